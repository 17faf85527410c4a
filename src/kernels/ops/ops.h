// The forward pass's non-matmul ops on the GPU: normalisation, RoPE, element-wise epilogues,
// the KV cache and attention, sampling. Like the GEMV/GEMM families these take raw device
// pointers and sizes, validate them, and return a Status instead of launching on bad input.
//
// Layouts (described as data):
//   activations  f32 [rows][cols], row-major, contiguous (one row per token)
//   KV cache     one layer: [n_ctx][n_head_kv * head_dim] of K and the same of V, f16 or f32
//   positions    int32 [rows] on the device (the token's position in the sequence)
#pragma once

#include "format/ggml_type.h"
#include "kernels/common/status.h"

#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace lamina::kernels {

// out[t][i] = x[t][i] / sqrt(mean_i x[t][i]^2 + eps) * w[i]   (sum of squares in f64, as ggml)
// out16 (optional) receives the same values rounded to `t16` (F16 or BF16) for a following GEMM
// (out may then be null: the 16-bit copy alone);
// out8 (optional, cols a multiple of 32) the same values as int8 blocks for a following dp4a GEMV
// (kernels/common/q8_blocks.cuh: x8_bytes(cols) bytes per row).
Status rmsnorm(const float* x, const float* w, int64_t rows, int64_t cols, float eps, float* out,
               void* out16, GgmlType t16, cudaStream_t s, void* out8 = nullptr);

Status add(float* x, const float* y, int64_t n, cudaStream_t s);                          // x += y
// x[t] += y[t] (yw given: += rmsnorm(y[t]) * yw), then h[t] = rmsnorm(x[t]) * w when w is given;
// h8 (optional, cols % 32 == 0) also receives h as int8 blocks (x8_bytes(cols) per row).
// x, y, h: [rows][cols]; yw, w: [cols].
Status add_norm(float* x, const float* y, const float* yw, const float* w, int64_t rows, int64_t cols, float eps,
                float* h, cudaStream_t s, void* h8 = nullptr);
Status add_bias(float* x, const float* b, int64_t rows, int64_t cols, cudaStream_t s);    // x[t] += b
// gate = silu(gate) * up; out16 (optional, n % 4 == 0) also receives it rounded to t16 (F16/BF16).
Status swiglu(float* gate, const float* up, int64_t n, cudaStream_t s, void* out16 = nullptr,
              GgmlType t16 = GgmlType::F16);
// gate = gelu(gate) * up, GELU in its tanh form (as ggml).
Status geglu(float* gate, const float* up, int64_t n, cudaStream_t s);
Status scale(float* x, float f, int64_t n, cudaStream_t s);  // x *= f
// dst[t][c] = src[t][col0 + c] for c < n_cols (splitting a stacked matmul's output).
Status copy_columns(const float* src, int64_t rows, int64_t src_cols, int64_t col0, int64_t n_cols, float* dst,
                    cudaStream_t s);
// dst[i] = src[rows[i]] for i < n (rows: device [n]; each row `cols` floats).
Status gather_rows(const float* src, int64_t cols, const int32_t* rows, int64_t n, float* dst, cudaStream_t s);
// dst[rows[i]] += scale[i] * src[i] for i < n, rows distinct (rows, scale: device [n]; each row
// `cols` floats): a mixture of experts' weighted outputs back into their tokens' rows.
Status add_rows_scaled(float* dst, const float* src, int64_t cols, const int32_t* rows, const float* scale, int64_t n,
                       cudaStream_t s);
