// GGUF v2/v3 container: reader (mmap, fully validated) and writer.
//
// Layout (little-endian): magic "GGUF", u32 version, i64 n_tensors, i64 n_kv, n_kv key/value
// records, n_tensors tensor-info records, zero padding to ALIGN (general.alignment, default 32),
// then the tensor data blob. See ../shared/docs/formats.md §1.
//
// The reader never trusts the file: every count, length, type id, shape and offset is checked
// against the bytes that are actually there before it is used, and any violation throws
// lamina::Error naming the file, the byte offset and the key or tensor concerned.
#pragma once

#include "format/ggml_type.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace lamina {

class OutputFile;

enum class GgufType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
std::string_view gguf_type_name(GgufType t);

// One metadata value. Scalars live in u/i/f (by type class), strings in s; arrays of strings in
// strs, arrays of anything else (numbers, bools, nested arrays) in arr.
struct GgufValue {
  GgufType type = GgufType::UINT8;
  uint64_t u = 0;   // UINT8..UINT64 and BOOL
  int64_t i = 0;    // INT8..INT64
  double f = 0;     // FLOAT32, FLOAT64
  std::string s;    // STRING
  GgufType elem = GgufType::UINT8;  // ARRAY: element type
  std::vector<std::string> strs;    // ARRAY of STRING
  std::vector<GgufValue> arr;       // ARRAY of other types
  size_t array_size() const { return elem == GgufType::STRING ? strs.size() : arr.size(); }
  std::string to_string(size_t max_items = 8) const;  // short human rendering for `info`
};

struct GgufKV {
  std::string key;
  GgufValue value;
};

struct GgufTensor {
  std::string name;
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};  // ne[0] is contiguous (elements per row)
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;           // relative to the data blob
  size_t nbytes = 0;
  const uint8_t* data = nullptr; // points into the mapping
  int64_t nelements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t nrows() const { return ne[1] * ne[2] * ne[3]; }
  std::string shape_string() const;
};

class GgufFile {
 public:
  // Maps and parses a file. Throws lamina::Error on any problem.
  static GgufFile open(const std::string& path);
  // Parses bytes already in memory (they must outlive the object); `name` is used in messages.
  static GgufFile parse(const uint8_t* data, size_t size, std::string name);

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  size_t data_offset() const { return data_offset_; }
  size_t file_size() const { return size_; }

  const std::vector<GgufKV>& kvs() const { return kvs_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufValue* find(std::string_view key) const;
  const GgufTensor* find_tensor(std::string_view name) const;
  const GgufTensor& tensor(std::string_view name) const;  // throws if missing

  // Typed accessors. get_* return nullopt when the key is absent and throw when it is present
  // with an incompatible type; integers are widened (any integer type that holds the value).
  std::optional<uint64_t> get_uint(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;
  const std::vector<std::string>* get_string_array(std::string_view key) const;
  std::optional<std::vector<double>> get_float_array(std::string_view key) const;
  std::optional<std::vector<int64_t>> get_int_array(std::string_view key) const;

  uint64_t require_uint(std::string_view key) const;
  std::string require_string(std::string_view key) const;

 private:
  GgufFile() = default;
  struct Mapping;
  std::unique_ptr<Mapping> map_;
  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  size_t data_offset_ = 0;
  std::vector<GgufKV> kvs_;
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string, size_t> kv_index_, tensor_index_;
  friend class GgufParser;
};

// Writes GGUF v3 files that llama.cpp loads: keys in insertion order, tensors packed in info
// order, each padded to the alignment. Tensor data comes from a buffer or from a callback that
// fills it (so multi-GB models are produced one tensor at a time).
class GgufWriter {
 public:
  void set(std::string key, GgufValue v);
  void set_u32(std::string key, uint32_t v);
  void set_i32(std::string key, int32_t v);
  void set_f32(std::string key, float v);
  void set_bool(std::string key, bool v);
  void set_str(std::string key, std::string v);
  void set_str_array(std::string key, std::vector<std::string> v);
  void set_f32_array(std::string key, const std::vector<float>& v);
  void set_i32_array(std::string key, const std::vector<int32_t>& v);

  using Fill = std::function<void(uint8_t* dst, size_t nbytes)>;
  void add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne, Fill fill);
  void add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne,
                  std::span<const uint8_t> bytes);

  // Writes through an OutputFile (core/files.h): the target is replaced whole or left as it
  // was; throws lamina::Error naming the path and the reason. Commands that read inputs open
  // the OutputFile first (it refuses an output that is one of them) and pass it here.
  void write(const std::string& path) const;
  void write(OutputFile& out) const;
  std::vector<uint8_t> to_bytes() const;      // the whole file in memory (tests)

 private:
  struct PendingTensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    size_t nbytes;
    Fill fill;
  };
  uint32_t alignment() const;
  template <class Sink> void emit(Sink& sink) const;
  std::vector<GgufKV> kvs_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace lamina
