// Backend conformance (as llama.cpp's test-backend-ops): every op of the CUDA backend against the
// CPU backend on the same random inputs, every weight type, odd sizes, both KV cache types.
// The CPU side runs in its exact mode (f32 activations) so the bound measures the GPU's error:
//   f32 element-wise ops, norms, RoPE, embedding             rel L2 <= 1e-5 .. 1e-4
//   matmuls, f32-x GEMV (f16/bf16/f32 weights, exact mode)   <= 1e-4
//   matmuls with int8-rounded x (quantised weights, GEMV)    <= 2e-2
//   matmuls with f16-rounded x (GEMM, > 8 rows)              <= 5e-3
//   attention (f16 or f32 cache, same rounding both sides)   <= 1e-4
//   tensor-core prefill attention (q and P rounded to f16)   <= 3e-3
// Sampling is checked for the exact token against a host implementation of the same rules.
// Attention and sampling: test_backend_attention_gpu.cpp. Helpers: backend_ops_util.h.
#include "backend_ops_util.h"
#include "gpu_test_util.h"
#include "kernels/common/q8_blocks.h"
#include "kernels/ops/ops.h"
#include "model/sampler.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>

using namespace lamina;
using namespace lamina::backend_ops_test;

namespace {

// The prompt's RMSNorm kernel (128-thread blocks, from 256 rows) against the one-row kernel (1,024
// threads) at the row widths of real models: the f32 values, the f16 copy and the int8 blocks of
// a row among 300 equal, bit for bit, those of the same row normalised alone.
TEST(BackendOps, RmsNormOfManyRowsIsTheOneRowKernelsBitForBit) {
  std::mt19937 rng(11);
  for (int64_t cols : {2048, 4096, 5120, 8192}) {
    const int64_t rows = 300, pick = 123;
    const std::vector<float> xh = randn(size_t(rows * cols), rng), wh = randn(size_t(cols), rng);
    const size_t x8 = kernels::x8_bytes(cols);
    DeviceBuf x(xh), w(wh), out(size_t(rows * cols) * 4), out16(size_t(rows * cols) * 2), out8(size_t(rows) * x8);
    DeviceBuf one(size_t(cols) * 4), one16(size_t(cols) * 2), one8(x8);
    const float* xp = static_cast<const float*>(x.p);
    ASSERT_TRUE(kernels::rmsnorm(xp, static_cast<const float*>(w.p), rows, cols, 1e-6f, static_cast<float*>(out.p), out16.p,
                                 GgmlType::F16, nullptr, out8.p).ok);
    ASSERT_TRUE(kernels::rmsnorm(xp + pick * cols, static_cast<const float*>(w.p), 1, cols, 1e-6f, static_cast<float*>(one.p),
                                 one16.p, GgmlType::F16, nullptr, one8.p).ok);
    CUDA_OK(cudaDeviceSynchronize());
    auto bytes = [](const DeviceBuf& b, size_t offset, size_t n) {
      std::vector<uint8_t> h(n);
      EXPECT_EQ(cudaMemcpy(h.data(), static_cast<const uint8_t*>(b.p) + offset, n, cudaMemcpyDeviceToHost), cudaSuccess);
      return h;
    };
    EXPECT_EQ(bytes(out, size_t(pick * cols) * 4, size_t(cols) * 4), bytes(one, 0, size_t(cols) * 4)) << cols << " columns, f32";
    EXPECT_EQ(bytes(out16, size_t(pick * cols) * 2, size_t(cols) * 2), bytes(one16, 0, size_t(cols) * 2)) << cols << " columns, f16";
    EXPECT_EQ(bytes(out8, size_t(pick) * x8, x8), bytes(one8, 0, x8)) << cols << " columns, int8 blocks";
  }
}

TEST(BackendOps, RmsNormAddBiasSwiglu) {
  Both b;
  std::mt19937 rng(1);
  for (int64_t rows : {1, 5, 17, 300}) {  // (300: rmsnorm's kernel for prompts)
    for (int64_t cols : {256, 576, 1000}) {
      const auto xh = randn(size_t(rows * cols), rng), yh = randn(size_t(rows * cols), rng), gh = randn(size_t(cols), rng);
      auto [wc, wg] = b.weight(GgmlType::F32, 1, cols, f32_bytes(gh), WeightUse::Vector);
      b.cpu.reset_scratch(), b.gpu.reset_scratch();
      Tensor xc = b.put(b.cpu, xh, rows, cols), xg = b.put(b.gpu, xh, rows, cols);
      Tensor yc = b.put(b.cpu, yh, rows, cols), yg = b.put(b.gpu, yh, rows, cols);
      Tensor oc = b.cpu.alloc(rows, cols), og = b.gpu.alloc(rows, cols);
      b.cpu.rmsnorm(xc, wc, 1e-5f, oc), b.gpu.rmsnorm(xg, wg, 1e-5f, og);
      EXPECT_LE(rel(b.get(b.gpu, og), b.get(b.cpu, oc)), 1e-6) << "rmsnorm " << rows << "x" << cols;
      if (rows == 300) {  // a prompt's rows (128-thread blocks) and one row (1024 threads): the same bits
        const std::vector<float> x3(xh.begin() + 3 * cols, xh.begin() + 4 * cols);
        Tensor x1 = b.put(b.gpu, x3, 1, cols), o1 = b.gpu.alloc(1, cols);
        b.gpu.rmsnorm(x1, wg, 1e-5f, o1);
        const std::vector<float> all = b.get(b.gpu, og), one = b.get(b.gpu, o1);
        EXPECT_TRUE(std::equal(one.begin(), one.end(), all.begin() + 3 * cols)) << "rmsnorm row 3 alone, " << cols << " columns";
      }
      b.cpu.add(xc, yc), b.gpu.add(xg, yg);
      EXPECT_LE(rel(b.get(b.gpu, xg), b.get(b.cpu, xc)), 1e-7) << "add";
      b.cpu.add_bias(xc, wc), b.gpu.add_bias(xg, wg);
      EXPECT_LE(rel(b.get(b.gpu, xg), b.get(b.cpu, xc)), 1e-7) << "add_bias";
      b.cpu.swiglu(xc, yc), b.gpu.swiglu(xg, yg);
      EXPECT_LE(rel(b.get(b.gpu, xg), b.get(b.cpu, xc)), 1e-6) << "swiglu";
      b.cpu.geglu(xc, yc), b.gpu.geglu(xg, yg);
      EXPECT_LE(rel(b.get(b.gpu, xg), b.get(b.cpu, xc)), 1e-6) << "geglu";
      b.cpu.scale(xc, 25.3f), b.gpu.scale(xg, 25.3f);
      EXPECT_LE(rel(b.get(b.gpu, xg), b.get(b.cpu, xc)), 1e-7) << "scale";
      // the residual add with the norms around it (Gemma's post-norm; the next layer's norm),
      // every combination; h's int8 copy (rows <= 8) is checked by the GEMV that reads it below
      for (const bool post : {false, true})
        for (const bool next : {false, true}) {
          Tensor hc = b.cpu.alloc(rows, cols), hg = b.gpu.alloc(rows, cols);
          b.cpu.add_norm(xc, yc, post ? &wc : nullptr, next ? &wc : nullptr, 1e-6f, hc);
          b.gpu.add_norm(xg, yg, post ? &wg : nullptr, next ? &wg : nullptr, 1e-6f, hg);
          EXPECT_LE(rel(b.get(b.gpu, xg), b.get(b.cpu, xc)), 1e-6) << "add_norm x, post " << post << " next " << next;
          if (next) EXPECT_LE(rel(b.get(b.gpu, hg), b.get(b.cpu, hc)), 1e-6) << "add_norm h, post " << post;
        }
    }
  }
}

// A mixture of experts' outputs back into their tokens' rows: dst[rows[i]] += scale[i] * src[i],
// recorded ops before it run first (the add of y here), rows not routed stay as they were.
TEST(BackendOps, AddRowsScaledAfterTheRecordedOps) {
  Both b;
  std::mt19937 rng(3);
  const int64_t rows = 9, cols = 640;
  const std::vector<int32_t> routed{7, 0, 4};
  const std::vector<float> scale{0.25f, -1.5f, 0.625f};
  const auto xh = randn(size_t(rows * cols), rng), yh = randn(size_t(rows * cols), rng),
             sh = randn(size_t(routed.size()) * size_t(cols), rng);
  b.cpu.reset_scratch(), b.gpu.reset_scratch();
  Tensor xc = b.put(b.cpu, xh, rows, cols), xg = b.put(b.gpu, xh, rows, cols);
  Tensor yc = b.put(b.cpu, yh, rows, cols), yg = b.put(b.gpu, yh, rows, cols);
  Tensor sc = b.put(b.cpu, sh, int64_t(routed.size()), cols), sg = b.put(b.gpu, sh, int64_t(routed.size()), cols);
  b.cpu.add(xc, yc), b.gpu.add(xg, yg);
  b.cpu.add_rows_scaled(xc, sc, routed, scale), b.gpu.add_rows_scaled(xg, sg, routed, scale);
  const std::vector<float> got = b.get(b.gpu, xg), want = b.get(b.cpu, xc);
  EXPECT_LE(rel(got, want), 1e-7);
  for (int64_t r = 0; r < rows; ++r) {
    if (std::find(routed.begin(), routed.end(), int32_t(r)) != routed.end()) continue;
    for (int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(got[size_t(r * cols + c)], xh[size_t(r * cols + c)] + yh[size_t(r * cols + c)]) << "row " << r << " not routed";
  }
  EXPECT_THROW(b.gpu.add_rows_scaled(xg, sg, std::vector<int32_t>{1, 2, 9}, scale), Error);  // a row outside dst
}

TEST(BackendOps, Rope) {
  Both b;
  std::mt19937 rng(2);
  const float factors[32] = {1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 3, 4, 5, 6, 7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8};
  for (bool neox : {false, true})
    for (int n_rot : {64, 32})
      for (bool ff : {false, true}) {
        const int heads = 3, hd = 64, rows = 7;
        std::vector<int32_t> pos(rows), toks(rows, 0);
        for (int i = 0; i < rows; ++i) pos[size_t(i)] = 1000 * i + 3;
        const auto xh = randn(size_t(rows * heads * hd), rng);
        b.begin(toks, pos);
        Tensor xc = b.put(b.cpu, xh, rows, heads * hd), xg = b.put(b.gpu, xh, rows, heads * hd);
        // (with the factors, LongRoPE's magnitude scaling of cos and sin too)
        const RopeParams p{n_rot, 10000.f, 0.5f, neox, ff && n_rot == 64 ? factors : nullptr, ff ? 1.19f : 1.f};
        b.cpu.rope(xc, heads, hd, pos, p), b.gpu.rope(xg, heads, hd, pos, p);
        EXPECT_LE(rel(b.get(b.gpu, xg), b.get(b.cpu, xc)), 2e-6) << "neox " << neox << " n_rot " << n_rot;
      }
}

TEST(BackendOps, EmbedEveryType) {
  Both b;
  std::mt19937 rng(3);
  for (GgmlType t : kTypes) {
    const int64_t V = 300, E = 512;
    const auto bytes = quantised(t, V, E, rng);
    auto [wc, wg] = b.weight(t, V, E, bytes, WeightUse::Embedding);
    const std::vector<int32_t> toks = {0, 299, 17, 17, 150}, pos = {0, 1, 2, 3, 4};
    b.begin(toks, pos);
    Tensor oc = b.cpu.alloc(5, E), og = b.gpu.alloc(5, E);
    b.cpu.embed(wc, toks, oc), b.gpu.embed(wg, toks, og);
    EXPECT_LE(rel(b.get(b.gpu, og), b.get(b.cpu, oc)), 1e-7) << type_name(t);
  }
}

// rows <= 8 take GEMV, more take GEMM (or GEMV slices for types without a GEMM variant).
TEST(BackendOps, MatmulEveryTypeAndEpilogue) {
  Both b(gemv_rows(8));
  CudaBackend exact(0, true);
  std::mt19937 rng(4);
  for (GgmlType t : kTypes) {
    for (int64_t rows : {1, 3, 8, 9, 40, 160}) {  // 160: types without a GEMM go through f16 from 129 rows
      const int64_t N = 200, K = 512;
      const auto bytes = quantised(t, N, K, rng), up = quantised(t, N, K, rng);
      auto [wc, wg] = b.weight(t, N, K, bytes);
      auto [uc, ug] = b.weight(t, N, K, up);
      GgufTensor gt;
      gt.name = "w", gt.n_dims = 2, gt.ne[0] = K, gt.ne[1] = N, gt.type = t, gt.nbytes = bytes.size(), gt.data = bytes.data();
      const Weight we = exact.load_weight(gt, WeightUse::Matmul);
      const auto xh = randn(size_t(rows * K), rng), rh = randn(size_t(rows * N), rng);
      b.cpu.reset_scratch(), b.gpu.reset_scratch(), exact.reset_scratch();
      Tensor xc = b.put(b.cpu, xh, rows, K), xg = b.put(b.gpu, xh, rows, K), xe = b.put(exact, xh, rows, K);
      Tensor oc = b.cpu.alloc(rows, N), og = b.gpu.alloc(rows, N), oe = exact.alloc(rows, N);
      b.cpu.matmul(wc, xc, oc), b.gpu.matmul(wg, xg, og), exact.matmul(we, xe, oe);
      const auto want = b.get(b.cpu, oc);
      const double tol = int8_x(t) ? 2e-2 : rows > 8 && t != GgmlType::F32 ? 5e-3 : 1e-4;
      EXPECT_LE(rel(b.get(b.gpu, og), want), tol) << "matmul " << type_name(t) << " rows " << rows;
      EXPECT_LE(rel(b.get(exact, oe), want), 1e-4) << "exact matmul " << type_name(t) << " rows " << rows;
      // residual add fused
      Tensor rc = b.put(b.cpu, rh, rows, N), rg = b.put(b.gpu, rh, rows, N);
      b.cpu.matmul_add(wc, xc, rc), b.gpu.matmul_add(wg, xg, rg);
      EXPECT_LE(rel(b.get(b.gpu, rg), b.get(b.cpu, rc)), tol) << "matmul_add " << type_name(t) << " rows " << rows;
      // SwiGLU and GeGLU of the gate/up pair
      for (const Glu act : {Glu::Silu, Glu::Gelu}) {
        Tensor gc = b.cpu.alloc(rows, N), gg = b.gpu.alloc(rows, N);
        b.cpu.ffn_gate_up(wc, uc, xc, gc, act), b.gpu.ffn_gate_up(wg, ug, xg, gg, act);
        EXPECT_LE(rel(b.get(b.gpu, gg), b.get(b.cpu, gc)), 2 * tol)
            << "ffn_gate_up " << type_name(t) << " rows " << rows << (act == Glu::Gelu ? " gelu" : " silu");
      }
    }
  }
}

// CudaOptions::gemv_max_rows: with 2, matmuls of 3 to 8 rows run as GEMMs (the profile names
// them) and still match the CPU; 1 and 2 rows stay GEMVs.
TEST(BackendOps, GemvMaxRowsSendsSmallBatchesToTheGemm) {
  ASSERT_EQ(CudaOptions{}.gemv_max_rows, 2);  // the default, measured (cuda_options.h)
  Both b(gemv_rows(2));
  std::mt19937 rng(21);
  for (GgmlType t : {GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K}) {
    for (int64_t rows : {1, 2, 3, 8}) {
      const int64_t N = 256, K = 512;
      auto [wc, wg] = b.weight(t, N, K, quantised(t, N, K, rng));
      const auto xh = randn(size_t(rows * K), rng);
      b.cpu.reset_scratch(), b.gpu.reset_scratch();
      Tensor xc = b.put(b.cpu, xh, rows, K), xg = b.put(b.gpu, xh, rows, K);
      Tensor oc = b.cpu.alloc(rows, N), og = b.gpu.alloc(rows, N);
      b.gpu.set_profiling(true);
      b.gpu.profile_reset();
      b.cpu.matmul(wc, xc, oc), b.gpu.matmul(wg, xg, og);
      const std::vector<float> got = b.get(b.gpu, og);
      const std::string report = b.gpu.profile_report();
      b.gpu.set_profiling(false);
      const bool gemm = rows > 2;
      EXPECT_EQ(report.find("| gemm ") != std::string::npos, gemm) << type_name(t) << " rows " << rows << "\n" << report;
      EXPECT_EQ(report.find("| gemv ") != std::string::npos, !gemm) << type_name(t) << " rows " << rows << "\n" << report;
      const double tol = int8_x(t) ? 2e-2 : gemm ? 5e-3 : 1e-4;
      EXPECT_LE(rel(got, b.get(b.cpu, oc)), tol) << type_name(t) << " rows " << rows;
    }
  }
  CudaOptions bad;
  bad.gemv_max_rows = 9;
  EXPECT_THROW(CudaBackend(0, false, bad), Error);
}

// Prompt rows of norm -> gate/up -> GLU -> down (+ residual): on an H100 the plan's gated GEMM
// (the GLU in its epilogue, the down projection reading its f16 output only), else two GEMMs and
// the GLU kernel; either way the CPU's numbers, the profile naming the path taken, and the GLU
// output still readable afterwards (widened from its 16-bit copy). --no-gated-gemm gives the
// separate kernels.
TEST(BackendOps, GatedGemmFeedsTheDownProjection) {
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::mt19937 rng(23);
  for (const bool gated : {true, false}) {
    CudaOptions o;
    o.gated_gemm = gated;
    Both b(o);
    for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K}) {
      for (const bool gelu : {false, true}) {
        // (F = 640: W_down's k fits no tensor-core GEMM, so it takes the GLU output through GEMVs
        // widened from the f16 copy; q4_K blocks need F % 256 == 0)
        const int64_t rows = 37, E = 512, F = t == GgmlType::Q4_K ? 768 : 640;
        auto [gc, gg] = b.weight(t, F, E, quantised(t, F, E, rng));
        auto [uc, ug] = b.weight(t, F, E, quantised(t, F, E, rng));
        auto [dc, dg] = b.weight(t, E, F, quantised(t, E, F, rng));
        auto [nc, ng] = b.weight(GgmlType::F32, 1, E, f32_bytes(randn(size_t(E), rng)), WeightUse::Vector);
        const auto xh = randn(size_t(rows * E), rng);
        b.cpu.reset_scratch(), b.gpu.reset_scratch();
        Tensor xc = b.put(b.cpu, xh, rows, E), xg = b.put(b.gpu, xh, rows, E);
        Tensor hc = b.cpu.alloc(rows, E), hg = b.gpu.alloc(rows, E);
        const Tensor oc[] = {b.cpu.alloc(rows, F), b.cpu.alloc(rows, F)};
        const Tensor og[] = {b.gpu.alloc(rows, F), b.gpu.alloc(rows, F)};
        const Weight* pc[] = {&gc, &uc};
        const Weight* pg[] = {&gg, &ug};
        b.gpu.set_profiling(true);
        b.gpu.profile_reset();
        for (Backend* be : {static_cast<Backend*>(&b.cpu), static_cast<Backend*>(&b.gpu)}) {
          const bool g = be == &b.gpu;
          be->rmsnorm(g ? xg : xc, g ? ng : nc, 1e-5f, g ? hg : hc);
          be->matmul_multi(g ? pg : pc, g ? hg : hc, g ? og : oc);
          if (gelu) be->geglu(g ? og[0] : oc[0], g ? og[1] : oc[1]);
          else be->swiglu(g ? og[0] : oc[0], g ? og[1] : oc[1]);
          const Tensor down = g ? b.gpu.alloc(rows, E) : b.cpu.alloc(rows, E);
          be->matmul(g ? dg : dc, g ? og[0] : oc[0], down);
          be->add(g ? xg : xc, down);
        }
        const std::vector<float> x_gpu = b.get(b.gpu, xg);
        const std::string report = b.gpu.profile_report();
        b.gpu.set_profiling(false);
        const bool fused = gated && prop.major == 9;
        SCOPED_TRACE(testing::Message() << type_name(t) << (gelu ? " geglu" : " swiglu") << (gated ? " gated" : " separate"));
        EXPECT_EQ(report.find("gemm gate/up") != std::string::npos, fused) << report;
        EXPECT_EQ(report.find(gelu ? "| geglu" : "| swiglu") != std::string::npos, !fused) << report;
        EXPECT_LE(rel(x_gpu, b.get(b.cpu, xc)), 2e-2);
        EXPECT_LE(rel(b.get(b.gpu, og[0]), b.get(b.cpu, oc[0])), 3e-2) << "the GLU output read back";
      }
    }
  }
}

