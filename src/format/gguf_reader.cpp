// GGUF reader: a bounded cursor over the mapped bytes. Every read checks the bytes left first,
// so a malformed file can only ever produce a lamina::Error, never an out-of-bounds read.
#include "format/gguf.h"

#include "core/error.h"
#include "core/files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

namespace lamina {

struct GgufFile::Mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (addr && size) munmap(addr, size);
  }
};

GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

namespace {

constexpr uint64_t kMaxNameLen = 63;    // GGML_MAX_NAME (64) includes the NUL
constexpr int kMaxDims = 4;
constexpr int kMaxArrayDepth = 4;       // nested arrays: the spec allows them; bound recursion

size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::UINT8: case GgufType::INT8: case GgufType::BOOL: return 1;
    case GgufType::UINT16: case GgufType::INT16: return 2;
    case GgufType::UINT32: case GgufType::INT32: case GgufType::FLOAT32: return 4;
    case GgufType::UINT64: case GgufType::INT64: case GgufType::FLOAT64: return 8;
    default: return 0;
  }
}

bool valid_value_type(uint32_t t) { return t <= uint32_t(GgufType::FLOAT64); }

}  // namespace

class GgufParser {
 public:
  GgufParser(GgufFile& f) : f_(f), p_(f.base_), n_(f.size_) {}

  void run() {
    parse_header();
    for (int64_t k = 0; k < n_kv_; ++k) parse_kv(k);
    if (const GgufValue* a = f_.find("general.alignment")) {
      if (a->type != GgufType::UINT32)
        fail("{}: general.alignment has type {}, expected uint32", f_.path_, gguf_type_name(a->type));
      if (a->u == 0 || (a->u & (a->u - 1)) != 0)
        fail("{}: general.alignment = {} is not a power of two", f_.path_, a->u);
      f_.alignment_ = uint32_t(a->u);
    }
    for (int64_t t = 0; t < n_tensors_; ++t) parse_tensor_info(t);
    const size_t align = f_.alignment_;
    f_.data_offset_ = (pos_ + align - 1) / align * align;  // pos_ <= n_, no overflow
    place_tensors();
  }

 private:
  GgufFile& f_;
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
  int64_t n_kv_ = 0, n_tensors_ = 0;
  std::string ctx_;  // what is being read, for messages ("key 'x'", "tensor 'y'")

