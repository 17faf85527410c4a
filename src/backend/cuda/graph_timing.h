// CudaOptions::graph_timing (`--graph-timing`): where a decode step's time goes between the GPU and the host, measured
// without a tracer (a CUPTI trace slows graph launches, so its gaps overstate the host's share).
// Timing events recorded into each graph at its first and last node give the GPU's time per
// replay; host clocks give the time from a sampled id's arrival to the next graph launch call
// and the time inside that call (negative "to the launch" when steps run ahead of the id). The
// backend prints the report to stderr when it closes.
#pragma once

#include <chrono>
#include <string>

typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;

namespace lamina {

class GraphTiming {
 public:
  GraphTiming();
  ~GraphTiming();
  GraphTiming(const GraphTiming&) = delete;
  GraphTiming& operator=(const GraphTiming&) = delete;

  void capture_first(cudaStream_t s);  // inside a capture: the graph's first node
  void capture_last(cudaStream_t s);   // inside a capture: its last node
  void launch_begin();                 // around cudaGraphLaunch of a replay
  void launch_end();
  void id_arrived();                   // the host has the sampled id; the replay before it is done
  std::string report() const;

 private:
  using Clock = std::chrono::steady_clock;
  cudaEvent_t first_ = nullptr, last_ = nullptr;
  bool replayed_ = false, have_id_ = false;
  Clock::time_point id_at_, launch_at_;
  long replays_ = 0, gpu_n_ = 0;
  double gpu_us_ = 0, to_launch_us_ = 0, in_launch_us_ = 0, launch_to_id_us_ = 0;
};

}  // namespace lamina