// add_rows_scaled of one row (src [cols]), its index and scale given by value: no upload (decode's experts).
Status add_row_scaled(float* dst, const float* src, int64_t cols, int32_t row, float scale, cudaStream_t s);
// A mixture of experts' router, for each row t of logits [rows][n_expert] (n_expert <=
// kMoeRouteMaxExperts): the softmax (float exponentials, their sum in f64), the k most probable
// experts (k <= kMoeRouteMaxPicks; the lower index first among equal ones) and their
// probabilities, divided by the picks' sum (summed in order of probability) when renorm.
// out [rows][2k]: the k ids as int32 bits, ascending, then their weights in the same order:
// backend/moe_route.h's route_top_k, one warp a row.
inline constexpr int kMoeRouteMaxExperts = 256, kMoeRouteMaxPicks = 32;  // a warp a row: 8 logits a lane, a pick a lane
Status moe_route(const float* logits, int64_t rows, int n_expert, int k, bool renorm, float* out, cudaStream_t s);
// y[t][c] += w_tj d[t k + j][c] for j = 0..k-1 in that order, one fmaf each (add_rows_scaled's
// bits), the weights w_t read from route [rows][2k] (moe_route's rows: after the ids).
// y [rows][cols], d [rows * k][cols].
Status add_routed(float* y, const float* d, int64_t rows, int64_t cols, const float* route, int k, cudaStream_t s);
// A route's pairs (token t, pick j: pair t k + j; route [rows][2k] as moe_route makes it) sorted
// by expert for the grouped GEMM (gemm_experts): slot_pair [rows k] the pair in each slot,
// expert 0's first, each expert's in pair order; tiles [count][4] {expert, first slot, end slot,
// 0}, each expert's slots cut every tile_rows (room for rows k / tile_rows + n_expert tiles);
// count [1]. One block.
Status moe_sort(const float* route, int64_t rows, int k, int n_expert, int tile_rows, int32_t* slot_pair, int32_t* tiles,
                int32_t* count, cudaStream_t s);
// out [slots][cols] f16: row s = x [.][cols] row slot_pair[s] / share, rounded (share k: a row a token
// for the pairs of its k picks; 1: a row a pair).
Status gather_rows_f16(const float* x, int64_t share, const int32_t* slot_pair, int64_t slots, int64_t cols, void* out,
                       cudaStream_t s);
// dst [.][cols] row slot_pair[s] = src [slots][cols] row s.
Status scatter_rows(const float* src, const int32_t* slot_pair, int64_t slots, int64_t cols, float* dst, cudaStream_t s);
// out = x rounded to F16 or BF16 (the A operand of the tensor-core GEMMs).
Status convert_f32(const float* x, int64_t n, GgmlType to, void* out, cudaStream_t s);

struct RopeArgs {
  int n_heads = 0, head_dim = 0, n_rot = 0;
  float base = 10000.f, freq_scale = 1.f;
  bool neox = false;
  const float* freq_factors = nullptr;  // device [n_rot/2] divisors (Llama 3, LongRoPE), optional
  float attn_factor = 1.f;              // cos and sin times this (LongRoPE's magnitude scaling)
};
// In place on x [rows][n_heads * head_dim]; angles as ggml's CPU rope (running product in f32).
Status rope(float* x, int64_t rows, const int32_t* pos, const RopeArgs& a, cudaStream_t s);

struct AttentionArgs {
  int n_head = 0, n_head_kv = 0, head_dim = 0;  // head_dim: 64, 80, 96, 128, 256 (a multiple of 16)
  float scale = 1.f;
  GgmlType kv_type = GgmlType::F16;  // F16 or F32
  int n_ctx = 0;                     // positions in the cache
  int window = 0;                    // > 0: position p attends to p - window + 1 .. p only (sliding window)
};
// Writes k, v [rows][n_head_kv * head_dim] into the cache at their positions.
Status kv_store(const float* k, const float* v, int64_t rows, const int32_t* pos, void* k_cache, void* v_cache,
                const AttentionArgs& a, cudaStream_t s);

// Per-head RMSNorm weights of q and k (device, [head_dim] each; qwen3, gemma3), or none.
struct HeadNorms {
  const float* q = nullptr;
  const float* k = nullptr;
  float eps = 0.f;
};
// rope() on q [rows][n_head * head_dim] and k [rows][n_head_kv * head_dim] (in place), then
// kv_store() of the rotated k and v: one kernel. r.n_heads is ignored (q has a.n_head heads,
// k a.n_head_kv).
// slots (optional, device [rows]): the cache row of row t (a paged cache), instead of pos[t].
// norms (optional; where head_norms_supported): each head of q and k RMS-normalised before its
// rotation, as rmsnorm() per head would.
Status rope_kv_store(float* q, float* k, const float* v, int64_t rows, const int32_t* pos, const RopeArgs& r,
                     void* k_cache, void* v_cache, const AttentionArgs& a, cudaStream_t s,
                     const int32_t* slots = nullptr, const HeadNorms& norms = {});
