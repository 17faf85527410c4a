// GGUF writer -> reader round trips: every value type, nested arrays, alignment, tensors.
#include "core/error.h"
#include "format/gguf.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

using namespace lamina;

namespace {

GgufValue scalar(GgufType t, double v) {
  GgufValue x;
  x.type = t;
  if (t == GgufType::FLOAT32 || t == GgufType::FLOAT64) x.f = v;
  else if (t == GgufType::INT8 || t == GgufType::INT16 || t == GgufType::INT32 || t == GgufType::INT64) x.i = int64_t(v);
  else x.u = uint64_t(v);
  return x;
}

GgufWriter sample_writer() {
  GgufWriter w;
  w.set_str("general.architecture", "llama");
  w.set("u8", scalar(GgufType::UINT8, 200));
  w.set("i8", scalar(GgufType::INT8, -100));
  w.set("u16", scalar(GgufType::UINT16, 60000));
  w.set("i16", scalar(GgufType::INT16, -30000));
  w.set_u32("u32", 4000000000u);
  w.set_i32("i32", -2000000000);
  w.set_f32("f32", 0.15625f);
  w.set_bool("flag", true);
  w.set("u64", scalar(GgufType::UINT64, double(1ull << 60)));
  w.set("i64", scalar(GgufType::INT64, -double(1ll << 60)));
  w.set("f64", scalar(GgufType::FLOAT64, 3.25));
  w.set_str_array("strs", {"a", "", "ünï"});
  w.set_f32_array("floats", {1.5f, -2.f});
  w.set_i32_array("ints", {7, -8, 9});
  GgufValue nested;  // [[1, 2], [3]] of uint8
  nested.type = GgufType::ARRAY;
  nested.elem = GgufType::ARRAY;
  for (int n : {2, 1}) {
    GgufValue inner;
    inner.type = GgufType::ARRAY;
    inner.elem = GgufType::UINT8;
    for (int k = 0; k < n; ++k) inner.arr.push_back(scalar(GgufType::UINT8, double(nested.arr.size() * 2 + size_t(k) + 1)));
    nested.arr.push_back(inner);
  }
  w.set("nested", nested);
  std::vector<float> a(64);
  std::iota(a.begin(), a.end(), 0.f);
  w.add_tensor("a", GgmlType::F32, {16, 4},
               std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(a.data()), a.size() * 4));
  w.add_tensor("b", GgmlType::Q8_0, {64, 3}, [](uint8_t* dst, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] = uint8_t(i * 7);
  });
  return w;
}

TEST(Gguf, RoundTripEveryValueType) {
  const auto bytes = sample_writer().to_bytes();
  const GgufFile f = GgufFile::parse(bytes.data(), bytes.size(), "mem");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.kvs().size(), 16u);
  EXPECT_EQ(f.kvs()[0].key, "general.architecture");  // insertion order kept
  EXPECT_EQ(f.get_uint("u8"), 200u);
  EXPECT_EQ(f.get_int("i8"), -100);
  EXPECT_EQ(f.get_uint("u16"), 60000u);
  EXPECT_EQ(f.get_int("i16"), -30000);
  EXPECT_EQ(f.get_uint("u32"), 4000000000u);
  EXPECT_EQ(f.get_int("i32"), -2000000000);
  EXPECT_EQ(f.get_float("f32"), 0.15625);
  EXPECT_EQ(f.get_bool("flag"), true);
  EXPECT_EQ(f.get_uint("u64"), 1ull << 60);
  EXPECT_EQ(f.get_int("i64"), -(1ll << 60));
  EXPECT_EQ(f.get_float("f64"), 3.25);
  ASSERT_NE(f.get_string_array("strs"), nullptr);
  EXPECT_EQ(*f.get_string_array("strs"), (std::vector<std::string>{"a", "", "ünï"}));
  EXPECT_EQ(*f.get_float_array("floats"), (std::vector<double>{1.5, -2.0}));
  EXPECT_EQ(*f.get_int_array("ints"), (std::vector<int64_t>{7, -8, 9}));
  const GgufValue* n = f.find("nested");
  ASSERT_NE(n, nullptr);
  ASSERT_EQ(n->elem, GgufType::ARRAY);
  ASSERT_EQ(n->arr.size(), 2u);
  EXPECT_EQ(n->arr[0].arr.size(), 2u);
  EXPECT_EQ(n->arr[1].arr[0].u, 3u);
  // Widening: a uint8 reads as any integer; a signed negative is not an unsigned.
  EXPECT_EQ(f.get_int("u8"), 200);
  EXPECT_THROW(f.get_uint("i8"), Error);
  EXPECT_THROW(f.get_string("u32"), Error);
  EXPECT_FALSE(f.get_uint("absent").has_value());
  EXPECT_THROW(f.require_uint("absent"), Error);
}

TEST(Gguf, TensorsArePackedAndAligned) {
  const auto bytes = sample_writer().to_bytes();
  const GgufFile f = GgufFile::parse(bytes.data(), bytes.size(), "mem");
  ASSERT_EQ(f.tensors().size(), 2u);
  const GgufTensor& a = f.tensor("a");
  EXPECT_EQ(a.ne[0], 16);
  EXPECT_EQ(a.ne[1], 4);
  EXPECT_EQ(a.nbytes, 256u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  EXPECT_EQ(size_t(a.data - bytes.data()), f.data_offset());
  float v;
  std::memcpy(&v, a.data + 4 * 17, 4);
  EXPECT_EQ(v, 17.f);
  const GgufTensor& b = f.tensor("b");
  EXPECT_EQ(b.type, GgmlType::Q8_0);
  EXPECT_EQ(b.nbytes, 3u * 2 * 34);
  EXPECT_EQ(b.offset, 256u);  // a's 256 bytes, already aligned
  EXPECT_EQ(b.data[5], uint8_t(35));
  EXPECT_EQ(bytes.size() % 32, 0u);
  EXPECT_THROW(f.tensor("missing"), Error);
}

TEST(Gguf, CustomAlignment) {
  GgufWriter w;
  w.set_u32("general.alignment", 64);
  w.add_tensor("x", GgmlType::F16, {3}, [](uint8_t* d, size_t n) { std::memset(d, 1, n); });
  w.add_tensor("y", GgmlType::F16, {5}, [](uint8_t* d, size_t n) { std::memset(d, 2, n); });
  const auto bytes = w.to_bytes();
  const GgufFile f = GgufFile::parse(bytes.data(), bytes.size(), "mem");
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(f.tensor("y").offset, 64u);
  EXPECT_EQ(f.tensor("y").data[0], 2);
}

TEST(Gguf, WriterRejectsBadTensors) {
  GgufWriter w;
  EXPECT_THROW(w.add_tensor("q", GgmlType::Q4_0, {33}, [](uint8_t*, size_t) {}), Error);
  EXPECT_THROW(w.add_tensor(std::string(64, 'n'), GgmlType::F32, {1}, [](uint8_t*, size_t) {}), Error);
  w.add_tensor("t", GgmlType::F32, {1}, [](uint8_t*, size_t) {});
  EXPECT_THROW(w.add_tensor("t", GgmlType::F32, {1}, [](uint8_t*, size_t) {}), Error);
}

TEST(Gguf, WriteToFileAndOpen) {
  const std::string path = ::testing::TempDir() + "/lamina_rt.gguf";
  sample_writer().write(path);
  const GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.tensor("b").data[5], uint8_t(35));
  std::remove(path.c_str());
  EXPECT_THROW(GgufFile::open(path), Error);
  EXPECT_THROW(sample_writer().write("/nonexistent-dir/x.gguf"), Error);
}

}  // namespace
