// Collective operations between the ranks of a tensor-parallel group (issue #35), over host
// memory. The one-GPU path is a group of one (every collective a copy); `ThreadGroup` runs N ranks
// as threads of one process, which is how the CPU tests check the sharded arithmetic. NCCL over
// device memory is the transport of the multi-GPU backend (to come, behind the same operations).
//
// Every rank calls the same collectives in the same order with the same sizes. Sums run in rank
// order 0, 1, ..., N-1 for every element, so that all ranks get the same bits, run after run.
#pragma once

#include <barrier>
#include <cstddef>
#include <memory>
#include <vector>

namespace lamina {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int ranks() const = 0;
  virtual int rank() const = 0;
  // data[0..n) = the element-wise sum over the ranks' data[0..n).
  virtual void all_reduce_sum(float* data, size_t n) = 0;
  // out[r * n + i] = rank r's data[i], on every rank (out holds ranks() * n floats).
  virtual void all_gather(const float* data, size_t n, float* out) = 0;
};

// A group of one: the sum is the data itself, the gather a copy.
std::unique_ptr<Communicator> single_rank();

// N ranks as threads sharing memory. member(r) is rank r's endpoint; each must be used by one
// thread, and the group must outlive its members.
class ThreadGroup {
 public:
  explicit ThreadGroup(int ranks);
  ThreadGroup(const ThreadGroup&) = delete;
  ThreadGroup& operator=(const ThreadGroup&) = delete;
  int ranks() const { return int(inputs_.size()); }
  std::unique_ptr<Communicator> member(int rank);

 private:
  friend class ThreadMember;
  std::vector<const float*> inputs_;  // each rank's data during a collective
  std::vector<float*> outputs_;       // each rank's result buffer (all_reduce_sum: the same)
  std::barrier<> barrier_;
};

}  // namespace lamina