// A norm output that only a GEMM read is left in 16 bits (Node::out16_only). Read back in the same
// pass it is widened from that copy; once a new pass begins (whose recorded replay may write the
// same scratch addresses without a plan), the old copy is forgotten: what the memory holds then is
// what a read returns.
TEST(BackendOps, SixteenBitOnlyOutputsEndWithTheirPass) {
  Both b;
  std::mt19937 rng(31);
  const int64_t rows = 24, E = 512, N = 256;
  auto [wc, wg] = b.weight(GgmlType::Q8_0, N, E, quantised(GgmlType::Q8_0, N, E, rng));
  auto [nc, ng] = b.weight(GgmlType::F32, 1, E, f32_bytes(randn(size_t(E), rng)), WeightUse::Vector);
  const auto xh = randn(size_t(rows * E), rng);
  b.cpu.reset_scratch(), b.gpu.reset_scratch();
  Tensor xc = b.put(b.cpu, xh, rows, E), xg = b.put(b.gpu, xh, rows, E);
  Tensor hc = b.cpu.alloc(rows, E), hg = b.gpu.alloc(rows, E);
  Tensor oc = b.cpu.alloc(rows, N), og = b.gpu.alloc(rows, N);
  b.cpu.rmsnorm(xc, nc, 1e-5f, hc), b.gpu.rmsnorm(xg, ng, 1e-5f, hg);
  b.cpu.matmul(wc, hc, oc), b.gpu.matmul(wg, hg, og);
  EXPECT_LE(rel(b.get(b.gpu, og), b.get(b.cpu, oc)), 2e-2);
  EXPECT_LE(rel(b.get(b.gpu, hg), b.get(b.cpu, hc)), 2e-3) << "the norm read back: widened from its f16 copy";
  const int32_t tok = 1, pos = 0;
  b.gpu.begin_forward(std::span<const int32_t>(&tok, 1), std::span<const int32_t>(&pos, 1));
  const auto fresh = randn(size_t(rows * E), rng);
  b.gpu.finish();
  CUDA_OK(cudaMemcpy(hg.data, fresh.data(), fresh.size() * 4, cudaMemcpyHostToDevice));
  EXPECT_EQ(b.get(b.gpu, hg), fresh) << "a new pass widened the last pass's copy over its memory";
}

