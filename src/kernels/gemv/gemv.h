// GEMV family (decode): y[b][n] = sum_k W[n][k] * x[b][k] for batch b = 1..8, fp32 accumulation.
//
// Layouts (described as data):
//   W  [n][k] row-major in the GGUF block layout of `wtype` (row = n, k contiguous), or, for the
//      repacked variants, the planes made by gemv_repack(): quants [n][k*bits/8] then scales (Q5_K:
//      its fifth bits in between; the list below).
//   x  [batch][k] f32, contiguous;   y [batch][n] f32, contiguous.
// Epilogues (optional): + bias[n];  + residual[b][n] (may alias y);  gate/up pair: when w_up
// is set, y = silu(W x) * (W_up x) (gelu instead of silu when gelu is set) with both matrices of
// the same type and shape.
//
// Every variant is registered with its name, the types it takes and a config space; the
// autotuner (kernels/autotune) times configs per shape and device, and gemv() uses its choice.
#pragma once

#include "format/ggml_type.h"
#include "kernels/common/status.h"

#include <cstdint>
#include <string>
#include <vector>

typedef struct CUstream_st* cudaStream_t;

namespace lamina::kernels {

inline constexpr int kGemvMaxBatch = 8;
// The widest x a variant takes as int8 blocks with their sums of squares (GemvProblem::x8_ss):
// the RMS scale is summed from 4 sums per lane (RmsParts, gemv_common.cuh), 128 blocks of 32.
inline constexpr int64_t kX8SsMaxK = 4096;

enum class WeightLayout { Gguf, Repacked };

// Where a batch-1 GEMV leaves the argmax of y (the first row of its largest value; rows whose
// value is not above -FLT_MAX, NaN among them, never win; 0 when none is): the id is written to
// id[0], or to id[*parity & 1] when parity (a device word) is given, and to id2 when given. key
// and count are device words, zero before the launch and left zero after it (the blocks combine
// their best rows there). (parity: the pass's position, so that a decode step that runs ahead
// writes the other of two host words than the step whose id the host is about to read.)
struct GemvArgmax {
  unsigned long long* key = nullptr;
  unsigned* count = nullptr;
  int32_t* id = nullptr;   // device or mapped host memory
  int32_t* id2 = nullptr;  // optional
  const int32_t* parity = nullptr;  // optional
};

struct GemvProblem {
  GgmlType wtype = GgmlType::F16;
  WeightLayout layout = WeightLayout::Gguf;
  const void* w = nullptr;       // device
  const void* w_up = nullptr;    // device, optional (gate/up pair)
  bool gelu = false;             // the gate/up pair's activation: GELU (tanh form) instead of SiLU
  int64_t n = 0, k = 0;
  const float* x = nullptr;      // device [batch][k]
  // device, optional: x already as int8 blocks (kernels/common/q8_blocks.cuh, x8_bytes(k) bytes
  // per batch row), the same values the dp4a variants would make from x; others ignore it.
  const void* x8 = nullptr;
  int batch = 1;
  float* y = nullptr;            // device [batch][n]
  // device, optional: y also as int8 blocks (x8 layout, x8_bytes(n) bytes per batch row; n a
  // multiple of 32), the x8 of a GEMV that multiplies y next. With y8_count (device, n/32
  // counters, zero, left zero) a variant that can makes the blocks in its own epilogue;
  // otherwise gemv() quantises y after the variant, in a kernel of its own.
  void* y8 = nullptr;
  unsigned* y8_count = nullptr;
  // With y8 (and a variant that makes it itself): the blocks are those of y * y8_gain (device
  // [n]: the weight of an RMSNorm of y that comes next), and y8_ss (device [batch][n/32] f64)
  // receives each 32-row block's sum of squares of y. Together they are a GEMV's x8 and x8_ss.
  const float* y8_gain = nullptr;
  double* y8_ss = nullptr;
  const float* bias = nullptr;   // device [n], optional
  const float* residual = nullptr;  // device [batch][n], optional
  // device [k], optional: the GEMV multiplies rmsnorm(x) * norm_w (eps norm_eps; ops' rmsnorm)
  // instead of x, and x8 is ignored. The normalised x is also written to norm_out (device
  // [batch][k], required) and, when given, as int8 blocks to norm_out8 ([batch][x8_bytes(k)]),
  // for any later use: as ops' rmsnorm(x, norm_w, ..., norm_out, out8 = norm_out8) would. A
  // variant with fuses_norm does all of it in its prologue; for others gemv() runs that rmsnorm
  // first.
  const float* norm_w = nullptr;
  float norm_eps = 0.f;
  float* norm_out = nullptr;
  void* norm_out8 = nullptr;
  // device [batch][k/32], optional with norm_w and x8: x8 holds the blocks of x * norm_w (not of
  // the normalised x) and x8_ss the blocks' sums of squares of x (a producer's y8_gain, y8_ss). A
  // variant with takes_x8_ss scales its sums by 1 / sqrt(sum(x8_ss) / k + norm_eps) instead of
  // normalising x; norm_out is then left unwritten. Others take the norm_w path above.
  const double* x8_ss = nullptr;
  // optional, batch 1: the argmax of y as well (GemvArgmax). A variant with writes_argmax makes
  // it in its epilogue; for others gemv() runs a one-block argmax kernel after the variant.
  GemvArgmax argmax;
};

// Precision of x inside a variant: exact f32, 8-bit blocks of 32 scaled to their second-largest
// element with the largest kept wide (kernels/common/q8_blocks.h), or rounded to the weights'
// 16-bit type (tensor cores).
enum class XRounding { None, Int8Blocks, WeightType };

struct GemvConfig {
  int rows = 1;      // output rows per warp (or per block for the ladder's simple variants)
  int warps = 4;     // warps per block
  int unroll = 1;    // independent 16-byte loads in flight per lane
  std::string str() const;
};

struct GemvVariant {
  const char* name;
  const char* summary;  // what it changes versus the previous rung
  WeightLayout layout;
  bool (*supports)(GgmlType type);
  Status (*launch)(const GemvProblem& p, const GemvConfig& c, cudaStream_t s);
  std::vector<GemvConfig> configs;  // the autotuner's search space (first = default)
  XRounding x_rounding = XRounding::None;  // what the variant does to x before multiplying
  bool writes_y8 = false;  // makes GemvProblem::y8 in its epilogue (given y8_count)
  bool fuses_norm = false;  // takes GemvProblem::norm_w (RMSNorm of x in its prologue)
  bool takes_x8_ss = false;  // takes GemvProblem::x8_ss (batch 1, k <= kX8SsMaxK)
  // false: a measured rung the tuner leaves out (it can win a back-to-back timing by noise but
  // lost in the decode chain; kbench still times it)
  bool tuner_picks = true;
  bool writes_argmax = false;  // makes GemvProblem::argmax in its epilogue (batch 1)
  int max_batch = kGemvMaxBatch;  // the largest batch it takes (decode's slots rungs: 1)
};

// Whether gemv() would make p.y8 inside the GEMV (the variant it dispatches writes y8 and
// p.y8_count is given); y8_gain and y8_ss need that.
bool gemv_makes_y8(const GemvProblem& p);

// The variant and config gemv() would run for p, as "name(config)": the tuned entry its lookup
// finds (see gemv()), else the default rung's first config; "" when no variant takes p.
std::string gemv_choice(const GemvProblem& p);

const std::vector<GemvVariant>& gemv_variants();
const GemvVariant* find_gemv_variant(const std::string& name);

// Checks shapes, pointers and alignment common to all variants.
Status gemv_validate(const GemvProblem& p, const GemvVariant& v);

// Runs the best known variant/config for the problem (autotune cache, else a default), then
// makes y8 if one was asked for and the variant did not. The lookup falls back from p's own
// shape to, in order: with norm_w, the shape tuned with x8 (the same x8 made in the prologue);
// each without y8; the shape without x8.
Status gemv(const GemvProblem& p, cudaStream_t s);

// A mixture of experts' matmuls for a few tokens' picks, in one launch (q_dp4a_experts,
// gemv_experts.cu): y[g] = W_e x_g for each (token, pick) pair g < groups, g = t * picks + j,
// e = ids[t * ids_stride + j] read on the device (a router kernel's output, kernels/ops/ops.h
// moe_route: ids_stride = 2 picks there), so no host round trip comes between the router and the
// experts; with w_up, y[g] = silu(W_e x_g) * (W_up_e x_g) (gelu when gelu). Expert e's matrices
// are w[e] and w_up[e]: n x k each, wtype in its repacked layout, 16-byte aligned.
// x_g = x + (g / x_share) * x_stride: the gate/up pair's x_share = picks (a token's row for each of
// its picks), the down matmul's 1 (x_stride a multiple of 4). x is quantised to int8 blocks as
// q_dp4a's (XRounding::Int8Blocks). Each pair reads its expert's whole matrix: for a few tokens,
// not for a prompt (which groups its rows by expert for the GEMMs).
struct GemvExperts {
  GgmlType wtype = GgmlType::Q4_0;
  const void* const* w = nullptr;     // device [n_expert] pointers
  const void* const* w_up = nullptr;  // device [n_expert] pointers, optional (the gate/up pair)
  bool gelu = false;
  const int32_t* ids = nullptr;       // device, each < n_expert
  int groups = 0;                     // tokens x picks
  int picks = 1;                      // picks a token
  int64_t ids_stride = 1;             // int32s from one token's ids to the next's
  int64_t n = 0, k = 0;
  const float* x = nullptr;           // device
  int x_share = 1;                    // consecutive pairs that multiply one x row
  int64_t x_stride = 0;
  float* y = nullptr;                 // device [groups][n]
};
// Whether gemv_experts takes weights of type t with rows of k (q_dp4a's types and k).
bool gemv_experts_supports(GgmlType t, int64_t k);
Status gemv_experts(const GemvExperts& p, cudaStream_t s);

// Bytes of W (and W_up) a GEMV reads: the figure GB/s is computed from.
size_t gemv_weight_bytes(const GemvProblem& p);

// Repacked layouts: Q4_0 / Q4_1 / Q8_0 separate the 16-byte-aligned quant plane from the scale
// plane so that every lane loads 16 bytes at once:
//   [n][k/2] (q4_0, q4_1) or [n][k] (q8_0) bytes, then [n][k/32] f16 d (q4_1: (d, m) pairs);
// Q4_K: quants [n][k/2] in Q4_0's order (block j of a super-block: byte e holds its elements e
// and e + 16 in the low and high nibble) | the 16-byte super-block headers [n][k/256] (d, dmin,
// 12 bytes of 6-bit scales and mins, as in the file): the same 144 bytes per 256 weights;
// Q5_K: as Q4_K with, between quants and headers, fifth bits [n][k/32] u32 (element e of block j
// at bit 8 (e % 4) + e / 4 of its word, Q3_K's third-bit order, gemv_k23.cuh): 176 bytes per 256;
// Q6_K: ql [n][k/2] in Q4_0's order (the low 4 bits) | qh [n][k/4] (the high 2 bits, two u32 per
// block, one per half) | scales int8 [n][k/16] | d f16 [n][k/256] (gemv_q6k.cu): 210 bytes per 256;
// Q3_K: low 2 bits [n][k/4] (two u32 per block, one per half) | third bits [n][k/8] (a u32 per
// block) | scales int8 [n][k/16] | d f16 [n][k/256] (gemv_k23.cuh): 114 bytes per 256;
// Q2_K: low 2 bits as Q3_K's | scales [n][k/16] as in the file | (d, dmin) [n][k/256]: 84 bytes per 256;
// IQ4_XS: quants [n][k/2] (byte b of a block: its elements 2b, 2b + 1 in the low and high nibble)
// | headers [n][k/256][8] (d, scales_h, scales_l as in the file): 136 bytes per 256 (gemv_iq4xs.cu);
// Q5_0, Q5_1: quants [n][k/2] as in the file | fifth bits [n][k/32] u32 in Q5_K's order | d [n][k/32] f16 (Q5_1: (d, m)
// pairs); IQ4_NL: quants [n][k/2] in IQ4_XS's order | d [n][k/32] f16: the file's 22, 24 and 18 bytes
// per 32 (gemv_block32_planes.cu).
size_t gemv_repacked_bytes(GgmlType t, int64_t n, int64_t k);
// The weight types whose matmul kernels (GEMV and GEMM) want the repacked layout.
inline bool repacked_layout_preferred(GgmlType t) {
  return t == GgmlType::Q4_0 || t == GgmlType::Q4_1 || t == GgmlType::Q5_0 || t == GgmlType::Q5_1 || t == GgmlType::Q8_0 ||
         t == GgmlType::Q6_K || t == GgmlType::Q3_K || t == GgmlType::Q2_K || t == GgmlType::Q4_K || t == GgmlType::Q5_K ||
         t == GgmlType::IQ4_NL || t == GgmlType::IQ4_XS;
}
Status gemv_repack(GgmlType t, const void* gguf_rows, int64_t n, int64_t k, void* out, cudaStream_t s);
// Whether dequant_repacked takes type t (for a problem or GPU the repacked types' GEMMs do not
// take: before Hopper, or k not a multiple of 256; not q4_0, q4_1 or q8_0).
inline bool dequant_repacked_takes(GgmlType t) {
  return t == GgmlType::Q6_K || t == GgmlType::Q3_K || t == GgmlType::Q2_K || t == GgmlType::Q5_K || t == GgmlType::Q4_K ||
         t == GgmlType::IQ4_XS || t == GgmlType::Q5_0 || t == GgmlType::Q5_1 || t == GgmlType::IQ4_NL;
}
// out [rows][k] f16 = rows row0 .. row0 + rows - 1 of a repacked q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, q6_K,
// iq4_nl or iq4_xs matrix of n x k (k a multiple of 256; 32 for q5_0, q5_1, iq4_nl): the B operand of an f16 GEMM for a matmul of many rows.
Status dequant_repacked(GgmlType t, const void* w, int64_t n, int64_t k, int64_t row0, int64_t rows, void* out,
                        cudaStream_t s);

}  // namespace lamina::kernels
