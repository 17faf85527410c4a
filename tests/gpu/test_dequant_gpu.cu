// GPU dequantisation vs the CPU reference, every type: random data (never zeros), poisoned
// outputs, odd row counts, gathered rows, and argument validation.
#include "core/half.h"
#include "format/quant.h"
#include "format/quant_blocks.h"
#include "kernels/common/q8_blocks.h"
#include "kernels/dequant/dequant.h"
#include "kernels/gemv/gemv.h"
#include "x8_host.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

using namespace lamina;

namespace {

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << cudaGetErrorString(x)

// Random rows of `type`: quantised from Gaussian floats where a quantiser exists, otherwise
// random bytes with every f16/f32 scale field overwritten by a finite random value.
std::vector<uint8_t> random_rows(GgmlType type, int64_t n_cols, int64_t n_rows, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.f, 1.f);
  const size_t rb = row_bytes(type, n_cols);
  std::vector<uint8_t> out(rb * size_t(n_rows));
  if (can_quantize(type)) {
    std::vector<float> x(static_cast<size_t>(n_cols));
    for (int64_t r = 0; r < n_rows; ++r) {
      for (auto& v : x) v = nd(rng);
      quantize_row(type, x.data(), out.data() + size_t(r) * rb, n_cols);
    }
    return out;
  }
  for (auto& b : out) b = uint8_t(rng());
  const TypeTraits& tr = traits(type);
  auto put_f16 = [&](uint8_t* p) { const uint16_t h = f32_to_f16(0.01f + std::fabs(nd(rng)) * 0.05f); std::memcpy(p, &h, 2); };
  for (size_t off = 0; off < out.size(); off += size_t(tr.block_bytes)) {
    uint8_t* blk = out.data() + off;
    switch (type) {
      case GgmlType::Q2_K: put_f16(blk + offsetof(block_q2_K, d)); put_f16(blk + offsetof(block_q2_K, dmin)); break;
      case GgmlType::Q3_K: put_f16(blk + offsetof(block_q3_K, d)); break;
      case GgmlType::Q5_K: put_f16(blk + offsetof(block_q5_K, d)); put_f16(blk + offsetof(block_q5_K, dmin)); break;
      case GgmlType::Q8_K: { const float d = 0.02f; std::memcpy(blk, &d, 4); break; }
      default: break;
    }
  }
  return out;
}

class DequantGpu : public ::testing::TestWithParam<GgmlType> {};

