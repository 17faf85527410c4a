// Tensor parallelism's arithmetic on the CPU (issue #35): every rank's share of heads, FFN rows
// and vocabulary, and each rank's slice of a quantised weight equal to that piece of the whole.
#include "core/error.h"
#include "format/quant.h"
#include "model/tensor_parallel.h"

#include <gtest/gtest.h>
#include <algorithm>

#include <random>
#include <thread>

using namespace lamina;

namespace {

ModelConfig shape(uint32_t hq, uint32_t hkv, uint32_t ff, uint32_t vocab) {
  ModelConfig c;
  c.arch = "llama";
  c.n_embd = hq * 128, c.n_head = hq, c.n_head_kv = hkv, c.head_dim = 128, c.n_ff = ff, c.n_vocab = vocab;
  return c;
}

TEST(TensorParallel, RanksCoverEveryHeadFfnRowAndTokenOnce) {
  const ModelConfig shapes[] = {shape(32, 8, 14336, 128256), shape(64, 8, 28672, 32000), shape(32, 32, 11008, 32001)};
  int plans = 0;
  for (const ModelConfig& c : shapes)
    for (int n : {1, 2, 4, 8, 16, 32}) {
      if (c.n_ff % uint32_t(n) || (c.n_head_kv % uint32_t(n) && uint32_t(n) % c.n_head_kv)) continue;
      std::vector<int> q(c.n_head), kv(c.n_head_kv), ff(c.n_ff), vocab(c.n_vocab);
      for (int r = 0; r < n; ++r) {
        const TpPlan p = TpPlan::make(c, n, r);
        for (int64_t h = p.q_heads.first; h < p.q_heads.end(); ++h) {
          ++q[size_t(h)];
          const int64_t group = c.n_head / c.n_head_kv;  // the KV head query head h reads
          EXPECT_GE(h / group, p.kv_heads.first) << n << " ranks, rank " << r;
          EXPECT_LT(h / group, p.kv_heads.end()) << n << " ranks, rank " << r;
        }
        for (int64_t h = p.kv_heads.first; h < p.kv_heads.end(); ++h) ++kv[size_t(h)];
        for (int64_t i = p.ff.first; i < p.ff.end(); ++i) ++ff[size_t(i)];
        for (int64_t i = p.vocab.first; i < p.vocab.end(); ++i) ++vocab[size_t(i)];
      }
      const int kv_copies = n > int(c.n_head_kv) ? n / int(c.n_head_kv) : 1;
      for (int v : q) ASSERT_EQ(v, 1) << n << " ranks";
      for (int v : kv) ASSERT_EQ(v, kv_copies) << n << " ranks";
      for (int v : ff) ASSERT_EQ(v, 1) << n << " ranks";
      for (int v : vocab) ASSERT_EQ(v, 1) << n << " ranks";
      ++plans;
    }
  EXPECT_EQ(plans, 18);  // every shape at every count: the FFNs and heads all divide by 1..32
}

TEST(TensorParallel, SplitsThatDoNotDivideAreRefusedWithTheReason) {
  const auto why = [](const ModelConfig& c, int n) {
    try {
      TpPlan::make(c, n, 0);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(why(shape(32, 8, 14336, 32000), 3).find("32 query heads do not split over 3 ranks"), std::string::npos);
  EXPECT_NE(why(shape(32, 8, 14336, 32000), 64).find("query heads"), std::string::npos);
  EXPECT_NE(why(shape(24, 6, 14336, 32000), 4).find("6 KV heads do not split over 4 ranks"), std::string::npos);
  EXPECT_NE(why(shape(32, 8, 11000, 32000), 16).find("FFN"), std::string::npos);
  EXPECT_NE(why(shape(32, 8, 14336, 32000), 0).find("0 ranks"), std::string::npos);
}

// The FFN's rows split on the down projection's column blocks: evenly where n_ff / N is whole
// blocks, else whole blocks as evenly as they go, the later ranks taking one more; refused where
// there are fewer blocks than ranks or n_ff is not whole blocks. The shared expert's alike.
TEST(TensorParallel, TheFfnSplitsOnTheDownProjectionsBlocks) {
  const auto ranges = [](const ModelConfig& c, int n, int64_t block, bool shared = false) {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (int r = 0; r < n; ++r) {
      const TpPlan p = TpPlan::make(c, n, r, block);
      const TpRange f = shared ? p.ff_shared : p.ff;
      out.emplace_back(f.first, f.count);
    }
    return out;
  };
  using R = std::vector<std::pair<int64_t, int64_t>>;
  const ModelConfig llama2 = shape(32, 32, 11008, 32000);  // 43 blocks of 256
  EXPECT_EQ(ranges(llama2, 2, 256), (R{{0, 5376}, {5376, 5632}}));
  EXPECT_EQ(ranges(llama2, 2, 32), (R{{0, 5504}, {5504, 5504}}));  // (q4_0, q8_0: 5504 is 172 blocks of 32)
  const R four = ranges(llama2, 4, 256);
  int64_t next = 0;
  for (const auto& [first, count] : four) {
    EXPECT_EQ(first, next);
    EXPECT_EQ(count % 256, 0);
    EXPECT_GE(count, 10 * 256);
    EXPECT_LE(count, 11 * 256);
    next = first + count;
  }
  EXPECT_EQ(next, 11008);
  EXPECT_EQ(ranges(shape(32, 8, 14336, 32000), 2, 256), (R{{0, 7168}, {7168, 7168}}));
  const ModelConfig experts = shape(32, 4, 768, 32000);  // Qwen3-30B-A3B's experts: 3 blocks
  EXPECT_EQ(ranges(experts, 2, 256), (R{{0, 256}, {256, 512}}));
  try {
    TpPlan::make(experts, 4, 0, 256);
    ADD_FAILURE() << "3 blocks over 4 ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("768 rows do not split over 4 ranks on the down projection's 256-element blocks"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(TpPlan::make(shape(32, 8, 1000, 32000), 2, 0, 256), Error);  // (1000: not whole blocks of 256)
  ModelConfig shexp = shape(32, 8, 2048, 32000);
  shexp.n_ff_shared = 5632, shexp.n_expert = 60;  // a shared expert of 22 blocks of 256 (Qwen1.5-MoE's width)
  EXPECT_EQ(ranges(shexp, 4, 256, true), (R{{0, 1280}, {1280, 1536}, {2816, 1280}, {4096, 1536}}));
}

TEST(TensorParallel, WeightsSplitByTheirRole) {
  const ModelConfig c = shape(32, 8, 14336, 32000);
  const TpPlan p = TpPlan::make(c, 4, 1);
  using K = TpSlice::Kind;
  const auto is = [&](const char* name, K kind, int64_t first, int64_t count) {
    const TpSlice s = tp_slice(p, c, name);
    EXPECT_EQ(int(s.kind), int(kind)) << name;
    if (kind == K::Whole) return;
    EXPECT_EQ(s.range.first, first) << name;
    EXPECT_EQ(s.range.count, count) << name;
  };
  is("blk.3.attn_q.weight", K::Rows, 8 * 128, 8 * 128);
  is("blk.3.attn_k.weight", K::Rows, 2 * 128, 2 * 128);
  is("blk.3.attn_v.weight", K::Rows, 2 * 128, 2 * 128);
  is("blk.3.attn_output.weight", K::Cols, 8 * 128, 8 * 128);
  is("blk.3.ffn_gate.weight", K::Rows, 3584, 3584);
  is("blk.3.ffn_up.weight", K::Rows, 3584, 3584);
  is("blk.3.ffn_down.weight", K::Cols, 3584, 3584);
  is("output.weight", K::Rows, 8000, 8000);
  is("token_embd.weight", K::Whole, 0, 0);
  is("blk.3.attn_norm.weight", K::Whole, 0, 0);
  is("blk.3.attn_q.bias", K::Cols, 8 * 128, 8 * 128);  // (qwen2: with their matrices' rows)
  is("blk.3.attn_k.bias", K::Cols, 2 * 128, 2 * 128);
  is("blk.3.attn_v.bias", K::Cols, 2 * 128, 2 * 128);
  is("blk.3.attn_output.bias", K::Whole, 0, 0);  // added after the all-reduce
  is("blk.3.attn_q_norm.weight", K::Whole, 0, 0);
  is("blk.3.ffn_gate_inp.weight", K::Whole, 0, 0);  // (the router: every rank routes alike)
}

// A mixture of experts with a shared expert (qwen2moe), 2 ranks: the shared expert splits by its
// own range, the router and the shared expert's gate stay whole; what a rank holds of the tensors
// that are several parts in one (phi3's fused QKV and gate/up, the experts' stacks).
TEST(TensorParallel, ExpertsAndFusedTensorsSplitPartByPart) {
  ModelConfig c = shape(32, 8, 1024, 32000);
  c.n_ff_shared = 2048, c.n_expert = 8;
  const TpPlan p = TpPlan::make(c, 2, 1);
  EXPECT_EQ(p.ff_shared.first, 1024);
  EXPECT_EQ(p.ff_shared.count, 1024);
  EXPECT_EQ(int(tp_slice(p, c, "blk.0.ffn_gate_shexp.weight").kind), int(TpSlice::Kind::Rows));
  EXPECT_EQ(int(tp_slice(p, c, "blk.0.ffn_down_shexp.weight").kind), int(TpSlice::Kind::Cols));
  EXPECT_EQ(tp_slice(p, c, "blk.0.ffn_down_shexp.weight").range.count, 1024);
  EXPECT_EQ(int(tp_slice(p, c, "blk.0.ffn_gate_inp_shexp.weight").kind), int(TpSlice::Kind::Whole));
  const auto held = [&](const char* name, std::vector<int64_t> ne) {
    GgufTensor t;
    t.name = name, t.type = GgmlType::F16, t.n_dims = int(ne.size());
    for (size_t i = 0; i < ne.size(); ++i) t.ne[i] = ne[i];
    return tp_held_shape(p, c, t);
  };
  using Shape = std::pair<int64_t, int64_t>;  // (columns, rows)
  const int64_t E = 4096, QD = 32 * 128, KVD = 8 * 128;
  EXPECT_EQ(held("blk.0.attn_qkv.weight", {E, QD + 2 * KVD}), Shape(E, (16 + 2 * 4) * 128));
  EXPECT_EQ(held("blk.0.ffn_up.weight", {E, 2 * 1024}), Shape(E, 2 * 512));  // phi3: gate and up
  EXPECT_EQ(held("blk.0.ffn_up.weight", {E, 1024}), Shape(E, 512));
  EXPECT_EQ(held("blk.0.ffn_gate_exps.weight", {E, 1024, 8}), Shape(E, 8 * 512));
  EXPECT_EQ(held("blk.0.ffn_down_exps.weight", {1024, E, 8}), Shape(512, 8 * E));
  EXPECT_EQ(held("blk.0.ffn_gate_inp.weight", {E, 8}), Shape(E, 8));
  EXPECT_EQ(held("blk.0.ffn_up_shexp.weight", {E, 2048}), Shape(E, 1024));
}

// A [64][512] matrix quantised; a rank's rows and a rank's columns, dequantised, are exactly
// those rows and columns of the whole matrix dequantised (a slice moves whole blocks).
TEST(TensorParallel, SlicesAreExactlyThePiecesOfTheWhole) {
  constexpr int64_t kRows = 64, kCols = 512;
  std::mt19937 rng(35);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> w(size_t(kRows * kCols));
  for (auto& v : w) v = nd(rng);
  for (GgmlType t : {GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K}) {
    std::vector<uint8_t> q(size_t(kRows) * row_bytes(t, kCols));
    for (int64_t r = 0; r < kRows; ++r) quantize_row(t, &w[size_t(r * kCols)], q.data() + size_t(r) * row_bytes(t, kCols), kCols);
    GgufTensor g;
    g.name = "blk.0.ffn_down.weight", g.n_dims = 2, g.ne[0] = kCols, g.ne[1] = kRows, g.type = t, g.data = q.data();
    g.nbytes = q.size();
    std::vector<float> full(size_t(kRows * kCols));
    for (int64_t r = 0; r < kRows; ++r) dequantize_row(t, q.data() + size_t(r) * row_bytes(t, kCols), &full[size_t(r * kCols)], kCols);
    // rows 16..39
    const std::vector<uint8_t> rows = tp_slice_bytes(g, {TpSlice::Kind::Rows, {16, 24}});
    ASSERT_EQ(rows.size(), size_t(24) * row_bytes(t, kCols));
    std::vector<float> got(static_cast<size_t>(kCols));
    for (int64_t r = 0; r < 24; ++r) {
      dequantize_row(t, rows.data() + size_t(r) * row_bytes(t, kCols), got.data(), kCols);
      for (int64_t i = 0; i < kCols; ++i) ASSERT_EQ(got[size_t(i)], full[size_t((16 + r) * kCols + i)]) << type_name(t);
    }
    // columns 256..511 of every row
    const std::vector<uint8_t> cols = tp_slice_bytes(g, {TpSlice::Kind::Cols, {256, 256}});
    ASSERT_EQ(cols.size(), size_t(kRows) * row_bytes(t, 256));
    for (int64_t r = 0; r < kRows; ++r) {
      dequantize_row(t, cols.data() + size_t(r) * row_bytes(t, 256), got.data(), 256);
      for (int64_t i = 0; i < 256; ++i) ASSERT_EQ(got[size_t(i)], full[size_t(r * kCols + 256 + i)]) << type_name(t);
    }
  }
}

TEST(TensorParallel, ColumnsOffTheBlocksAreRefused) {
  std::vector<uint8_t> q(size_t(4) * row_bytes(GgmlType::Q4_K, 512));
  GgufTensor g;
  g.name = "blk.0.ffn_down.weight", g.n_dims = 2, g.ne[0] = 512, g.ne[1] = 4, g.type = GgmlType::Q4_K, g.data = q.data();
  try {
    tp_slice_bytes(g, {TpSlice::Kind::Cols, {128, 128}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("256-element q4_K blocks"), std::string::npos) << e.what();
  }
  EXPECT_THROW(tp_slice_bytes(g, {TpSlice::Kind::Rows, {2, 4}}), Error);
}

}  // namespace

namespace {

// The greedy id over a vocabulary split by rows over 4 thread ranks: the largest logit, the
// lowest id among equal ones, on every rank, also when a rank holds no rows.
TEST(TensorParallel, ArgmaxOverSplitVocabularyIsTheWholeOnes) {
  constexpr int kRanks = 4;
  for (uint32_t vocab : {1000u, 5u}) {
    ModelConfig c = shape(32, 8, 14336, vocab);
    std::mt19937 rng(vocab);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> logits(vocab);
    for (auto& v : logits) v = nd(rng);
    const int64_t tie_hi = vocab - 1, tie_lo = vocab > 5 ? 300 : 1;
    logits[size_t(tie_hi)] = logits[size_t(tie_lo)] = 9.f;  // equal maxima on different ranks
    ThreadGroup group(kRanks);
    std::vector<int32_t> got(kRanks, -7);
    std::vector<std::thread> threads;
    for (int r = 0; r < kRanks; ++r)
      threads.emplace_back([&, r] {
        auto comm = group.member(r);
        const TpPlan p = TpPlan::make(c, kRanks, r);
        got[size_t(r)] = tp_argmax(*comm, logits.data() + p.vocab.first, p.vocab.count, p.vocab.first);
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < kRanks; ++r) EXPECT_EQ(got[size_t(r)], tie_lo) << "vocab " << vocab << ", rank " << r;
  }
  auto one = single_rank();
  const float l[] = {1.f, 3.f, 3.f, -2.f};
  EXPECT_EQ(tp_argmax(*one, l, 4, 0), 1);
}

// Each rank's best tokens of its share, sorted (logit descending, id ascending), merged: the
// first `keep` of the whole row sorted so, ties across ranks going to the lowest id; a share with
// fewer than `keep` tokens, or none, gives what it has.
TEST(TensorParallel, CandidatesOfTheSharesMergeIntoTheWholeRowsBest) {
  std::mt19937 rng(12);
  const auto before = [](const TpPick& a, const TpPick& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  for (int ranks : {1, 2, 3, 4})
    for (size_t keep : {size_t(1), size_t(5), size_t(40), size_t(700)}) {
      std::vector<float> row(613);
      for (auto& v : row) v = float(int(rng() % 50)) / 4.f;  // many ties
      std::vector<TpPick> whole;
      for (size_t i = 0; i < row.size(); ++i) whole.emplace_back(row[i], int32_t(i));
      std::sort(whole.begin(), whole.end(), before);
      std::vector<std::vector<TpPick>> lists(static_cast<size_t>(ranks));
      const size_t per = (row.size() + size_t(ranks) - 1) / size_t(ranks);
      for (int r = 0; r < ranks; ++r) {
        for (size_t i = size_t(r) * per; i < std::min(row.size(), size_t(r + 1) * per); ++i) lists[size_t(r)].emplace_back(row[i], int32_t(i));
        std::sort(lists[size_t(r)].begin(), lists[size_t(r)].end(), before);
        if (lists[size_t(r)].size() > keep) lists[size_t(r)].resize(keep);
      }
      const std::vector<TpPick> got = tp_merge_candidates(lists, keep);
      ASSERT_EQ(got.size(), std::min(keep, row.size())) << ranks << " ranks, keep " << keep;
      EXPECT_TRUE(std::equal(got.begin(), got.end(), whole.begin())) << ranks << " ranks, keep " << keep;
    }
  EXPECT_TRUE(tp_merge_candidates(std::vector<std::vector<TpPick>>(2), 3).empty());
}

}  // namespace
