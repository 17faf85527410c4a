// Sampling on the GPU: the sampling kernel (or the id the logits GEMV left), and the next
// step's graph launched before the host has the id (run-ahead).
#include "backend/cuda/cuda_backend.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_op.h"
#include "kernels/ops/ops.h"

#include <cuda_runtime.h>

#include <algorithm>

namespace lamina {

namespace kn = kernels;

int32_t CudaBackend::sample(Tensor logits, const SamplerParams& p, std::span<const int32_t> penalty_ids, double u,
                            bool more) {
  if (p.additive_penalties())
    fail("CUDA sampling has the repetition penalty only: a draw with presence or frequency penalties is made on the host");
  flush(logits, true);
  const Tensor row = logits.rows_view(logits.rows - 1, 1);
  if (!sample_ids_) {
    sample_ids_ = static_cast<int32_t*>(dev_alloc(kMaxPenalty * sizeof(int32_t), "sampling"));
    owned_.push_back(sample_ids_);
  }
  if (!sample_scratch_) {
    sample_scratch_ = static_cast<float*>(dev_alloc(kn::sample_scratch_floats(int(row.cols)) * sizeof(float), "sampling"));
    owned_.push_back(sample_scratch_);
  }
  kn::SampleArgs a;
  a.temperature = p.temperature, a.top_k = p.top_k, a.top_p = p.top_p, a.min_p = p.min_p;
  a.repeat_penalty = p.repeat_penalty, a.u = u;
  // At most kMaxPenalty distinct ids are penalised: with more (only possible with
  // --repeat-last-n above 4096 or -1) the sorted list is cut and the highest ids go unpenalised.
  const size_t n = std::min(penalty_ids.size(), size_t(kMaxPenalty));
  if (n && p.repeat_penalty != 1.f) {
    cuda_check(cudaMemcpyAsync(sample_ids_, penalty_ids.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
               "penalty ids");
    cuda_check(cudaStreamSynchronize(stream_), "penalty ids");  // the host span may not outlive this call
    a.penalty_ids = sample_ids_, a.n_penalty = int(n);
  }
  // The kernel writes the id to pinned host memory itself (no copy-engine transfer after it), and
  // to dev_sampled_ for a step that runs ahead (cuda_graphs.cpp).
  a.also = dev_sampled_;
  const int slot = last_pos_ & 1;  // this pass's host word (launch_ahead stages the next position)
  // Greedy without a penalty from the row whose GEMV the plan asked for the argmax: the id is written.
  const bool made = p.temperature <= 0.f && p.repeat_penalty == 1.f && logits.rows == 1 && argmax_of_ == logits.data;
  if (!made)
    run_op("sample", double(row.cols) * 8.0, 0,
           [&] { return kn::sample(row.data, int(row.cols), a, sample_scratch_, host_id_dev_ + slot, stream_); });
  if (more && launch_ahead()) cuda_check(cudaEventSynchronize(sampled_), "sample");
  else cuda_check(cudaStreamSynchronize(stream_), "sample");
  if (graph_timing_) graph_timing_->id_arrived();
  collect_profile();
  return host_id_[slot];
}

}  // namespace lamina