// Whether rope_kv_store takes head norms for this geometry: whole heads rotated (n_rot ==
// head_dim) and at most 256 heads of q and k together.
bool head_norms_supported(const AttentionArgs& a, const RopeArgs& r);

// Causal attention of q [rows][n_head * head_dim] over cache positions 0..pos[t] (the last
// a.window of them when it is set; GQA: head h reads KV head h / (n_head / n_head_kv)):
// out[t] = concat_h softmax(q_h K^T scale) V.
//
// Flash-decoding: each (KV head, token) has `splits` blocks (1 to 4096), each block takes a contiguous
// share of the positions (sized on the device from pos[t], so a captured graph stays valid as
// the sequence grows) and writes (max, sum, unnormalised output) to `work`; a second kernel
// merges the splits. `work` holds attention_work_floats(...) floats. out8 (optional) also
// receives out as int8 blocks (q8_blocks.cuh, x8_bytes(n_head * head_dim) bytes per row).
size_t attention_work_floats(const AttentionArgs& a, int64_t rows, int splits);
Status attention_decode(const float* q, int64_t rows, const int32_t* pos, const void* k_cache, const void* v_cache,
                        const AttentionArgs& a, int splits, float* work, float* out, cudaStream_t s,
                        void* out8 = nullptr);
// Blocks of attention_decode's split kernel for a's shape that an SM holds at once (0: a shape it
// does not take): the caller sizes `splits` to whole waves of them.
int attention_decode_blocks_per_sm(const AttentionArgs& a);

// The same attention for the rows of several sequences over a paged cache (the batching engine,
// engine/kv_blocks.h): row t belongs to sequence row_seq[t], whose position j sits in cache row
// tables[row_seq[t] * max_blocks + j / block_tokens] * block_tokens + j % block_tokens; it attends
// to its own positions 0..pos[t] (so a prompt chunk's rows are causal among themselves).
struct PagedKv {
  const int32_t* row_seq = nullptr;  // device [rows]
  const int32_t* tables = nullptr;   // device [sequences][max_blocks] block ids
  int max_blocks = 0, block_tokens = 0;
};
// out8 (optional): out's int8 blocks as well, as attention_decode makes them (the Wo GEMV's input);
// out16 (optional): out rounded to f16 (the Wo GEMM's input, [rows][n_head * head_dim]).
// The variants are the family's ladder: Split (attention_decode.cu: warp-wide shuffle reductions
// per position and query head) and Mma (attention_paged_mma.cu: 16 positions at a time on tensor
// cores, where decode_attention_supported; elsewhere the split kernels run), the default.
enum class DecodeAttention { Split, Mma };
const char* decode_attention_name(DecodeAttention v);
bool decode_attention_supported(DecodeAttention v, const AttentionArgs& a);
Status attention_paged(const float* q, int64_t rows, const int32_t* pos, const PagedKv& paged, const void* k_cache,
                       const void* v_cache, const AttentionArgs& a, int splits, float* work, float* out, cudaStream_t s,
                       void* out8 = nullptr, void* out16 = nullptr, DecodeAttention variant = DecodeAttention::Mma);

// A decode token's attention block in one kernel: rope_kv_store() then attention_decode() for
// one row, without splits (one block per query head), so meant for short contexts; same results
// as those two up to float summation order (q rotated in place, k too without GQA; the cache
// row written).
// Supported: one row, an F16 cache, head_dim 64/96/128/256, n_head a multiple of n_head_kv (GQA),
// no sliding window shorter than the `positions` the pass attends over at most (the kernel
// attends over every position; the caller's length bucket; 0: unknown, then no window at all),
// and with head norms (qwen3, gemma3: HeadNorms, as rope_kv_store takes them) whole heads rotated
// (n_rot == head_dim). The launches take the same `positions` and refuse what this refuses.
bool attention_decode_rope_supported(const AttentionArgs& a, const RopeArgs& r, int64_t rows, int64_t positions,
                                     bool head_norms);
