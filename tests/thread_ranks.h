// A helper the CPU and GPU tests share: a model's tensor-parallel ranks as threads of this
// process, summing in host memory (ThreadGroup).
#pragma once

#include "core/communicator.h"
#include "model/llama.h"

#include <exception>
#include <string>
#include <thread>
#include <vector>

namespace lamina::test {

// run(rank) on n threads, each with its TpRank of the model shaped c (its FFN split on ff_block:
// tp_ff_block of the file); returns what each gave and the message of what each threw ("" when none).
template <class T, class F>
std::vector<T> on_thread_ranks(const ModelConfig& c, int n, F run, std::vector<std::string>& errors,
                               int64_t ff_block = 1) {
  ThreadGroup group(n);
  std::vector<T> out(static_cast<size_t>(n));
  errors.assign(static_cast<size_t>(n), "");
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        auto comm = group.member(r);
        const LlamaModel::TpRank rank{TpPlan::make(c, n, r, ff_block), comm.get()};
        out[size_t(r)] = run(rank);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return out;
}

}  // namespace lamina::test
