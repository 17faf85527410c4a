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
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "format/gguf.h"
#include "format/quant.h"
#include "gpu_test_util.h"
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

namespace {

double rel(const std::vector<float>& got, const std::vector<float>& want) {
  double e = 0, n = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    e += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    n += double(want[i]) * want[i];
  }
  return std::sqrt(e / std::max(n, 1e-30));
}

std::vector<float> randn(size_t n, std::mt19937& rng, float scale = 1.f) {
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// One op run on both backends: inputs uploaded, outputs compared.
// Options whose matmuls of up to `rows` rows run as GEMVs (the default sends more than 2 to the
// GEMM): the tests of every GEMV path at 3 to 8 rows ask for 8.
CudaOptions gemv_rows(int rows) {
  CudaOptions o;
  o.gemv_max_rows = rows;
  return o;
}

struct Both {
  explicit Both(const CudaOptions& o = {}) : gpu(0, false, o) {}
  CpuBackend cpu{4, true};
  CudaBackend gpu;

  Tensor put(Backend& be, const std::vector<float>& h, int64_t rows, int64_t cols) {
    Tensor t = be.alloc(rows, cols);
    if (&be == &cpu) std::copy(h.begin(), h.end(), t.data);
    else gpu.finish(), cudaMemcpy(t.data, h.data(), h.size() * 4, cudaMemcpyHostToDevice), cudaDeviceSynchronize();
    return t;
  }
  std::vector<float> get(Backend& be, Tensor t) {
    std::vector<float> h(size_t(t.rows * t.cols));
    be.read(t, h.data());
    return h;
  }
  // A weight from host bytes (a GgufTensor over them), loaded by both backends. The bytes are
  // kept: the CPU backend recognises a tensor it already holds by its address.
  std::vector<std::unique_ptr<std::vector<uint8_t>>> kept;
  std::pair<Weight, Weight> weight(GgmlType type, int64_t rows, int64_t cols, const std::vector<uint8_t>& src,
                                   WeightUse use = WeightUse::Matmul) {
    kept.push_back(std::make_unique<std::vector<uint8_t>>(src));
    const std::vector<uint8_t>& bytes = *kept.back();
    GgufTensor t;
    t.name = "w";
    t.n_dims = rows > 1 ? 2 : 1;
    t.ne[0] = cols, t.ne[1] = rows;
    t.type = type;
    t.nbytes = bytes.size();
    t.data = bytes.data();
    return {cpu.load_weight(t, use), gpu.load_weight(t, use)};
  }
  // Random q [rows][qd], k and v [rows][kvd], the same values on both backends.
  struct Qkv {
    Tensor qc, qg, kc, kg, vc, vg;
  };
  Qkv put_qkv(int rows, int qd, int kvd, std::mt19937& rng) {
    const auto qh = randn(size_t(rows * qd), rng), kh = randn(size_t(rows * kvd), rng), vh = randn(size_t(rows * kvd), rng);
    return {put(cpu, qh, rows, qd), put(gpu, qh, rows, qd), put(cpu, kh, rows, kvd),
            put(gpu, kh, rows, kvd), put(cpu, vh, rows, kvd), put(gpu, vh, rows, kvd)};
  }
  void begin(std::span<const int32_t> tokens, std::span<const int32_t> pos) {
    cpu.reset_scratch(), gpu.reset_scratch();
    cpu.begin_forward(tokens, pos), gpu.begin_forward(tokens, pos);
  }
};

std::vector<uint8_t> quantised(GgmlType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  const std::vector<float> v = randn(size_t(rows * cols), rng);
  std::vector<uint8_t> b(row_bytes(t, cols) * size_t(rows));
  for (int64_t r = 0; r < rows; ++r) quantize_row(t, v.data() + r * cols, b.data() + size_t(r) * row_bytes(t, cols), cols);
  return b;
}

// Random `t` matrices of `rows[i]` x `cols` as GgufTensors over bytes the caller keeps.
std::vector<GgufTensor> random_matrices(GgmlType t, std::span<const int64_t> rows, int64_t cols,
                                        std::vector<std::vector<uint8_t>>& bytes, std::mt19937& rng) {
  std::vector<GgufTensor> ts(rows.size());
  bytes.clear();
  for (int64_t r : rows) bytes.push_back(quantised(t, r, cols, rng));
  for (size_t i = 0; i < rows.size(); ++i) {
    GgufTensor& g = ts[i];
    g.name = "w", g.n_dims = 2, g.ne[0] = cols, g.ne[1] = rows[i], g.type = t;
    g.nbytes = bytes[i].size(), g.data = bytes[i].data();
  }
  return ts;
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

const GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,   GgmlType::Q4_0,
                           GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q2_K,   GgmlType::Q3_K,
                           GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS};

bool int8_x(GgmlType t) { return t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::BF16; }

TEST(BackendOps, RmsNormAddBiasSwiglu) {
  Both b;
  std::mt19937 rng(1);
  for (int64_t rows : {1, 5, 17}) {
    for (int64_t cols : {256, 576, 1000}) {
      const auto xh = randn(size_t(rows * cols), rng), yh = randn(size_t(rows * cols), rng), gh = randn(size_t(cols), rng);
      auto [wc, wg] = b.weight(GgmlType::F32, 1, cols, f32_bytes(gh), WeightUse::Vector);
      b.cpu.reset_scratch(), b.gpu.reset_scratch();
      Tensor xc = b.put(b.cpu, xh, rows, cols), xg = b.put(b.gpu, xh, rows, cols);
      Tensor yc = b.put(b.cpu, yh, rows, cols), yg = b.put(b.gpu, yh, rows, cols);
      Tensor oc = b.cpu.alloc(rows, cols), og = b.gpu.alloc(rows, cols);
      b.cpu.rmsnorm(xc, wc, 1e-5f, oc), b.gpu.rmsnorm(xg, wg, 1e-5f, og);
      EXPECT_LE(rel(b.get(b.gpu, og), b.get(b.cpu, oc)), 1e-6) << "rmsnorm " << rows << "x" << cols;
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
                     GgmlType::Q6_K, GgmlType::IQ4_XS}) {
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
    }
  }
}

