// GGUF typed accessors, value rendering and the writer.
#include "format/gguf.h"

#include "core/error.h"
#include "core/files.h"

#include <cmath>
#include <functional>
#include <future>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

namespace lamina {

std::string_view gguf_type_name(GgufType t) {
  static constexpr std::string_view names[] = {"uint8", "int8", "uint16", "int16", "uint32",
                                                "int32", "float32", "bool", "string", "array",
                                                "uint64", "int64", "float64"};
  const auto i = uint32_t(t);
  return i < std::size(names) ? names[i] : std::string_view("?");
}

namespace {

bool is_uint(GgufType t) {
  return t == GgufType::UINT8 || t == GgufType::UINT16 || t == GgufType::UINT32 ||
         t == GgufType::UINT64;
}
bool is_sint(GgufType t) {
  return t == GgufType::INT8 || t == GgufType::INT16 || t == GgufType::INT32 || t == GgufType::INT64;
}
bool is_float(GgufType t) { return t == GgufType::FLOAT32 || t == GgufType::FLOAT64; }

std::string scalar_string(const GgufValue& v) {
  if (is_uint(v.type)) return std::to_string(v.u);
  if (is_sint(v.type)) return std::to_string(v.i);
  if (is_float(v.type)) return fmt::format("{:g}", v.f);
  if (v.type == GgufType::BOOL) return v.u ? "true" : "false";
  return "?";
}

std::string quoted(const std::string& s, size_t max_len = 60) {
  std::string out = "\"";
  for (size_t k = 0; k < s.size() && k < max_len; ++k) {
    const unsigned char c = static_cast<unsigned char>(s[k]);
    if (c == '\n') out += "\\n";
    else if (c == '"') out += "\\\"";
    else if (c < 0x20) out += fmt::format("\\x{:02x}", c);
    else out += char(c);
  }
  if (s.size() > max_len) out += "...";
  return out + "\"";
}

}  // namespace

std::string GgufValue::to_string(size_t max_items) const {
  if (type == GgufType::STRING) return quoted(s);
  if (type != GgufType::ARRAY) return scalar_string(*this);
  const size_t n = array_size();
  std::string out = fmt::format("[{} x {}] [", n, gguf_type_name(elem));
  for (size_t k = 0; k < n && k < max_items; ++k) {
    if (k) out += ", ";
    out += elem == GgufType::STRING ? quoted(strs[k], 20) : arr[k].to_string(2);
  }
  return out + (n > max_items ? ", ...]" : "]");
}

std::string GgufTensor::shape_string() const {
  std::string s = "[";
  for (int d = 0; d < std::max(n_dims, 1); ++d) s += (d ? ", " : "") + std::to_string(ne[d]);
  return s + "]";
}

// ---- accessors ------------------------------------------------------------------------------

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(std::string(key));
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::tensor(std::string_view name) const {
  const GgufTensor* t = find_tensor(name);
  if (!t) fail("{}: missing tensor '{}'", path_, name);
  return *t;
}

static std::optional<uint64_t> as_uint(const GgufValue& v) {
  if (is_uint(v.type)) return v.u;
  if (is_sint(v.type) && v.i >= 0) return uint64_t(v.i);
  return std::nullopt;
}
static std::optional<int64_t> as_int(const GgufValue& v) {
  if (is_sint(v.type)) return v.i;
  if (is_uint(v.type) && v.u <= uint64_t(std::numeric_limits<int64_t>::max())) return int64_t(v.u);
  return std::nullopt;
}

std::optional<uint64_t> GgufFile::get_uint(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (auto u = as_uint(*v)) return u;
  fail("{}: key '{}' has type {} and value {}, expected an unsigned integer", path_, key,
       gguf_type_name(v->type), v->to_string());
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (auto i = as_int(*v)) return i;
  fail("{}: key '{}' has type {}, expected an integer", path_, key, gguf_type_name(v->type));
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (is_float(v->type)) return v->f;
  if (auto i = as_int(*v)) return double(*i);
  fail("{}: key '{}' has type {}, expected a number", path_, key, gguf_type_name(v->type));
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type == GgufType::BOOL) return v->u != 0;
  fail("{}: key '{}' has type {}, expected bool", path_, key, gguf_type_name(v->type));
}

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type == GgufType::STRING) return v->s;
  fail("{}: key '{}' has type {}, expected string", path_, key, gguf_type_name(v->type));
}

const std::vector<std::string>* GgufFile::get_string_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return nullptr;
  if (v->type == GgufType::ARRAY && v->elem == GgufType::STRING) return &v->strs;
  fail("{}: key '{}' has type {}, expected an array of strings", path_, key, gguf_type_name(v->type));
}

