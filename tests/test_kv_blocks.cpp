// The paged KV block manager: allocation and release, prefix sharing by content (exact, with
// reference counts), least-recently-freed eviction, admission that fails without side effects,
// preemption when blocks run out, and the waste figure, against counts worked out by hand.
#include "engine/kv_blocks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

using namespace lamina;

namespace {

std::vector<int32_t> seq(int n, int32_t start = 100) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(KvBlocks, AllocatesWhatAPromptNeedsAndGrowsByBlocks) {
  KvBlockManager m(8, 4);
  ASSERT_EQ(m.add_sequence(1, seq(6)), 0);  // 6 tokens: 2 blocks, nothing cached yet
  EXPECT_EQ(m.block_table(1).size(), 2u);
  EXPECT_EQ(m.used_blocks(), 2);
  EXPECT_EQ(m.free_blocks(), 6);
  EXPECT_NEAR(m.waste(), 2.0 / 8, 1e-12);  // 6 of 8 positions hold a token
  EXPECT_TRUE(m.append(1, 7));
  EXPECT_TRUE(m.append(1, 8));               // block 2 now full
  EXPECT_EQ(m.block_table(1).size(), 2u);
  EXPECT_TRUE(m.append(1, 9));               // a third block
  EXPECT_EQ(m.block_table(1).size(), 3u);
  m.free_sequence(1);
  EXPECT_EQ(m.used_blocks(), 0);
  EXPECT_EQ(m.free_blocks(), 8);  // nothing was committed, so nothing stays cached
  EXPECT_FALSE(m.has_sequence(1));
}

// reserve_next takes the block of the next token before the token is known (the engine's
// run-ahead): only when the last block is full, once; append then uses it; with no block left it
// fails and changes nothing; the reserved block is released with the sequence.
TEST(KvBlocks, TheNextTokensBlockIsReservedAhead) {
  KvBlockManager m(3, 4);
  ASSERT_EQ(m.add_sequence(1, seq(3)), 0);
  EXPECT_TRUE(m.reserve_next(1));  // the 4th token still fits the first block
  EXPECT_EQ(m.block_table(1).size(), 1u);
  EXPECT_TRUE(m.append(1, 7));
  EXPECT_TRUE(m.reserve_next(1));  // the 5th needs a second block: taken now
  EXPECT_EQ(m.block_table(1).size(), 2u);
  EXPECT_EQ(m.used_blocks(), 2);
  EXPECT_TRUE(m.reserve_next(1));  // once
  EXPECT_EQ(m.block_table(1).size(), 2u);
  EXPECT_TRUE(m.append(1, 8));     // into the reserved block, no other taken
  EXPECT_EQ(m.block_table(1).size(), 2u);
  EXPECT_EQ(m.used_blocks(), 2);
  ASSERT_EQ(m.add_sequence(2, seq(4, 300)), 0);  // the last free block
  for (int32_t t : {9, 10, 11}) EXPECT_TRUE(m.append(1, t));  // sequence 1's second block full
  EXPECT_FALSE(m.reserve_next(1));  // none left
  EXPECT_EQ(m.block_table(1).size(), 2u);
  EXPECT_EQ(m.used_blocks(), 3);
  m.free_sequence(1);
  EXPECT_EQ(m.used_blocks(), 1);
  EXPECT_TRUE(m.reserve_next(2));  // sequence 2's first block is full: a block freed by 1
  EXPECT_EQ(m.block_table(2).size(), 2u);
  m.free_sequence(2);
  EXPECT_EQ(m.used_blocks(), 0);
  EXPECT_EQ(m.free_blocks(), 3);
}

TEST(KvBlocks, ASharedPrefixIsComputedOnce) {
  KvBlockManager m(16, 4);
  std::vector<int32_t> a = seq(10);  // blocks [0-3] [4-7] [8-9]
  ASSERT_EQ(m.add_sequence(1, a), 0);
  m.commit(1, 10);  // two full blocks registered
  std::vector<int32_t> b = seq(8);   // the same first 8 tokens, then its own
  b.push_back(7), b.push_back(7), b.push_back(7);
  ASSERT_EQ(m.add_sequence(2, b), 8);  // both full blocks reused
  EXPECT_EQ(m.block_table(2)[0], m.block_table(1)[0]);
  EXPECT_EQ(m.block_table(2)[1], m.block_table(1)[1]);
  EXPECT_NE(m.block_table(2)[2], m.block_table(1)[2]);
  EXPECT_EQ(m.used_blocks(), 4);  // 2 shared + 1 each
  // A prompt that differs in its first block shares nothing, even with the same second block.
  std::vector<int32_t> c = seq(10);
  c[0] = 5;
  EXPECT_EQ(m.add_sequence(3, c), 0);
  // A prompt equal to a registered chain keeps its last token to compute: 8 tokens, 2 full
  // blocks registered, but only the first is reused.
  EXPECT_EQ(m.add_sequence(4, seq(8)), 4);
  // The shared blocks survive the sequences that used them, and are found again.
  m.free_sequence(1), m.free_sequence(2), m.free_sequence(4);
  EXPECT_EQ(m.cached_blocks(), 2);
  EXPECT_EQ(m.add_sequence(5, seq(9)), 8);
  EXPECT_EQ(m.cached_blocks(), 0);
}

TEST(KvBlocks, EvictsTheLeastRecentlyFreedAndNeverWhatItReuses) {
  KvBlockManager m(4, 2);
  ASSERT_EQ(m.add_sequence(1, seq(3, 0)), 0);    // blocks for [0 1] [2]
  m.commit(1, 2);
  m.free_sequence(1);                             // [0 1] cached
  ASSERT_EQ(m.add_sequence(2, seq(3, 10)), 0);
  m.commit(2, 2);
  m.free_sequence(2);                             // [10 11] cached after [0 1]
  EXPECT_EQ(m.cached_blocks(), 2);
  EXPECT_EQ(m.free_blocks(), 2);
  // 3 blocks needed with 2 free: the least recently freed cached block ([0 1]) is evicted.
  ASSERT_EQ(m.add_sequence(3, seq(6, 50)), 0);
  EXPECT_EQ(m.cached_blocks(), 1);
  m.free_sequence(3);
  EXPECT_EQ(m.add_sequence(4, seq(3, 0)), 0);   // [0 1] was evicted
  m.free_sequence(4);
  EXPECT_EQ(m.add_sequence(5, seq(3, 10)), 2);  // [10 11] was kept
}

TEST(KvBlocks, AdmissionWithoutRoomChangesNothingAndAppendReportsAFullCache) {
  KvBlockManager m(3, 4);
  ASSERT_EQ(m.add_sequence(1, seq(8)), 0);
  m.commit(1, 8);
  EXPECT_FALSE(m.add_sequence(2, seq(9, 500)).has_value());  // needs 3, 1 free
  EXPECT_FALSE(m.has_sequence(2));
  EXPECT_EQ(m.used_blocks(), 2);
  EXPECT_EQ(m.free_blocks(), 1);
  ASSERT_TRUE(m.append(1, 1));  // takes the last block
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(m.append(1, 1));
  EXPECT_FALSE(m.append(1, 1));  // 12 positions used: the caller must preempt
  EXPECT_EQ(m.block_table(1).size(), 3u);
  m.free_sequence(1);
  EXPECT_EQ(m.cached_blocks(), 2);  // the committed blocks stay cached
  EXPECT_EQ(m.free_blocks(), 1);
}

TEST(KvBlocks, WasteIsUnderFourPercentForLongSequences) {
  KvBlockManager m(4096, 16);
  for (int s = 0; s < 64; ++s) ASSERT_EQ(m.add_sequence(s, seq(128 + 128 + s % 16, 1000 * s)), 0);
  // 64 sequences of 256-271 tokens in blocks of 16: at most 15 empty positions each.
  EXPECT_LT(m.waste(), 0.04);
  EXPECT_GT(m.waste(), 0.0);
}

// A window pool (window layers reading their last 8 positions, blocks of 4): a sequence holds the
// window blocks of its last window and the current one, however long it grows, and lets the rest
// go; the ids it holds are distinct blocks of the pool.
TEST(KvBlocks, WindowLayersHoldTheirLastWindowOnly) {
  KvBlockManager m(32, 4, true, {8, 6});
  ASSERT_TRUE(m.windowed());
  ASSERT_EQ(m.add_sequence(1, seq(6)), 0);
  EXPECT_TRUE(m.window_table(1).empty());  // taken as the prompt is computed
  EXPECT_EQ(m.hold_window(1, 0, 6), 6);
  EXPECT_EQ(m.window_table(1).size(), 2u);
  EXPECT_EQ(m.window_used_blocks(), 2);
  for (int p = 6; p <= 40; ++p) {
    ASSERT_TRUE(m.append(1, p)) << p;
    // the queries from p on read p - 7 on: blocks (p - 7) / 4 .. p / 4
    const int first = std::max(0, p - 7) / 4, held = p / 4 - first + 1;
    EXPECT_EQ(m.window_used_blocks(), held) << p;
    const std::vector<int32_t>& w = m.window_table(1);
    ASSERT_EQ(int(w.size()), p / 4 + 1);
    std::vector<int32_t> ids(w.begin() + first, w.end());
    std::sort(ids.begin(), ids.end());
    EXPECT_EQ(std::adjacent_find(ids.begin(), ids.end()), ids.end()) << p;
    for (int32_t id : ids) EXPECT_TRUE(id >= 0 && id < 6) << id;
  }
  EXPECT_EQ(m.block_table(1).size(), 11u);  // the other layers keep every position
  EXPECT_EQ(m.window_used_blocks(), 3);
  m.free_sequence(1);
  EXPECT_EQ(m.window_used_blocks(), 0);
}

// hold_window gives a prompt chunk as many positions as the pool has blocks for; as the prompt
// goes on, the blocks before its window come back; admission needs one free window block.
TEST(KvBlocks, HoldWindowGivesAsManyPositionsAsThePoolHas) {
  KvBlockManager m(32, 4, true, {8, 3});
  ASSERT_EQ(m.add_sequence(1, seq(20)), 0);
  EXPECT_EQ(m.hold_window(1, 0, 20), 12);   // 3 blocks
  EXPECT_EQ(m.hold_window(1, 12, 20), 16);  // position 12's window starts at 5: block 0 goes
  EXPECT_EQ(m.hold_window(1, 16, 20), 20);  // and block 1
  EXPECT_EQ(m.window_used_blocks(), 3);
  EXPECT_FALSE(m.add_sequence(2, seq(4, 500)).has_value());
  EXPECT_FALSE(m.has_sequence(2));
  EXPECT_TRUE(m.append(1, 7));  // position 20 reads 13 on: block 2 goes, block 5 comes
  EXPECT_EQ(m.window_used_blocks(), 3);
  EXPECT_EQ(m.window_table(1).size(), 6u);
}

// A prefix found in the cache brings the window blocks of its last window (attached to its blocks
// when they were registered, cached with them); once those are evicted (least recently freed
// first) the prefix is reused only as far as every window block it needs is there.
TEST(KvBlocks, APrefixComesWithItsWindowBlocksOrIsCutBack) {
  KvBlockManager m(64, 4, true, {6, 8});
  const std::vector<int32_t> a = seq(16);
  std::vector<int32_t> b = a;
  for (int32_t t : seq(4, 900)) b.push_back(t);
  ASSERT_EQ(m.add_sequence(1, a), 0);
  ASSERT_EQ(m.hold_window(1, 0, 16), 16);
  m.commit(1, 16);               // 4 blocks registered, each with its window block
  ASSERT_TRUE(m.append(1, 77));  // position 16 reads 11 on: window blocks 0 and 1 go (cached)
  const std::vector<int32_t> wa = m.window_table(1);
  m.free_sequence(1);
  EXPECT_EQ(m.window_used_blocks(), 0);
  // A prompt of a's 16 tokens and 4 more: the query at 16 needs window blocks 2 and 3.
  EXPECT_EQ(m.add_sequence(2, b), 16);
  ASSERT_EQ(m.window_table(2).size(), 4u);
  EXPECT_EQ(m.window_table(2)[2], wa[2]);
  EXPECT_EQ(m.window_table(2)[3], wa[3]);
  EXPECT_EQ(m.window_used_blocks(), 2);
  m.free_sequence(2);
  // 6 window blocks taken: the 4 free ones, then the least recently freed cached ones (0, 1).
  ASSERT_EQ(m.add_sequence(3, seq(24, 700)), 0);
  ASSERT_EQ(m.hold_window(3, 0, 24), 24);
  m.free_sequence(3);
  EXPECT_EQ(m.add_sequence(4, b), 16);  // blocks 2 and 3 still there
  m.free_sequence(4);
  // All 8 taken: no window block of a is left, and a query at 4, 8, 12 or 16 would need one.
  ASSERT_EQ(m.add_sequence(5, seq(32, 800)), 0);
  ASSERT_EQ(m.hold_window(5, 0, 32), 32);
  m.free_sequence(5);
  EXPECT_EQ(m.add_sequence(6, b), 0);
  EXPECT_EQ(m.reused_tokens(), 32);
}

}  // namespace