struct AttnCase {
  int n_head, n_head_kv, head_dim;
  GgmlType kv;
};

// With a sliding window (Gemma 3's local layers) too: a query then attends to its last 48
// positions only, which the prompt, the decode rows and the long chunk all pass.
TEST(BackendOps, AttentionPrefillThenDecode) {
  std::mt19937 rng(5);
  for (const int window : {0, 48})
  for (const AttnCase& c : {AttnCase{4, 2, 64, GgmlType::F16}, AttnCase{8, 8, 128, GgmlType::F16},
                            AttnCase{9, 3, 64, GgmlType::F32}, AttnCase{32, 8, 128, GgmlType::F16},
                            AttnCase{2, 1, 96, GgmlType::F16}, AttnCase{4, 4, 256, GgmlType::F32},
                            AttnCase{4, 1, 256, GgmlType::F16}}) {
    Both b;
    const int n_ctx = 300, kvd = c.n_head_kv * c.head_dim, qd = c.n_head * c.head_dim;
    b.cpu.init_kv_cache(1, n_ctx, kvd, c.kv), b.gpu.init_kv_cache(1, n_ctx, kvd, c.kv);
    const AttentionParams ap{c.n_head, c.n_head_kv, c.head_dim, 1.f / std::sqrt(float(c.head_dim)), window};
    int past = 0;
    for (int rows : {37, 1, 1, 5, 200, 1}) {  // a prompt, decode steps, a small batch, a long chunk
      std::vector<int32_t> pos(static_cast<size_t>(rows)), toks(static_cast<size_t>(rows), 0);
      for (int i = 0; i < rows; ++i) pos[size_t(i)] = past + i;
      b.begin(toks, pos);
      const auto [qc, qg, kc, kg, vc, vg] = b.put_qkv(rows, qd, kvd, rng);
      Tensor oc = b.cpu.alloc(rows, qd), og = b.gpu.alloc(rows, qd);
      b.cpu.attention(0, qc, kc, vc, pos, ap, oc), b.gpu.attention(0, qg, kg, vg, pos, ap, og);
      // the tensor-core prefill rounds q and the probabilities to f16
      const bool tc = window == 0 && rows > 8 && c.kv == GgmlType::F16 && (c.head_dim == 64 || c.head_dim == 128);
      EXPECT_LE(rel(b.get(b.gpu, og), b.get(b.cpu, oc)), tc ? 3e-3 : 1e-4)
          << "window " << window << " heads " << c.n_head << "/" << c.n_head_kv << " hd " << c.head_dim << " rows " << rows << " at " << past;
      past += rows;
    }
  }
}

