// Tensor parallelism (issue #35): how a Llama-family model splits over N ranks (GPUs), as data.
//
// Each layer splits Megatron-style, one all-reduce after the attention and one after the FFN:
//   Wq, Wk, Wv  column-parallel: a rank holds the output rows of its heads;
//   Wo          row-parallel: the input columns of its query heads (partial sums, all-reduced);
//   gate, up    column-parallel: its rows of the FFN;
//   down        row-parallel: the matching input columns (partial sums, all-reduced);
//   output      column-parallel over the vocabulary (each rank's logits; the argmax or the
//               sampling then runs over the ranks' pieces);
//   Q, K, V biases (qwen2): the entries of the rank's rows (a 1-D tensor's column range);
//   phi3's fused QKV and gate/up tensors: each part as its own tensor would split;
//   experts: each expert's gate/up and down as a dense FFN's (the same FFN range), the shared
//               expert's by its own range; the router and the shared expert's gate replicated;
//               the experts' partial outputs summed over the ranks once per layer;
//   norms (per-head q/k norms too), token embeddings, biases added after an all-reduce: every
//   rank holds all of them.
// KV heads: with N <= n_head_kv each rank holds n_head_kv / N of them; with more ranks than KV
// heads, each rank holds the one KV head its query heads read (replicated N / n_head_kv times).
// FFN rows: n_ff / N each where that is a whole number of the down projection's column blocks;
// else whole blocks, as evenly as they go (rank r starts at block r * blocks / N: shares differ by
// one block at most; Llama-2-7B's 11008 = 43 blocks of 256 in a K-quant file: 5376 and 5632 on 2
// ranks; a q4_0 file splits it evenly).
// A GGUF matrix is [rows][cols] with cols contiguous (ne[0]); quantised rows are whole blocks,
// so a column range must start and end on block boundaries.
#pragma once

#include "core/communicator.h"
#include "format/gguf.h"
#include "model/config.h"

#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace lamina {

struct TpRange {
  int64_t first = 0, count = 0;
  int64_t end() const { return first + count; }
};

struct TpPlan {
  int ranks = 1, rank = 0;
  TpRange q_heads, kv_heads;  // in heads
  TpRange ff;                 // rows of gate/up, columns of down (an expert's too)
  TpRange ff_shared;          // the shared expert's (qwen2moe; empty without one)
  TpRange vocab;              // rows of the output matrix (the last rank takes the remainder)

  // The plan of `rank` of `ranks`; throws lamina::Error saying which dimension does not split.
  // ff_block: the down projections' column block (tp_ff_block of the file; 1 splits rows evenly).
  static TpPlan make(const ModelConfig& c, int ranks, int rank, int64_t ff_block = 1);
};

// The column block of a file's down projections (ffn_down, the experts' and the shared expert's):
// the largest block among their types, 1 where none is quantised. A rank's FFN range starts and
// ends on it.
int64_t tp_ff_block(const GgufFile& f);

// How one weight is split: all of it, a range of its rows, or a range of every row's columns.
struct TpSlice {
  enum class Kind { Whole, Rows, Cols } kind = Kind::Whole;
  TpRange range;
};

// The slice of the tensor `name` (a GGUF tensor name, e.g. "blk.3.attn_k.weight") a rank holds.
TpSlice tp_slice(const TpPlan& p, const ModelConfig& c, std::string_view name);

// The (columns, rows) of file tensor t a rank holds: tp_slice's share, and for the tensors that
// are several parts in one (phi3's attn_qkv and fused ffn_up, the experts' stacks) the sum of
// their parts' shares. (What a rank's weights take: Session's memory check.)
std::pair<int64_t, int64_t> tp_held_shape(const TpPlan& p, const ModelConfig& c, const GgufTensor& t);

// The bytes of that slice of `t` (2-D, row-major, any type with whole-block rows), in the same
// layout: rows * row_bytes(type, cols). Throws lamina::Error when a column range is not on block
// boundaries or lies outside the tensor.
std::vector<uint8_t> tp_slice_bytes(const GgufTensor& t, const TpSlice& s);

// A rank's greedy pick of a row: (its largest logit, that id); id < 0 where the rank holds no rows.
using TpPick = std::pair<float, int32_t>;
// The pick over the ranks' picks: the largest logit, the lowest id among equal ones (Sampler's
// greedy rule); id -1 when no rank holds rows.
TpPick tp_merge_picks(std::span<const TpPick> picks);
// The first `keep` of the ranks' candidate lists merged, each list sorted by logit descending,
// then id ascending (Sampler::sample_sorted's order): the row's best `keep` tokens when each rank
// gave its share's best `keep` (or all of its share).
std::vector<TpPick> tp_merge_candidates(std::span<const std::vector<TpPick>> lists, size_t keep);

// The greedy id over a vocabulary split by rows: each rank passes its logits[0..n) for ids
// vocab0 .. vocab0 + n - 1. The largest logit wins, the lowest id among equal ones (Sampler's
// greedy rule); every rank gets the same id. A rank may hold no rows (n = 0).
int32_t tp_argmax(Communicator& comm, const float* logits, int64_t n, int64_t vocab0);

}  // namespace lamina
