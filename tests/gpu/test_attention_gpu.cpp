// The prompt-attention kernels (every rung of PrefillAttention) against a CPU fp64 reference:
// GQA and plain heads, head_dim 64, 128 and 256, sliding windows, prompts that start at position 0
// or after earlier positions, row counts that are not multiples of the query tile. Cache positions
// past the prompt hold NaN (a kernel that lets them reach the output fails), outputs start as NaN
// (a row it does not write fails). On an sm_90 device v3_wgmma and v4_overlap must run as
// themselves (not as their fallback, v2) where they apply: head_dim 64 or 128, no window (v1 and
// they run as v2 elsewhere).
// Bound: rel. L2 <= 3e-3 (the kernels round q * scale and the probabilities to f16). The 16-bit
// copy (out16) must equal the f32 output rounded to nearest even, bit for bit.
#include "core/half.h"
#include "gpu_test_util.h"
#include "kernels/ops/ops.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

using namespace lamina;
using namespace lamina::kernels;

namespace {

struct PrefillCase {
  int n_head, n_head_kv, head_dim, rows, p0;
  int window = 0;  // sliding window (0: none)
};

// out[r][h][d] in f64 over the f16 cache values the kernel reads.
std::vector<double> reference(const PrefillCase& c, const std::vector<float>& q, const std::vector<uint16_t>& kc,
                              const std::vector<uint16_t>& vc, float scale) {
  const int hd = c.head_dim, qd = c.n_head * hd, kvd = c.n_head_kv * hd, group = c.n_head / c.n_head_kv;
  std::vector<double> out(size_t(c.rows) * qd);
  std::vector<double> p;
  for (int r = 0; r < c.rows; ++r)
    for (int h = 0; h < c.n_head; ++h) {
      const int n = c.p0 + r + 1, kvh = h / group, j0 = c.window > 0 ? std::max(0, n - c.window) : 0;
      p.assign(size_t(n), 0.0);
      double mx = -INFINITY, sum = 0;
      for (int j = j0; j < n; ++j) {
        double s = 0;
        for (int d = 0; d < hd; ++d)
          s += double(q[size_t(r) * qd + h * hd + d]) * f16_to_f32(kc[size_t(j) * kvd + kvh * hd + d]);
        p[size_t(j)] = s * scale;
        mx = std::max(mx, p[size_t(j)]);
      }
      for (int j = j0; j < n; ++j) sum += (p[size_t(j)] = std::exp(p[size_t(j)] - mx));
      for (int d = 0; d < hd; ++d) {
        double o = 0;
        for (int j = j0; j < n; ++j) o += p[size_t(j)] * f16_to_f32(vc[size_t(j) * kvd + kvh * hd + d]);
        out[size_t(r) * qd + h * hd + d] = o / sum;
      }
    }
  return out;
}

}  // namespace

