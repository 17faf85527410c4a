// q2_wgmma and q3_wgmma_rs registration and dispatch; the kernels are in qgemm_wgmma.cuh and
// qgemm_rs.cuh, instantiated per weight type in qgemm_wgmma_<type>.cu and per (type, tile) in
// units src/CMakeLists.txt writes (the translation units compile in parallel).
#include "kernels/gemm/gemm_experts.h"
#include "kernels/gemm/qgemm_rs.cuh"

namespace lamina::kernels {
namespace {

Status run_q2(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) {
  if (p.b_type == GgmlType::Q8_0) return qgemm_wgmma::run_q8_0(p, c, s);
  if (p.b_type == GgmlType::Q4_0) return qgemm_wgmma::run_q4_0(p, c, s);
  if (p.b_type == GgmlType::Q5_K) return qgemm_wgmma::run_q5_k(p, c, s);
  return qgemm_wgmma::run_q4_k(p, c, s);
}

// Both variants read the same planes of gemv_repack; q3_wgmma_rs (rs) also those of Q5_0, Q5_1, Q6_K,
// IQ4_NL, IQ4_XS, Q3_K, Q2_K and Q4_1. TMA needs 16-byte row strides: K a multiple of 256 (the d plane's rows are k/16 bytes).
bool takes_planes(const GemmProblem& p, bool rs) {
  const GgmlType t = p.b_type;
  const bool both = t == GgmlType::Q8_0 || t == GgmlType::Q4_0 || t == GgmlType::Q4_K || t == GgmlType::Q5_K;
  const bool rs_only = t == GgmlType::Q5_0 || t == GgmlType::Q5_1 || t == GgmlType::Q6_K || t == GgmlType::IQ4_NL ||
                       t == GgmlType::IQ4_XS || t == GgmlType::Q3_K || t == GgmlType::Q2_K || t == GgmlType::Q4_1;
  const bool type = both || (rs && rs_only);
  return wgmma_gemm::hopper() && p.a_type == GgmlType::F16 && type && p.b_layout == WeightLayout::Repacked && !p.a_col_major &&
         p.b_col_major && p.k % 256 == 0;
}
bool q2_takes(const GemmProblem& p) { return takes_planes(p, false); }
bool q3_takes(const GemmProblem& p) { return takes_planes(p, true); }

}  // namespace

bool gemm_experts_supports(GgmlType t, int64_t n, int64_t k) {
  GemmProblem p;
  p.a_type = GgmlType::F16, p.b_type = t, p.b_layout = WeightLayout::Repacked, p.n = n, p.k = k;
  return n > 0 && k > 0 && q3_takes(p);
}

// (gemm_experts_args: qgemm_rs.cu, beside the dispatch of each type to its kind.)

Status gemm_experts(const GemmProblem& p, cudaStream_t s) { return gemm_experts(p, ExpertsLaunch::Rows128, s); }

Status gemm_experts(const GemmProblem& p, ExpertsLaunch l, cudaStream_t s) {
  if (!p.groups || !p.groups->tiles || !p.groups->count || p.groups->max_tiles < 1 || !p.a || !p.b || !p.c || p.m < 1 ||
      p.lda != p.k || p.ldc != p.n || (p.c_type != GgmlType::F32 && p.c_type != GgmlType::F16) ||
      !gemm_experts_supports(p.b_type, p.n, p.k))
    return Status::error("gemm_experts: bad problem (Hopper, a repacked q3_wgmma_rs type, f16 A and f32 or f16 C packed, tiles)");
  if (!experts_launch_takes(l, p.b_up != nullptr))
    return Status::error(std::string("gemm_experts: launch ") + experts_launch_name(l) + " does not take " +
                         (p.b_up ? "a gated problem" : "an ungated problem"));
  return qgemm_rs::run_experts(p, l, s);
}

const char* experts_launch_name(ExpertsLaunch l) {
  switch (l) {
    case ExpertsLaunch::Rows128: return "rows128";
    case ExpertsLaunch::Rows256: return "rows256";
    case ExpertsLaunch::TwoBlocks: return "two-blocks";
  }
  return "?";
}

bool experts_launch_takes(ExpertsLaunch l, bool gated) { return l == ExpertsLaunch::Rows128 || !gated; }

void register_qgemm_wgmma_variants(std::vector<GemmVariant>& out) {
  // Stages: what the shared memory holds next to the ring of raw weight bytes (2 x 4 k-steps).
  GemmConfig split2{128, 128, 64, 4}, split4{128, 128, 64, 4};
  split2.splits = 2, split4.splits = 4;
  out.push_back({"q2_wgmma", "Hopper: the h2_wgmma pipeline with producer warpgroups dequantising W into the stage",
                 q2_takes, run_q2, {GemmConfig{128, 128, 64, 4}, split2, split4}, false});
  out.back().column_parts = true;
  // bm: activation rows per block (wgmma's N); bn: the block's weight rows (wgmma's M side,
  // 64 per consumer warpgroup and half).
  std::vector<GemmConfig> rs;
  // (128 x 256 blocks were never the fastest at the 54 shapes of the default kbench; removed.)
  for (auto [bm, bn] : {std::pair{256, 128}, {128, 128}, {64, 256}, {64, 128}})
    rs.push_back(GemmConfig{bm, bn, 64, 4});
  // 256-row blocks in K splits come after the others: half the conversions of W per product of
  // 128-row ones, at 256-512 activation rows where 256-row blocks alone fill half the SMs, but
  // the untuned choice (gemm.cpp: the first config of the most splits that fit) must not take
  // them for a few rows (the engine's 16-128-row steps ran 15-20 % slower when it did).
  for (auto [bm, bn] : {std::pair{128, 128}, {64, 128}, {256, 128}})
    for (int splits : {2, 4}) {
      GemmConfig c{bm, bn, 64, 4};
      c.splits = splits;
      rs.push_back(c);
    }
  // 64 x 128 tiles in 8 K splits run two blocks an SM (half the registers each): at 16-64 rows a
  // block's k-step waits with two consumer warps per scheduler (docs/benchmarks.md, ncu).
  GemmConfig two{64, 128, 64, 4};
  two.splits = 8;
  rs.push_back(two);
  // Gated problems: 128 columns of C (a block of 128 gate and 128 up rows), 64 or 128 activation
  // rows, no split-K.
  const auto gated = [](const GemmConfig& c) { return c.bn == 128 && c.splits == 1 && (c.bm == 64 || c.bm == 128); };
  out.push_back({"q3_wgmma_rs", "Hopper: W converted straight into wgmma's register operand (C^T = W X^T), no f16 stage of W",
                 q3_takes, qgemm_rs::run, rs, false, +gated});
  out.back().column_parts = true;
}

}  // namespace lamina::kernels