// RMSNorm, add_norm, decode attention and the gate/up GEMV also write their output as int8 blocks for the
// next GEMV. The matmul that reads that copy must give bit for bit what it gives when it
// quantises the output itself (the copy made stale by adding zeros).
TEST(BackendOps, Int8CopiesMatchInKernelQuantisation) {
  Both b(gemv_rows(8));  // (3 rows read the copies through GEMVs)
  std::mt19937 rng(9);
  b.gpu.init_kv_cache(1, 64, 2 * 128, GgmlType::F16);  // kv_heads * hd below
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_1, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K,
                     GgmlType::Q6_K, GgmlType::IQ4_XS, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4_NL}) {
    for (int64_t rows : {1, 3}) {
      const int64_t N = 96, K = 512, heads = 4, kv_heads = 2, hd = K / heads;
      auto [wc, wg] = b.weight(t, N, K, quantised(t, N, K, rng));
      const auto nh = randn(size_t(K), rng), xh = randn(size_t(rows * K), rng), zh = std::vector<float>(size_t(rows * K));
      auto [nc, ng] = b.weight(GgmlType::F32, 1, K, f32_bytes(nh), WeightUse::Vector);
      std::vector<int32_t> pos(static_cast<size_t>(rows)), toks(static_cast<size_t>(rows), 0);
      for (int64_t i = 0; i < rows; ++i) pos[size_t(i)] = int32_t(i);
      b.gpu.reset_scratch();
      b.gpu.begin_forward(toks, pos);
      Tensor x = b.put(b.gpu, xh, rows, K), zeros = b.put(b.gpu, zh, rows, K), h = b.gpu.alloc(rows, K);
      Tensor y1 = b.gpu.alloc(rows, N), y2 = b.gpu.alloc(rows, N);
      b.gpu.rmsnorm(x, ng, 1e-5f, h);
      b.gpu.matmul(wg, h, y1);  // reads the RMSNorm's int8 copy
      b.gpu.add(h, zeros);      // same values, copy stale
      b.gpu.matmul(wg, h, y2);  // quantises h itself
      EXPECT_EQ(b.get(b.gpu, y1), b.get(b.gpu, y2)) << "rmsnorm copy, " << type_name(t) << " rows " << rows;
      Tensor x2 = b.put(b.gpu, xh, rows, K), h2 = b.gpu.alloc(rows, K);
      b.gpu.add_norm(x2, x, &ng, &ng, 1e-6f, h2);
      b.gpu.matmul(wg, h2, y1);  // reads add_norm's int8 copy
      b.gpu.add(h2, zeros);
      b.gpu.matmul(wg, h2, y2);
      EXPECT_EQ(b.get(b.gpu, y1), b.get(b.gpu, y2)) << "add_norm copy, " << type_name(t) << " rows " << rows;
      const auto kh = randn(size_t(rows * kv_heads * hd), rng), vh = randn(size_t(rows * kv_heads * hd), rng);
      Tensor k = b.put(b.gpu, kh, rows, kv_heads * hd), v = b.put(b.gpu, vh, rows, kv_heads * hd), o = b.gpu.alloc(rows, K);
      const AttentionParams ap{int(heads), int(kv_heads), int(hd), 0.1f};
      b.gpu.attention(0, x, k, v, pos, ap, o);
      b.gpu.matmul(wg, o, y1);  // reads the attention's int8 copy
      b.gpu.add(o, zeros);
      b.gpu.matmul(wg, o, y2);
      EXPECT_EQ(b.get(b.gpu, y1), b.get(b.gpu, y2)) << "attention copy, " << type_name(t) << " rows " << rows;
      const int64_t F = 256;  // FFN width: whole K-quant blocks
      auto [gc, gg] = b.weight(t, F, K, quantised(t, F, K, rng));
      auto [uc, ug] = b.weight(t, F, K, quantised(t, F, K, rng));
      auto [dc, dg] = b.weight(t, N, F, quantised(t, N, F, rng));
      Tensor f = b.gpu.alloc(rows, F), fzeros = b.put(b.gpu, std::vector<float>(size_t(rows * F)), rows, F);
      b.gpu.ffn_gate_up(gg, ug, h, f, Glu::Silu);
      b.gpu.matmul(dg, f, y1);  // reads the gate/up GEMV's int8 copy of its output
      b.gpu.add(f, fzeros);
      b.gpu.matmul(dg, f, y2);
      EXPECT_EQ(b.get(b.gpu, y1), b.get(b.gpu, y2)) << "gate/up copy, " << type_name(t) << " rows " << rows;
    }
  }
}