Status attention_decode_rope(float* q, float* k, const float* v, const int32_t* pos, const RopeArgs& r, void* k_cache,
                             void* v_cache, const AttentionArgs& a, float* out, cudaStream_t s, void* out8 = nullptr,
                             const HeadNorms& norms = {}, int64_t positions = 0);
// The same for the batching engine's decode rows on the paged cache, each row its sequence's only
// row in the pass: q [rows][n_head * head_dim], k, v [rows][n_head_kv * head_dim], row t at
// position pos[t] of sequence paged.row_seq[t], stored at the slot its block table gives that
// position; out (and out8: [rows][x8_bytes(n_head * head_dim)], out16: f16 [rows][n_head *
// head_dim], both optional) per row. Supported as attention_decode_rope, any number of rows.
bool attention_decode_rope_paged_supported(const AttentionArgs& a, const RopeArgs& r, int64_t positions, bool head_norms);
Status attention_decode_rope_paged(float* q, float* k, const float* v, int64_t rows, const int32_t* pos,
                                   const PagedKv& paged, const RopeArgs& r, void* k_cache, void* v_cache,
                                   const AttentionArgs& a, float* out, cudaStream_t s, void* out8 = nullptr,
                                   void* out16 = nullptr, const HeadNorms& norms = {}, int64_t positions = 0);

// Prompt attention on tensor cores (flash-attention: query tiles, K/V tiles streamed through
// shared memory, online softmax; f16 mma.sync, or wgmma on Hopper). Requires an F16 cache, head_dim 64, 128 or
// 256, and the rows at consecutive positions pos[0] .. pos[0] + rows - 1; a.window > 0 limits each row to its
// sliding window. out16 (optional) also receives the
// output rounded to t16 (F16 or BF16), the A operand of the next GEMM. The variants are the
// family's ladder (attention_prefill.cu and attention_prefill_wgmma.cu say what each changes).
// V3Wgmma and V4Overlap need an sm_90 device, an sm_90a build, 16-byte aligned caches and q,
// head_dim 64 or 128 and no window; elsewhere they run as V2Pipelined (as V1Mma does at head_dim
// 256 or with a window).
enum class PrefillAttention { V1Mma, V2Pipelined, V3Wgmma, V4Overlap };
inline constexpr PrefillAttention kPrefillAttentionRungs[] = {PrefillAttention::V1Mma, PrefillAttention::V2Pipelined,
                                                              PrefillAttention::V3Wgmma, PrefillAttention::V4Overlap};
const char* prefill_attention_name(PrefillAttention v);
bool attention_prefill_supported(const AttentionArgs& a);
// Whether rung v runs as itself on this device with these q and caches (not as the rung it falls
// back to).
bool prefill_attention_runs(PrefillAttention v, const AttentionArgs& a, const float* q, const void* k_cache,
                            const void* v_cache);
Status attention_prefill(const float* q, int64_t rows, const int32_t* pos, const void* k_cache, const void* v_cache,
                         const AttentionArgs& a, float* out, cudaStream_t s, void* out16 = nullptr,
                         GgmlType t16 = GgmlType::F16, PrefillAttention variant = PrefillAttention::V4Overlap);
// The same over a paged cache: the rows are one sequence's consecutive positions pos[0] ..
// pos[0] + rows - 1 (a prompt chunk of the batching engine's pass), key position j in the slot
// table[j / block_tokens] * block_tokens + j % block_tokens (table: that sequence's block ids,
// device). v3 and v4 need, besides what they need over a contiguous cache, block_tokens a
// multiple of 8 that divides 128 or is a multiple of it; v1 and the rest run as v2
// (prefill_attention_paged_runs: whether v runs as itself).
bool prefill_attention_paged_runs(PrefillAttention v, const AttentionArgs& a, int block_tokens, const float* q,
                                  const void* k_cache, const void* v_cache);
