// GEMM family (prefill): C = alpha * A B + beta * C, fp32 accumulation.
//
// Layouts (described as data):
//   A  logically [m][k]: row-major a[i*lda + p], or column-major a[p*lda + i] (a_col_major).
//   B  logically [k][n]: row-major b[p*ldb + j], or column-major b[j*ldb + p] (b_col_major) —
//      the column-major B is a weight matrix W[n][k] as stored in a GGUF file.
//   C  [m][n] row-major, c[i*ldc + j]. With beta == 0, C is only written (never read). Or C's
//      columns in parts that lie apart (GemmProblem::parts): columns from parts[i].col0 on are
//      written at parts[i].c[i*parts[i].ldc + j - col0] (the stacked Q/K/V projection writing q,
//      k and v where their tensors are).
// Types: SGEMM: A, B, C f32 in any of the four layouts. HGEMM: A row-major f16/bf16, B
// column-major of the same type, C f32/f16/bf16. Quantised GEMM: A row-major f16/bf16, B a
// weight matrix in Q8_0 / Q4_0 / Q4_K / Q5_K, and for q3_wgmma_rs Q5_0 / Q5_1 / Q6_K / IQ4_NL /
// IQ4_XS / Q3_K / Q2_K / Q4_1 (the repacked planes of gemv_repack).
// Split-K (GemmConfig::splits > 1): each K range writes f32 partials to the workspace
// [splits][m][n]; a second kernel sums them and applies alpha, beta and C's type.
//
// Variants are registered with a config space; the autotuner (kernels/autotune, family "gemm")
// times them per shape and device and gemm() uses its choice.
#pragma once

#include "format/ggml_type.h"
#include "kernels/common/status.h"
#include "kernels/gemv/gemv.h"

#include <cstdint>
#include <string>
#include <vector>

