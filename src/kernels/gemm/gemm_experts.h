// The grouped GEMM's launch shapes (gemm_experts, gemm.h): how q3_wgmma_rs lays its blocks over the
// experts' weights. A mixture of experts' GEMM reads every routed expert's matrices for a few rows
// each (Qwen3-30B-A3B's 512-token prompt: 32 rows an expert, a 64-row tile each), so it is bound by
// the bytes of W in flight, not by the tensor cores; the shapes differ in how many W bytes an SM
// has in flight. lamina kbench experts times each; the CUDA backend picks by that measurement
// (figures: docs/benchmarks.md).
#pragma once

#include "kernels/gemm/gemm.h"

namespace lamina::kernels {

enum class ExpertsLaunch {
  Rows128,    // 128 weight rows a block (gated: 128 gate and 128 up rows), one block an SM
  Rows256,    // 256 weight rows a block (two 64-row halves a consumer warpgroup): twice the W
              // slot for one X stage; not gated
  TwoBlocks,  // 128 weight rows a block, two blocks an SM (half the registers each): twice the
              // blocks' TMA loads in flight; not gated
};
inline constexpr ExpertsLaunch kExpertsLaunches[] = {ExpertsLaunch::Rows128, ExpertsLaunch::Rows256, ExpertsLaunch::TwoBlocks};

const char* experts_launch_name(ExpertsLaunch l);
// Whether the launch takes a gated problem (GemmProblem::b_up) or an ungated one.
bool experts_launch_takes(ExpertsLaunch l, bool gated);
// gemm_experts (gemm.h) in launch shape l.
Status gemm_experts(const GemmProblem& p, ExpertsLaunch l, cudaStream_t s);

namespace qgemm_rs {
// The grouped instances of q3_wgmma_rs (qgemm_rs.cu): p checked by gemm_experts.
Status run_experts(const GemmProblem& p, ExpertsLaunch l, cudaStream_t s);
}  // namespace qgemm_rs

}  // namespace lamina::kernels
