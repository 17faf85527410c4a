// Internal to the CUDA backend's files: the op wrapper (profiling and errors), shared helpers
// and sizes.
#pragma once

#include "backend/cuda/cuda_backend.h"
#include "kernels/gemv/gemv.h"

#include <string>
#include <utility>

namespace lamina {

namespace kn = kernels;

inline constexpr int kMaxPenalty = 4096;                     // distinct ids the repetition penalty can cover
inline constexpr size_t kGemmWorkBytes = size_t(64) << 20;   // split-K partials
inline constexpr size_t kMinScratch = size_t(64) << 20;

inline bool float_type(GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16; }

// The type a GEMM with this weight reads its activations in: f32 for f32 weights, bf16 for bf16,
// f16 otherwise.
inline GgmlType gemm_input_type(GgmlType w) {
  return w == GgmlType::F32 ? GgmlType::F32 : w == GgmlType::BF16 ? GgmlType::BF16 : GgmlType::F16;
}

// One kernel-library call as a named op: timed under --profile (bytes and FLOPs give its GB/s and
// TFLOP/s), its Status returned (try_op) or turned into a lamina::Error (run_op).
template <class F>
kn::Status CudaBackend::try_op(const std::string& name, double bytes, double flops, F&& launch) {
  op_begin();
  const kn::Status st = launch();
  if (st.ok) op_end(name, bytes, flops);
  return st;
}

template <class F>
void CudaBackend::run_op(const std::string& name, double bytes, double flops, F&& launch) {
  const kn::Status st = try_op(name, bytes, flops, std::forward<F>(launch));
  check(name.c_str(), st.ok, st.message);
}

}  // namespace lamina
