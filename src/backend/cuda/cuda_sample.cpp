// Sampling on the GPU: the sampling kernel (or the id the logits GEMV left), and the next
// step's graph launched before the host has the id (run-ahead); the engine's sampled rows, one
// draw a block, each with its own parameters.
#include "backend/cuda/cuda_backend.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_op.h"
#include "kernels/ops/ops.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <vector>

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

// The draws the sampling kernel makes by the host Sampler's rules exactly: the repetition penalty
// only (over at most kMaxPenalty ids: repeat_last_n within it), and for a seeded draw the top-k cut
// within the kernel's candidates (with top-k off the kernel keeps at most that many).
bool CudaBackend::draws_on_device(const SamplerParams& p) const {
  const bool penalty = p.repeat_penalty != 1.f && p.repeat_last_n != 0;
  if (p.additive_penalties() || (penalty && (p.repeat_last_n < 0 || p.repeat_last_n > kMaxPenalty))) return false;
  return p.temperature <= 0.f || (p.top_k > 0 && p.top_k <= kn::kSampleMaxCandidates);
}

// The draws' arguments and penalty ids uploaded into this pass's scratch (one copy), with a
// work row for each draw the repetition penalty applies to.
CudaBackend::StagedDraws CudaBackend::stage_draws(Tensor logits, std::span<const RowDraw> draws) {
  std::vector<kn::SampleRowArgs> args(draws.size());
  std::vector<int32_t> ids;  // every draw's penalty ids, in turn
  int64_t work_rows = 0;
  for (size_t i = 0; i < draws.size(); ++i) {
    const RowDraw& d = draws[i];
    check("sampling", d.params && draws_on_device(*d.params) && d.row >= 0 && d.row < logits.rows,
          "each draw on a row of the logits, with parameters the device follows (draws_on_device)");
    const SamplerParams& p = *d.params;
    kn::SampleRowArgs& a = args[i];
    a.row = d.row, a.temperature = p.temperature, a.top_k = p.top_k, a.top_p = p.top_p, a.min_p = p.min_p;
    a.repeat_penalty = p.repeat_penalty, a.u = d.u;
    if (p.repeat_penalty != 1.f && !d.penalty_ids.empty()) {
      check("sampling", d.penalty_ids.size() <= size_t(kMaxPenalty), "at most 4096 penalised ids a draw");
      a.penalty_first = int(ids.size()), a.n_penalty = int(d.penalty_ids.size()), a.work = work_rows++;
      ids.insert(ids.end(), d.penalty_ids.begin(), d.penalty_ids.end());
    }
  }
  const size_t arg_bytes = args.size() * sizeof(kn::SampleRowArgs);
  std::vector<uint8_t> up(arg_bytes + ids.size() * sizeof(int32_t));
  std::memcpy(up.data(), args.data(), arg_bytes);
  if (!ids.empty()) std::memcpy(up.data() + arg_bytes, ids.data(), ids.size() * sizeof(int32_t));
  auto* dev = static_cast<uint8_t*>(scratch_bytes(up.size()));
  StagedDraws st;
  st.args = reinterpret_cast<const kn::SampleRowArgs*>(dev);
  st.ids = reinterpret_cast<const int32_t*>(dev + arg_bytes);
  st.work = work_rows ? static_cast<float*>(scratch_bytes(size_t(work_rows * logits.cols) * sizeof(float))) : nullptr;
  cuda_check(cudaMemcpyAsync(dev, up.data(), up.size(), cudaMemcpyHostToDevice, stream_), "sampling");
  return st;
}

void CudaBackend::sample_rows(Tensor logits, std::span<const RowDraw> draws, std::span<int32_t> out) {
  check("sample_rows", out.size() == draws.size(), "one id per draw");
  if (draws.empty()) return;
  flush(logits, true);
  const StagedDraws st = stage_draws(logits, draws);
  auto* dev_out = static_cast<int32_t*>(scratch_bytes(out.size() * sizeof(int32_t)));
  run_op("sample rows", double(draws.size() * logits.cols) * 4.0, 0, [&] {
    return kn::sample_rows(logits.data, int(logits.cols), st.args, int(draws.size()), st.ids, st.work, dev_out, stream_);
  });
  cuda_check(cudaMemcpyAsync(out.data(), dev_out, out.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_), "sample_rows");
  cuda_check(cudaStreamSynchronize(stream_), "sample_rows");
  if (graph_timing_) graph_timing_->id_arrived();
  collect_profile();
}

void CudaBackend::top_candidates(Tensor logits, std::span<const RowDraw> draws,
                                 std::vector<std::vector<std::pair<float, int32_t>>>& out) {
  out.assign(draws.size(), {});
  if (draws.empty()) return;
  flush(logits, true);
  const StagedDraws st = stage_draws(logits, draws);
  constexpr size_t kCand = kn::kSampleMaxCandidates;
  auto* best_v = static_cast<float*>(scratch_bytes(draws.size() * kCand * sizeof(float)));
  auto* best_i = static_cast<int32_t*>(scratch_bytes(draws.size() * kCand * sizeof(int32_t)));
  auto* count = static_cast<int32_t*>(scratch_bytes(draws.size() * sizeof(int32_t)));
  run_op("top candidates", double(draws.size() * logits.cols) * 4.0, 0, [&] {
    return kn::top_candidates(logits.data, int(logits.cols), st.args, int(draws.size()), st.ids, st.work, best_v, best_i,
                              count, stream_);
  });
  // Only the columns the widest draw can fill come back (top-k 40: 40 of each row's 2048).
  size_t widest = 1;
  for (const RowDraw& d : draws) widest = std::max(widest, size_t(std::clamp(d.params->top_k, 1, int(kCand))));
  widest = std::min(widest, size_t(logits.cols));
  std::vector<float> v(draws.size() * widest);
  std::vector<int32_t> id(draws.size() * widest), n(draws.size());
  cuda_check(cudaMemcpy2DAsync(v.data(), widest * 4, best_v, kCand * 4, widest * 4, draws.size(), cudaMemcpyDeviceToHost, stream_),
             "top_candidates");
  cuda_check(cudaMemcpy2DAsync(id.data(), widest * 4, best_i, kCand * 4, widest * 4, draws.size(), cudaMemcpyDeviceToHost, stream_),
             "top_candidates");
  cuda_check(cudaMemcpyAsync(n.data(), count, n.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_), "top_candidates");
  cuda_check(cudaStreamSynchronize(stream_), "top_candidates");
  for (size_t i = 0; i < draws.size(); ++i) {
    const size_t k = std::min(size_t(std::max(n[i], 0)), widest);
    for (size_t j = 0; j < k; ++j) out[i].emplace_back(v[i * widest + j], id[i * widest + j]);
  }
  collect_profile();
}

}  // namespace lamina
