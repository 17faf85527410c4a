#include "core/communicator.h"

#include "core/error.h"

#include <algorithm>
#include <cstring>

namespace lamina {

namespace {

class SingleRank final : public Communicator {
 public:
  int ranks() const override { return 1; }
  int rank() const override { return 0; }
  void all_reduce_sum(float*, size_t) override {}
  void all_gather(const float* data, size_t n, float* out) override {
    if (n) std::memmove(out, data, n * sizeof(float));
  }
};

}  // namespace

std::unique_ptr<Communicator> single_rank() { return std::make_unique<SingleRank>(); }

// A rank of a ThreadGroup. A collective: publish this rank's buffer, wait for all; compute this
// rank's share of the result from every rank's buffer; wait for all (everyone has read the
// inputs) before writing it back in place; wait again before the buffers are reused.
class ThreadMember final : public Communicator {
 public:
  ThreadMember(ThreadGroup& g, int rank) : g_(g), rank_(rank) {}
  int ranks() const override { return g_.ranks(); }
  int rank() const override { return rank_; }

  void all_reduce_sum(float* data, size_t n) override {
    const int nr = ranks();
    g_.inputs_[size_t(rank_)] = data;
    g_.outputs_[size_t(rank_)] = data;
    g_.barrier_.arrive_and_wait();
    // This rank sums elements [b, e) over all ranks, in rank order.
    const size_t per = (n + size_t(nr) - 1) / size_t(nr);
    const size_t b = std::min(n, per * size_t(rank_)), e = std::min(n, b + per);
    share_.assign(e - b, 0.f);
    for (int r = 0; r < nr; ++r) {
      const float* src = g_.inputs_[size_t(r)];
      for (size_t i = b; i < e; ++i) share_[i - b] = r == 0 ? src[i] : share_[i - b] + src[i];
    }
    g_.barrier_.arrive_and_wait();  // every rank has read every input
    // Write this share into every rank's buffer.
    for (int r = 0; r < nr; ++r)
      std::copy(share_.begin(), share_.end(), g_.outputs_[size_t(r)] + b);
    g_.barrier_.arrive_and_wait();  // every share is in place
  }

  void all_gather(const float* data, size_t n, float* out) override {
    g_.inputs_[size_t(rank_)] = data;
    g_.barrier_.arrive_and_wait();
    for (int r = 0; r < ranks(); ++r) std::memcpy(out + size_t(r) * n, g_.inputs_[size_t(r)], n * sizeof(float));
    g_.barrier_.arrive_and_wait();  // no rank reuses its buffer before all have read it
  }

 private:
  ThreadGroup& g_;
  int rank_;
  std::vector<float> share_;
};

ThreadGroup::ThreadGroup(int ranks)
    : inputs_(size_t(std::max(ranks, 1)), nullptr), outputs_(size_t(std::max(ranks, 1)), nullptr), barrier_(std::max(ranks, 1)) {
  if (ranks < 1) fail("communicator: a group of {} ranks", ranks);
}

std::unique_ptr<Communicator> ThreadGroup::member(int rank) {
  if (rank < 0 || rank >= ranks()) fail("communicator: rank {} of {}", rank, ranks());
  return std::make_unique<ThreadMember>(*this, rank);
}

}  // namespace lamina