// Decode past 1024 and 2048 positions, where the backend splits the sequence into more parts
// (one per 128 positions of the length bucket): GQA and plain heads, the per-group instances.
TEST(BackendOps, LongContextDecode) {
  std::mt19937 rng(9);
  for (const AttnCase& c : {AttnCase{8, 8, 128, GgmlType::F16}, AttnCase{8, 2, 64, GgmlType::F16},
                            AttnCase{6, 1, 64, GgmlType::F16}}) {
    Both b;
    const int n_ctx = 2200, kvd = c.n_head_kv * c.head_dim, qd = c.n_head * c.head_dim;
    b.cpu.init_kv_cache(1, n_ctx, kvd, c.kv), b.gpu.init_kv_cache(1, n_ctx, kvd, c.kv);
    const AttentionParams ap{c.n_head, c.n_head_kv, c.head_dim, 1.f / std::sqrt(float(c.head_dim))};
    int past = 0;
    for (int rows : {1100, 1, 2, 950, 1, 1}) {
      std::vector<int32_t> pos(static_cast<size_t>(rows)), toks(static_cast<size_t>(rows), 0);
      for (int i = 0; i < rows; ++i) pos[size_t(i)] = past + i;
      b.begin(toks, pos);
      const auto [qc, qg, kc, kg, vc, vg] = b.put_qkv(rows, qd, kvd, rng);
      Tensor oc = b.cpu.alloc(rows, qd), og = b.gpu.alloc(rows, qd);
      b.cpu.attention(0, qc, kc, vc, pos, ap, oc), b.gpu.attention(0, qg, kg, vg, pos, ap, og);
      EXPECT_LE(rel(b.get(b.gpu, og), b.get(b.cpu, oc)), rows > 8 ? 3e-3 : 1e-4)
          << "heads " << c.n_head << "/" << c.n_head_kv << " hd " << c.head_dim << " rows " << rows << " at " << past;
      past += rows;
    }
  }
}

