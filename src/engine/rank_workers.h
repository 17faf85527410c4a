// The other ranks of a tensor-parallel session (issue #35): ranks 1 .. N-1, each on a thread of
// its own that makes its backend (its GPU), its share of the model and its KV cache there, and
// then runs the jobs the session posts to all of them. The session runs rank 0 on its own
// thread beside them; the ranks meet in the pass's all-reduces. A rank's backend is made, used
// and destroyed on its thread (a GPU is the thread's current device).
#pragma once

#include "backend/backend.h"
#include "core/communicator.h"
#include "model/llama.h"

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace lamina {

struct Rank {
  std::unique_ptr<Communicator> comm;  // host-memory collectives (and the all-reduce without NCCL)
  std::unique_ptr<Backend> backend;
  std::unique_ptr<LlamaModel> model;
};

class RankWorkers {
 public:
  using Make = std::function<void(int rank, Rank& into)>;
  using Job = std::function<void(int rank, Rank& r)>;
  // Starts ranks 1 .. ranks-1, each running make on its thread; waits until all are made and
  // rethrows the first error.
  RankWorkers(int ranks, Make make);
  ~RankWorkers();
  RankWorkers(const RankWorkers&) = delete;
  RankWorkers& operator=(const RankWorkers&) = delete;

  // Hands job to every worker (they run it at once); wait() blocks until all have, and rethrows
  // the first error. One job at a time. Both sides spin a little before they sleep: a decode
  // step's job comes and goes within tens of microseconds, less than a thread takes to wake.
  void post(Job job);
  void wait();

 private:
  struct Worker {
    Rank rank;
    std::thread thread;
  };
  void loop(int rank, Worker& w, const Make& make);
  void stop();  // ends and joins the threads

  std::vector<std::unique_ptr<Worker>> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  Job job_;
  // Written under mu_ (then notified); read by the spinning side without it.
  std::atomic<uint64_t> generation_ = 0;  // bumped per job (and to stop: with stop_)
  std::atomic<int> busy_ = 0;             // workers still running the current job (or being made)
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace lamina
