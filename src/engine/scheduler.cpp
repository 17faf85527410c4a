#include "engine/scheduler.h"

#include "core/error.h"

#include <algorithm>

namespace lamina {

Scheduler::Scheduler(KvBlockManager& kv, SchedulerOptions o) : kv_(kv), opt_(o) {
  if (o.max_step_tokens < 1 || o.max_running < 1)
    fail("scheduler: a step of {} tokens over {} sequences", o.max_step_tokens, o.max_running);
}

void Scheduler::submit(SeqId id, std::vector<int32_t> prompt) {
  if (prompt.empty()) fail("scheduler: sequence {} has an empty prompt", id);
  if (running_.count(id) || std::any_of(waiting_.begin(), waiting_.end(), [&](auto& w) { return w.first == id; }))
    fail("scheduler: sequence {} was already submitted", id);
  waiting_.emplace_back(id, std::move(prompt));
}

bool Scheduler::cancel(SeqId id) {
  if (running_.erase(id)) {
    kv_.free_sequence(id);
    return true;
  }
  const auto it = std::find_if(waiting_.begin(), waiting_.end(), [&](auto& w) { return w.first == id; });
  if (it == waiting_.end()) return false;
  waiting_.erase(it);
  return true;
}

void Scheduler::finish(SeqId id) {
  if (!running_.erase(id)) fail("scheduler: sequence {} is not running", id);
  kv_.free_sequence(id);
}

const std::vector<int32_t>& Scheduler::tokens(SeqId id) const {
  const auto it = running_.find(id);
  if (it == running_.end()) fail("scheduler: sequence {} is not running", id);
  return it->second.tokens;
}

Step Scheduler::next_step() {
  for (;;) {
    Step step = plan_step();
    // Every running prompt waits for window blocks that only they hold (a window pool smaller
    // than the engine sizes it): the newest gives its blocks back.
    if (!step.seqs.empty() || running_.empty()) return step;
    const auto newest = std::max_element(running_.begin(), running_.end(),
                                         [](auto& a, auto& b) { return a.second.admitted < b.second.admitted; });
    preempt(newest->first);
  }
}

Step Scheduler::plan_step() {
  Step step;
  int budget = opt_.max_step_tokens;
  // Decode rows first: one token each for the sequences whose prompt is computed.
  for (auto& [id, s] : running_)
    if (budget > 0 && s.computed == int(s.tokens.size()) - 1) {
      // (a prompt's last token, left by a chunk that ended one short, has no window block yet)
      if (kv_.hold_window(id, s.computed, s.computed + 1) <= s.computed) continue;
      step.seqs.push_back({id, s.computed, 1, true});
      --budget;
    }
  // Then the prompts already admitted, oldest first, a chunk each within the budget.
  std::vector<std::pair<uint64_t, SeqId>> prefill;
  for (auto& [id, s] : running_)
    if (s.computed < int(s.tokens.size()) - 1) prefill.emplace_back(s.admitted, id);
  std::sort(prefill.begin(), prefill.end());
  for (const auto& [order, id] : prefill) {
    if (budget == 0) break;
    const Seq& s = running_.at(id);
    // (with a window pool, as many positions as its window blocks can be had for)
    const int n = kv_.hold_window(id, s.computed, s.computed + std::min(budget, int(s.tokens.size()) - s.computed)) - s.computed;
    if (n <= 0) continue;
    step.seqs.push_back({id, s.computed, n, s.computed + n == int(s.tokens.size())});
    budget -= n;
  }
  // Then new sequences in arrival order, while their blocks fit; one whose shared prefix another
  // prompt is computing waits for it (and so do those behind it: arrival order holds).
  while (budget > 0 && !waiting_.empty() && int(running_.size()) < opt_.max_running) {
    auto& [id, prompt] = waiting_.front();
    if (waits_for_prefix(prompt)) break;
    const std::optional<int> cached = kv_.add_sequence(id, prompt);
    if (!cached) break;
    Seq s;
    s.tokens = std::move(prompt);
    s.computed = *cached;
    s.admitted = next_admission_++;
    // (add_sequence left a window block for the first position at least)
    const int n = kv_.hold_window(id, s.computed, s.computed + std::min(budget, int(s.tokens.size()) - s.computed)) - s.computed;
    step.seqs.push_back({id, s.computed, n, s.computed + n == int(s.tokens.size())});
    budget -= n;
    running_.emplace(id, std::move(s));
    waiting_.pop_front();
  }
  step.tokens = opt_.max_step_tokens - budget;
  return step;
}

bool Scheduler::waits_for_prefix(std::span<const int32_t> prompt) const {
  if (!kv_.prefix_cache()) return false;
  const size_t bt = size_t(kv_.block_tokens());
  for (const auto& [id, s] : running_) {
    if (s.computed >= int(s.tokens.size()) - 1) continue;  // its prompt's KV is in (or decoding)
    // The leading tokens both have, compared a block at a time (most prompts differ in the first).
    const size_t most = std::min(prompt.size(), s.tokens.size());
    size_t same = 0;
    while (same + bt <= most && std::equal(prompt.begin() + ptrdiff_t(same), prompt.begin() + ptrdiff_t(same + bt),
                                           s.tokens.begin() + ptrdiff_t(same)))
      same += bt;
    // Full shared blocks past the ones it has computed (and so registered): they are in flight.
    if (same / bt > size_t(s.computed) / bt) return true;
  }
  return false;
}

void Scheduler::preempt(SeqId id) {
  ++preemptions_;
  auto it = running_.find(id);
  kv_.free_sequence(id);
  waiting_.emplace_front(id, std::move(it->second.tokens));
  running_.erase(it);
}

void Scheduler::step_done(const Step& step, std::span<const std::pair<SeqId, int32_t>> sampled,
                          std::vector<SeqId>* preempted) {
  for (const StepSeq& r : step.seqs) {
    auto it = running_.find(r.id);
    if (it == running_.end()) continue;  // cancelled meanwhile
    it->second.computed = r.pos + r.n;
    kv_.commit(r.id, it->second.computed);
  }
  // The tokens are their sequences' from here on: a sequence preempted below (for its own token
  // or another's) is recomputed with them, never sampled again.
  for (const auto& [id, token] : sampled)
    if (auto it = running_.find(id); it != running_.end()) it->second.tokens.push_back(token);
  for (const auto& [id, token] : sampled) {
    if (!running_.count(id)) continue;  // cancelled or preempted meanwhile
    // Room for the token's KV: preempt the newest running sequences until there is.
    while (!kv_.append(id, token)) {
      const auto newest = std::max_element(running_.begin(), running_.end(),
                                           [](auto& a, auto& b) { return a.second.admitted < b.second.admitted; });
      const SeqId victim = newest->first;
      preempt(victim);
      if (preempted) preempted->push_back(victim);
      if (victim == id) break;
    }
  }
}

}  // namespace lamina