TEST_P(DequantGpu, MatchesCpuReference) {
  const GgmlType type = GetParam();
  const int64_t block = traits(type).block_elems;
  std::mt19937 rng(uint32_t(type) * 7919u + 1);
  for (int64_t n_cols : {block, block * 3, block * 17}) {
    for (int64_t n_rows : {int64_t(1), int64_t(5), int64_t(37)}) {
      SCOPED_TRACE(testing::Message() << type_name(type) << " " << n_rows << "x" << n_cols);
      const auto host = random_rows(type, n_cols, n_rows, rng);
      // Gather rows in a scrambled order (with a repeat), as the embedding lookup does.
      std::vector<int32_t> rows(static_cast<size_t>(n_rows));
      for (int64_t r = 0; r < n_rows; ++r) rows[size_t(r)] = int32_t((r * 7 + 3) % n_rows);
      std::vector<float> ref(static_cast<size_t>(n_rows * n_cols));
      const size_t rb = row_bytes(type, n_cols);
      for (int64_t r = 0; r < n_rows; ++r)
        dequantize_row(type, host.data() + size_t(rows[size_t(r)]) * rb, ref.data() + r * n_cols, n_cols);

      void* d_src; int32_t* d_rows; float* d_dst;
      CUDA_OK(cudaMalloc(&d_src, host.size()));
      CUDA_OK(cudaMalloc(&d_rows, rows.size() * 4));
      CUDA_OK(cudaMalloc(&d_dst, ref.size() * 4 + 64));
      CUDA_OK(cudaMemcpy(d_src, host.data(), host.size(), cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemcpy(d_rows, rows.data(), rows.size() * 4, cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemset(d_dst, 0xFF, ref.size() * 4 + 64));  // poison: NaN everywhere
      const auto st = kernels::dequantize_rows(type, d_src, n_cols, d_rows, n_rows, d_dst, nullptr);
      ASSERT_TRUE(st.ok) << st.message;
      std::vector<float> got(ref.size() + 16);
      CUDA_OK(cudaMemcpy(got.data(), d_dst, got.size() * 4, cudaMemcpyDeviceToHost));
      double max_ref = 0;
      for (float v : ref) max_ref = std::max(max_ref, double(std::fabs(v)));
      ASSERT_GT(max_ref, 0.0);
      for (size_t i = 0; i < ref.size(); ++i)
        ASSERT_NEAR(got[i], ref[i], 1e-6 * max_ref) << "element " << i;
      for (size_t i = ref.size(); i < got.size(); ++i) ASSERT_TRUE(std::isnan(got[i])) << "wrote past the end";
      cudaFree(d_src); cudaFree(d_rows); cudaFree(d_dst);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DequantGpu,
  ::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1,
                    GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q2_K,
                    GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_K),
  [](const auto& p) { return std::string(type_name(p.param)); });

// One row's int8 blocks of v * gain (q8_blocks.h's layout) and each block's sum of squares of v,
// against the host's computation from the CPU reference row v (f64 sums). The device's products
// may differ from the host's in the last bit: the element kept apart must be a largest one within
// that, and every q (and Q) within 1 of the host's rounding at the device's step.
void expect_x8_row(const float* v, const float* gain, const uint8_t* row, const double* ss, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const kernels::X8Facts got = host_x8_facts(row, n, b);
    ASSERT_TRUE(got.m >= 0 && got.m < 32) << "block " << b;
    const float* vb = v + b * 32;
    const float* gb = gain + b * 32;
    float a2 = 0.f;
    double want_ss = 0;
    for (int i = 0; i < 32; ++i) {
      want_ss += double(vb[i]) * vb[i];
      if (i != got.m) a2 = std::max(a2, std::fabs(vb[i] * gb[i]));
    }
    const float a1 = std::fabs(vb[got.m] * gb[got.m]);
    EXPECT_GE(a1, a2 * (1 - 1e-6f)) << "block " << b << ": the element kept apart is not the largest";
    const float d = std::max(a2, a1 * kernels::kX8StepFloor) / 127.f;
    EXPECT_NEAR(got.d, d, 1e-6 * d) << "block " << b;
    const float id = got.d != 0.f ? 1.f / got.d : 0.f;
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      const int64_t c = b * 32 + i;
      const int want_q = int(std::round(vb[i] * gb[i] * id));
      const int got_q = i == got.m ? got.big : int8_t(row[c]);
      if (i == got.m) EXPECT_EQ(int8_t(row[c]), 0) << "column " << c;
      ASSERT_LE(std::abs(got_q - want_q), 1) << "column " << c;
      sum += got_q;
    }
    EXPECT_EQ(got.sum, sum) << "block " << b;
    EXPECT_NEAR(ss[b], want_ss, 1e-12 * want_ss + 1e-30) << "block " << b;
  }
}

// With RowsX8 (the decode step's embedding lookup feeding the first GEMV's RMSNorm): dst as
// before, the int8 blocks of dst * gain (q8_blocks.h's layout, as the host computes them) and
// each block's sum of squares of dst against an f64 sum over the CPU reference.
TEST(DequantGpuX8, BlocksOfTheGainedRowsAndSumsOfSquares) {
  std::mt19937 rng(29);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (GgmlType type : {GgmlType::F16, GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
    const int64_t n_cols = 768, n_rows = 3, nb = n_cols / 32;
    SCOPED_TRACE(type_name(type));
    const auto host = random_rows(type, n_cols, 7, rng);
    const std::vector<int32_t> rows{5, 0, 5};
    std::vector<float> gain(static_cast<size_t>(n_cols)), ref(static_cast<size_t>(n_rows * n_cols));
    for (auto& g : gain) g = 0.5f + nd(rng) * 0.3f;
    const size_t rb = row_bytes(type, n_cols), xb = kernels::x8_bytes(n_cols);
    for (int64_t r = 0; r < n_rows; ++r) dequantize_row(type, host.data() + size_t(rows[size_t(r)]) * rb, ref.data() + r * n_cols, n_cols);

    void* d_src; int32_t* d_rows; float *d_dst, *d_gain; uint8_t* d_q; double* d_ss;
    CUDA_OK(cudaMalloc(&d_src, host.size()));
    CUDA_OK(cudaMalloc(&d_rows, rows.size() * 4));
    CUDA_OK(cudaMalloc(&d_dst, ref.size() * 4));
    CUDA_OK(cudaMalloc(&d_gain, gain.size() * 4));
    CUDA_OK(cudaMalloc(&d_q, xb * n_rows));
    CUDA_OK(cudaMalloc(&d_ss, size_t(n_rows * nb) * 8));
    CUDA_OK(cudaMemcpy(d_src, host.data(), host.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_rows, rows.data(), rows.size() * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_gain, gain.data(), gain.size() * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(d_q, 0x7F, xb * n_rows));                // poison
    CUDA_OK(cudaMemset(d_ss, 0xFF, size_t(n_rows * nb) * 8));  // NaN
    const kernels::RowsX8 x8{d_q, d_gain, d_ss};
    const auto st = kernels::dequantize_rows(type, d_src, n_cols, d_rows, n_rows, d_dst, nullptr, x8);
    ASSERT_TRUE(st.ok) << st.message;
    std::vector<float> got(ref.size());
    std::vector<uint8_t> q(xb * n_rows);
    std::vector<double> ss(static_cast<size_t>(n_rows * nb));
    CUDA_OK(cudaMemcpy(got.data(), d_dst, got.size() * 4, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(q.data(), d_q, q.size(), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(ss.data(), d_ss, ss.size() * 8, cudaMemcpyDeviceToHost));
    for (int64_t r = 0; r < n_rows; ++r) {
      SCOPED_TRACE(testing::Message() << "row " << r);
      expect_x8_row(ref.data() + r * n_cols, gain.data(), q.data() + size_t(r) * xb, ss.data() + r * nb, n_cols);
      for (int64_t c = 0; c < n_cols; ++c) ASSERT_EQ(got[size_t(r * n_cols + c)], ref[size_t(r * n_cols + c)]);
    }
    float* bad = nullptr;
    EXPECT_FALSE(kernels::dequantize_rows(type, d_src, n_cols, d_rows, n_rows, d_dst, nullptr,
                                          kernels::RowsX8{d_q, bad, d_ss}).ok) << "x8 without a gain";
    cudaFree(d_src); cudaFree(d_rows); cudaFree(d_dst); cudaFree(d_gain); cudaFree(d_q); cudaFree(d_ss);
  }
}

// With StagedInputs (the decode step's lookup reading its inputs from the pinned staging): the
// row of the staged token, or of the id at *sampled when the token is -1; token and position
// copied to dst[0] and dst[half]; the stamp published. The kernel decodes the sampled id's row
// before it has read the staging, so the cases cover a right guess, a wrong one (the host
// staged another token) and none (the sampled id outside the table); 768, 4096 and 8192 columns
// (under one, four and eight per thread of the one block), with and without the int8 blocks.
TEST(DequantGpuStaged, TokenFromTheStagingOrTheSampledId) {
  std::mt19937 rng(31);
  std::normal_distribution<float> nd(0.f, 1.f);
  const GgmlType type = GgmlType::Q4_0;
  const int64_t half = 16, table_rows = 9;
  int32_t* staging = nullptr;  // [tokens | positions | stamp], mapped
  int32_t* seen = nullptr;
  CUDA_OK(cudaHostAlloc(reinterpret_cast<void**>(&staging), (2 * half + 1) * 4, cudaHostAllocMapped));
  CUDA_OK(cudaHostAlloc(reinterpret_cast<void**>(&seen), 4, cudaHostAllocMapped));
  int32_t *staging_dev = nullptr, *seen_dev = nullptr;
  CUDA_OK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&staging_dev), staging, 0));
  CUDA_OK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&seen_dev), seen, 0));
  for (const int64_t n_cols : {int64_t(768), int64_t(4096), int64_t(8192)}) {
    SCOPED_TRACE(testing::Message() << n_cols << " columns");
    const auto host = random_rows(type, n_cols, table_rows, rng);
    const size_t rb = row_bytes(type, n_cols), xb = kernels::x8_bytes(n_cols);
    const int64_t nb = n_cols / 32;
    std::vector<float> gain(static_cast<size_t>(n_cols));
    for (auto& g : gain) g = 0.5f + nd(rng) * 0.3f;
    void* d_src; float *d_dst, *d_gain; int32_t *d_in, *d_sampled; uint8_t* d_q; double* d_ss;
    CUDA_OK(cudaMalloc(&d_src, host.size()));
    CUDA_OK(cudaMalloc(&d_dst, size_t(n_cols) * 4));
    CUDA_OK(cudaMalloc(&d_gain, size_t(n_cols) * 4));
    CUDA_OK(cudaMalloc(&d_q, xb));
    CUDA_OK(cudaMalloc(&d_ss, size_t(nb) * 8));
    CUDA_OK(cudaMalloc(&d_in, size_t(2 * half) * 4));
    CUDA_OK(cudaMalloc(&d_sampled, 4));
    CUDA_OK(cudaMemcpy(d_src, host.data(), host.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_gain, gain.data(), gain.size() * 4, cudaMemcpyHostToDevice));
    const kernels::StagedInputs in{staging_dev, d_in, half, d_sampled, seen_dev, table_rows};
    // token: staged (-1: the sampled id); row: the one expected
    struct Step { int32_t token, sampled, pos, stamp, row; bool x8; };
    for (const Step s : {Step{3, 7, 41, 100, 3, false}, Step{-1, 7, 42, 101, 7, true}, Step{-1, 8, 43, 102, 8, false},
                         Step{5, 5, 44, 103, 5, true}, Step{2, 1000, 45, 104, 2, true}, Step{0, -3, 46, 105, 0, false}}) {
      SCOPED_TRACE(testing::Message() << "token " << s.token << ", sampled " << s.sampled);
      staging[0] = s.token, staging[half] = s.pos, staging[2 * half] = s.stamp;
      *seen = 0;
      CUDA_OK(cudaMemcpy(d_sampled, &s.sampled, 4, cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemset(d_dst, 0xFF, size_t(n_cols) * 4));
      CUDA_OK(cudaMemset(d_in, 0xFF, size_t(2 * half) * 4));
      CUDA_OK(cudaMemset(d_q, 0x7F, xb));
      CUDA_OK(cudaMemset(d_ss, 0xFF, size_t(nb) * 8));
      const kernels::RowsX8 x8 = s.x8 ? kernels::RowsX8{d_q, d_gain, d_ss} : kernels::RowsX8{};
      const auto st = kernels::dequantize_rows(type, d_src, n_cols, nullptr, 1, d_dst, nullptr, x8, in);
      ASSERT_TRUE(st.ok) << st.message;
      CUDA_OK(cudaDeviceSynchronize());
      std::vector<float> got(static_cast<size_t>(n_cols)), ref(static_cast<size_t>(n_cols));
      dequantize_row(type, host.data() + size_t(s.row) * rb, ref.data(), n_cols);
      CUDA_OK(cudaMemcpy(got.data(), d_dst, got.size() * 4, cudaMemcpyDeviceToHost));
      EXPECT_EQ(got, ref);
      std::vector<int32_t> copied(static_cast<size_t>(2 * half));
      CUDA_OK(cudaMemcpy(copied.data(), d_in, copied.size() * 4, cudaMemcpyDeviceToHost));
      EXPECT_EQ(copied[0], s.row);
      EXPECT_EQ(copied[size_t(half)], s.pos);
      EXPECT_EQ(*seen, s.stamp);
      if (s.x8) {
        std::vector<uint8_t> q(xb);
        std::vector<double> ss(static_cast<size_t>(nb));
        CUDA_OK(cudaMemcpy(q.data(), d_q, q.size(), cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(ss.data(), d_ss, ss.size() * 8, cudaMemcpyDeviceToHost));
        expect_x8_row(ref.data(), gain.data(), q.data(), ss.data(), n_cols);
      }
    }
    int32_t d_rows_dummy = 0;
    EXPECT_FALSE(kernels::dequantize_rows(type, d_src, n_cols, nullptr, 2, d_dst, nullptr, {}, in).ok) << "two rows";
    EXPECT_FALSE(kernels::dequantize_rows(type, d_src, n_cols, &d_rows_dummy, 1, d_dst, nullptr, {}, in).ok) << "a row list";
    cudaFree(d_src); cudaFree(d_dst); cudaFree(d_gain); cudaFree(d_q); cudaFree(d_ss); cudaFree(d_in); cudaFree(d_sampled);
  }
  float* d_big = nullptr;
  CUDA_OK(cudaMalloc(&d_big, 8224 * 4));
  const kernels::StagedInputs in{staging_dev, reinterpret_cast<int32_t*>(d_big), half, reinterpret_cast<int32_t*>(d_big),
                                 seen_dev, 1};
  EXPECT_FALSE(kernels::dequantize_rows(GgmlType::F32, d_big, 8224, nullptr, 1, d_big, nullptr, {}, in).ok)
      << "a row wider than the staged lookup's block covers";
  cudaFree(d_big);
  cudaFreeHost(staging); cudaFreeHost(seen);
}

TEST(DequantGpuArgs, RejectsBadShapes) {
  float* d;
  ASSERT_EQ(cudaMalloc(&d, 1024), cudaSuccess);
  EXPECT_FALSE(kernels::dequantize_rows(GgmlType::Q4_0, d, 33, nullptr, 1, d, nullptr).ok);
  EXPECT_FALSE(kernels::dequantize_rows(GgmlType::Q4_K, d, 0, nullptr, 1, d, nullptr).ok);
  EXPECT_FALSE(kernels::dequantize_rows(GgmlType::F32, nullptr, 4, nullptr, 1, d, nullptr).ok);
  EXPECT_TRUE(kernels::dequantize_rows(GgmlType::F32, d, 4, nullptr, 0, d, nullptr).ok);
  cudaFree(d);
}

}  // namespace

