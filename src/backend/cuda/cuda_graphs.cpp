// The CUDA backend's pass inputs, recorded graphs and decode run-ahead (cuda_backend.h says what
// each member is for).
//
// Run-ahead: between two decode graphs the host wakes from the sampling kernel, takes its turn
// and spends microseconds inside cudaGraphLaunch, with the GPU idle (--graph-timing measures it:
// docs/benchmarks.md, thirteenth session). Enqueueing the next step before waiting for the id
// moves all of that off the GPU's path.
#include "backend/cuda/cuda_backend.h"

#include "backend/cuda/cuda_check.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

namespace lamina {

namespace kn = kernels;

// ---- inputs --------------------------------------------------------------------------------

void CudaBackend::begin_forward(std::span<const int32_t> tokens, std::span<const int32_t> pos) {
  flush({}, true);
  if (!layout_ && !pos.empty()) {  // one sequence: the window layers' rows this pass reads and writes
    const auto [lo, hi] = std::minmax_element(pos.begin(), pos.end());
    kv_mem_.prepare(*lo, *hi, stream_);
  }
  // A new pass reuses the scratch of the last one (a replayed recording too, without a
  // reset_scratch): its 16-bit-only tensors are gone, and their address ranges must not be
  // widened over this pass's.
  only16_.clear();
  last_graph_ = 0;
  argmax_of_ = nullptr;
  ahead_hit_ = false;
  if (ahead_) {
    ahead_ = false;
    const bool rows = ahead_rows_;
    ahead_rows_ = false;
    // The step that runs ahead is this one: its inputs are staged ({-1, pos}: the upload takes
    // the token from dev_sampled_, which holds this id until the next sampling kernel runs; the
    // engine's rows {-1 - r, pos}, dev_sampled_[r]).
    if (rows ? ahead_rows_match(tokens, pos)
             : tokens.size() == 1 && pos.size() == 1 && pos[0] == ahead_pos_ && tokens[0] == host_id_[(ahead_pos_ - 1) & 1]) {
      ahead_hit_ = true;
      inputs_staged_ = true;
      ahead_rows_taken_ += rows;
      return;
    }
  }
  stage_inputs(tokens, pos);
}

void CudaBackend::stage_inputs(std::span<const int32_t> tokens, std::span<const int32_t> pos) {
  const size_t n = tokens.size();
  if (n > in_capacity_) {
    cuda_check(cudaStreamSynchronize(stream_), "input buffers");
    cudaFree(dev_in_);
    cudaFreeHost(host_in_);
    in_capacity_ = std::max<size_t>(n, 512);
    cuda_check(cudaMallocHost(&host_in_, (2 * in_capacity_ + 1) * sizeof(int32_t)), "cudaMallocHost");
    void* mapped = nullptr;
    cuda_check(cudaHostGetDevicePointer(&mapped, host_in_, 0), "cudaHostGetDevicePointer");
    host_in_dev_ = static_cast<const int32_t*>(mapped);
    dev_in_ = static_cast<int32_t*>(dev_alloc(2 * in_capacity_ * sizeof(int32_t), "token inputs"));
    upload_enqueued_ = false;
    ++generation_;
  } else {
    wait_staging_read();
  }
  std::memcpy(host_in_, tokens.data(), n * sizeof(int32_t));
  std::memcpy(host_in_ + in_capacity_, pos.data(), n * sizeof(int32_t));
  host_in_[2 * in_capacity_] = ++stamp_;
  n_in_ = int64_t(n);
  last_pos_ = n ? pos.back() : 0;
  const int64_t longest = n ? int64_t(*std::max_element(pos.begin(), pos.end())) + 1 : 0;
  kv_bucket_ = kMinBucket;
  while (kv_bucket_ < longest) kv_bucket_ *= 2;
  paged_words_ = 0;
  if (layout_) stage_paged(pos);  // (after the bucket: it sets the tables' stride)
  inputs_staged_ = true;
}

// The last upload on the stream has read the staging (its stamp arrived), or the stream is idle.
void CudaBackend::wait_staging_read() {
  if (!upload_enqueued_) return;
  const volatile int32_t* seen = seen_;
  while (*seen != stamp_) {
    const cudaError_t e = cudaStreamQuery(stream_);
    if (e == cudaSuccess) break;  // idle: every upload has run
    if (e != cudaErrorNotReady) cuda_check(e, "input upload");
  }
  upload_enqueued_ = false;
}

// One upload of the pass's n_in_ tokens and positions: the same node serves every replay of a
// graph (a recorded pass always has the same number of rows).
void CudaBackend::upload_inputs() {
  if (!inputs_staged_) return;
  inputs_staged_ = false;
  // The paged tables first (from pinned memory: a memcpy node in a graph); the stamp the upload
  // kernel writes then also says that they have been read.
  if (paged_words_)
    cuda_check(cudaMemcpyAsync(dev_paged_, host_paged_, paged_words_ * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
               "paged KV tables");
  const kn::Status st =
      kn::upload_inputs(host_in_dev_, dev_in_, n_in_, int64_t(in_capacity_), dev_sampled_, seen_dev_, stream_);
  check("input upload", st.ok, st.message);
  upload_enqueued_ = true;  // recorded into a graph, it runs at the launch that ends the recording
}

// ---- graphs --------------------------------------------------------------------------------

// A recorded pass is valid for one length bucket (the attention's split count depends on it).
uint64_t CudaBackend::graph_key(uint64_t key) const { return key << 32 | uint64_t(kv_bucket_); }

void CudaBackend::launch_graph(cudaGraphExec_t exec) {
  if (graph_timing_) graph_timing_->launch_begin();
  cuda_check(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch");
  if (graph_timing_) graph_timing_->launch_end();
  upload_enqueued_ = true;  // the graph's first node uploads the staging
  inputs_staged_ = false;
}

bool CudaBackend::replay(uint64_t key, Tensor& out) {
  if (!graphs_enabled_ || profiling_) return false;
  key = graph_key(key);
  if (ahead_hit_) {  // already on the stream
    ahead_hit_ = false;
    if (key == ahead_graph_) {
      adopt_recorded(key, graphs_[key], out);
      inputs_staged_ = false;
      return true;
    }
  }
  auto it = graphs_.find(key);
  if (it == graphs_.end() || !it->second.exec) return false;
  if (it->second.generation != generation_) {  // buffers moved since it was recorded
    ++graphs_dropped_;
    cudaGraphExecDestroy(it->second.exec);
    graphs_.erase(it);
    return false;
  }
  launch_graph(it->second.exec);
  adopt_recorded(key, it->second, out);
  return true;
}

void CudaBackend::adopt_recorded(uint64_t key, const Recorded& r, Tensor& out) {
  last_graph_ = key;
  argmax_of_ = r.argmax_of;
  out = r.out;
  scratch_used_ = r.scratch_used;  // what follows the pass allocates after its tensors
}

bool CudaBackend::capture_begin(uint64_t key) {
  if (!graphs_enabled_ || profiling_) return false;
  key = graph_key(key);
  Recorded& r = graphs_[key];
  if (++r.seen < 2) return false;  // the first pass runs eagerly: it sizes scratch and warms caches
  // Scratch that grew in an earlier pass is merged now, not inside the recording (the merge
  // waits for the stream). The recording's own pass then allocates what the eager one did.
  compact_scratch();
  // The inputs are still staged (begin_forward ran first): the pass's first op that reads them
  // records their upload, so that replays fetch the fresh staging contents.
  inputs_staged_ = true;
  cuda_check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
  capturing_ = key;
  if (graph_timing_) graph_timing_->capture_first(stream_);
  return true;
}

void CudaBackend::capture_end(Tensor out) {
  // The pass's nodes go into the recording. A norm still pending at its end is dropped rather
  // than run at the end of every replay: its output lives in scratch, which the next pass
  // writes anew.
  flush(out, true);
  cudaGraph_t g = nullptr;
  const uint64_t key = capturing_;
  capturing_ = 0;
  if (graph_timing_) graph_timing_->capture_last(stream_);
  cuda_check(cudaStreamEndCapture(stream_, &g), "cudaStreamEndCapture");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
  cudaGraphDestroy(g);
  cuda_check(e, "cudaGraphInstantiate");
  Recorded& r = graphs_[key];
  r.exec = exec;
  r.generation = generation_;
  r.argmax_of = argmax_of_;
  r.out = out;
  r.scratch_used = scratch_used_;
  ++graphs_recorded_;
  cuda_check(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch");
  upload_enqueued_ = true;
  last_graph_ = key;
}

int CudaBackend::recorded_graphs() const {
  return int(std::count_if(graphs_.begin(), graphs_.end(), [](const auto& g) { return g.second.exec != nullptr; }));
}

void CudaBackend::capture_abort() {
  plan_.clear();  // the failed pass's ops
  cudaGraph_t g = nullptr;
  cudaStreamEndCapture(stream_, &g);
  if (g) cudaGraphDestroy(g);
  cudaGetLastError();
  capturing_ = 0;
}

// ---- run-ahead -----------------------------------------------------------------------------

// After the sampling kernel of a pass that ran a recorded one-token graph: the same graph for the
// next position (while it stays in the same length bucket and inside the cache), its token the
// sampled id. Records sampled_ first, for the host to wait on.
bool CudaBackend::launch_ahead() {
  if (!last_graph_ || n_in_ != 1 || int64_t(last_pos_) + 1 >= kv_ctx_ ||
      int64_t(last_pos_) + 1 >= kv_bucket_ || !kv_mem_.covers(int64_t(last_pos_) + 1))
    return false;
  const auto it = graphs_.find(last_graph_);
  if (it == graphs_.end() || !it->second.exec || it->second.generation != generation_) return false;
  cuda_check(cudaEventRecord(sampled_, stream_), "sample");
  const uint64_t key = last_graph_;
  const int32_t token = -1, pos = last_pos_ + 1;
  stage_inputs(std::span<const int32_t>(&token, 1), std::span<const int32_t>(&pos, 1));
  launch_graph(it->second.exec);
  ahead_ = true;
  ahead_pos_ = pos;
  ahead_graph_ = key;
  return true;
}

}  // namespace lamina
