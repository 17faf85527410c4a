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

inline bool overlaps(const Tensor& a, const Tensor& b) {
  return a.data && b.data && a.data < b.data + b.rows * b.cols && b.data < a.data + a.rows * a.cols;
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
