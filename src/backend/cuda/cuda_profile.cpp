// The CUDA backend's per-op profile (--profile).
#include "backend/cuda/cuda_backend.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_op.h"
#include "kernels/common/timing.h"
#include "kernels/gemm/gemm.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>

namespace lamina {

namespace kn = kernels;

// ---- profile -------------------------------------------------------------------------------
// Events around every op, recorded back to back (no synchronisation between ops) and read
// after the pass. Profiling runs the pass eagerly (no graph), so where the GPU waits for the
// host's launches that gap is counted in the next op's time.

void CudaBackend::set_profiling(bool on) {
  profiling_ = on;
  if (!on || copy_gbps_ > 0) return;
  // Rooflines measured here, once: device copy bandwidth and an f16 GEMM at 4096^3.
  copy_gbps_ = kn::copy_bandwidth_gbs(size_t(1) << 30, stream_);
  const int64_t n = 4096;
  void* a = dev_alloc(size_t(n * n) * 2, "profile roofline");
  void* b = dev_alloc(size_t(n * n) * 2, "profile roofline");
  void* c = dev_alloc(size_t(n * n) * 4, "profile roofline");
  kn::fill_random_bytes(a, size_t(n * n) * 2, 1, stream_);
  kn::fill_random_bytes(b, size_t(n * n) * 2, 2, stream_);
  kn::GemmProblem p;
  p.a_type = p.b_type = GgmlType::F16, p.c_type = GgmlType::F32;
  p.m = p.n = p.k = n, p.a = a, p.lda = n, p.b = b, p.ldb = n, p.c = c, p.ldc = n;
  // random bytes as f16 include NaN/Inf patterns; the time does not depend on the values
  const double us = kn::median_time_us([&](int) { kn::gemm(p, stream_); }, 2, 10, stream_);
  gemm_tflops_ = 2.0 * double(n) * double(n) * double(n) / us * 1e-6;
  cudaFree(a), cudaFree(b), cudaFree(c);
}

void CudaBackend::op_begin() {
  if (!profiling_) return;
  while (event_pool_.size() < pending_.size() * 2 + 2) {
    cudaEvent_t e;
    cuda_check(cudaEventCreate(&e), "cudaEventCreate");
    event_pool_.push_back(e);
  }
  cuda_check(cudaEventRecord(event_pool_[pending_.size() * 2], stream_), "profile");
}

std::string CudaBackend::op_name(const char* kind, const Weight& w) const {
  if (!profiling_) return {};
  return fmt::format("{} {}x{} {}", kind, w.rows, w.cols, type_name(w.type));
}

void CudaBackend::op_end(const std::string& name, double bytes, double flops) {
  if (!profiling_) return;
  cuda_check(cudaEventRecord(event_pool_[pending_.size() * 2 + 1], stream_), "profile");
  pending_.push_back({name, bytes, flops});
}

void CudaBackend::collect_profile() {
  if (pending_.empty()) return;
  cuda_check(cudaStreamSynchronize(stream_), "profile");
  for (size_t i = 0; i < pending_.size(); ++i) {
    float ms = 0;
    cudaEventElapsedTime(&ms, event_pool_[2 * i], event_pool_[2 * i + 1]);
    OpTimes& o = profile_[pending_[i].name];
    o.ms += ms, o.bytes += pending_[i].bytes, o.flops += pending_[i].flops, ++o.calls;
  }
  pending_.clear();
}

void CudaBackend::profile_reset() {
  collect_profile();
  profile_.clear();
  plans_.clear();
}

std::string CudaBackend::profile_report() {
  collect_profile();
  double total = 0;
  for (const auto& [n, o] : profile_) total += o.ms;
  std::vector<std::pair<std::string, OpTimes>> rows(profile_.begin(), profile_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& x, const auto& y) { return x.second.ms > y.second.ms; });
  std::string r = fmt::format("per-op profile on {} (rooflines measured now: copy {:.0f} GB/s, f16 GEMM 4096^3 {:.0f} TFLOP/s)\n",
                              gpu_name_, copy_gbps_, gemm_tflops_);
  r += fmt::format("| {:<22} | {:>7} | {:>10} | {:>6} | {:>9} | {:>6} | {:>9} | {:>6} |\n", "op", "calls", "ms", "%",
                   "GB/s", "% BW", "TFLOP/s", "% MMA");
  r += fmt::format("|{:-<24}|{:->9}|{:->12}|{:->8}|{:->11}|{:->8}|{:->11}|{:->8}|\n", "", "", "", "", "", "", "", "");
  for (const auto& [n, o] : rows) {
    const double gbs = o.bytes / (o.ms * 1e-3) * 1e-9, tf = o.flops / (o.ms * 1e-3) * 1e-12;
    r += fmt::format("| {:<22} | {:>7} | {:>10.3f} | {:>5.1f}% | {:>9.0f} | {:>5.1f}% | {:>9.2f} | {:>5.1f}% |\n", n, o.calls,
                     o.ms, 100 * o.ms / total, gbs, 100 * gbs / copy_gbps_, tf, o.flops > 0 ? 100 * tf / gemm_tflops_ : 0.0);
  }
  r += fmt::format("| {:<22} | {:>7} | {:>10.3f} |\n", "total (GPU time)", "", total);
  for (const auto& [n_rows, plan] : plans_)  // what ran, as the fusion pass left it
    r += fmt::format("\nstep plan of a {}-row pass, after fusion (the last one run):\n{}", n_rows, plan);
  return r;
}

}  // namespace lamina