std::optional<std::vector<double>> GgufFile::get_float_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type == GgufType::ARRAY && (is_float(v->elem) || is_uint(v->elem) || is_sint(v->elem))) {
    std::vector<double> out;
    out.reserve(v->arr.size());
    for (const auto& e : v->arr)
      out.push_back(is_float(e.type) ? e.f : is_uint(e.type) ? double(e.u) : double(e.i));
    return out;
  }
  fail("{}: key '{}' has type {}, expected an array of numbers", path_, key, gguf_type_name(v->type));
}

std::optional<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type == GgufType::ARRAY && (is_uint(v->elem) || is_sint(v->elem))) {
    std::vector<int64_t> out;
    out.reserve(v->arr.size());
    for (const auto& e : v->arr) {
      auto i = as_int(e);
      if (!i) fail("{}: key '{}' holds {} which does not fit int64", path_, key, e.u);
      out.push_back(*i);
    }
    return out;
  }
  fail("{}: key '{}' has type {}, expected an array of integers", path_, key, gguf_type_name(v->type));
}

uint64_t GgufFile::require_uint(std::string_view key) const {
  auto v = get_uint(key);
  if (!v) fail("{}: missing required key '{}'", path_, key);
  return *v;
}

std::string GgufFile::require_string(std::string_view key) const {
  auto v = get_string(key);
  if (!v) fail("{}: missing required key '{}'", path_, key);
  return *v;
}

// ---- writer ---------------------------------------------------------------------------------

void GgufWriter::set(std::string key, GgufValue v) {
  for (auto& kv : kvs_)
    if (kv.key == key) {
      kv.value = std::move(v);
      return;
    }
  kvs_.push_back({std::move(key), std::move(v)});
}

void GgufWriter::set_u32(std::string key, uint32_t v) {
  GgufValue x; x.type = GgufType::UINT32; x.u = v; set(std::move(key), std::move(x));
}
void GgufWriter::set_i32(std::string key, int32_t v) {
  GgufValue x; x.type = GgufType::INT32; x.i = v; set(std::move(key), std::move(x));
}
void GgufWriter::set_f32(std::string key, float v) {
  GgufValue x; x.type = GgufType::FLOAT32; x.f = v; set(std::move(key), std::move(x));
}
void GgufWriter::set_bool(std::string key, bool v) {
  GgufValue x; x.type = GgufType::BOOL; x.u = v; set(std::move(key), std::move(x));
}
void GgufWriter::set_str(std::string key, std::string v) {
  GgufValue x; x.type = GgufType::STRING; x.s = std::move(v); set(std::move(key), std::move(x));
}
void GgufWriter::set_str_array(std::string key, std::vector<std::string> v) {
  GgufValue x; x.type = GgufType::ARRAY; x.elem = GgufType::STRING; x.strs = std::move(v);
  set(std::move(key), std::move(x));
}
void GgufWriter::set_f32_array(std::string key, const std::vector<float>& v) {
  GgufValue x; x.type = GgufType::ARRAY; x.elem = GgufType::FLOAT32;
  for (float f : v) { GgufValue e; e.type = GgufType::FLOAT32; e.f = f; x.arr.push_back(e); }
  set(std::move(key), std::move(x));
}
void GgufWriter::set_i32_array(std::string key, const std::vector<int32_t>& v) {
  GgufValue x; x.type = GgufType::ARRAY; x.elem = GgufType::INT32;
  for (int32_t i : v) { GgufValue e; e.type = GgufType::INT32; e.i = i; x.arr.push_back(e); }
  set(std::move(key), std::move(x));
}

void GgufWriter::add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne, Fill fill) {
  if (name.size() > 63) fail("tensor name '{}' is longer than 63 bytes", name);
  if (ne.empty() || ne.size() > 4) fail("tensor '{}': {} dimensions (1..4 allowed)", name, ne.size());
  const TypeTraits& tr = traits(type);
  if (ne[0] % tr.block_elems != 0)
    fail("tensor '{}': row length {} is not a multiple of the {} block size {}", name, ne[0], tr.name,
         tr.block_elems);
  for (const auto& t : tensors_)
    if (t.name == name) fail("duplicate tensor name '{}'", name);
  int64_t rows = 1;
  for (size_t d = 1; d < ne.size(); ++d) rows *= ne[d];
  const size_t nbytes = row_bytes(type, ne[0]) * size_t(rows);
  tensors_.push_back({std::move(name), type, std::move(ne), nbytes, std::move(fill)});
}