// matmul_add_norm on one decode row: the GEMV that adds Wo x to the residual also writes the
// int8 blocks of residual * norm weight and their sums of squares; the GEMVs that read the norm's
// output (stacked Q/K/V, the gate/up pair, twice over) scale by the RMS; reading the output
// itself makes the backend run the norm. Against the CPU (matmul_add, rmsnorm), and in the
// last step against a fused GEMV tuned for another variant (q4_K: the norm kernel runs instead).
TEST(BackendOps, MatmulAddNormFeedsTheNextGemvs) {
  std::mt19937 rng(13);
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_1, GgmlType::Q4_K}) {
    Both b;
    const int64_t E = 512, F = 256, n[3] = {256, 128, 128};
    SCOPED_TRACE(type_name(t));
    std::vector<std::vector<uint8_t>> bytes;
    const int64_t out_rows[6] = {n[0], n[1], n[2], F, F, E};
    const std::vector<GgufTensor> ts = random_matrices(t, out_rows, E, bytes, rng);
    const GgufTensor* tp[] = {&ts[0], &ts[1], &ts[2]};
    const std::vector<Weight> qc = b.cpu.load_stacked(tp), qg = b.gpu.load_stacked(tp);
    Weight wc[3], wg[3];
    for (int i = 0; i < 3; ++i) wc[i] = b.cpu.load_weight(ts[size_t(3 + i)], WeightUse::Matmul), wg[i] = b.gpu.load_weight(ts[size_t(3 + i)], WeightUse::Matmul);
    auto [nc, ng] = b.weight(GgmlType::F32, 1, E, f32_bytes(randn(size_t(E), rng, 0.5f)), WeightUse::Vector);
    const auto xh = randn(size_t(E), rng, 2.f), ah = randn(size_t(E), rng);
    const std::vector<int32_t> pos{0}, toks{0};
    b.begin(toks, pos);
    auto pass = [&](Backend& be, const std::vector<Weight>& q, const Weight (&w)[3], const Weight& nw) {
      std::vector<std::vector<float>> out;
      Tensor x = b.put(be, xh, 1, E), a = b.put(be, ah, 1, E), h = be.alloc(1, E), f = be.alloc(1, F);
      const Tensor o[] = {be.alloc(1, n[0]), be.alloc(1, n[1]), be.alloc(1, n[2])};
      const Weight* pw[] = {&q[0], &q[1], &q[2]};
      for (int step = 0; step < 2; ++step) {  // the second step drops the first's pending norm
        be.matmul_add_norm(w[2], a, x, nw, 1e-5f, h);
        be.matmul_multi(pw, h, o);
        be.ffn_gate_up(w[0], w[1], h, f, Glu::Silu);
      }
      for (const Tensor& t : o) out.push_back(b.get(be, t));
      out.push_back(b.get(be, f));
      out.push_back(b.get(be, x));
      out.push_back(b.get(be, h));  // read: the norm runs
      return out;
    };
    const auto want = pass(b.cpu, qc, wc, nc), got = pass(b.gpu, qg, wg, ng);
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_LE(rel(got[i], want[i]), i == 3 ? 4e-2 : 2e-2) << "output " << i;
  }
}