namespace lamina::kernels {

// A mixture of experts' matmul grouped by expert (gemm_experts): A's rows sorted by expert
// (kernels/ops moe_sort's slots) and cut into tiles of at most kGemmExpertsTileRows rows of one
// expert each; W is each tile's expert's matrix.
inline constexpr int kGemmExpertsTileRows = 64;
struct GemmGroups {
  const int32_t* tiles = nullptr;  // device [*count][4]: {expert, first row, end row, 0}
  const int32_t* count = nullptr;  // device: the tiles in use
  int64_t max_tiles = 0;           // a bound on *count (sizes the grid)
};

struct GemmProblem {
  GgmlType a_type = GgmlType::F32, b_type = GgmlType::F32, c_type = GgmlType::F32;
  WeightLayout b_layout = WeightLayout::Gguf;  // Repacked: the planes of gemv_repack
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;  // device
  int64_t lda = 0;
  bool a_col_major = false;
  const void* b = nullptr;  // device
  int64_t ldb = 0;          // elements; ignored for quantised B (rows of k/32 blocks)
  bool b_col_major = true;
  void* c = nullptr;        // device
  int64_t ldc = 0;
  float alpha = 1.f, beta = 0.f;
  // Scratch for split-K configs (f32 partial sums, gemm_workspace_bytes); a config that needs
  // more than is given here is refused (gemm() then falls back to the variant's first config).
  void* workspace = nullptr;  // device
  size_t workspace_bytes = 0;
  // Gated (a GLU's gate and up projections in one): C = act(A B) * (A B_up), B_up of B's type,
  // layout and shape; act SiLU, or GELU (tanh form) with gelu. alpha 1, beta 0, no split-K.
  // Only variants with GemmVariant::gated_config take it.
  const void* b_up = nullptr;  // device
  bool gelu = false;
  // C in up to three column parts: c and ldc hold columns [0, parts[0].col0), parts[i] the
  // columns from its col0 (increasing, each a multiple of 8) to the next part's or n; c = null
  // in an unused part. beta 0 only. Only variants with GemmVariant::column_parts take it.
  struct ColumnPart {
    int64_t col0 = 0;
    void* c = nullptr;  // device
    int64_t ldc = 0;
  };
  ColumnPart parts[2];
  bool has_parts() const { return parts[0].c != nullptr; }
  // Grouped by expert (only gemm_experts sets it; gemm() refuses it): b and b_up are then
  // gemm_experts_args's tables of the experts' matrices in device memory.
  const GemmGroups* groups = nullptr;
};

struct GemmConfig {
  int bm = 128, bn = 128, bk = 8;  // block tile
  int stages = 1;                  // shared-memory pipeline depth
  int splits = 1;                  // split-K: K ranges computed by separate blocks, then summed
  std::string str() const;
};

struct GemmVariant {
  const char* name;
  const char* summary;  // what it changes versus the previous rung
  bool (*supports)(const GemmProblem& p);
  Status (*launch)(const GemmProblem& p, const GemmConfig& c, cudaStream_t s);
  std::vector<GemmConfig> configs;  // the autotuner's search space (first = default)
  bool teaching = false;            // a ladder rung kept for the progression, not for production
  // Takes gated problems (GemmProblem::b_up) with the configs gated_config accepts.
  bool (*gated_config)(const GemmConfig& c) = nullptr;
  bool column_parts = false;  // writes C through tc_gemm::Out, which places GemmProblem::parts
};

// Whether v runs p with config c (a gated problem: only the configs its variant marks).
bool gemm_takes(const GemmVariant& v, const GemmProblem& p);
bool gemm_config_takes(const GemmVariant& v, const GemmProblem& p, const GemmConfig& c);

const std::vector<GemmVariant>& gemm_variants();
const GemmVariant* find_gemm_variant(const std::string& name);

// Checks shapes, leading dimensions and pointers common to all variants.
Status gemm_validate(const GemmProblem& p, const GemmVariant& v);

// Runs the best known variant/config for the problem (gemm_choice).
Status gemm(const GemmProblem& p, cudaStream_t s);

// What gemm() runs for p: the tune cache's choice for its exact shape; else, for at most
// kGemmBucketMaxM rows, the choice tuned for the next power of two of rows at or above p.m, or
// the one after it (the batching engine's passes vary the rows step by step; `lamina tune
// --prompt 16,32,64,128` tunes those buckets); else the top rung that takes it, with the config
// whose tiles fill the SMs best (tuned = false).
inline constexpr int64_t kGemmBucketMaxM = 256;
struct GemmChoice {
  const GemmVariant* variant = nullptr;  // null: no variant takes these types and layouts
  GemmConfig config;
  bool tuned = false;
};
GemmChoice gemm_choice(const GemmProblem& p);

// A mixture of experts' matmul grouped by expert, in one launch of q3_wgmma_rs (Hopper): C [m][n]
// (f32 or f16, row stride n) = A [m][k] (f16, row stride k) times W_e^T for the rows of each tile of
// p.groups, e its expert; gated (p.b_up): act(A W_e^T) * (A U_e^T), SiLU or GELU (p.gelu). p.b and
// p.b_up: tables from gemm_experts_args in device memory. Rows that no tile holds are not written.
Status gemm_experts(const GemmProblem& p, cudaStream_t s);
// Whether gemm_experts takes experts of type t, n x k (Hopper; the repacked types of q3_wgmma_rs;
// k a multiple of 256).
bool gemm_experts_supports(GgmlType t, int64_t n, int64_t k);
// The bytes of a table of the experts' W for gemm_experts (to be copied to device memory, 64-byte
// aligned): mats[e] expert e's repacked n x k matrix in device memory. Empty when the driver
// refuses a tensor map.
std::vector<uint8_t> gemm_experts_args(GgmlType t, const std::vector<const void*>& mats, int64_t n, int64_t k);

// Scratch a config needs for this problem (0 without split-K).
size_t gemm_workspace_bytes(const GemmProblem& p, const GemmConfig& c);

// Bytes of a B operand (for buffers in tests and benchmarks).
size_t gemm_b_bytes(const GemmProblem& p);

struct GemmTiming {
  const GemmVariant* variant;
  GemmConfig config;
  double us;
};

// Times every variant (all configs, or the first only) on a shape; buffers are allocated here and
// filled with fresh random data. Records the best production variant in the tune cache when
// `record` is set (in memory; TuneCache::get("gemm").save() persists).
std::vector<GemmTiming> gemm_time_variants(const GemmProblem& shape, bool all_configs, bool record, cudaStream_t s,
                                           int reps = 10);

}  // namespace lamina::kernels
