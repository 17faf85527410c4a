#include "engine/rank_workers.h"

#include <chrono>

namespace lamina {

namespace {

// Polls `ready` for up to kSpin before the caller sleeps on its condition variable.
constexpr auto kSpin = std::chrono::microseconds(200);

template <class F>
bool spin_until(F ready) {
  const auto end = std::chrono::steady_clock::now() + kSpin;
  do {
    for (int i = 0; i < 64; ++i)
      if (ready()) return true;
  } while (std::chrono::steady_clock::now() < end);
  return false;
}

}  // namespace

RankWorkers::RankWorkers(int ranks, Make make) {
  busy_ = ranks - 1;
  for (int r = 1; r < ranks; ++r) workers_.push_back(std::make_unique<Worker>());
  for (int r = 1; r < ranks; ++r) {
    Worker& w = *workers_[size_t(r - 1)];
    w.thread = std::thread([this, r, &w, make] { loop(r, w, make); });
  }
  try {
    wait();
  } catch (...) {
    stop();
    throw;
  }
}

RankWorkers::~RankWorkers() { stop(); }

void RankWorkers::stop() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
    ++generation_;
  }
  wake_.notify_all();
  for (auto& w : workers_)
    if (w->thread.joinable()) w->thread.join();
}

void RankWorkers::post(Job job) {
  {
    std::lock_guard lk(mu_);
    job_ = std::move(job);
    busy_ = int(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
}

void RankWorkers::wait() {
  spin_until([&] { return busy_.load() == 0; });
  std::unique_lock lk(mu_);
  done_.wait(lk, [&] { return busy_ == 0; });
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void RankWorkers::loop(int rank, Worker& w, const Make& make) {
  // Made here, so that the backend's device is this thread's and its memory is freed here.
  auto finish = [&](std::exception_ptr e) {
    std::lock_guard lk(mu_);
    if (e && !error_) error_ = e;
    --busy_;
    done_.notify_all();
  };
  uint64_t seen = 0;
  try {
    make(rank, w.rank);
    finish(nullptr);
  } catch (...) {
    finish(std::current_exception());
  }
  for (;;) {
    Job job;
    spin_until([&] { return generation_.load() != seen; });
    {
      std::unique_lock lk(mu_);
      wake_.wait(lk, [&] { return generation_ != seen; });
      seen = generation_;
      if (stop_) break;
      job = job_;
    }
    try {
      job(rank, w.rank);
      finish(nullptr);
    } catch (...) {
      finish(std::current_exception());
    }
  }
  w.rank.model.reset();  // the model before the backend, on this thread
  w.rank.backend.reset();
}

}  // namespace lamina