// rope_attention: the CUDA backend's fused RoPE + cache store kernel, then attention, against
// the CPU's rope, rope, attention. Partial rotary (n_rot < head_dim) stores the unrotated tail of
// k as it is; later passes read the cache the fused kernel wrote. Single decode rows below 256
// positions without GQA take the one-kernel path (attention_decode_rope: head sizes 64/96/128/
// 256, partial rotary, Llama 3 frequency factors): the row at 0 (nothing cached), at 23 and 24
// (the warps' first round, loaded before the wait, only), at 254 and 255 (its last bucket's end,
// a second round read after the cache store), the row at 256 the split path again; GQA cases the
// split path throughout. With per-head q/k norms (Qwen 3, Gemma 3) the norms go into the
// RoPE + cache store kernel (n_rot == head_dim) or run as ops of their own (partial rotary).
TEST(BackendOps, RopeAttentionFused) {
  std::mt19937 rng(6);
  struct Case {
    int n_head, n_head_kv, head_dim, n_rot;
    bool neox;
    GgmlType kv;
    bool factors = false;
    bool norms = false;
  };
  for (const Case& c : {Case{4, 2, 64, 64, false, GgmlType::F16}, Case{8, 2, 128, 128, true, GgmlType::F16},
                        Case{6, 3, 64, 32, true, GgmlType::F32}, Case{4, 4, 96, 48, false, GgmlType::F16},
                        Case{16, 2, 128, 128, false, GgmlType::F16, true}, Case{2, 2, 256, 256, true, GgmlType::F16},
                        Case{8, 1, 64, 64, false, GgmlType::F16}, Case{12, 12, 128, 64, false, GgmlType::F16},
                        Case{6, 6, 128, 128, false, GgmlType::F16, true}, Case{4, 1, 256, 256, true, GgmlType::F16, false, true},
                        Case{8, 2, 128, 128, true, GgmlType::F16, false, true}, Case{6, 3, 64, 32, true, GgmlType::F32, false, true}}) {
    Both b;
    const int n_ctx = 300, kvd = c.n_head_kv * c.head_dim, qd = c.n_head * c.head_dim;
    b.cpu.init_kv_cache(1, n_ctx, kvd, c.kv), b.gpu.init_kv_cache(1, n_ctx, kvd, c.kv);
    const AttentionParams ap{c.n_head, c.n_head_kv, c.head_dim, 1.f / std::sqrt(float(c.head_dim))};
    std::vector<float> ff(size_t(c.n_rot / 2));
    for (size_t i = 0; i < ff.size(); ++i) ff[i] = 1.f + float(i % 7);
    const RopeParams rp{c.n_rot, 10000.f, 1.f, c.neox, c.factors ? ff.data() : nullptr, c.factors ? 1.19f : 1.f};
    auto [qnc, qng] = b.weight(GgmlType::F32, 1, c.head_dim, f32_bytes(randn(size_t(c.head_dim), rng)), WeightUse::Vector);
    auto [knc, kng] = b.weight(GgmlType::F32, 1, c.head_dim, f32_bytes(randn(size_t(c.head_dim), rng)), WeightUse::Vector);
    const QkNorm qk_cpu = c.norms ? QkNorm{&qnc, &knc, 1e-6f} : QkNorm{};
    const QkNorm qk_gpu = c.norms ? QkNorm{&qng, &kng, 1e-6f} : QkNorm{};
    int past = 0;
    for (int rows : {1, 22, 1, 1, 3, 226, 1, 1, 1}) {
      std::vector<int32_t> pos(static_cast<size_t>(rows)), toks(static_cast<size_t>(rows), 0);
      for (int i = 0; i < rows; ++i) pos[size_t(i)] = past + i;
      b.begin(toks, pos);
      const auto [qc, qg, kc, kg, vc, vg] = b.put_qkv(rows, qd, kvd, rng);
      Tensor oc = b.cpu.alloc(rows, qd), og = b.gpu.alloc(rows, qd);
      b.cpu.Backend::rope_attention(0, qc, kc, vc, pos, rp, ap, qk_cpu, oc);
      b.gpu.rope_attention(0, qg, kg, vg, pos, rp, ap, qk_gpu, og);
      const std::string at = "hd " + std::to_string(c.head_dim) + " n_rot " + std::to_string(c.n_rot) + " rows " +
                             std::to_string(rows) + " at " + std::to_string(past) + (c.norms ? " norms" : "");
      if (!c.norms) {  // (with norms the CPU rotates copies: only the output and the cache compare)
        EXPECT_LE(rel(b.get(b.gpu, qg), b.get(b.cpu, qc)), 2e-6) << "q " << at;
        EXPECT_LE(rel(b.get(b.gpu, kg), b.get(b.cpu, kc)), 2e-6) << "k " << at;
      }
      const bool tc = rows > 8 && c.kv == GgmlType::F16 && (c.head_dim == 64 || c.head_dim == 128);
      EXPECT_LE(rel(b.get(b.gpu, og), b.get(b.cpu, oc)), tc ? 3e-3 : 1e-4) << "out " << at;
      past += rows;
    }
  }
}

