// Where a mixture of experts' pass runs its experts on the GPU: the CUDA backend's rules, kept
// apart from it (header-only, pure) so that the CPU tests check their arithmetic.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>

namespace lamina {

// The pairs an expert may average for a pass of several rows to route on the device: the
// option's value (CudaOptions::moe_pairs_per_expert, --moe-pairs-per-expert) when >= 0; by
// default (-1) min(16, max(1, n_expert / 8)). The grouped GEMVs' dp4a work grows with the pairs
// where a GEMM's tensor cores do not, so more pairs go to the grouped GEMM on the device where
// the backend has one, else to the host's grouping and a GEMM an expert (a sync and a few launches
// an expert a layer: Mixtral's 8 ran faster on the host at 8 and 32 users, Qwen3-30B-A3B's 128 on
// the device at 4 to 64: docs/benchmarks.md, sixtieth session).
// With the grouped GEMM (gemm), the default is 2: in `lamina kbench experts` (docs/benchmarks.md,
// sixty-first session) the GEMM pipeline beat the GEMVs from 2-4 pairs an expert on (Qwen3-30B-A3B's
// 32 tokens, Mixtral's 16), and lost at fewer (Mixtral's 8 tokens, 2 an expert: 496 against 326 µs).
inline int64_t moe_pairs_per_expert(int option, int64_t n_expert, bool gemm = false) {
  if (option >= 0) return option;
  return gemm ? 2 : std::min<int64_t>(16, std::max<int64_t>(1, n_expert / 8));
}

// Whether a pass of `rows` tokens, k picks each of n_expert, routes on the device: one row always,
// several while their rows x k pairs are at most max_pairs (what one grouped launch takes) and
// average at most moe_pairs_per_expert(option, n_expert) an expert.
// With a grouped GEMM for the experts (gemm: the CUDA backend's gemm_experts takes them), every
// pass routes on the device: the pairs past that average run through it (moe_gemm_launch).
inline bool moe_rows_on_device(int64_t rows, int64_t n_expert, int64_t k, int option, int64_t max_pairs, bool gemm) {
  if (rows < 1 || n_expert < 1 || k < 1) return false;
  if (rows == 1) return true;
  const int64_t pairs = rows * k;
  if (gemm) return pairs <= INT32_MAX;
  return pairs <= max_pairs && pairs <= moe_pairs_per_expert(option, n_expert) * n_expert;
}

// Whether a pass of `rows` tokens (k picks each) runs its experts through the grouped GEMM rather
// than the GEMVs: several rows whose pairs average more than moe_pairs_per_expert(option,
// n_expert, true) an expert, or more than the GEMVs' max_pairs (an explicit option may allow an
// average the GEMVs cannot take).
inline bool moe_gemm_launch(int64_t rows, int64_t k, int64_t n_expert, int option, int64_t max_pairs) {
  const int64_t pairs = rows * k;
  return rows > 1 && (pairs > moe_pairs_per_expert(option, n_expert, true) * n_expert || pairs > max_pairs);
}

// Whether the pairs run grouped by expert (each expert's matrix read once for all its pairs)
// rather than a block row a pair: only the gate/up pair, once the pairs average 4 an expert. In
// `lamina kbench experts` (docs/benchmarks.md, sixty-first session) the one-a-pair launch was the
// faster one for every down matrix, and for Qwen3-30B-A3B's gate/up up to 32 tokens (2 pairs an
// expert; even at 4); Mixtral's gate/up (an expert's pair of matrices larger than L2) gained from
// grouping from 2 pairs an expert.
inline bool moe_grouped_launch(int64_t pairs, int64_t n_expert, bool gate_up) { return gate_up && pairs >= 4 * n_expert; }

}  // namespace lamina