// The repacked q6_K, q3_K, q2_K, q4_K, q5_K, iq4_xs, q5_0, q5_1 and iq4_nl planes (gemv_repack) back to f16 rows (dequant_repacked:
// the batching engine's matmuls of many rows with these weights): a slice of rows in the middle of
// the matrix, against the CPU's dequantised values rounded to f16 (within one f16 rounding: the
// kernel scales d * (sc * q), the CPU (d * sc) * q; q2_K, q4_K and q5_K subtract dmin m, where a host
// compiler's contraction into an FMA may move the f32 result by an ulp of the terms), the output's
// neighbours poisoned and left alone.
TEST(DequantGpuRepacked, SliceOfRowsMatchesTheCpu) {
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (GgmlType t : {GgmlType::Q6_K, GgmlType::Q3_K, GgmlType::Q2_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::IQ4_XS,
                     GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4_NL}) {
    const int64_t n = 37, k = traits(t).block_elems == 32 ? 800 : 768, row0 = 5, rows = 29;  // (800: 25 blocks of 32)
    const size_t rb = row_bytes(t, k);
    std::vector<uint8_t> w(rb * size_t(n));
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t r = 0; r < n; ++r) {
      for (auto& f : row) f = nd(rng);
      quantize_row(t, row.data(), w.data() + size_t(r) * rb, k);
    }
    void *raw = nullptr, *planes = nullptr, *out = nullptr;
    const size_t out_elems = size_t(rows * k) + 16;
    ASSERT_EQ(cudaMalloc(&raw, w.size()), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&planes, kernels::gemv_repacked_bytes(t, n, k)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&out, out_elems * 2), cudaSuccess);
    cudaMemcpy(raw, w.data(), w.size(), cudaMemcpyHostToDevice);
    cudaMemset(out, 0xFF, out_elems * 2);
    ASSERT_TRUE(kernels::gemv_repack(t, raw, n, k, planes, nullptr).ok);
    const kernels::Status st = kernels::dequant_repacked(t, planes, n, k, row0, rows, out, nullptr);
    ASSERT_TRUE(st.ok) << st.message;
    std::vector<uint16_t> got(out_elems);
    cudaMemcpy(got.data(), out, got.size() * 2, cudaMemcpyDeviceToHost);
    cudaFree(raw), cudaFree(planes), cudaFree(out);
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(t, w.data() + size_t(row0 + r) * rb, row.data(), k);
      for (int64_t c = 0; c < k; ++c) {
        const float want = f16_to_f32(f32_to_f16(row[size_t(c)])), g = f16_to_f32(got[size_t(r * k + c)]);
        ASSERT_NEAR(g, want, std::fabs(want) / 1024 + 1e-6) << type_name(t) << " row " << row0 + r << " col " << c;
      }
    }
    for (size_t i = size_t(rows * k); i < out_elems; ++i) ASSERT_EQ(got[i], 0xFFFF) << "written past the slice";
  }
  // an unaligned output is refused
  EXPECT_FALSE(kernels::dequant_repacked(GgmlType::Q6_K, reinterpret_cast<void*>(256), 8, 256, 0, 1,
                                         reinterpret_cast<void*>(258), nullptr).ok);
}
