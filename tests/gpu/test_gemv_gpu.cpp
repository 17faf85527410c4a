// Every GEMV variant against a CPU fp64 reference: every weight type it takes, batch 1..8, odd
// N, K not a multiple of the vector width where the type allows, poisoned outputs, epilogues.
// The int8 blocks, y8, the fused norm, argmax and argument checks: test_gemv_epilogue_gpu.cpp.
#include "core/half.h"
#include "gemv_test_util.h"
#include "gpu_test_util.h"
#include "format/quant.h"
#include "kernels/common/q8_blocks.h"
#include "kernels/gemv/gemv.h"
#include "kernels/gemv/gemv_tune.h"
#include "x8_host.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

using namespace lamina;
using namespace lamina::kernels;
using namespace lamina::gemv_test;

namespace {

struct Case {
  std::string variant;
  GgmlType type;
};

class GemvGpu : public ::testing::TestWithParam<Case> {};

// The int8 copy of y a variant made in its epilogue (GemvProblem::y8): equal, byte for byte, to
// y quantised on the host, and the same again on a second launch (the counters were left zero).
void check_y8(const GemvVariant& v, GemvProblem p, const GemvConfig& cfg, const std::vector<float>& y) {
  const size_t bytes = size_t(p.batch) * x8_bytes(p.n);
  const std::vector<uint8_t> want = host_x8(std::vector<float>(y.begin(), y.begin() + p.batch * p.n), p.n);
  DeviceBuf y8(bytes), count(size_t(p.n / 32) * sizeof(unsigned));
  CUDA_OK(cudaMemset(count.p, 0, size_t(p.n / 32) * sizeof(unsigned)));
  p.y8 = y8.p, p.y8_count = count.as<unsigned>();
  for (int launch = 0; launch < 2; ++launch) {
    CUDA_OK(cudaMemset(y8.p, 0xA5, bytes));  // poison
    const Status st = v.launch(p, cfg, nullptr);
    ASSERT_TRUE(st.ok) << st.message;
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<uint8_t> all(bytes);
    CUDA_OK(cudaMemcpy(all.data(), y8.p, bytes, cudaMemcpyDeviceToHost));
    const std::vector<uint8_t> got = all;
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "y8 byte " << i << ", launch " << launch << ", config " << cfg.str();
  }
  // With y8_gain and y8_ss (matmul_add_norm's producer): the blocks of y * gain, and each
  // block's sum of squares of y.
  std::vector<float> gain(size_t(p.n)), yg(size_t(p.batch * p.n));
  std::vector<double> ss_want(size_t(p.batch * p.n / 32), 0.0), ss_got(ss_want.size());
  for (int64_t i = 0; i < p.n; ++i) gain[size_t(i)] = 0.25f + float(i % 13) * 0.125f;
  for (int64_t i = 0; i < p.batch * p.n; ++i) {
    yg[size_t(i)] = y[size_t(i)] * gain[size_t(i % p.n)];
    ss_want[size_t(i / 32)] += double(y[size_t(i)]) * y[size_t(i)];
  }
  DeviceBuf dgain(gain.size() * 4), dss(ss_want.size() * 8);
  CUDA_OK(cudaMemcpy(dgain.p, gain.data(), gain.size() * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(y8.p, 0xA5, bytes));
  CUDA_OK(cudaMemset(dss.p, 0xFF, ss_want.size() * 8));
  p.y8_gain = dgain.as<float>(), p.y8_ss = dss.as<double>();
  const Status st = v.launch(p, cfg, nullptr);
  ASSERT_TRUE(st.ok) << st.message;
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint8_t> all(bytes);
  CUDA_OK(cudaMemcpy(all.data(), y8.p, bytes, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(ss_got.data(), dss.p, ss_got.size() * 8, cudaMemcpyDeviceToHost));
  ASSERT_EQ(all, host_x8(yg, p.n)) << "y8 of y * gain, config " << cfg.str();
  for (size_t i = 0; i < ss_want.size(); ++i)
    ASSERT_NEAR(ss_got[i], ss_want[i], 1e-12 * ss_want[i]) << "y8_ss block " << i << ", config " << cfg.str();
}

// A variant with takes_x8_ss, given x8 = the int8 blocks of x * g and x8_ss = the blocks' sums
// of squares of x (batch 1): y = W (x8 values) / rms(x), against the fp64 reference.
void check_x8_ss(const GemvVariant& v, GemvProblem p, const GemvConfig& cfg, const std::vector<float>& wd_rows,
                 std::mt19937& rng) {
  if (p.batch != 1 || p.k > 4096 || p.k % 32) return;
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(size_t(p.k)), g(size_t(p.k)), xg(size_t(p.k)), xr(size_t(p.k));
  std::vector<double> ss(size_t(p.k / 32), 0.0);
  double total = 0;
  for (int64_t i = 0; i < p.k; ++i) {
    x[size_t(i)] = 2.f * nd(rng), g[size_t(i)] = 0.5f + std::fabs(nd(rng));
    xg[size_t(i)] = x[size_t(i)] * g[size_t(i)];
    ss[size_t(i / 32)] += double(x[size_t(i)]) * x[size_t(i)];
  }
  for (double b : ss) total += b;
  const std::vector<uint8_t> x8 = host_x8(xg, p.k, &xr);
  const double inv = 1.0 / std::sqrt(total / double(p.k) + 1e-5);
  DeviceBuf dx(x.size() * 4), dg(g.size() * 4), dx8(x8.size()), dss(ss.size() * 8), dn(x.size() * 4),
      dy((size_t(p.n) + 32) * 4);
  CUDA_OK(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dg.p, g.data(), g.size() * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dx8.p, x8.data(), x8.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dss.p, ss.data(), ss.size() * 8, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dy.p, 0xFF, (size_t(p.n) + 32) * 4));
  p.x = dx.as<float>(), p.x8 = dx8.p, p.x8_ss = dss.as<double>(), p.y = dy.as<float>();
  p.norm_w = dg.as<float>(), p.norm_eps = 1e-5f, p.norm_out = dn.as<float>();
  p.bias = nullptr, p.residual = nullptr, p.w_up = nullptr, p.y8 = nullptr, p.y8_count = nullptr;
  Status st = gemv_validate(p, v);
  ASSERT_TRUE(st.ok) << st.message;
  st = v.launch(p, cfg, nullptr);
  ASSERT_TRUE(st.ok) << st.message;
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> y(size_t(p.n) + 32);
  CUDA_OK(cudaMemcpy(y.data(), dy.p, y.size() * 4, cudaMemcpyDeviceToHost));
  for (int64_t r = 0; r < p.n; ++r) {
    double ref = 0, mag = 0;
    for (int64_t i = 0; i < p.k; ++i) {
      ref += double(wd_rows[size_t(r * p.k + i)]) * xr[size_t(i)];
      mag += std::fabs(double(wd_rows[size_t(r * p.k + i)]) * xr[size_t(i)]);
    }
    ASSERT_NEAR(y[size_t(r)], ref * inv, (2e-5 * mag + 1e-5) * inv) << "x8_ss, config " << cfg.str() << " row " << r;
  }
  for (size_t i = size_t(p.n); i < y.size(); ++i) ASSERT_TRUE(std::isnan(y[i])) << "wrote past y (x8_ss)";
}

void run_case(const GemvVariant& v, GgmlType type, int64_t n, int64_t k, int batch, bool epilogues, bool gate_up,
              std::mt19937& rng) {
  if (batch > v.max_batch) {  // decode's rungs (the slots): gemv_validate refuses the batch
    GemvProblem p;
    p.wtype = type, p.layout = v.layout, p.n = n, p.k = k, p.batch = batch;
    p.w = p.x = p.y = reinterpret_cast<float*>(uintptr_t(256));
    EXPECT_FALSE(gemv_validate(p, v).ok) << v.name << " took batch " << batch;
    return;
  }
  SCOPED_TRACE(testing::Message() << v.name << " " << type_name(type) << " n=" << n << " k=" << k << " b=" << batch
                                  << (epilogues ? " +bias+residual" : "") << (gate_up ? " gate/up" : ""));
  const auto w = random_matrix(type, n, k, rng), w2 = random_matrix(type, n, k, rng);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(size_t(batch * k)), bias(static_cast<size_t>(n)), res(size_t(batch * n));
  // Activations with outliers, as models have them: a few elements 30x the rest, so that the
  // int8 blocks' kept element (q8_blocks.h) is found at every position of a block.
  for (size_t i = 0; i < x.size(); ++i) x[i] = nd(rng) * (i % 37 == 5 ? 30.f : 1.f);
  // Variants that quantise x to 8 bits are checked against the same quantised x (x8_host.h's
  // rule, as on the device).
  std::vector<float> xr = x;
  if (v.x_rounding == XRounding::WeightType)  // tensor-core variants take x in the weights' type
    for (auto& f : xr) f = type == GgmlType::BF16 ? bf16_to_f32(f32_to_bf16(f)) : f16_to_f32(f32_to_f16(f));
  // The same blocks in the x8 layout (q8_blocks.h), given to the variant as GemvProblem::x8 in a
  // second launch: its output must not change by a bit.
  const bool int8_x = v.x_rounding == XRounding::Int8Blocks;
  const std::vector<uint8_t> x8 = int8_x ? host_x8(x, k, &xr) : std::vector<uint8_t>{};
  // For variants that fuse an RMSNorm: its weight, and the int8 blocks of rmsnorm(x) * gamma.
  std::vector<float> gamma(static_cast<size_t>(k));
  for (auto& f : gamma) f = 0.5f + std::fabs(nd(rng));
  const std::vector<uint8_t> xn8 = int8_x && v.fuses_norm ? host_x8(host_rmsnorm(x, gamma, k, 1e-5f), k) : std::vector<uint8_t>{};
  for (auto& f : bias) f = nd(rng);
  for (auto& f : res) f = nd(rng);
  // CPU fp64 reference from the dequantised rows.
  std::vector<float> wd(static_cast<size_t>(k)), wd2(static_cast<size_t>(k)), wd_all;
  if (v.takes_x8_ss) {
    wd_all.resize(size_t(n * k));
    for (int64_t r = 0; r < n; ++r) dequantize_row(type, w.data() + size_t(r) * row_bytes(type, k), wd_all.data() + r * k, k);
  }
  std::vector<double> ref(size_t(batch * n)), mag(size_t(batch * n));
  const size_t rb = row_bytes(type, k);
  for (int64_t r = 0; r < n; ++r) {
    dequantize_row(type, w.data() + size_t(r) * rb, wd.data(), k);
    dequantize_row(type, w2.data() + size_t(r) * rb, wd2.data(), k);
    for (int b = 0; b < batch; ++b) {
      double g = 0, u = 0, m = 0;
      for (int64_t i = 0; i < k; ++i) {
        g += double(wd[size_t(i)]) * xr[size_t(b * k + i)];
        u += double(wd2[size_t(i)]) * xr[size_t(b * k + i)];
        m += std::fabs(double(wd[size_t(i)]) * xr[size_t(b * k + i)]) + std::fabs(double(wd2[size_t(i)]) * xr[size_t(b * k + i)]);
      }
      double out = gate_up ? g / (1.0 + std::exp(-g)) * u : g;
      if (epilogues) out += bias[size_t(r)] + res[size_t(b * n + r)];
      ref[size_t(b * n + r)] = out;
      mag[size_t(b * n + r)] = gate_up ? m * (1.0 + std::fabs(u)) : m;
    }
  }
  // Device buffers; weights uploaded in the variant's layout.
  const size_t wbytes = v.layout == WeightLayout::Repacked ? gemv_repacked_bytes(type, n, k) : w.size();
  DeviceBuf dw(wbytes), dw2(wbytes), raw(w.size()), dx(x.size() * 4), dy((size_t(batch * n) + 32) * 4),
      db(bias.size() * 4), dr(res.size() * 4);
  for (auto [dst, src] : {std::pair{&dw, &w}, std::pair{&dw2, &w2}}) {
    if (v.layout == WeightLayout::Repacked) {
      CUDA_OK(cudaMemcpy(raw.p, src->data(), src->size(), cudaMemcpyHostToDevice));
      const Status st = gemv_repack(type, raw.p, n, k, dst->p, nullptr);
      ASSERT_TRUE(st.ok) << st.message;
    } else {
      CUDA_OK(cudaMemcpy(dst->p, src->data(), src->size(), cudaMemcpyHostToDevice));
    }
  }
  CUDA_OK(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  DeviceBuf dx8(std::max<size_t>(x8.size(), 16));
  if (int8_x) CUDA_OK(cudaMemcpy(dx8.p, x8.data(), x8.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(db.p, bias.data(), bias.size() * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dr.p, res.data(), res.size() * 4, cudaMemcpyHostToDevice));
  for (const GemvConfig& cfg : v.configs) {
    CUDA_OK(cudaMemset(dy.p, 0xFF, (size_t(batch * n) + 32) * 4));  // poison: NaN
    GemvProblem p;
    p.wtype = type;
    p.layout = v.layout;
    p.w = dw.p;
    p.w_up = gate_up ? dw2.p : nullptr;
    p.n = n;
    p.k = k;
    p.x = dx.as<float>();
    p.batch = batch;
    p.y = dy.as<float>();
    p.bias = epilogues ? db.as<float>() : nullptr;
    p.residual = epilogues ? dr.as<float>() : nullptr;
    Status st = gemv_validate(p, v);
    ASSERT_TRUE(st.ok) << st.message;
    st = v.launch(p, cfg, nullptr);
    ASSERT_TRUE(st.ok) << st.message;
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> got(size_t(batch * n) + 32);
    CUDA_OK(cudaMemcpy(got.data(), dy.p, got.size() * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < ref.size(); ++i)
      ASSERT_NEAR(got[i], ref[i], 2e-5 * mag[i] + 1e-5) << "config " << cfg.str() << " output " << i;
    for (size_t i = ref.size(); i < got.size(); ++i) ASSERT_TRUE(std::isnan(got[i])) << "wrote past y";
    if (v.writes_y8 && n % 32 == 0) check_y8(v, p, cfg, got);
    if (v.takes_x8_ss && !epilogues && !gate_up) check_x8_ss(v, p, cfg, wd_all, rng);
    if (::testing::Test::HasFatalFailure() || !int8_x) continue;
    CUDA_OK(cudaMemset(dy.p, 0xFF, (size_t(batch * n) + 32) * 4));
    p.x8 = dx8.p;
    st = v.launch(p, cfg, nullptr);
    ASSERT_TRUE(st.ok) << st.message;
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> got8(got.size());
    CUDA_OK(cudaMemcpy(got8.data(), dy.p, got8.size() * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(got8[i], got[i]) << "x8 given, config " << cfg.str() << " output " << i;
    for (size_t i = ref.size(); i < got8.size(); ++i) ASSERT_TRUE(std::isnan(got8[i])) << "wrote past y (x8 given)";
    if (v.writes_y8 && n % 32 == 0) check_y8(v, p, cfg, got8);  // with x8 given (decode's path)
    if (::testing::Test::HasFatalFailure()) return;
    if (!v.fuses_norm) continue;
    // RMSNorm in the prologue (GemvProblem::norm_w): x taken as the norm's input. The output must
    // equal, bit for bit, a launch given the int8 blocks of the host's rmsnorm(x) * g, and the
    // normalised x (norm_out) and its blocks (norm_out8) those of the host.
    DeviceBuf dg(size_t(k) * 4), dn(x.size() * 4), dxn8(std::max<size_t>(x8.size(), 16)), dn8(std::max<size_t>(x8.size(), 16));
    CUDA_OK(cudaMemset(dn.p, 0xFF, x.size() * 4));
    CUDA_OK(cudaMemset(dn8.p, 0xA5, x8.size()));
    CUDA_OK(cudaMemcpy(dg.p, gamma.data(), gamma.size() * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dxn8.p, xn8.data(), xn8.size(), cudaMemcpyHostToDevice));
    std::vector<float> want(got.size()), gotn(got.size());
    for (int pass = 0; pass < 2; ++pass) {
      CUDA_OK(cudaMemset(dy.p, 0xFF, (size_t(batch * n) + 32) * 4));
      GemvProblem q = p;
      if (pass == 0) q.x8 = dxn8.p;
      else q.x8 = dx8.p, q.norm_w = dg.as<float>(), q.norm_eps = 1e-5f, q.norm_out = dn.as<float>(), q.norm_out8 = dn8.p;  // x8 ignored
      st = gemv_validate(q, v);
      ASSERT_TRUE(st.ok) << st.message;
      st = v.launch(q, cfg, nullptr);
      ASSERT_TRUE(st.ok) << st.message;
      CUDA_OK(cudaDeviceSynchronize());
      CUDA_OK(cudaMemcpy((pass ? gotn : want).data(), dy.p, got.size() * 4, cudaMemcpyDeviceToHost));
    }
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(gotn[i], want[i]) << "norm fused, config " << cfg.str() << " output " << i;
    for (size_t i = ref.size(); i < gotn.size(); ++i) ASSERT_TRUE(std::isnan(gotn[i])) << "wrote past y (norm fused)";
    std::vector<float> normed(x.size());
    std::vector<uint8_t> normed8(x8.size());
    CUDA_OK(cudaMemcpy(normed.data(), dn.p, normed.size() * 4, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(normed8.data(), dn8.p, normed8.size(), cudaMemcpyDeviceToHost));
    ASSERT_EQ(normed, host_rmsnorm(x, gamma, k, 1e-5f)) << "norm_out, config " << cfg.str();
    ASSERT_EQ(normed8, xn8) << "norm_out8, config " << cfg.str();
  }
}

TEST_P(GemvGpu, MatchesFp64Reference) {
  const auto [name, type] = GetParam();
  const GemvVariant* v = find_gemv_variant(name);
  ASSERT_NE(v, nullptr);
  std::mt19937 rng(uint32_t(type) * 101 + uint32_t(name.size()));
  const int64_t blk = traits(type).block_elems;
  const bool any_k = name == "v0_naive" || name == "v1_splitk_atomic";
  const bool epi = name == "v5_stream" || name == "v6_mma" || name == "q4k_mma" || name.rfind("q_", 0) == 0;
  const int64_t k_big = blk == 256 ? 1024 : 1536;
  run_case(*v, type, 37, k_big, 1, false, false, rng);          // odd N
  for (int b = 1; b <= kGemvMaxBatch; ++b) run_case(*v, type, 129, blk == 256 ? 512 : 256, b, false, false, rng);
  run_case(*v, type, 5, blk == 256 ? 256 : 32, 3, false, false, rng);  // tiny, fewer rows than a block
  if (any_k) run_case(*v, type, 33, 1003, 2, false, false, rng);       // k not a multiple of 8
  // q6k_dp4a's batch-1 instance loads a warp's first step before the PDL wait: rows past the
  // first pass (the step loaded early, then the loop's own loads).
  if (name == "q6k_dp4a") run_case(*v, type, 8512, 512, 1, false, false, rng);
  // The batch-1 instance: one step per row, several with the last one short (27 super-blocks),
  // and rows past the first pass.
  if (name == "q6k_dp4a") {
    run_case(*v, type, 37, k_big, 1, false, false, rng);
    run_case(*v, type, 300, 6912, 1, false, false, rng);
    run_case(*v, type, 8512, 512, 1, false, false, rng);
  }
  // The slots rungs (decode, batch 1): steps that cross row groups and the gate/up pair's two
  // matrices in either slot (one, two, three and 27 super-blocks a row: one step, an odd count, a
  // short last step), more rows than a grid covers at once, epilogues, the int8 copy of y.
  if (name.find("_slots") != std::string::npos) {
    for (int64_t kk : {256, 512, 768, 6912}) {
      run_case(*v, type, 37, kk, 1, false, false, rng);
      run_case(*v, type, 67, kk, 1, true, true, rng);
    }
    run_case(*v, type, 8512, 512, 1, false, false, rng);
    run_case(*v, type, 8512, 256, 1, true, true, rng);
    run_case(*v, type, 96, 768, 1, true, false, rng);
  }
  if (epi) {
    run_case(*v, type, 67, k_big, 2, true, false, rng);
    run_case(*v, type, 67, k_big, 3, false, true, rng);
    run_case(*v, type, 64, k_big, 1, true, true, rng);
    run_case(*v, type, 96, k_big, 3, false, false, rng);  // n a multiple of 32: the int8 copy of y
    // More rows than a persistent grid covers at once (132 SMs: up to 8448 rows per pass), so
    // every warp goes on to a second row group (and a pipelined variant loads across groups).
    if (name.rfind("q_dp4a", 0) == 0) run_case(*v, type, 8512, 256, 1, true, true, rng);
    // Three or four passes for every block of a 32-row config (416 blocks of y on 132 SMs): y8's
    // shared-memory buffers are reused by every block (the rotating y8 of decode's instances).
    if (name == "q_dp4a") run_case(*v, type, 13312, 256, 1, false, true, rng);
    // One matrix with bias and residual, several passes a block (q_dp4a_slots at unroll 2, the
    // overlapping instance at 4), with y8 and its gain: decode's Wo and W_down over more rows.
    if (name == "q_dp4a") run_case(*v, type, 13312, 256, 1, true, false, rng);
    // Rows of whole slot steps (q_dp4a_slots' kWhole instance: k a multiple of 2048 for the 4-bit
    // types at 2 rows x 2 steps, of 1024 at 4 x 1): one step a row (slot b never filled), an odd
    // count of steps (slot b's last one past the row), an even count; rows past n clamped.
    if (name == "q_dp4a")
      for (int64_t kk : {1024, 2048, 3072, 4096, 6144}) run_case(*v, type, 67, kk, 1, true, false, rng);
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> out;
  const GgmlType types[] = {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1,
                            GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K,
                            GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS};
  for (const auto& v : gemv_variants())
    for (GgmlType t : types)
      if (v.supports(t)) out.push_back({v.name, t});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Variants, GemvGpu, ::testing::ValuesIn(all_cases()), [](const auto& info) {
  return info.param.variant + "_" + std::string(type_name(info.param.type));
});

// gemv() with y8 but no counters (and so for any variant that cannot make it itself) quantises y
// in a kernel of its own; with counters, the variant's epilogue does. Either way y8 equals y
// quantised on the host.
// quantize_x8 (the producer every x8 writer shares) byte for byte against the host's rule, on
// blocks that test its edges: all zero, one nonzero element (the step's floor), equal largest
// magnitudes of either sign (the first is kept apart, the other becomes -127), the largest in the
// last lane, outliers among Gaussian values, halves to round away from zero.

}  // namespace