// embed_norm on one decode row: the lookup also writes the int8 blocks of x * norm weight and
// their sums of squares, and the stacked Q/K/V GEMV applies the norm (the step plan shows it
// taking the lookup's pending norm; the norm's own kernel runs only because the pass goes on
// after the read, and h is read). Embedding tables of several types, against the CPU's embed
// and rmsnorm.
TEST(BackendOps, EmbedNormFeedsTheNextGemv) {
  std::mt19937 rng(17);
  for (GgmlType et : {GgmlType::F16, GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q6_K}) {
    for (GgmlType wt : {GgmlType::Q4_0, GgmlType::Q8_0}) {
      SCOPED_TRACE(std::string(type_name(et)) + " table, " + std::string(type_name(wt)) + " Q/K/V");
      Both b;
      const int64_t V = 100, E = 512, n[3] = {256, 128, 128};
      auto [tc, tg] = b.weight(et, V, E, quantised(et, V, E, rng), WeightUse::Embedding);
      std::vector<std::vector<uint8_t>> bytes;
      const std::vector<GgufTensor> ts = random_matrices(wt, n, E, bytes, rng);
      const GgufTensor* tp[] = {&ts[0], &ts[1], &ts[2]};
      const std::vector<Weight> qc = b.cpu.load_stacked(tp), qg = b.gpu.load_stacked(tp);
      auto [nc, ng] = b.weight(GgmlType::F32, 1, E, f32_bytes(randn(size_t(E), rng, 0.5f)), WeightUse::Vector);
      const std::vector<int32_t> toks{37}, pos{0};
      b.begin(toks, pos);
      b.gpu.profile_reset();
      b.gpu.set_profiling(true);
      std::string ops;  // the GPU's ops before h is read
      auto pass = [&](Backend& be, const Weight& t, const std::vector<Weight>& q, const Weight& nw) {
        std::vector<std::vector<float>> out;
        Tensor x = be.alloc(1, E), h = be.alloc(1, E);
        const Tensor o[] = {be.alloc(1, n[0]), be.alloc(1, n[1]), be.alloc(1, n[2])};
        const Weight* pw[] = {&q[0], &q[1], &q[2]};
        be.embed_norm(t, toks, x, nw, 1e-5f, h);
        be.matmul_multi(pw, h, o);
        for (const Tensor& r : o) out.push_back(b.get(be, r));
        if (&be == &b.gpu) ops = b.gpu.profile_report();
        out.push_back(b.get(be, x));
        out.push_back(b.get(be, h));  // read: the norm runs
        return out;
      };
      const auto want = pass(b.cpu, tc, qc, nc), got = pass(b.gpu, tg, qg, ng);
      b.gpu.set_profiling(false);
      for (size_t i = 0; i < 3; ++i) EXPECT_LE(rel(got[i], want[i]), 2e-2) << "Q/K/V part " << i;
      EXPECT_LE(rel(got[3], want[3]), 1e-7) << "embedding";
      EXPECT_LE(rel(got[4], want[4]), 1e-6) << "norm";
      EXPECT_NE(ops.find("embed+norm"), std::string::npos) << ops;
      EXPECT_NE(ops.find("(3 weights) takes norm of #0"), std::string::npos) << ops;
    }
  }
}