// A layer's attention half: rope_attention then matmul_add_norm. Against the CPU's rope, attention,
// matmul_add, rmsnorm: the attention output, the residual, the norm's output read back, and a
// GEMV that takes the pending norm (x8_ss); decode rows before and past the 256-position bucket.
TEST(BackendOps, AttentionOut) {
  std::mt19937 rng(21);
  struct Case {
    int n_head, n_head_kv, head_dim, n_rot;
    bool neox;
    GgmlType wt;
    int64_t E;
  };
  for (const Case& c : {Case{8, 8, 128, 128, false, GgmlType::Q4_0, 512}, Case{4, 4, 64, 64, true, GgmlType::Q8_0, 256},
                        Case{6, 6, 64, 32, false, GgmlType::Q4_1, 384}, Case{32, 32, 128, 128, false, GgmlType::Q4_0, 4096},
                        Case{8, 2, 64, 64, false, GgmlType::Q8_0, 256}, Case{4, 4, 128, 128, false, GgmlType::Q4_K, 512}}) {
    Both b(gemv_rows(8));  // (the 3-row pass through the fused GEMVs)
    const int n_ctx = 300, kvd = c.n_head_kv * c.head_dim, qd = c.n_head * c.head_dim;
    const int64_t F = 64;
    SCOPED_TRACE(testing::Message() << type_name(c.wt) << " heads " << c.n_head << "/" << c.n_head_kv << " hd " << c.head_dim);
    b.cpu.init_kv_cache(1, n_ctx, kvd, GgmlType::F16), b.gpu.init_kv_cache(1, n_ctx, kvd, GgmlType::F16);
    const AttentionParams ap{c.n_head, c.n_head_kv, c.head_dim, 1.f / std::sqrt(float(c.head_dim))};
    const RopeParams rp{c.n_rot, 10000.f, 1.f, c.neox, nullptr};
    std::vector<std::vector<uint8_t>> bytes;
    const int64_t out_rows[2] = {c.E, F};
    const std::vector<GgufTensor> wo = random_matrices(c.wt, std::span<const int64_t>(out_rows, 1), qd, bytes, rng);
    std::vector<std::vector<uint8_t>> bytes2;
    const std::vector<GgufTensor> wf = random_matrices(GgmlType::Q8_0, std::span<const int64_t>(out_rows + 1, 1), c.E, bytes2, rng);
    const Weight woc = b.cpu.load_weight(wo[0], WeightUse::Matmul), wog = b.gpu.load_weight(wo[0], WeightUse::Matmul);
    const Weight wfc = b.cpu.load_weight(wf[0], WeightUse::Matmul), wfg = b.gpu.load_weight(wf[0], WeightUse::Matmul);
    auto [nc, ng] = b.weight(GgmlType::F32, 1, c.E, f32_bytes(randn(size_t(c.E), rng, 0.5f)), WeightUse::Vector);
    int past = 0;
    for (int rows : {23, 1, 1, 3, 229, 1, 1}) {  // the last two rows: past the 256-position bucket
      std::vector<int32_t> pos(static_cast<size_t>(rows)), toks(static_cast<size_t>(rows), 0);
      for (int i = 0; i < rows; ++i) pos[size_t(i)] = past + i;
      b.begin(toks, pos);
      b.gpu.profile_reset();
      b.gpu.set_profiling(true);
      const auto [qc, qg, kc, kg, vc, vg] = b.put_qkv(rows, qd, kvd, rng);
      const auto xh = randn(size_t(rows * c.E), rng, 2.f);
      auto pass = [&](Backend& be, Tensor q, Tensor k, Tensor v, const Weight& w, const Weight& nw, const Weight& f) {
        Tensor x = b.put(be, xh, rows, c.E), att = be.alloc(rows, qd), h = be.alloc(rows, c.E), y = be.alloc(rows, F);
        be.rope_attention(0, q, k, v, pos, rp, ap, {}, att);
        be.matmul_add_norm(w, att, x, nw, 1e-5f, h);
        be.matmul(f, h, y);
        return std::vector<std::vector<float>>{b.get(be, att), b.get(be, x), b.get(be, y), b.get(be, h)};
      };
      const auto want = pass(b.cpu, qc, kc, vc, woc, nc, wfc), got = pass(b.gpu, qg, kg, vg, wog, ng, wfg);
      b.gpu.set_profiling(false);
      const std::string at = "rows " + std::to_string(rows) + " at " + std::to_string(past);
      EXPECT_LE(rel(got[0], want[0]), rows > 8 ? 3e-3 : 1e-4) << "attention " << at;
      for (size_t i = 1; i < 4; ++i) EXPECT_LE(rel(got[i], want[i]), 2e-2) << "output " << i << " " << at;
      past += rows;
    }
  }
}