TEST(AttentionPrefill, EveryVariantMatchesFp64Reference) {
  std::mt19937 rng(11);
  const bool hopper = sm90_device();
  std::normal_distribution<float> nd(0.f, 1.f);
  // (v3's and v4's blocks are 128 rows and their tiles 128 keys: 700 and 389 rows span several
  // of both, with a last block of 60 and 5 rows; 9 / 3 heads of 64 and 10 rows: SmolLM2's
  // shortest prompts that take this kernel.)
  const PrefillCase cases[] = {{4, 2, 64, 37, 0},    {8, 8, 128, 200, 0}, {32, 8, 128, 300, 45},
                               {4, 4, 128, 129, 0}, {2, 1, 64, 64, 100}, {6, 3, 128, 9, 70},
                               {8, 2, 128, 700, 0}, {4, 1, 64, 389, 130}, {9, 3, 64, 10, 0},
                               // head_dim 256 and sliding windows (v2 only): Gemma 3 270M's 4 / 1 heads of
                               // 256 and window of 512 over 700 rows; windows shorter than a tile and a
                               // block, from position 0 and after a prefix
                               {4, 1, 256, 700, 0, 512}, {4, 2, 256, 200, 30}, {8, 2, 128, 300, 0, 100},
                               {4, 1, 64, 389, 130, 40}, {2, 1, 128, 150, 70, 1}};
  for (const PrefillCase& c : cases) {
    const int hd = c.head_dim, qd = c.n_head * hd, kvd = c.n_head_kv * hd;
    const int n_ctx = c.p0 + c.rows + 40, filled = c.p0 + c.rows;
    std::vector<float> q(size_t(c.rows) * qd);
    for (float& x : q) x = nd(rng);
    std::vector<uint16_t> kc(size_t(n_ctx) * kvd, 0x7E00), vc(size_t(n_ctx) * kvd, 0x7E00);  // NaN past the prompt
    for (size_t i = 0; i < size_t(filled) * kvd; ++i) kc[i] = f32_to_f16(nd(rng)), vc[i] = f32_to_f16(nd(rng));
    const float scale = 1.f / std::sqrt(float(hd));
    const std::vector<double> want = reference(c, q, kc, vc, scale);
    std::vector<int32_t> pos(size_t(c.rows));
    for (int i = 0; i < c.rows; ++i) pos[size_t(i)] = c.p0 + i;

    DeviceBuf dq(q.size() * 4), dk(kc.size() * 2), dv(vc.size() * 2), dpos(pos.size() * 4), dout(q.size() * 4),
        dout16(q.size() * 2);
    CUDA_OK(cudaMemcpy(dq.p, q.data(), dq.n, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dk.p, kc.data(), dk.n, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dv.p, vc.data(), dv.n, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dpos.p, pos.data(), dpos.n, cudaMemcpyHostToDevice));
    AttentionArgs a;
    a.n_head = c.n_head, a.n_head_kv = c.n_head_kv, a.head_dim = hd, a.scale = scale, a.n_ctx = n_ctx;
    a.window = c.window;
    double v2_err = 0;
    for (PrefillAttention v : kPrefillAttentionRungs)
      for (GgmlType t16 : {GgmlType::F16, GgmlType::BF16}) {
        const std::string what = std::string(prefill_attention_name(v)) + " heads " + std::to_string(c.n_head) + "/" +
                                 std::to_string(c.n_head_kv) + " hd " + std::to_string(hd) + " rows " +
                                 std::to_string(c.rows) + " from " + std::to_string(c.p0) + " window " + std::to_string(c.window) + " " +
                                 std::string(type_name(t16));
        if (v >= PrefillAttention::V3Wgmma && hopper && hd <= 128 && c.window == 0)
          ASSERT_TRUE(prefill_attention_runs(v, a, dq.as<float>(), dk.p, dv.p)) << what << ": does not run on this sm_90 device";
        CUDA_OK(cudaMemset(dout.p, 0xFF, dout.n));  // NaN
        CUDA_OK(cudaMemset(dout16.p, 0xFF, dout16.n));
        const Status st = attention_prefill(dq.as<float>(), c.rows, dpos.as<int32_t>(), dk.p, dv.p, a, dout.as<float>(),
                                            nullptr, dout16.p, t16, v);
        ASSERT_TRUE(st.ok) << st.message << " " << what;
        std::vector<float> got(q.size());
        std::vector<uint16_t> got16(q.size());
        CUDA_OK(cudaMemcpy(got.data(), dout.p, dout.n, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(got16.data(), dout16.p, dout16.n, cudaMemcpyDeviceToHost));
        double e = 0, n = 0;
        size_t bad16 = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          e += std::isfinite(got[i]) ? (got[i] - want[i]) * (got[i] - want[i]) : INFINITY;
          n += want[i] * want[i];
          const uint16_t r16 = t16 == GgmlType::F16 ? f32_to_f16(got[i]) : f32_to_bf16(got[i]);
          bad16 += got16[i] != r16;
        }
        EXPECT_LE(std::sqrt(e / n), 3e-3) << what;
        // No rung may be much less accurate than v2 (the rung the engine's chunks run): the
        // wgmma rungs round Q and P to f16 as v2 does, only the summation order differs.
        if (v == PrefillAttention::V2Pipelined && t16 == GgmlType::F16) v2_err = std::sqrt(e / n);
        if (v != PrefillAttention::V1Mma && v != PrefillAttention::V2Pipelined)
          EXPECT_LE(std::sqrt(e / n), 1.25 * v2_err) << what << " against v2's " << v2_err;
        EXPECT_EQ(bad16, 0u) << what << ": 16-bit copy differs from the rounded output";
      }
  }
}