// Q/K/V stacked into one matrix on the GPU: matmul_multi against three CPU matmuls, one row
// (outputs back to back: one GEMV in place) and 20 rows (one GEMM, then split by columns).
TEST(BackendOps, StackedMatmulMulti) {
  std::mt19937 rng(7);
  for (GgmlType t : {GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
    for (int64_t rows : {1, 20}) {
      Both b;
      const int64_t K = 512, n[3] = {256, 128, 128};
      std::vector<std::vector<uint8_t>> bytes;
      const std::vector<GgufTensor> ts = random_matrices(t, n, K, bytes, rng);
      const GgufTensor* tp[] = {&ts[0], &ts[1], &ts[2]};
      const std::vector<Weight> wc = b.cpu.load_stacked(tp), wg = b.gpu.load_stacked(tp);
      const auto xh = randn(size_t(rows * K), rng);
      b.cpu.reset_scratch(), b.gpu.reset_scratch();
      Tensor xc = b.put(b.cpu, xh, rows, K), xg = b.put(b.gpu, xh, rows, K);
      const Tensor oc[] = {b.cpu.alloc(rows, n[0]), b.cpu.alloc(rows, n[1]), b.cpu.alloc(rows, n[2])};
      const Tensor og[] = {b.gpu.alloc(rows, n[0]), b.gpu.alloc(rows, n[1]), b.gpu.alloc(rows, n[2])};
      const Weight* pc[] = {&wc[0], &wc[1], &wc[2]};
      const Weight* pg[] = {&wg[0], &wg[1], &wg[2]};
      b.cpu.matmul_multi(pc, xc, oc), b.gpu.matmul_multi(pg, xg, og);
      for (int i = 0; i < 3; ++i)
        EXPECT_LE(rel(b.get(b.gpu, og[i]), b.get(b.cpu, oc[i])), int8_x(t) ? 2e-2 : 5e-3)
            << type_name(t) << " rows " << rows << " part " << i;
      // Fed by an RMSNorm, whose f16 copy lets prompt rows take one GEMM into the parts (f16
      // stacks too), as a model's Q/K/V and gate/up do.
      const auto gh = randn(size_t(K), rng);
      auto [nc, ng] = b.weight(GgmlType::F32, 1, K, f32_bytes(gh), WeightUse::Vector);
      Tensor hc = b.cpu.alloc(rows, K), hg = b.gpu.alloc(rows, K);
      b.cpu.rmsnorm(xc, nc, 1e-5f, hc), b.gpu.rmsnorm(xg, ng, 1e-5f, hg);
      b.cpu.matmul_multi(pc, hc, oc), b.gpu.matmul_multi(pg, hg, og);
      for (int i = 0; i < 3; ++i)
        EXPECT_LE(rel(b.get(b.gpu, og[i]), b.get(b.cpu, oc[i])), int8_x(t) ? 2e-2 : 5e-3)
            << type_name(t) << " rows " << rows << " part " << i << ", after an RMSNorm";
    }
  }
}

}  // namespace