// A layer's attention half from h: the stacked Q/K/V matmul, rope_attention, matmul_add_norm. Against the CPU: q (rotated),
// the attention output, the residual, the norm's output and a GEMV that takes the pending norm;
// h comes in as a pending norm (x8 and sums of squares) as in the decode chain. The last row is
// past the 256-position bucket.
TEST(BackendOps, AttentionBlock) {
  std::mt19937 rng(33);
  struct Case {
    int n_head, n_head_kv, head_dim;
    GgmlType wt;
    int64_t E;
  };
  for (const Case& c : {Case{8, 8, 128, GgmlType::Q4_0, 512}, Case{32, 32, 128, GgmlType::Q8_0, 4096},
                        Case{4, 4, 64, GgmlType::Q4_0, 256}, Case{8, 2, 128, GgmlType::Q8_0, 512},
                        Case{4, 4, 128, GgmlType::Q4_K, 512}}) {
    Both b(gemv_rows(8));  // (the 3-row pass through the fused GEMVs)
    const int n_ctx = 300, kvd = c.n_head_kv * c.head_dim, qd = c.n_head * c.head_dim;
    const int64_t F = 64;
    SCOPED_TRACE(testing::Message() << type_name(c.wt) << " heads " << c.n_head << "/" << c.n_head_kv << " hd " << c.head_dim);
    b.cpu.init_kv_cache(1, n_ctx, kvd, GgmlType::F16), b.gpu.init_kv_cache(1, n_ctx, kvd, GgmlType::F16);
    // q and k come out of the GEMV with variance E * 0.25 (N(0, 1) weights, h of RMS 1 times a
    // gain of sd 0.5): scores scaled to O(1), so that the comparison measures the kernels and not
    // a softmax that turns the int8 rounding of h into large weight changes (at 1/sqrt(hd) the
    // scores are in the hundreds; the unfused paths then differ from the CPU by 7-24 % too).
    const float score_scale = 1.f / (std::sqrt(float(c.head_dim)) * 0.25f * float(c.E));
    const AttentionParams ap{c.n_head, c.n_head_kv, c.head_dim, score_scale};
    const RopeParams rp{c.head_dim, 10000.f, 1.f, false, nullptr};
    std::vector<std::vector<uint8_t>> qkv_bytes, wo_bytes, down_bytes, f_bytes;
    const int64_t qkv_rows[3] = {qd, kvd, kvd}, e_rows[1] = {c.E}, f_rows[1] = {F};
    const std::vector<GgufTensor> qkv = random_matrices(c.wt, qkv_rows, c.E, qkv_bytes, rng);
    const std::vector<GgufTensor> wo = random_matrices(c.wt, e_rows, qd, wo_bytes, rng);
    const std::vector<GgufTensor> down = random_matrices(GgmlType::Q8_0, e_rows, F, down_bytes, rng);
    const std::vector<GgufTensor> wf = random_matrices(GgmlType::Q8_0, f_rows, c.E, f_bytes, rng);
    const GgufTensor* tp[] = {&qkv[0], &qkv[1], &qkv[2]};
    const std::vector<Weight> sc = b.cpu.load_stacked(tp), sg = b.gpu.load_stacked(tp);
    auto both = [&](const GgufTensor& t) { return std::pair{b.cpu.load_weight(t, WeightUse::Matmul), b.gpu.load_weight(t, WeightUse::Matmul)}; };
    const auto [woc, wog] = both(wo[0]);
    const auto [dc, dg] = both(down[0]);
    const auto [fc, fg] = both(wf[0]);
    auto [n1c, n1g] = b.weight(GgmlType::F32, 1, c.E, f32_bytes(randn(size_t(c.E), rng, 0.5f)), WeightUse::Vector);
    auto [n2c, n2g] = b.weight(GgmlType::F32, 1, c.E, f32_bytes(randn(size_t(c.E), rng, 0.5f)), WeightUse::Vector);
    int past = 0;
    for (int rows : {23, 1, 1, 104, 1, 1, 130, 1}) {
      std::vector<int32_t> pos(static_cast<size_t>(rows)), toks(static_cast<size_t>(rows), 0);
      for (int i = 0; i < rows; ++i) pos[size_t(i)] = past + i;
      b.begin(toks, pos);
      b.gpu.profile_reset();
      b.gpu.set_profiling(true);
      const auto xh = randn(size_t(rows * c.E), rng, 2.f), ah = randn(size_t(rows * F), rng);
      auto pass = [&](Backend& be, const std::vector<Weight>& s, const Weight& o, const Weight& d, const Weight& f,
                      const Weight& n1, const Weight& n2) {
        Tensor x = b.put(be, xh, rows, c.E), a = b.put(be, ah, rows, F), h = be.alloc(rows, c.E);
        Tensor q = be.alloc(rows, qd), k = be.alloc(rows, kvd), v = be.alloc(rows, kvd), att = be.alloc(rows, qd);
        Tensor y = be.alloc(rows, F);
        const Weight* pw[] = {&s[0], &s[1], &s[2]};
        be.matmul_add_norm(d, a, x, n1, 1e-5f, h);  // h: the pending norm of the decode chain
        const Tensor qkv[] = {q, k, v};
        be.matmul_multi(pw, h, qkv);
        be.rope_attention(0, q, k, v, pos, rp, ap, {}, att);
        be.matmul_add_norm(o, att, x, n2, 1e-5f, h);
        be.matmul(f, h, y);
        return std::vector<std::vector<float>>{b.get(be, q), b.get(be, att), b.get(be, x), b.get(be, y), b.get(be, h)};
      };
      const auto want = pass(b.cpu, sc, woc, dc, fc, n1c, n2c), got = pass(b.gpu, sg, wog, dg, fg, n1g, n2g);
      b.gpu.set_profiling(false);
      const std::string at = "rows " + std::to_string(rows) + " at " + std::to_string(past);
      for (size_t i = 0; i < want.size(); ++i) EXPECT_LE(rel(got[i], want[i]), 3e-2) << "output " << i << " " << at;
      past += rows;
    }
  }
}

