// Backend conformance, attention and sampling (test_backend_gpu.cpp has the rest and the bounds):
// every attention op of the CUDA backend against the CPU backend on the same random inputs, both
// KV cache types; sampling for the exact token against a host implementation of the same rules.
#include "backend_ops_util.h"
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
using namespace lamina::backend_ops_test;

namespace {

struct AttnCase {
  int n_head, n_head_kv, head_dim;
  GgmlType kv;
};

// Whether the backend's attention over `rows` prompt rows runs the tensor-core prefill kernel
// (head_dim 64, 128 or 256, any sliding window, an f16 cache), which rounds q and the
// probabilities to f16.
bool tensor_core_prefill(int rows, GgmlType kv, int head_dim) {
  return rows > 8 && kv == GgmlType::F16 && (head_dim == 64 || head_dim == 128 || head_dim == 256);
}

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
      const bool tc = tensor_core_prefill(rows, c.kv, c.head_dim);
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
// positions take the one-kernel path (attention_decode_rope: head sizes 64/96/128/256, partial
// rotary, Llama 3 frequency factors, GQA groups of 2 to 8 query heads whose first block stores
// the row): the row at 0 (nothing cached), at 23 and 24 (the warps' first round, loaded before
// the wait, only), at 254 and 255 (its last bucket's end, a second round read after the cache
// store, the new row folded from shared memory by the blocks that do not store), the row at 256
// the split path again. With per-head q/k norms (Qwen 3, Gemma 3) the norms go into that one
// kernel for single rows (n_rot == head_dim), else into the RoPE + cache store kernel, or run as
// ops of their own (partial rotary).
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
        // (the one-kernel path leaves a shared KV head's k unrotated: only the cache holds it so)
        const bool one_kernel = rows == 1 && past < 256 && c.kv == GgmlType::F16;
        if (c.n_head == c.n_head_kv || !one_kernel) EXPECT_LE(rel(b.get(b.gpu, kg), b.get(b.cpu, kc)), 2e-6) << "k " << at;
      }
      const bool tc = tensor_core_prefill(rows, c.kv, c.head_dim);
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

// The engine's draws: one block a draw, each with its own parameters, penalty ids and u, on rows
// in any order (two draws on one row, rows of a length that is not a multiple of 4): each id the
// host rules' over its row.
TEST(BackendOps, SampleRowsMatchHostRules) {
  CudaBackend gpu(0);
  std::mt19937 rng(9);
  std::uniform_real_distribution<double> ud(0, 1);
  struct P { float temp; int k; float top_p, min_p, pen; };
  const std::vector<P> kinds = {P{0.8f, 40, 0.95f, 0.05f, 1},  P{1.0f, 2048, 0.9f, 0, 1}, P{0.7f, 5, 1, 0, 1.3f},
                                P{1.5f, 2048, 0.99f, 0.01f, 1.1f}, P{0.9f, 1, 1, 0, 1},     P{0, 40, 1, 0, 1.3f},
                                P{1.2f, 300, 1, 0.02f, 1},       P{0.6f, 64, 0.5f, 0, 0.8f}, P{2.0f, 1000, 1, 0, 1}};
  for (int V : {32000, 32001})
    for (int trial = 0; trial < 6; ++trial) {
      const int rows = 7;
      std::vector<float> all;
      for (int r = 0; r < rows; ++r) {
        auto l = randn(size_t(V), rng, 3.f);
        for (int i = 0; i < 50; ++i) l[size_t(rng() % V)] = l[size_t(rng() % V)];  // ties
        all.insert(all.end(), l.begin(), l.end());
      }
      std::vector<SamplerParams> params(kinds.size());
      std::vector<std::vector<int32_t>> pens(kinds.size());
      std::vector<Backend::RowDraw> draws;
      for (size_t i = 0; i < kinds.size(); ++i) {
        const P& pp = kinds[i];
        SamplerParams& p = params[i];
        p.temperature = pp.temp, p.top_k = pp.k, p.top_p = pp.top_p, p.min_p = pp.min_p, p.repeat_penalty = pp.pen;
        if (pp.pen != 1) {
          for (int j = 0; j < 64; ++j) pens[i].push_back(int32_t(rng() % V));
          std::sort(pens[i].begin(), pens[i].end());
          pens[i].erase(std::unique(pens[i].begin(), pens[i].end()), pens[i].end());
        }
        ASSERT_TRUE(gpu.draws_on_device(p));
        draws.push_back({int64_t((i * 5 + size_t(trial)) % rows), &params[i], pens[i], pp.temp > 0 ? ud(rng) : 0.0});
      }
      gpu.reset_scratch();
      Tensor t = gpu.alloc(rows, V);
      cudaMemcpy(t.data, all.data(), all.size() * 4, cudaMemcpyHostToDevice);
      cudaDeviceSynchronize();
      std::vector<int32_t> got(draws.size(), -7);
      gpu.sample_rows(t, draws, got);
      for (size_t i = 0; i < draws.size(); ++i) {
        const std::vector<float> row(all.begin() + draws[i].row * V, all.begin() + (draws[i].row + 1) * V);
        EXPECT_EQ(got[i], host_sample(row, params[i], pens[i], draws[i].u)) << "V " << V << " trial " << trial << " draw " << i;
      }
    }
  {  // zeros of both signs at the top-k cut: ties, the lowest ids kept (as the host compares them)
    std::vector<float> row(64, -1.f);
    row[0] = 5.f, row[1] = -0.f, row[2] = 0.f, row[3] = 0.f;
    SamplerParams p;
    p.temperature = 1.f, p.top_k = 2, p.top_p = 1.f, p.min_p = 0.f;
    const std::vector<int32_t> none;
    for (double u : {0.999, 0.5, 0.0001}) {
      gpu.reset_scratch();
      Tensor t = gpu.alloc(1, 64);
      cudaMemcpy(t.data, row.data(), row.size() * 4, cudaMemcpyHostToDevice);
      cudaDeviceSynchronize();
      const Backend::RowDraw d{0, &p, none, u};
      std::vector<int32_t> got(1, -7);
      gpu.sample_rows(t, std::span<const Backend::RowDraw>(&d, 1), got);
      EXPECT_EQ(got[0], host_sample(row, p, none, u)) << "signed zeros, u " << u;
      EXPECT_EQ(gpu.sample(t, p, none, u), host_sample(row, p, none, u)) << "signed zeros, one row, u " << u;
    }
  }
  SamplerParams off;  // (top-k off, or presence penalties: the host draws those)
  off.top_k = 0;
  EXPECT_FALSE(gpu.draws_on_device(off));
  off.top_k = 40, off.presence_penalty = 0.5f;
  EXPECT_FALSE(gpu.draws_on_device(off));
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
