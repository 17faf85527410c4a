// The iteration-level scheduler, step by step against plans worked out by hand: decode rows
// first, chunked prefill within the token budget, arrival order, prefix-cached tokens skipped,
// preemption of the newest sequence when a generated token finds no block (and its recompute),
// cancellation, and the cap on running sequences.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <numeric>
#include <sstream>
#include <string>
#include <vector>

using namespace lamina;

namespace {

std::vector<int32_t> toks(int n, int32_t start) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

// "id:pos+n" per row, "*" where logits are wanted.
std::string plan(const Step& s) {
  std::ostringstream out;
  for (size_t i = 0; i < s.seqs.size(); ++i) {
    const StepSeq& r = s.seqs[i];
    out << (i ? " " : "") << r.id << ":" << r.pos << "+" << r.n << (r.logits ? "*" : "");
  }
  return out.str();
}

// Samples token 7 for every row that wants logits.
std::vector<std::pair<Scheduler::SeqId, int32_t>> sample_all(const Step& s) {
  std::vector<std::pair<Scheduler::SeqId, int32_t>> out;
  for (const StepSeq& r : s.seqs)
    if (r.logits) out.emplace_back(r.id, 7);
  return out;
}

TEST(Scheduler, ChunkedPrefillThenBatchedDecode) {
  KvBlockManager kv(64, 4);
  Scheduler sch(kv, SchedulerOptions{8, 16});
  sch.submit(1, toks(10, 100));
  sch.submit(2, toks(3, 200));
  Step s = sch.next_step();
  EXPECT_EQ(plan(s), "1:0+8");  // the budget of 8 goes to the first prompt
  EXPECT_EQ(s.tokens, 8);
  sch.step_done(s, sample_all(s));
  s = sch.next_step();
  EXPECT_EQ(plan(s), "1:8+2* 2:0+3*");  // the rest of 1, then 2 admitted
  sch.step_done(s, sample_all(s));
  EXPECT_EQ(sch.tokens(1).size(), 11u);
  EXPECT_EQ(sch.tokens(1).back(), 7);
  s = sch.next_step();
  EXPECT_EQ(plan(s), "1:10+1* 2:3+1*");  // one decode row each
  sch.step_done(s, sample_all(s));
  sch.finish(1);
  s = sch.next_step();
  EXPECT_EQ(plan(s), "2:4+1*");
  EXPECT_EQ(sch.running(), 1u);
}

TEST(Scheduler, DecodeRowsComeBeforeNewPrompts) {
  KvBlockManager kv(64, 4);
  Scheduler sch(kv, SchedulerOptions{4, 16});
  sch.submit(1, toks(2, 0));
  Step s = sch.next_step();
  sch.step_done(s, sample_all(s));
  sch.submit(2, toks(9, 50));
  s = sch.next_step();
  EXPECT_EQ(plan(s), "1:2+1* 2:0+3");  // the decode row, then what is left of the budget
}

TEST(Scheduler, APrefixCachedPromptStartsAfterItsCachedBlocks) {
  KvBlockManager kv(64, 4);
  Scheduler sch(kv, SchedulerOptions{64, 16});
  sch.submit(1, toks(8, 100));
  Step s = sch.next_step();
  sch.step_done(s, sample_all(s));  // blocks [100-103] [104-107] computed and registered
  std::vector<int32_t> p = toks(8, 100);
  p.push_back(999);
  sch.submit(2, p);
  s = sch.next_step();
  EXPECT_EQ(plan(s), "1:8+1* 2:8+1*");  // 2's first 8 tokens come from the cache
}

// Prompts arriving together with a shared prefix: the first computes it, the others wait a step
// (and so does the prompt behind them), then find it in the cache instead of computing it again.
// Without the prefix cache nothing waits.
TEST(Scheduler, PromptsSharingAPrefixInFlightWaitForIt) {
  for (const bool cache : {true, false}) {
    KvBlockManager kv(64, 4, cache);
    Scheduler sch(kv, SchedulerOptions{64, 16});
    std::vector<int32_t> a = toks(9, 100), b = toks(8, 100), c = toks(5, 300);
    b.push_back(555);
    sch.submit(1, a);
    sch.submit(2, b);  // shares blocks [100-103] [104-107] with 1
    sch.submit(3, c);  // shares nothing, but arrived after 2
    Step s = sch.next_step();
    if (!cache) {
      EXPECT_EQ(plan(s), "1:0+9* 2:0+9* 3:0+5*");
      continue;
    }
    EXPECT_EQ(plan(s), "1:0+9*");
    sch.step_done(s, sample_all(s));  // 1's two full blocks registered
    s = sch.next_step();
    EXPECT_EQ(plan(s), "1:9+1* 2:8+1* 3:0+5*");  // 2 from the cache; 3 behind it
    EXPECT_EQ(kv.reused_tokens(), 8);
  }
}

// A prompt that shares only blocks the prompt in flight has computed does not wait; one that
// shares a block still to be computed does.
TEST(Scheduler, APromptWaitsOnlyForBlocksNotYetComputed) {
  KvBlockManager kv(64, 4);
  Scheduler sch(kv, SchedulerOptions{8, 16});
  sch.submit(1, toks(14, 100));
  Step s = sch.next_step();
  EXPECT_EQ(plan(s), "1:0+8");
  sch.step_done(s, sample_all(s));  // [100-103] [104-107] computed and registered, 6 tokens to go
  std::vector<int32_t> p = toks(4, 100), q = toks(12, 100);
  for (int32_t t : {900, 901, 902}) p.push_back(t);
  q.push_back(903);
  sch.submit(2, p);  // shares [100-103]: computed
  sch.submit(3, q);  // shares [108-111] too: not yet
  s = sch.next_step();
  EXPECT_EQ(plan(s), "1:8+6* 2:4+2");  // 2 from the cache (then out of budget); 3 waits
  sch.step_done(s, sample_all(s));
  s = sch.next_step();
  EXPECT_EQ(plan(s), "1:14+1* 2:6+1* 3:12+1*");  // 3's three blocks from the cache
}

TEST(Scheduler, ANewTokenWithoutABlockPreemptsTheNewestSequence) {
  KvBlockManager kv(3, 4);
  Scheduler sch(kv, SchedulerOptions{64, 16});
  sch.submit(1, toks(4, 0));
  sch.submit(2, toks(4, 10));
  Step s = sch.next_step();
  EXPECT_EQ(plan(s), "1:0+4* 2:0+4*");
  std::vector<Scheduler::SeqId> pre;
  sch.step_done(s, sample_all(s), &pre);  // 1's token takes the last block; 2's finds none
  EXPECT_EQ(pre, std::vector<Scheduler::SeqId>{2});
  EXPECT_EQ(sch.running(), 1u);
  EXPECT_EQ(sch.waiting(), 1u);
  EXPECT_EQ(kv.used_blocks(), 2);
  sch.finish(1);
  // 2 comes back with its prompt and the token it sampled (never sampled again): its first block
  // is found in the prefix cache, so only the new token is computed.
  s = sch.next_step();
  EXPECT_EQ(plan(s), "2:4+1*");
  EXPECT_EQ(sch.tokens(2), (std::vector<int32_t>{10, 11, 12, 13, 7}));  // sample_all's token
}

TEST(Scheduler, CancelAndTheCapOnRunningSequences) {
  KvBlockManager kv(64, 4);
  Scheduler sch(kv, SchedulerOptions{64, 2});
  for (int id = 1; id <= 3; ++id) sch.submit(id, toks(5, 10 * id));
  Step s = sch.next_step();
  EXPECT_EQ(plan(s), "1:0+5* 2:0+5*");  // at most 2 running
  EXPECT_EQ(sch.waiting(), 1u);
  EXPECT_TRUE(sch.cancel(1));
  EXPECT_FALSE(sch.cancel(1));
  sch.step_done(s, sample_all(s));  // 1's row is ignored: cancelled
  s = sch.next_step();
  EXPECT_EQ(plan(s), "2:5+1* 3:0+5*");
  EXPECT_TRUE(sch.cancel(3));
  EXPECT_EQ(kv.used_blocks(), 2);  // only 2's blocks are left
}

// A window pool (window 8, blocks of 4): each prompt chunk and decode row has the window block of
// its positions; a chunk that ends one short of its prompt leaves the last prompt token to a
// decode row, which takes its block too (it starts a new one here); the window blocks before
// the window go as the sequence moves on.
TEST(Scheduler, EveryRowHasItsWindowBlock) {
  KvBlockManager kv(16, 4, true, {8, 6});
  SchedulerOptions o;
  o.max_step_tokens = 4;
  Scheduler sched(kv, o);
  sched.submit(1, toks(5, 10));
  const Step s1 = sched.next_step();
  EXPECT_EQ(plan(s1), "1:0+4");
  EXPECT_EQ(kv.window_table(1).size(), 1u);
  sched.step_done(s1, sample_all(s1));
  const Step s2 = sched.next_step();
  EXPECT_EQ(plan(s2), "1:4+1*");
  EXPECT_EQ(kv.window_table(1).size(), 2u);  // position 4's block
  sched.step_done(s2, sample_all(s2));
  for (int p = 5; p < 24; ++p) {
    const Step s = sched.next_step();
    ASSERT_EQ(plan(s), "1:" + std::to_string(p) + "+1*");
    ASSERT_GT(int(kv.window_table(1).size()) * 4, p);
    sched.step_done(s, sample_all(s));
  }
  EXPECT_LE(kv.window_used_blocks(), 3);  // positions 17.. of the query at 24: blocks 4, 5 and 6
}

}  // namespace
