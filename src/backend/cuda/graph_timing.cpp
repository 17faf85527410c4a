#include "backend/cuda/graph_timing.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstdlib>

namespace lamina {

GraphTiming::GraphTiming() {
  cudaEventCreate(&first_);
  cudaEventCreate(&last_);
}

GraphTiming::~GraphTiming() {
  cudaEventDestroy(first_);
  cudaEventDestroy(last_);
}

void GraphTiming::capture_first(cudaStream_t s) { cudaEventRecordWithFlags(first_, s, cudaEventRecordExternal); }
void GraphTiming::capture_last(cudaStream_t s) { cudaEventRecordWithFlags(last_, s, cudaEventRecordExternal); }

void GraphTiming::launch_begin() { launch_at_ = Clock::now(); }

void GraphTiming::launch_end() {
  const Clock::time_point now = Clock::now();
  in_launch_us_ += std::chrono::duration<double, std::micro>(now - launch_at_).count();
  if (have_id_) to_launch_us_ += std::chrono::duration<double, std::micro>(launch_at_ - id_at_).count();
  replayed_ = true;
}

void GraphTiming::id_arrived() {
  id_at_ = Clock::now();
  if (!replayed_) {  // an eager pass: the next launch is not timed from this id
    have_id_ = false;
    return;
  }
  float ms = 0.f;  // not ready while a step runs ahead (its graph records the events again)
  if (cudaEventElapsedTime(&ms, first_, last_) == cudaSuccess) gpu_us_ += 1e3 * ms, ++gpu_n_;
  cudaGetLastError();
  launch_to_id_us_ += std::chrono::duration<double, std::micro>(id_at_ - launch_at_).count();
  ++replays_;
  replayed_ = false;
  have_id_ = true;
}

std::string GraphTiming::report() const {
  if (!replays_) return "graph timing: no replays\n";
  const double n = double(replays_);
  const std::string gpu =
      gpu_n_ ? fmt::format("GPU {:.1f} us from the graph's first node to its last", gpu_us_ / double(gpu_n_))
             : std::string("GPU time not read (steps ran ahead)");
  return fmt::format(
      "graph timing: {} replays; per replay: {}; host {:.1f} us from the sampled id to the next launch call, {:.1f} "
      "us inside it, {:.1f} us from that call to the next id\n",
      replays_, gpu, to_launch_us_ / n, in_launch_us_ / n, launch_to_id_us_ / n);
}

}  // namespace lamina