Status attention_prefill_paged(const float* q, int64_t rows, const int32_t* pos, const int32_t* table, int block_tokens,
                               const void* k_cache, const void* v_cache, const AttentionArgs& a, float* out,
                               cudaStream_t s, void* out16 = nullptr,
                               PrefillAttention variant = PrefillAttention::V4Overlap);

// A pass's token and position inputs from pinned host memory, read by the kernel over the bus
// (no copy-engine transfer; a graph node). src: [tokens | positions | stamp], each half `half`
// entries, of which the first n are used: dst[i] = src[i] and dst[half + i] = src[half + i] for
// i < n, except that a negative token -1 - r takes sampled[r] (device: the ids the last sampling
// or argmax kernel wrote, for a decode step enqueued before the host had them). Then the stamp src[2 * half] is
// written to *seen (pinned host memory), once every entry has been read: the host may stage the
// next inputs when it sees it. The stamp is read with the entries (one round trip over the bus).
Status upload_inputs(const int32_t* src, int32_t* dst, int64_t n, int64_t half, const int32_t* sampled, int32_t* seen,
                     cudaStream_t s);

// Sampling over one logits row (n_vocab f32, device). Matches model/sampler.h's rules; the draw
// uses `u` (uniform in [0, 1)) over the kept tokens in token order. Writes the id to *out.
struct SampleArgs {
  float temperature = 0.f;  // <= 0: greedy (lowest id among equal maxima)
  int top_k = 0;            // <= 0: off
  float top_p = 1.f;        // >= 1: off
  float min_p = 0.f;        // <= 0: off
  float repeat_penalty = 1.f;
  const int32_t* penalty_ids = nullptr;  // device, distinct token ids to penalise
  int n_penalty = 0;
  double u = 0.0;
  int32_t* also = nullptr;  // device, optional: a second copy of the id
  const int32_t* parity = nullptr;  // device, optional: the id goes to out[*parity & 1] (GemvArgmax)
};
Status sample(const float* logits, int n_vocab, const SampleArgs& a, float* scratch, int32_t* out, cudaStream_t s);
size_t sample_scratch_floats(int n_vocab);
// The most candidates a draw keeps after top-k: a draw with top_k in 1..this follows the host's
// rules exactly; with top_k off (or above it) the tokens past this many are left out of top-p.
inline constexpr int kSampleMaxCandidates = 2048;
// One draw of sample_rows: its row and its own parameters (SampleArgs' meanings).
struct SampleRowArgs {
  int64_t row = 0;  // the logits row it draws from
  float temperature = 0.f;
  int top_k = 0;
  float top_p = 1.f, min_p = 0.f, repeat_penalty = 1.f;
  int penalty_first = 0, n_penalty = 0;  // its distinct ids: penalty_ids[penalty_first .. + n_penalty)
  int64_t work = -1;                     // its scratch row (needed where the penalty applies), or -1
  double u = 0.0;
};
// Draw i (one block each) over logits[args[i].row] (rows of n_vocab f32), its id to out[i]; args,
// penalty_ids, scratch (n_vocab floats per work row) and out on the device.
Status sample_rows(const float* logits, int n_vocab, const SampleRowArgs* args, int draws, const int32_t* penalty_ids,
                   float* scratch, int32_t* out, cudaStream_t s);
// Steps 1-3 of each draw only (a vocabulary split over ranks: each rank's share): draw i's best
// min(top_k, n_vocab) (one for a greedy draw) (logit after the penalty, column), sorted by logit
// descending then column ascending, to best_v / best_i [i][kSampleMaxCandidates], the count to
// count[i]; every pointer on the device.
Status top_candidates(const float* logits, int n_vocab, const SampleRowArgs* args, int draws, const int32_t* penalty_ids,
                      float* scratch, float* best_v, int32_t* best_i, int32_t* count, cudaStream_t s);
// out[r] = the greedy id of logits row r (lowest id among equal maxima), for rows x cols f32
// logits; out on the device.
Status argmax_rows(const float* logits, int64_t rows, int64_t cols, int32_t* out, cudaStream_t s, float* max = nullptr);

}  // namespace lamina::kernels