  [[noreturn]] void bad(const std::string& what, size_t at) const {
    fail("{}: {}{} at offset {}", f_.path_, ctx_.empty() ? "" : ctx_ + ": ", what, at);
  }
  size_t left() const { return n_ - pos_; }
  void need(size_t bytes, const char* what) const {
    if (bytes > left())
      bad(fmt::format("file truncated: {} needs {} bytes but only {} remain", what, bytes, left()), pos_);
  }
  template <class T> T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const char* what) {
    const size_t at = pos_;
    const uint64_t len = read<uint64_t>(what);
    if (len > left())
      bad(fmt::format("{} length {} exceeds the {} bytes left in the file", what, len, left()), at);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), size_t(len));
    pos_ += size_t(len);
    return s;
  }

  void parse_header() {
    if (n_ < 4) bad(fmt::format("file truncated: {} bytes is too small for a GGUF header", n_), 0);
    if (std::memcmp(p_, "GGUF", 4) != 0) bad("bad magic (not a GGUF file)", 0);
    pos_ = 4;
    const uint32_t v = read<uint32_t>("version");
    if (v == 1) bad("GGUF version 1 is not supported (only versions 2 and 3)", 4);
    if (v == 0x03000000u || v == 0x02000000u) bad("big-endian GGUF files are not supported", 4);
    if (v != 2 && v != 3) bad(fmt::format("unsupported GGUF version {} (expected 2 or 3)", v), 4);
    f_.version_ = v;
    n_tensors_ = read<int64_t>("tensor count");
    n_kv_ = read<int64_t>("metadata count");
    // Every tensor info needs >= 8+4+8+4+8 bytes and every KV >= 8+4+1 bytes: bound the counts by
    // what the file could possibly hold before any allocation depends on them.
    if (n_tensors_ < 0 || uint64_t(n_tensors_) > left() / 32)
      bad(fmt::format("absurd tensor count {} for a file of {} bytes", n_tensors_, n_), 8);
    if (n_kv_ < 0 || uint64_t(n_kv_) > left() / 13)
      bad(fmt::format("absurd metadata count {} for a file of {} bytes", n_kv_, n_), 16);
  }

  GgufType read_type(const char* what) {
    const size_t at = pos_;
    const uint32_t t = read<uint32_t>(what);
    if (!valid_value_type(t)) bad(fmt::format("unknown {} {}", what, t), at);
    return GgufType(t);
  }

  void read_scalar(GgufType t, GgufValue& v) {
    v.type = t;
    switch (t) {
      case GgufType::UINT8: v.u = read<uint8_t>("uint8 value"); break;
      case GgufType::INT8: v.i = read<int8_t>("int8 value"); break;
      case GgufType::UINT16: v.u = read<uint16_t>("uint16 value"); break;
      case GgufType::INT16: v.i = read<int16_t>("int16 value"); break;
      case GgufType::UINT32: v.u = read<uint32_t>("uint32 value"); break;
      case GgufType::INT32: v.i = read<int32_t>("int32 value"); break;
      case GgufType::FLOAT32: v.f = read<float>("float32 value"); break;
      case GgufType::BOOL: v.u = read<uint8_t>("bool value") != 0; break;
      case GgufType::UINT64: v.u = read<uint64_t>("uint64 value"); break;
      case GgufType::INT64: v.i = read<int64_t>("int64 value"); break;
      case GgufType::FLOAT64: v.f = read<double>("float64 value"); break;
      default: break;
    }
  }

  void read_value(GgufType t, GgufValue& v, int depth) {
    if (t == GgufType::STRING) {
      v.type = t;
      v.s = read_string("string value");
      return;
    }
    if (t != GgufType::ARRAY) {
      read_scalar(t, v);
      return;
    }
    const size_t at = pos_;
    if (depth >= kMaxArrayDepth) bad(fmt::format("arrays nested deeper than {}", kMaxArrayDepth), at);
    v.type = GgufType::ARRAY;
    v.elem = read_type("array element type");
    const size_t count_at = pos_;
    const uint64_t count = read<uint64_t>("array length");
    // Minimum bytes per element: scalars their size, strings and arrays at least 8.
    const size_t min_elem = v.elem == GgufType::STRING ? 8
                          : v.elem == GgufType::ARRAY  ? 12 : scalar_size(v.elem);
    if (count > left() / min_elem)
      bad(fmt::format("array length {} of {} cannot fit in the {} bytes left", count,
                      gguf_type_name(v.elem), left()), count_at);
    if (v.elem == GgufType::STRING) {
      v.strs.reserve(size_t(count));
      for (uint64_t k = 0; k < count; ++k) v.strs.push_back(read_string("array string"));
    } else {
      v.arr.resize(size_t(count));
      for (auto& e : v.arr) read_value(v.elem, e, depth + 1);
    }
  }

  void parse_kv(int64_t k) {
    ctx_ = fmt::format("metadata #{}", k);
    const size_t at = pos_;
    std::string key = read_string("key");
    ctx_ = fmt::format("key '{}'", key);
    if (f_.kv_index_.count(key)) bad("duplicate key", at);
    GgufKV kv;
    kv.key = std::move(key);
    const GgufType t = read_type("value type");
    read_value(t, kv.value, 0);
    f_.kv_index_.emplace(kv.key, f_.kvs_.size());
    f_.kvs_.push_back(std::move(kv));
    ctx_.clear();
  }

  void parse_tensor_info(int64_t t) {
    ctx_ = fmt::format("tensor #{}", t);
    const size_t at = pos_;
    GgufTensor ti;
    ti.name = read_string("tensor name");
    ctx_ = fmt::format("tensor '{}'", ti.name);
    if (ti.name.size() > kMaxNameLen)
      bad(fmt::format("name is {} bytes, longer than the {} allowed", ti.name.size(), kMaxNameLen), at);
    if (f_.tensor_index_.count(ti.name)) bad("duplicate tensor name", at);
    const size_t dims_at = pos_;
    const uint32_t n_dims = read<uint32_t>("dimension count");
    if (n_dims > kMaxDims) bad(fmt::format("{} dimensions (at most {})", n_dims, kMaxDims), dims_at);
    ti.n_dims = int(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      const size_t d_at = pos_;
      ti.ne[d] = read<int64_t>("dimension");
      if (ti.ne[d] < 0) bad(fmt::format("negative dimension ne[{}] = {}", d, ti.ne[d]), d_at);
    }
    const size_t type_at = pos_;
    const uint32_t type_id = read<uint32_t>("tensor type");
    const auto tr = type_traits(type_id);
    if (!tr) {
      const auto name = known_type_name(type_id);
      bad(name.empty() ? fmt::format("unknown tensor type {}", type_id)
                       : fmt::format("tensor type {} ({}) is not supported", type_id, name), type_at);
    }
    ti.type = tr->type;
    const size_t off_at = pos_;
    ti.offset = read<uint64_t>("tensor data offset");
    // Element count and byte size without overflow.
    uint64_t nel = 1;
    for (int d = 0; d < kMaxDims; ++d) {
      if (ti.ne[d] != 0 && nel > uint64_t(std::numeric_limits<int64_t>::max()) / uint64_t(ti.ne[d]))
        bad("element count overflows 64 bits", dims_at);
      nel *= uint64_t(ti.ne[d]);
    }
    if (ti.ne[0] % tr->block_elems != 0)
      bad(fmt::format("row length {} is not a multiple of the {} block size {}", ti.ne[0], tr->name,
                      tr->block_elems), dims_at);
    const uint64_t blocks = nel / uint64_t(tr->block_elems);
    if (blocks > std::numeric_limits<uint64_t>::max() / uint64_t(tr->block_bytes))
      bad("byte size overflows 64 bits", dims_at);
    ti.nbytes = size_t(blocks * uint64_t(tr->block_bytes));
    if (ti.offset % f_.alignment_ != 0)
      bad(fmt::format("data offset {} is not a multiple of the alignment {}", ti.offset, f_.alignment_), off_at);
    f_.tensor_index_.emplace(ti.name, f_.tensors_.size());
    f_.tensors_.push_back(std::move(ti));
    ctx_.clear();
  }

  void place_tensors() {
    const size_t base = f_.data_offset_;
    for (auto& t : f_.tensors_) {
      if (base > n_ || t.offset > n_ - base || t.nbytes > n_ - base - t.offset)
        fail("{}: tensor '{}': data [{}, +{}) extends past the end of the file ({} bytes)", f_.path_,
             t.name, base + t.offset, t.nbytes, n_);
      t.data = f_.base_ + base + t.offset;
    }
    std::vector<const GgufTensor*> by_off;
    for (auto& t : f_.tensors_) by_off.push_back(&t);
    std::sort(by_off.begin(), by_off.end(),
              [](auto* a, auto* b) { return a->offset < b->offset; });
    for (size_t k = 1; k < by_off.size(); ++k) {
      const GgufTensor* a = by_off[k - 1];
      const GgufTensor* b = by_off[k];
      if (a->offset + a->nbytes > b->offset && a->nbytes > 0 && b->nbytes > 0)
        fail("{}: tensors '{}' and '{}' overlap in the data blob (offsets {} and {})", f_.path_,
             a->name, b->name, base + a->offset, base + b->offset);
    }
  }
};

GgufFile GgufFile::parse(const uint8_t* data, size_t size, std::string name) {
  GgufFile f;
  f.path_ = std::move(name);
  f.base_ = data;
  f.size_ = size;
  GgufParser(f).run();
  return f;
}

GgufFile GgufFile::open(const std::string& path) {
  const int fd = open_regular_file(path, "GGUF file");
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail("{}: cannot read: {}", path, std::strerror(e));
  }
  auto map = std::make_unique<Mapping>();
  map->size = size_t(st.st_size);
  if (map->size > 0) {
    map->addr = mmap(nullptr, map->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map->addr == MAP_FAILED) {
      map->addr = nullptr;
      ::close(fd);
      fail("{}: cannot map {} bytes: {}", path, map->size, std::strerror(errno));
    }
  }
  ::close(fd);
  static const uint8_t empty = 0;
  const uint8_t* base = map->addr ? static_cast<const uint8_t*>(map->addr) : &empty;
  GgufFile f = parse(base, map->size, path);
  f.map_ = std::move(map);
  return f;
}

}  // namespace lamina
