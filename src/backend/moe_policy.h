// Where a mixture of experts' pass runs its experts on the GPU: the CUDA backend's rules, kept
// apart from it (header-only, pure) so that the CPU tests check their arithmetic.
#pragma once

#include <algorithm>
#include <cstdint>

namespace lamina {

// The pairs an expert may average for a pass of several rows to route on the device: the
// option's value (CudaOptions::moe_pairs_per_expert, --moe-pairs-per-expert) when >= 0; by
// default (-1) min(16, max(1, n_expert / 8)). The grouped GEMVs' dp4a work grows with the pairs
// where a GEMM's tensor cores do not, so long prompts go to the host's grouping and the GEMMs;
// that grouping costs a sync and a few launches an expert a layer, cheap with few experts
// (Mixtral's 8 ran faster on the host at 8 and 32 users, Qwen3-30B-A3B's 128 on the device at 4
// to 64: docs/benchmarks.md, sixtieth session).
inline int64_t moe_pairs_per_expert(int option, int64_t n_expert) {
  return option >= 0 ? option : std::min<int64_t>(16, std::max<int64_t>(1, n_expert / 8));
}

// Whether a pass of `rows` tokens, k picks each of n_expert, routes on the device: one row always,
// several while their rows x k pairs are at most max_pairs (what one grouped launch takes) and
// average at most moe_pairs_per_expert(option, n_expert) an expert.
inline bool moe_rows_on_device(int64_t rows, int64_t n_expert, int64_t k, int option, int64_t max_pairs) {
  if (rows < 1 || n_expert < 1 || k < 1) return false;
  if (rows == 1) return true;
  const int64_t pairs = rows * k;
  return pairs <= max_pairs && pairs <= moe_pairs_per_expert(option, n_expert) * n_expert;
}

// Whether the pairs run grouped by expert (each expert's matrix read once for all its pairs)
// rather than a block row a pair: only the gate/up pair, once the pairs average 4 an expert. In
// `lamina kbench experts` (docs/benchmarks.md, sixty-first session) the one-a-pair launch was the
// faster one for every down matrix, and for Qwen3-30B-A3B's gate/up up to 32 tokens (2 pairs an
// expert; even at 4); Mixtral's gate/up (an expert's pair of matrices larger than L2) gained from
// grouping from 2 pairs an expert.
inline bool moe_grouped_launch(int64_t pairs, int64_t n_expert, bool gate_up) { return gate_up && pairs >= 4 * n_expert; }

}  // namespace lamina
