// Iteration-level scheduling over the paged KV blocks (issue #30): each step is one forward over
// every running sequence's next token (decode) plus, within a token budget, chunks of prompts
// still to compute (chunked prefill: a long prompt never stalls the others). Sequences are
// admitted in arrival order while their blocks fit; when a generated token finds no block, the
// newest running sequence is preempted (its blocks freed, its tokens so far queued again at the
// front, to be recomputed, with the prefix cache's help).
//
// The scheduler decides; it runs nothing. The caller runs the step's forward, samples a token
// for each sequence whose row asked for logits, and reports them with step_done().
#pragma once

#include "engine/kv_blocks.h"

#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <utility>
#include <vector>

namespace lamina {

struct SchedulerOptions {
  // Tokens one forward may take (decode rows first). Given 0, the Engine takes the backend's
  // choice (Backend::engine_step_tokens), or max_running when that is more.
  int max_step_tokens = 512;
  int max_running = 256;      // sequences admitted at once
};

// `n` tokens of sequence `id`, positions [pos, pos + n) (tokens() gives them); logits: the last
// one's logits are wanted (a decode token, or the end of a prompt).
struct StepSeq {
  KvBlockManager::SeqId id;
  int pos = 0;
  int n = 0;
  bool logits = false;
};

struct Step {
  std::vector<StepSeq> seqs;
  int tokens = 0;
};

class Scheduler {
 public:
  using SeqId = KvBlockManager::SeqId;
  Scheduler(KvBlockManager& kv, SchedulerOptions o);

  void submit(SeqId id, std::vector<int32_t> prompt);
  bool cancel(SeqId id);  // waiting or running; its blocks are freed
  void finish(SeqId id);  // the caller decided it is done (stop token, length)

  Step next_step();
  int step_tokens() const { return opt_.max_step_tokens; }  // the budget of each step
  // After the step's forward: one sampled token per StepSeq with logits. Sequences preempted to
  // place those tokens are listed in `preempted` (their generation restarts from their tokens).
  void step_done(const Step& step, std::span<const std::pair<SeqId, int32_t>> sampled,
                 std::vector<SeqId>* preempted = nullptr);

  const std::vector<int32_t>& tokens(SeqId id) const;
  size_t waiting() const { return waiting_.size(); }
  size_t running() const { return running_.size(); }
  bool is_running(SeqId id) const { return running_.count(id) != 0; }
  int64_t preemptions() const { return preemptions_; }  // since construction

 private:
  struct Seq {
    std::vector<int32_t> tokens;
    int computed = 0;     // tokens whose KV is in the cache
    uint64_t admitted = 0;  // admission order (the newest is preempted first)
  };
  Step plan_step();  // next_step's choice, once
  void preempt(SeqId id);
  // Whether `prompt` shares a full block not yet computed with a prompt still being computed:
  // admitted now it would compute that block again (its KV is registered, and found, only once
  // computed).
  bool waits_for_prefix(std::span<const int32_t> prompt) const;

  KvBlockManager& kv_;
  SchedulerOptions opt_;
  std::deque<std::pair<SeqId, std::vector<int32_t>>> waiting_;
  std::map<SeqId, Seq> running_;
  uint64_t next_admission_ = 0;
  int64_t preemptions_ = 0;
};

}  // namespace lamina
