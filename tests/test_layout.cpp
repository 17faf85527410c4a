// Layout algebra: each operation checked against its defining property by brute force, plus
// worked examples computed by hand.
#include "core/layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

using namespace lamina::layout;

namespace {

std::vector<int64_t> offsets(const Layout& l) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < l.size(); ++i) v.push_back(l(i));
  return v;
}

TEST(Layout, RowAndColumnMajor) {
  const Layout r = row_major(3, 5), c = col_major(3, 5);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) {
      EXPECT_EQ(r(i, j), i * 5 + j);
      EXPECT_EQ(c(i, j), i + j * 3);
    }
  EXPECT_EQ(r.size(), 15);
  EXPECT_EQ(r.cosize(), 15);
  EXPECT_EQ(row_major(3, 5, 8).cosize(), 2 * 8 + 5);
  // Linear coordinates are colexicographic: i = m + 3 n.
  for (int64_t i = 0; i < 15; ++i) EXPECT_EQ(r(i), r(i % 3, i / 3));
}

TEST(Layout, CoalesceKeepsTheMapping) {
  Layout l;
  l.add_mode().add_atom(2, 1).add_atom(1, 7).add_atom(3, 2);
  l.add_mode().add_atom(4, 6);
  const Layout c = coalesce(l);
  EXPECT_EQ(c.natoms, 1);  // 2:1, 3:2, 4:6 continue each other: 24:1
  EXPECT_EQ(offsets(c), offsets(l));
}

TEST(Layout, CompositionWorkedExample) {
  // (6,2):(8,2) ∘ (4,3):(3,1) = ((2,2),3):((24,2),8), worked by hand.
  const Layout a = make_layout({6, 2}, {8, 2}), b = make_layout({4, 3}, {3, 1});
  const Layout c = composition(a, b);
  ASSERT_EQ(c.rank, 2);
  ASSERT_EQ(c.begin[1], 2);
  EXPECT_EQ(c.atom[0].shape, 2);
  EXPECT_EQ(c.atom[0].stride, 24);
  EXPECT_EQ(c.atom[1].shape, 2);
  EXPECT_EQ(c.atom[1].stride, 2);
  EXPECT_EQ(c.atom[2].shape, 3);
  EXPECT_EQ(c.atom[2].stride, 8);
}

TEST(Layout, CompositionIsFunctionComposition) {
  // Pairs whose strides and shapes divide each other (the condition composition requires).
  const std::pair<Layout, Layout> cases[] = {
      {make_layout({6, 2}, {8, 2}), make_layout({4, 3}, {3, 1})},
      {row_major(8, 16), make_layout({2, 4}, {4, 1})},
      {row_major(8, 16), make_layout({4, 8}, {2, 16})},
      {col_major(16, 4, 20), make_layout({8}, {2})},
      {col_major(16, 4, 20), make_layout({2, 2, 2}, {1, 4, 2})},
      {make_layout({4, 2, 8}, {2, 1, 8}), make_layout({2, 2, 4}, {1, 4, 16})},
      {make_layout({4, 2, 8}, {2, 1, 8}), make_layout({3}, {0})},
  };
  for (const auto& [a, b] : cases) {
    const Layout c = composition(a, b);
    ASSERT_EQ(c.size(), b.size());
    for (int64_t i = 0; i < b.size(); ++i) EXPECT_EQ(c(i), a(b(i))) << "i=" << i;
  }
}

TEST(Layout, ComplementFillsTheGaps) {
  const Layout as[] = {make_layout({4}, {2}), make_layout({2, 2}, {1, 8}), make_layout({4, 3}, {3, 24}),
                       make_layout({8}, {1})};
  for (const auto& a : as) {
    const int64_t target = 96;
    const Layout r = complement(a, target);
    const Layout both = concat(a.flat(), r);
    std::set<int64_t> seen;
    for (int64_t i = 0; i < both.size(); ++i) EXPECT_TRUE(seen.insert(both(i)).second) << "offset repeats";
    EXPECT_GE(both.size(), target);
    EXPECT_EQ(*seen.begin(), 0);
    // (A, R) is a bijection onto [0, size): no gaps.
    EXPECT_EQ(*seen.rbegin(), int64_t(seen.size()) - 1);
  }
}

TEST(Layout, InadmissibleArgumentsAreRejected) {
  EXPECT_THROW(complement(make_layout({4, 2}, {2, 3}), 32), std::invalid_argument);
  EXPECT_THROW(composition(make_layout({4, 2, 8}, {2, 1, 8}), make_layout({4}, {3})), std::invalid_argument);
}