void GgufWriter::add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne,
                            std::span<const uint8_t> bytes) {
  auto keep = std::make_shared<std::vector<uint8_t>>(bytes.begin(), bytes.end());
  add_tensor(std::move(name), type, std::move(ne), [keep](uint8_t* dst, size_t n) {
    std::memcpy(dst, keep->data(), std::min(n, keep->size()));
  });
  if (keep->size() != tensors_.back().nbytes)
    fail("tensor '{}': {} bytes given, shape needs {}", tensors_.back().name, keep->size(),
         tensors_.back().nbytes);
}

uint32_t GgufWriter::alignment() const {
  for (const auto& kv : kvs_)
    if (kv.key == "general.alignment") return uint32_t(kv.value.u);
  return 32;
}

namespace {

template <class Sink> void put(Sink& s, const void* p, size_t n) { s(static_cast<const uint8_t*>(p), n); }
template <class Sink, class T> void put_pod(Sink& s, T v) { put(s, &v, sizeof v); }
template <class Sink> void put_str(Sink& s, const std::string& str) {
  put_pod<Sink, uint64_t>(s, str.size());
  put(s, str.data(), str.size());
}

template <class Sink> void put_value(Sink& s, const GgufValue& v) {
  switch (v.type) {
    case GgufType::UINT8: put_pod(s, uint8_t(v.u)); break;
    case GgufType::INT8: put_pod(s, int8_t(v.i)); break;
    case GgufType::UINT16: put_pod(s, uint16_t(v.u)); break;
    case GgufType::INT16: put_pod(s, int16_t(v.i)); break;
    case GgufType::UINT32: put_pod(s, uint32_t(v.u)); break;
    case GgufType::INT32: put_pod(s, int32_t(v.i)); break;
    case GgufType::FLOAT32: put_pod(s, float(v.f)); break;
    case GgufType::BOOL: put_pod(s, uint8_t(v.u ? 1 : 0)); break;
    case GgufType::UINT64: put_pod(s, uint64_t(v.u)); break;
    case GgufType::INT64: put_pod(s, int64_t(v.i)); break;
    case GgufType::FLOAT64: put_pod(s, double(v.f)); break;
    case GgufType::STRING: put_str(s, v.s); break;
    case GgufType::ARRAY:
      put_pod(s, uint32_t(v.elem));
      put_pod<Sink, uint64_t>(s, v.array_size());
      if (v.elem == GgufType::STRING)
        for (const auto& e : v.strs) put_str(s, e);
      else
        for (const auto& e : v.arr) put_value(s, e);
      break;
  }
}

}  // namespace

template <class Sink> void GgufWriter::emit(Sink& sink) const {
  const uint32_t align = alignment();
  size_t written = 0;
  auto counted = [&](const uint8_t* p, size_t n) { sink(p, n); written += n; };
  auto pad = [&] {
    static const uint8_t zeros[256] = {};
    while (written % align) counted(zeros, std::min<size_t>(align - written % align, sizeof zeros));
  };
  put(counted, "GGUF", 4);
  put_pod(counted, uint32_t(3));
  put_pod(counted, int64_t(tensors_.size()));
  put_pod(counted, int64_t(kvs_.size()));
  for (const auto& kv : kvs_) {
    put_str(counted, kv.key);
    put_pod(counted, uint32_t(kv.value.type));
    put_value(counted, kv.value);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put_str(counted, t.name);
    put_pod(counted, uint32_t(t.ne.size()));
    for (int64_t d : t.ne) put_pod(counted, d);
    put_pod(counted, uint32_t(t.type));
    put_pod(counted, offset);
    offset += (t.nbytes + align - 1) / align * align;
  }
  pad();
  // Tensor i+1 is produced (fill callbacks may be slow: random generation, quantisation) while
  // tensor i is written.
  std::vector<uint8_t> cur, next;
  auto produce = [this](size_t i, std::vector<uint8_t>& buf) {
    buf.assign(tensors_[i].nbytes, 0);
    tensors_[i].fill(buf.data(), buf.size());
  };
  if (!tensors_.empty()) produce(0, cur);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    std::future<void> ahead;
    if (i + 1 < tensors_.size()) ahead = std::async(std::launch::async, produce, i + 1, std::ref(next));
    counted(cur.data(), cur.size());
    pad();
    if (ahead.valid()) ahead.get();
    cur.swap(next);
  }
}

void GgufWriter::write(const std::string& path) const {
  OutputFile out(path);
  write(out);
}

void GgufWriter::write(OutputFile& out) const {
  auto sink = [&](const uint8_t* p, size_t n) { out.write(p, n); };
  emit(sink);
  out.commit();
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  std::vector<uint8_t> out;
  auto sink = [&](const uint8_t* p, size_t n) { out.insert(out.end(), p, p + n); };
  emit(sink);
  return out;
}

}  // namespace lamina
