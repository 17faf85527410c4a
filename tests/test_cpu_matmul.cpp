// CpuBackend's int8 and k-quant matmuls (q4_0, q4_1, q8_0, q2_K-q6_K, iq4_xs) and f16/bf16 ones through every kernel shape and instruction-set
// tier, AMX tiles included: the same bits as the portable one-row kernel for every output (the
// order vec_dot.h defines), whatever tokens share the call; and close to an fp64 product of the
// dequantised weights with the unquantised activations. Activation outliers and weights whose
// rows are not whole 16-row stripes included.
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm_amx.h"
#include "format/quant.h"
#include "format/quant_blocks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

using namespace lamina;

namespace {

struct Case {
  GgmlType type;
  int64_t K;
  std::vector<int64_t> rows;  // the weights of one matmul_multi call
  int64_t T;
};

// out[w][t][r] of one matmul_multi call on a backend with this tier.
std::vector<std::vector<float>> run(CpuIsa isa, int threads, const Case& c, const std::vector<std::vector<uint8_t>>& wq,
                                    const std::vector<float>& x, int64_t t0, int64_t T) {
  CpuBackend be(threads, false, isa);
  std::vector<Weight> ws;
  std::vector<const Weight*> wp;
  std::vector<std::vector<float>> outs;
  std::vector<Tensor> ot;
  for (size_t i = 0; i < c.rows.size(); ++i) {
    ws.push_back({c.type, c.K, c.rows[i], wq[i].data()});
    outs.emplace_back(size_t(T * c.rows[i]), std::nanf(""));  // poisoned
  }
  for (size_t i = 0; i < c.rows.size(); ++i) wp.push_back(&ws[i]), ot.push_back({outs[i].data(), T, c.rows[i]});
  std::vector<float> xs(x.begin() + t0 * c.K, x.begin() + (t0 + T) * c.K);
  be.matmul_multi(wp, Tensor{xs.data(), T, c.K}, ot);
  return outs;
}

// Some quants and scales at the ends of their ranges, which quantising Gaussians never gives:
// q8_0 quants of -128 and 127 (the products' extremes), q6_K group scales of -128 and 127.
void extremes(GgmlType t, std::vector<uint8_t>& wq, int64_t K) {
  const size_t rb = row_bytes(t, K);
  for (size_t r = 0; r * rb < wq.size(); r += 3) {
    uint8_t* row = wq.data() + r * rb;
    if (t == GgmlType::Q8_0) {
      auto* b = reinterpret_cast<block_q8_0*>(row);
      b[0].qs[1] = uint8_t(int8_t(-128)), b[0].qs[2] = 127, b[0].qs[3] = uint8_t(int8_t(-128));
    } else if (t == GgmlType::Q6_K) {
      auto* b = reinterpret_cast<block_q6_K*>(row);
      b[0].scales[0] = int8_t(-128), b[0].scales[5] = 127;
    }
  }
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST(CpuMatmul, EveryTierAndShapeGivesTheOneRowKernelsBits) {
  const std::vector<Case> cases = {
      {GgmlType::Q4_K, 512, {48, 20}, 33},      {GgmlType::Q4_K, 256, {16}, 16},
      {GgmlType::Q4_0, 64, {32, 17}, 7},        {GgmlType::Q6_K, 256, {16}, 6},
      {GgmlType::Q6_K, 512, {32, 18}, 20},      {GgmlType::Q6_K, 768, {16}, 45},
      {GgmlType::Q4_0, 576, {64, 48, 37}, 37},  {GgmlType::Q4_1, 160, {100}, 16},
      {GgmlType::Q8_0, 64, {16, 33}, 21},       {GgmlType::Q4_0, 96, {19}, 3},
      {GgmlType::Q4_1, 576, {48, 16}, 50},      {GgmlType::Q8_0, 1536, {32}, 17},
      {GgmlType::Q4_1, 64, {300, 77}, 2},       {GgmlType::Q8_0, 96, {261}, 1},
      {GgmlType::F16, 576, {64, 18}, 23},       {GgmlType::F16, 40, {7}, 13},
      {GgmlType::F16, 1536, {9, 12}, 3},       {GgmlType::BF16, 576, {21, 8}, 19},
      {GgmlType::BF16, 72, {5}, 7},
      // around the tiles' thresholds (6: AMX, AVX-512; 10: AVX-VNNI; 12: AVX2)
      {GgmlType::Q4_0, 128, {32}, 5},           {GgmlType::Q8_0, 64, {16}, 9},
      {GgmlType::Q4_1, 96, {16}, 10},           {GgmlType::Q4_K, 256, {16}, 11},
      {GgmlType::Q6_K, 256, {32}, 12},
      {GgmlType::Q5_K, 512, {24, 9}, 13},       {GgmlType::Q5_K, 256, {16}, 2},
      {GgmlType::Q5_K, 768, {32, 16}, 33},      // the tiles of q5_K, q3_K, iq4_xs: two token tiles
      {GgmlType::Q3_K, 768, {32, 16}, 33},      {GgmlType::IQ4_XS, 768, {32, 16}, 33},
      {GgmlType::Q3_K, 512, {24, 9}, 13},       {GgmlType::Q2_K, 256, {16, 5}, 3},
      {GgmlType::Q2_K, 512, {24, 9}, 13},       {GgmlType::Q3_K, 256, {16}, 6},
      {GgmlType::IQ4_XS, 512, {24, 9}, 13},     {GgmlType::IQ4_XS, 256, {16}, 1},
  };
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  int tiers = 0;
  for (const Case& c : cases) {
    std::vector<std::vector<uint8_t>> wq;
    std::vector<std::vector<float>> wf;
    for (int64_t n : c.rows) {
      wf.emplace_back(size_t(n * c.K));
      for (auto& v : wf.back()) v = nd(rng);
      wq.emplace_back(size_t(n) * row_bytes(c.type, c.K));
      for (int64_t r = 0; r < n; ++r) quantize_row(c.type, wf.back().data() + r * c.K, wq.back().data() + size_t(r) * row_bytes(c.type, c.K), c.K);
      extremes(c.type, wq.back(), c.K);
    }
    std::vector<float> x(size_t(c.T * c.K));
    for (size_t i = 0; i < x.size(); ++i) x[i] = nd(rng) * (i % 61 == 5 ? 25.f : 1.f);  // outliers in a few channels
    // The bits to match: the portable kernel's (vec_dot.h's one order); f16 and bf16 have their
    // order from AVX2's one-row kernel (two 8-lane chains) on every SIMD tier, the portable one a
    // plain chain.
    const bool half = c.type == GgmlType::F16 || c.type == GgmlType::BF16;
    const CpuIsa ref_isa = half ? CpuIsa::Avx2 : CpuIsa::Scalar;
    if (!cpu_runs(ref_isa)) continue;
    const auto want = run(ref_isa, 1, c, wq, x, 0, c.T);
    // Close to fp64 of the dequantised weights times the f32 activations.
    for (size_t w = 0; w < c.rows.size(); ++w) {
      std::vector<float> deq(size_t(c.K));
      double err = 0, ref2 = 0;
      for (int64_t r = 0; r < c.rows[w]; ++r) {
        dequantize_row(c.type, wq[w].data() + size_t(r) * row_bytes(c.type, c.K), deq.data(), c.K);
        for (int64_t t = 0; t < c.T; ++t) {
          double ref = 0;
          for (int64_t k = 0; k < c.K; ++k) ref += double(deq[size_t(k)]) * x[size_t(t * c.K + k)];
          const double got = want[w][size_t(t * c.rows[w] + r)];
          err += (got - ref) * (got - ref), ref2 += ref * ref;
        }
      }
      EXPECT_LT(std::sqrt(err / ref2), 1e-2) << type_name(c.type) << " K=" << c.K;
    }
    for (CpuIsa isa : {CpuIsa::Avx2, CpuIsa::AvxVnni, CpuIsa::Avx512, CpuIsa::Amx}) {
      if (!cpu_runs(isa) || isa == ref_isa) continue;
      ++tiers;
      const auto got = run(isa, 2, c, wq, x, 0, c.T);
      for (size_t w = 0; w < c.rows.size(); ++w)
        EXPECT_TRUE(same_bits(got[w], want[w])) << type_name(c.type) << " " << isa_name(isa) << " K=" << c.K << " T=" << c.T
                                                << " weight " << w;
      // Each token alone: the bits it gets in the batch.
      for (int64_t t : {int64_t(0), c.T - 1}) {
        const auto one = run(isa, 2, c, wq, x, t, 1);
        for (size_t w = 0; w < c.rows.size(); ++w)
          EXPECT_TRUE(same_bits(one[w], std::vector<float>(want[w].begin() + t * c.rows[w], want[w].begin() + (t + 1) * c.rows[w])))
              << type_name(c.type) << " " << isa_name(isa) << " token " << t << " alone";
      }
    }
  }
  if (tiers == 0) GTEST_SKIP() << "CPU has no SIMD tier (the portable kernel was checked against fp64 only)";
  if (detect_isa() < CpuIsa::Amx) std::printf("no AMX on this CPU: its tiles were not checked\n");
}