TEST(Layout, LogicalDivideSplitsIntoTiles) {
  // 24:1 divided by the tile 4:2 — tiles of 4 elements at stride 2.
  const Layout a = make_layout({24}, {1});
  const Layout d = logical_divide(a, make_layout({4}, {2}));
  ASSERT_EQ(d.rank, 2);
  EXPECT_EQ(d.size(0), 4);
  EXPECT_EQ(d.size(1), 6);
  std::set<int64_t> seen;
  for (int64_t t = 0; t < 6; ++t)
    for (int64_t i = 0; i < 4; ++i) seen.insert(d(i, t));
  EXPECT_EQ(seen.size(), 24u);
  EXPECT_EQ(d(1, 0), 2);
  EXPECT_EQ(d(3, 0), 6);
  EXPECT_EQ(d(0, 1), 1);  // the next tile starts in the gap
  EXPECT_EQ(d(0, 2), 8);
}

TEST(Layout, LogicalProductRepeatsALayout) {
  const Layout a = make_layout({2, 2}, {1, 4});  // 4 elements, holes at 2, 3
  const Layout p = logical_product(a, make_layout({4}, {1}));
  EXPECT_EQ(p.size(), 16);
  std::set<int64_t> seen;
  for (int64_t j = 0; j < 4; ++j)
    for (int64_t i = 0; i < 4; ++i) {
      EXPECT_EQ(p(i, j) - p(0, j), a(i));  // each copy is A, shifted
      seen.insert(p(i, j));
    }
  EXPECT_EQ(seen.size(), 16u);  // copies do not overlap
}

TEST(Layout, ZippedDivideAndLocalTile) {
  const Layout a = row_major(12, 20);
  const Layout z = zipped_divide(a, 4, 5);
  EXPECT_EQ(z.size(0), 20);  // tile
  EXPECT_EQ(z.size(1), 12);  // 3 x 4 tiles
  for (int64_t bm = 0; bm < 3; ++bm)
    for (int64_t bn = 0; bn < 4; ++bn) {
      const Part t = local_tile(a, 4, 5, bm, bn);
      for (int64_t i = 0; i < 4; ++i)
        for (int64_t j = 0; j < 5; ++j) {
          EXPECT_EQ(t.offset + t.layout(i, j), a(bm * 4 + i, bn * 5 + j));
          EXPECT_EQ(z(i + 4 * j, bm + 3 * bn), a(bm * 4 + i, bn * 5 + j));
        }
    }
}

TEST(Layout, LocalPartitionCoversTheTileOnce) {
  const Layout tile = col_major(16, 8);     // e.g. a shared-memory tile
  const Layout thr = row_major(4, 8);       // 32 threads, thread (i, j) = 8 i + j
  std::vector<int> owner(static_cast<size_t>(tile.cosize()), -1);
  for (int tid = 0; tid < 32; ++tid) {
    const Part p = local_partition(tile, thr, tid);
    EXPECT_EQ(p.layout.size(), 4);  // (16/4) x (8/8)
    for (int64_t a = 0; a < p.layout.size(0); ++a)
      for (int64_t b = 0; b < p.layout.size(1); ++b) {
        const int64_t off = p.offset + p.layout(a, b);
        EXPECT_EQ(owner[size_t(off)], -1);
        owner[size_t(off)] = tid;
      }
  }
  EXPECT_TRUE(std::none_of(owner.begin(), owner.end(), [](int o) { return o < 0; }));
  // Thread 9 is (1, 1): it owns rows 1, 5, 9, 13 of column 1.
  const Part p9 = local_partition(tile, thr, 9);
  EXPECT_EQ(p9.offset + p9.layout(2, 0), tile(9, 1));
}

TEST(Layout, SwizzleIsABijectionThatSpreadsBanks) {
  // f16 tile of 8 rows x 64 columns; 16-byte chunks (8 f16): chunk c of row r lands in chunk
  // c ^ (r % 8). Column 0 of all 8 rows must hit 8 different 16-byte bank groups.
  const Swizzled<Swizzle<3, 3, 3>> s{{}, row_major(8, 64)};
  std::set<int64_t> seen, chunks;
  for (int r = 0; r < 8; ++r) {
    for (int c = 0; c < 64; ++c) EXPECT_TRUE(seen.insert(s(r, c)).second);
    chunks.insert((s(r, 0) % 64) / 8);
  }
  EXPECT_EQ(chunks.size(), 8u);
  EXPECT_EQ(*seen.rbegin(), 511);
}

TEST(Layout, IsConstexpr) {
  constexpr Layout a = row_major(128, 32);
  constexpr Part t = local_tile(a, 16, 8, 2, 3);
  static_assert(t.offset == 2 * 16 * 32 + 3 * 8);
  static_assert(t.layout(1, 1) == 33);
  SUCCEED();
}

}  // namespace
