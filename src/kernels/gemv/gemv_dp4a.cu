// q_dp4a's registry entry and its dispatch by weight type; the kernel is gemv_dp4a_kernel.cuh.
#include "kernels/gemv/gemv_dp4a_kernel.cuh"

namespace lamina::kernels {

using namespace gemv_detail;

Status gemv_dp4a_launch(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  if (p.k % 32) return Status::error("q_dp4a: k must be a multiple of 32");
  const bool k_quant = p.wtype == GgmlType::Q4_K || p.wtype == GgmlType::Q5_K || p.wtype == GgmlType::Q6_K ||
                       p.wtype == GgmlType::IQ4_XS || p.wtype == GgmlType::Q2_K || p.wtype == GgmlType::Q3_K;
  if (k_quant && p.k % 256) return Status::error("q_dp4a: the K-quants and iq4_xs need k a multiple of 256");
  switch (p.wtype) {
    case GgmlType::Q4_0: return dp4a_launch_q4_0(p, c, s);
    case GgmlType::Q4_1: return dp4a_launch_q4_1(p, c, s);
    case GgmlType::Q5_0: return dp4a_launch_q5_0(p, c, s);
    case GgmlType::Q5_1: return dp4a_launch_q5_1(p, c, s);
    case GgmlType::IQ4_NL: return dp4a_launch_iq4_nl(p, c, s);
    case GgmlType::Q8_0: return dp4a_launch_q8_0(p, c, s);
    case GgmlType::Q4_K: return dp4a_launch_q4_k(p, c, s);
    case GgmlType::Q5_K: return dp4a_launch_q5_k(p, c, s);
    case GgmlType::Q6_K: return dp4a_launch_q6_k(p, c, s);
    case GgmlType::IQ4_XS: return dp4a_launch_iq4_xs(p, c, s);
    case GgmlType::Q2_K: return dp4a_launch_q2_k(p, c, s);
    case GgmlType::Q3_K: return dp4a_launch_q3_k(p, c, s);
    default: return Status::error("q_dp4a: only q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl and iq4_xs");
  }
}

void register_dp4a_variants(std::vector<GemvVariant>& out) {
  out.push_back({"q_dp4a", "q4_0/q4_1/q5_0/q5_1/q8_0/q2_K/q3_K/q4_K/q5_K/q6_K/iq4_nl/iq4_xs repacked; x as int8 blocks in shared memory, dp4a, persistent grid",
                 WeightLayout::Repacked, dp4a_types, gemv_dp4a_launch,
                 {GemvConfig{2, 8, 2}, GemvConfig{1, 8, 4}, GemvConfig{2, 8, 4}, GemvConfig{4, 8, 2},
                  GemvConfig{2, 4, 2}, GemvConfig{1, 4, 4}, GemvConfig{2, 16, 4}, GemvConfig{2, 16, 2}, GemvConfig{4, 8, 1}},
                 XRounding::Int8Blocks, /*writes_y8=*/true, /*fuses_norm=*/true, /*takes_x8_ss=*/true});
}

}  // namespace lamina::kernels