// The sampling rules of model/sampler.cpp with the draw r = u * sum (the GPU's).
int32_t host_sample(std::vector<float> l, const SamplerParams& p, const std::vector<int32_t>& pen, double u) {
  for (int32_t t : pen) l[size_t(t)] = l[size_t(t)] > 0 ? l[size_t(t)] / p.repeat_penalty : l[size_t(t)] * p.repeat_penalty;
  std::vector<std::pair<float, int32_t>> c(l.size());
  for (size_t i = 0; i < l.size(); ++i) c[i] = {l[i], int32_t(i)};
  std::sort(c.begin(), c.end(), [](auto& a, auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  if (p.temperature <= 0) return c[0].second;
  size_t n = std::min(c.size(), size_t(p.top_k > 0 ? p.top_k : 2048));
  std::vector<double> pr(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += pr[i] = std::exp(double(c[i].first) - double(c[0].first));
  if (p.top_p < 1) {
    double cum = 0;
    for (size_t i = 0; i < n; ++i)
      if ((cum += pr[i] / sum) >= p.top_p) { n = i + 1; break; }
  }
  if (p.min_p > 0) {
    size_t keep = 1;
    while (keep < n && pr[keep] >= p.min_p * pr[0]) ++keep;
    n = keep;
  }
  sum = 0;
  for (size_t i = 0; i < n; ++i) sum += pr[i] = std::exp((double(c[i].first) - double(c[0].first)) / p.temperature);
  double r = u * sum;
  for (size_t i = 0; i < n; ++i)
    if ((r -= pr[i]) <= 0) return c[i].second;
  return c[n - 1].second;
}

TEST(BackendOps, SampleMatchesHostRules) {
  CudaBackend gpu(0);
  std::mt19937 rng(6);
  std::uniform_real_distribution<double> ud(0, 1);
  const int V = 32000;
  struct P { float temp; int k; float top_p, min_p, pen; };
  for (const P& pp : {P{0, 40, 0.95f, 0.05f, 1}, P{0, 0, 1, 0, 1.3f}, P{0.8f, 40, 0.95f, 0.05f, 1}, P{1.0f, 0, 0.9f, 0, 1},
                      P{0.7f, 5, 1, 0, 1.3f}, P{1.5f, 2048, 0.99f, 0.01f, 1.1f}, P{0.9f, 1, 1, 0, 1}}) {
    for (int trial = 0; trial < 20; ++trial) {
      auto l = randn(size_t(V), rng, 3.f);
      for (int i = 0; i < 50; ++i) l[size_t(rng() % V)] = l[size_t(rng() % V)];  // ties
      SamplerParams p;
      p.temperature = pp.temp, p.top_k = pp.k, p.top_p = pp.top_p, p.min_p = pp.min_p, p.repeat_penalty = pp.pen;
      std::vector<int32_t> pen;
      for (int i = 0; i < 64; ++i) pen.push_back(int32_t(rng() % V));
      std::sort(pen.begin(), pen.end());
      pen.erase(std::unique(pen.begin(), pen.end()), pen.end());
      if (pp.pen == 1) pen.clear();
      const double u = ud(rng);
      gpu.reset_scratch();
      Tensor t = gpu.alloc(1, V);
      cudaMemcpy(t.data, l.data(), size_t(V) * 4, cudaMemcpyHostToDevice);
      cudaDeviceSynchronize();
      EXPECT_EQ(gpu.sample(t, p, pen, u), host_sample(l, p, pen, u))
          << "temp " << pp.temp << " top_k " << pp.k << " trial " << trial;
    }
  }
}

// Greedy without a penalty reads the logits directly: as float4s for a 16-byte aligned row of a
// multiple of 4, else one by one. Either way the lowest id among equal maxima, wherever they lie.
TEST(BackendOps, GreedySampleTakesTheFirstMaximum) {
  CudaBackend gpu(0);
  std::mt19937 rng(8);
  SamplerParams p;
  p.temperature = 0;
  for (int V : {32000, 32001, 4, 5})
    for (int offset : {0, 1})  // the row 16-byte aligned, or one float past that
      for (int trial = 0; trial < 10; ++trial) {
        auto l = randn(size_t(V), rng, 3.f);
        const int a = int(rng() % uint32_t(V)), b = int(rng() % uint32_t(V));
        l[size_t(a)] = l[size_t(b)] = 20.f;  // a tie at the maximum (or one maximum when a == b)
        gpu.reset_scratch();
        Tensor t = gpu.alloc(1, V + 1);
        const Tensor row{t.data + offset, 1, V};
        cudaMemcpy(row.data, l.data(), size_t(V) * 4, cudaMemcpyHostToDevice);
        cudaDeviceSynchronize();
        EXPECT_EQ(gpu.sample(row, p, {}, 0.0), std::min(a, b)) << "V " << V << " offset " << offset;
      }
}

}  // namespace
