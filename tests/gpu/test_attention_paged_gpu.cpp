// The batching engine's decode kernels against host references: attention_paged (each rung of
// DecodeAttention; rows of several sequences over a paged f16 cache, GQA and plain heads, split
// counts from 1 to 16)
// against an fp64 softmax over each row's own positions, and its int8 copy (out8) against the
// host's quantisation of the f32 output it wrote, byte for byte; argmax_rows against the host's
// first maximum (ties, NaN and -inf, rows of a multiple of 4 and not).
// Poison: cache blocks no table names, and the slots past each row's position, hold NaN (a kernel
// that reads them fails); the outputs start as NaN / 0xFF (a value it does not write fails).
#include "core/half.h"
#include "gpu_test_util.h"
#include "kernels/common/q8_blocks.h"
#include "kernels/ops/ops.h"
#include "x8_host.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

using namespace lamina;
using namespace lamina::kernels;

namespace {

struct PagedCase {
  int n_head, n_head_kv, head_dim, block_tokens;
  std::vector<int> lengths;  // per row (one row a sequence): its position is length - 1
};

TEST(AttentionPaged, RowsOfSeveralSequencesMatchFp64AndTheirInt8Copy) {
  std::mt19937 rng(21);
  std::normal_distribution<float> nd(0.f, 1.f);
  const PagedCase cases[] = {{32, 8, 128, 16, {200}},         {32, 8, 128, 16, {1, 17, 130, 256}},
                             {8, 8, 64, 16, {33, 5}},         {4, 1, 128, 8, {70, 9, 100}},
                             {12, 4, 96, 32, {64, 65, 1, 31}}, {2, 2, 256, 16, {40}},
                             {16, 2, 64, 16, {15, 16, 17, 700}}, {4, 2, 128, 32, {2, 1000, 33}},
                             {21, 3, 128, 16, {300, 5}},       {18, 3, 64, 16, {50}},
                             {9, 3, 64, 16, {129, 1}}};  // G = 7, 6, 3 (Qwen2.5-7B, SmolLM2)
  for (const PagedCase& c : cases) {
    const int hd = c.head_dim, qd = c.n_head * hd, kvd = c.n_head_kv * hd, group = c.n_head / c.n_head_kv;
    const int rows = int(c.lengths.size()), bt = c.block_tokens;
    // Each sequence's blocks, taken from a shuffled pool with spare blocks left as NaN.
    int max_blocks = 0, used = 0;
    for (int len : c.lengths) max_blocks = std::max(max_blocks, (len + bt - 1) / bt), used += (len + bt - 1) / bt;
    const int n_blocks = used + 3, n_ctx = n_blocks * bt;
    std::vector<int32_t> pool(static_cast<size_t>(n_blocks));
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    std::vector<int32_t> tables(size_t(rows) * size_t(max_blocks), 0), row_seq(static_cast<size_t>(rows)), pos(static_cast<size_t>(rows));
    std::vector<uint16_t> kc(size_t(n_ctx) * kvd, 0x7E00), vc(size_t(n_ctx) * kvd, 0x7E00);  // NaN
    size_t next = 0;
    for (int r = 0; r < rows; ++r) {
      row_seq[size_t(r)] = r, pos[size_t(r)] = c.lengths[size_t(r)] - 1;
      for (int b = 0; b < (c.lengths[size_t(r)] + bt - 1) / bt; ++b) tables[size_t(r) * max_blocks + b] = pool[next++];
      for (int j = 0; j < c.lengths[size_t(r)]; ++j) {
        const size_t slot = size_t(tables[size_t(r) * max_blocks + j / bt]) * bt + size_t(j % bt);
        for (int i = 0; i < kvd; ++i) kc[slot * kvd + i] = f32_to_f16(nd(rng)), vc[slot * kvd + i] = f32_to_f16(nd(rng));
      }
    }
    std::vector<float> q(size_t(rows) * qd);
    for (float& x : q) x = nd(rng);
    const float scale = 1.f / std::sqrt(float(hd));
    // fp64 reference over the f16 values the kernel reads
    std::vector<double> want(q.size());
    for (int r = 0; r < rows; ++r)
      for (int h = 0; h < c.n_head; ++h) {
        const int n = c.lengths[size_t(r)], kvh = h / group;
        std::vector<double> p(static_cast<size_t>(n));
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < n; ++j) {
          const size_t slot = size_t(tables[size_t(r) * max_blocks + j / bt]) * bt + size_t(j % bt);
          double s = 0;
          for (int d = 0; d < hd; ++d) s += double(q[size_t(r) * qd + h * hd + d]) * f16_to_f32(kc[slot * kvd + kvh * hd + d]);
          mx = std::max(mx, p[size_t(j)] = s * scale);
        }
        for (double& x : p) sum += (x = std::exp(x - mx));
        for (int d = 0; d < hd; ++d) {
          double o = 0;
          for (int j = 0; j < n; ++j) {
            const size_t slot = size_t(tables[size_t(r) * max_blocks + j / bt]) * bt + size_t(j % bt);
            o += p[size_t(j)] * f16_to_f32(vc[slot * kvd + kvh * hd + d]);
          }
          want[size_t(r) * qd + h * hd + d] = o / sum;
        }
      }

    DeviceBuf dq(q), dk(kc), dv(vc), dpos(pos), dseq(row_seq), dtab(tables), dout(q.size() * 4),
        dout8(size_t(rows) * x8_bytes(qd));
    AttentionArgs a;
    a.n_head = c.n_head, a.n_head_kv = c.n_head_kv, a.head_dim = hd, a.scale = scale, a.n_ctx = n_ctx;
    PagedKv pk;
    pk.row_seq = dseq.as<int32_t>(), pk.tables = dtab.as<int32_t>(), pk.max_blocks = max_blocks, pk.block_tokens = bt;
    // The mma rung takes 2 to 8 query heads per KV head of 64 or 128 dims; elsewhere the split kernels run.
    EXPECT_EQ(decode_attention_supported(DecodeAttention::Mma, a), group >= 2 && group <= 8 && (hd == 64 || hd == 128));
    for (DecodeAttention variant : {DecodeAttention::Split, DecodeAttention::Mma}) {
      for (int splits : {1, 3, 16, 300}) {  // 300: more splits than the merge's threads (and than positions)
        const std::string what = std::string(decode_attention_name(variant)) + " heads " + std::to_string(c.n_head) + "/" +
                                 std::to_string(c.n_head_kv) + " hd " + std::to_string(hd) + " block " + std::to_string(bt) +
                                 " rows " + std::to_string(rows) + " splits " + std::to_string(splits);
        DeviceBuf work(attention_work_floats(a, rows, splits) * 4);
        CUDA_OK(cudaMemset(dout.p, 0xFF, dout.n));
        CUDA_OK(cudaMemset(dout8.p, 0xFF, dout8.n));
        DeviceBuf dout16(q.size() * 2);
        CUDA_OK(cudaMemset(dout16.p, 0xFF, dout16.n));
        const Status st = attention_paged(dq.as<float>(), rows, dpos.as<int32_t>(), pk, dk.p, dv.p, a, splits,
                                          work.as<float>(), dout.as<float>(), nullptr, dout8.p, dout16.p, variant);
        ASSERT_TRUE(st.ok) << st.message << " " << what;
        CUDA_OK(cudaDeviceSynchronize());
        std::vector<float> got(q.size());
        std::vector<uint8_t> got8(dout8.n);
        CUDA_OK(cudaMemcpy(got.data(), dout.p, dout.n, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(got8.data(), dout8.p, dout8.n, cudaMemcpyDeviceToHost));
        double e = 0, n = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          e += std::isfinite(got[i]) ? (got[i] - want[i]) * (got[i] - want[i]) : INFINITY;
          n += want[i] * want[i];
        }
        // Both rungs accumulate in f32 (the mma rung's Q and P as f16 hi + lo pairs, ~22 bits).
        EXPECT_LE(std::sqrt(e / n), 1e-5) << what;
        EXPECT_EQ(got8, host_x8(got, qd)) << what << ": int8 copy differs from the host's blocks of out";
        std::vector<uint16_t> got16(q.size()), want16(q.size());
        CUDA_OK(cudaMemcpy(got16.data(), dout16.p, dout16.n, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < got.size(); ++i) want16[i] = f32_to_f16(got[i]);
        EXPECT_EQ(got16, want16) << what << ": f16 copy differs from out rounded";
      }
    }
  }
}

// The engine's decode rows through one kernel (attention_decode_rope_paged: RoPE, q/k head norms,
// the cache store at each row's slot, attention over the row's own sequence) against the two
// kernels it replaces (rope_kv_store at the slots, then attention_paged's split rung) on the same
// inputs: q rotated and the stored cache bit for bit (k too without GQA), the outputs within 1e-5
// (another summation order), out8 the host's blocks of the out it wrote and out16 that out rounded.
// Positions inside the warps' first round and past it (16 warps x 8 for head sizes up to 128, 8 x 8
// for 256), GQA groups of 1 to 8, head sizes 64 to 256, NEOX and adjacent pairs, with and without
// head norms; blocks no table names and the new rows' slots start as NaN.
TEST(AttentionPaged, DecodeRowsInOneKernelGiveTheTwoKernelsResults) {
  std::mt19937 rng(31);
  std::normal_distribution<float> nd(0.f, 1.f);
  struct Case {
    int n_head, n_head_kv, head_dim, block_tokens;
    std::vector<int> positions;  // one row a sequence
    bool norms, neox;
  };
  const Case cases[] = {{32, 8, 128, 16, {200, 3, 0}, false, false}, {8, 8, 64, 16, {33, 5}, false, true},
                        {4, 1, 128, 8, {70, 9, 255}, true, true},     {12, 4, 96, 32, {64, 65, 1, 31}, false, false},
                        {2, 2, 256, 16, {40, 130}, true, true},       {9, 3, 64, 16, {129, 1}, false, false},
                        {16, 2, 64, 16, {15, 16, 17, 250}, true, false}};
  for (const Case& c : cases) {
    const int hd = c.head_dim, qd = c.n_head * hd, kvd = c.n_head_kv * hd, bt = c.block_tokens;
    const int rows = int(c.positions.size());
    SCOPED_TRACE(testing::Message() << c.n_head << "/" << c.n_head_kv << " heads of " << hd << ", rows " << rows
                                    << (c.norms ? ", head norms" : ""));
    int max_blocks = 0, used = 0;
    for (int p : c.positions) max_blocks = std::max(max_blocks, p / bt + 1), used += p / bt + 1;
    const int n_blocks = used + 3, n_ctx = n_blocks * bt;
    std::vector<int32_t> pool(static_cast<size_t>(n_blocks));
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    std::vector<int32_t> tables(size_t(rows) * size_t(max_blocks), 0), row_seq(static_cast<size_t>(rows)),
        slots(static_cast<size_t>(rows));
    std::vector<uint16_t> kc(size_t(n_ctx) * kvd, 0x7E00), vc(kc.size(), 0x7E00);  // NaN
    size_t next = 0;
    for (int r = 0; r < rows; ++r) {
      const int p = c.positions[size_t(r)];
      row_seq[size_t(r)] = r;
      for (int b = 0; b <= p / bt; ++b) tables[size_t(r) * max_blocks + b] = pool[next++];
      for (int j = 0; j < p; ++j) {  // (the row at p: written by the kernels)
        const size_t slot = size_t(tables[size_t(r) * max_blocks + j / bt]) * bt + size_t(j % bt);
        for (int i = 0; i < kvd; ++i) kc[slot * kvd + i] = f32_to_f16(nd(rng)), vc[slot * kvd + i] = f32_to_f16(nd(rng));
      }
      slots[size_t(r)] = tables[size_t(r) * max_blocks + p / bt] * bt + p % bt;
    }
    std::vector<float> q(size_t(rows) * qd), k(size_t(rows) * kvd), v(k.size()), qn(static_cast<size_t>(hd)),
        kn(static_cast<size_t>(hd));
    for (float& x : q) x = nd(rng);
    for (float& x : k) x = nd(rng);
    for (float& x : v) x = nd(rng);
    for (float& x : qn) x = 1.f + 0.3f * nd(rng);
    for (float& x : kn) x = 1.f + 0.3f * nd(rng);
    DeviceBuf dq1(q), dq2(q), dk1(k), dk2(k), dv(v), dkc1(kc), dkc2(kc), dvc1(vc), dvc2(vc), dpos(c.positions),
        dseq(row_seq), dtab(tables), dslots(slots), dqn(qn), dkn(kn), dout1(q.size() * 4), dout2(q.size() * 4),
        dout8(size_t(rows) * x8_bytes(qd)), dout16(q.size() * 2);
    AttentionArgs a;
    a.n_head = c.n_head, a.n_head_kv = c.n_head_kv, a.head_dim = hd, a.scale = 1.f / std::sqrt(float(hd)), a.n_ctx = n_ctx;
    RopeArgs r;
    r.n_heads = c.n_head, r.head_dim = hd, r.n_rot = hd, r.neox = c.neox;
    HeadNorms norms;
    if (c.norms) norms = {dqn.as<float>(), dkn.as<float>(), 1e-6f};
    PagedKv pk;
    pk.row_seq = dseq.as<int32_t>(), pk.tables = dtab.as<int32_t>(), pk.max_blocks = max_blocks, pk.block_tokens = bt;
    ASSERT_TRUE(attention_decode_rope_paged_supported(a, r, 256, c.norms));
    CUDA_OK(cudaMemset(dout1.p, 0xFF, dout1.n));
    CUDA_OK(cudaMemset(dout8.p, 0xFF, dout8.n));
    CUDA_OK(cudaMemset(dout16.p, 0xFF, dout16.n));
    Status st = attention_decode_rope_paged(dq1.as<float>(), dk1.as<float>(), dv.as<float>(), rows, dpos.as<int32_t>(), pk,
                                            r, dkc1.p, dvc1.p, a, dout1.as<float>(), nullptr, dout8.p, dout16.p, norms, 256);
    ASSERT_TRUE(st.ok) << st.message;
    st = rope_kv_store(dq2.as<float>(), dk2.as<float>(), dv.as<float>(), rows, dpos.as<int32_t>(), r, dkc2.p, dvc2.p, a,
                       nullptr, dslots.as<int32_t>(), norms);
    ASSERT_TRUE(st.ok) << st.message;
    DeviceBuf work(attention_work_floats(a, rows, 1) * 4);
    st = attention_paged(dq2.as<float>(), rows, dpos.as<int32_t>(), pk, dkc2.p, dvc2.p, a, 1, work.as<float>(),
                         dout2.as<float>(), nullptr, nullptr, nullptr, DecodeAttention::Split);
    ASSERT_TRUE(st.ok) << st.message;
    CUDA_OK(cudaDeviceSynchronize());
    const auto get_f = [](const DeviceBuf& d) {
      std::vector<float> h(d.n / 4);
      cudaMemcpy(h.data(), d.p, d.n, cudaMemcpyDeviceToHost);
      return h;
    };
    const auto get_u16 = [](const DeviceBuf& d) {
      std::vector<uint16_t> h(d.n / 2);
      cudaMemcpy(h.data(), d.p, d.n, cudaMemcpyDeviceToHost);
      return h;
    };
    EXPECT_EQ(get_u16(dkc1), get_u16(dkc2)) << "the stored k rows";
    EXPECT_EQ(get_u16(dvc1), get_u16(dvc2)) << "the stored v rows";
    const std::vector<float> q1 = get_f(dq1), q2 = get_f(dq2);
    EXPECT_EQ(std::memcmp(q1.data(), q2.data(), q1.size() * 4), 0) << "q rotated";
    if (c.n_head == c.n_head_kv) {
      const std::vector<float> k1 = get_f(dk1), k2 = get_f(dk2);
      EXPECT_EQ(std::memcmp(k1.data(), k2.data(), k1.size() * 4), 0) << "k rotated";
    }
    const std::vector<float> got = get_f(dout1), want = get_f(dout2);
    double e = 0, n = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      e += std::isfinite(got[i]) ? double(got[i] - want[i]) * (got[i] - want[i]) : INFINITY;
      n += double(want[i]) * want[i];
    }
    EXPECT_LE(std::sqrt(e / n), 1e-5);
    std::vector<uint8_t> got8(dout8.n);
    CUDA_OK(cudaMemcpy(got8.data(), dout8.p, dout8.n, cudaMemcpyDeviceToHost));
    EXPECT_EQ(got8, host_x8(got, qd)) << "int8 copy";
    std::vector<uint16_t> want16(got.size());
    for (size_t i = 0; i < got.size(); ++i) want16[i] = f32_to_f16(got[i]);
    EXPECT_EQ(get_u16(dout16), want16) << "f16 copy";
  }
}

// The host's rule: the lowest id among equal maxima; values not above -FLT_MAX never win (0 when
// none does).
int host_argmax(const float* row, int cols) {
  int best = -1;
  for (int i = 0; i < cols; ++i)
    if (row[i] > -FLT_MAX && (best < 0 || row[i] > row[best])) best = i;
  return std::max(best, 0);
}

// A prompt chunk over a paged cache (attention_prefill_paged: the engine's chunks of 16 rows and
// more) gives bit for bit what the contiguous prefill kernel of the same rung gives over the same
// values (the rung it runs as: v1 and, where they cannot, v3 / v4 run as v2): positions p0 .. p0 +
// rows - 1 of a sequence whose blocks come from a shuffled pool (the others NaN), the output
// poisoned with NaN; GQA and plain heads, head_dim 128 and 64, chunks that start inside a block
// and end inside one, several 128-key tiles and 128-row blocks, blocks of 8 to 256 positions (12:
// no TMA box follows it, so v2), head_dim 256 with a sliding window (v2). On an sm_90 device v3
// and v4 must run as themselves where the block size, head_dim and window allow.
TEST(AttentionPaged, PromptChunkOverBlocksGivesTheContiguousKernelsBits) {
  std::mt19937 rng(29);
  std::normal_distribution<float> nd(0.f, 1.f);
  struct Chunk {
    int n_head, n_head_kv, head_dim, block_tokens, p0, rows;
    int window = 0;
  };
  const bool hopper = sm90_device();
  for (const Chunk& c : {Chunk{32, 8, 128, 16, 60, 90}, Chunk{8, 8, 64, 8, 0, 37}, Chunk{4, 1, 128, 32, 5, 200},
                         Chunk{8, 2, 128, 16, 300, 400}, Chunk{4, 2, 64, 256, 100, 300}, Chunk{4, 2, 128, 12, 20, 150},
                         Chunk{4, 1, 256, 16, 40, 300, 128}}) {
    SCOPED_TRACE(testing::Message() << c.n_head << "/" << c.n_head_kv << " heads of " << c.head_dim << ", blocks of "
                                    << c.block_tokens << ", rows " << c.p0 << ".." << c.p0 + c.rows - 1 << ", window "
                                    << c.window);
    const int len = c.p0 + c.rows, kvd = c.n_head_kv * c.head_dim, qd = c.n_head * c.head_dim, bt = c.block_tokens;
    const int n_seq_blocks = (len + bt - 1) / bt, n_blocks = n_seq_blocks + 5;
    std::vector<int32_t> pool(static_cast<size_t>(n_blocks));
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    const std::vector<int32_t> table(pool.begin(), pool.begin() + n_seq_blocks);
    std::vector<uint16_t> kc(size_t(len) * kvd), vc(size_t(len) * kvd);  // contiguous: position j is row j
    for (auto& x : kc) x = f32_to_f16(nd(rng));
    for (auto& x : vc) x = f32_to_f16(nd(rng));
    std::vector<uint16_t> kp(size_t(n_blocks) * bt * kvd, 0x7E00), vp(kp.size(), 0x7E00);  // paged, NaN elsewhere
    for (int j = 0; j < len; ++j) {
      const size_t slot = size_t(table[size_t(j / bt)]) * bt + size_t(j % bt);
      std::copy_n(kc.begin() + ptrdiff_t(j) * kvd, kvd, kp.begin() + ptrdiff_t(slot) * kvd);
      std::copy_n(vc.begin() + ptrdiff_t(j) * kvd, kvd, vp.begin() + ptrdiff_t(slot) * kvd);
    }
    std::vector<float> q(size_t(c.rows) * qd);
    for (float& x : q) x = nd(rng);
    std::vector<int32_t> pos(static_cast<size_t>(c.rows));
    std::iota(pos.begin(), pos.end(), c.p0);
    AttentionArgs a;
    a.n_head = c.n_head, a.n_head_kv = c.n_head_kv, a.head_dim = c.head_dim, a.kv_type = GgmlType::F16;
    a.scale = 1.f / std::sqrt(float(c.head_dim));
    a.n_ctx = n_blocks * bt;
    a.window = c.window;
    DeviceBuf dq(q), dpos(pos), dtab(table), dkc(kc), dvc(vc), dkp(kp), dvp(vp), d1(q.size() * 4), d2(q.size() * 4),
        h1(q.size() * 2), h2(q.size() * 2);
    CUDA_OK(cudaMemset(d1.p, 0xFF, d1.n));
    CUDA_OK(cudaMemset(d2.p, 0xFF, d2.n));
    const auto* qp = static_cast<const float*>(dq.p);
    const auto* pp = static_cast<const int32_t*>(dpos.p);
    AttentionArgs ac = a;
    ac.n_ctx = len;
    for (PrefillAttention v : kPrefillAttentionRungs) {
      const bool as_itself = prefill_attention_paged_runs(v, a, bt, qp, dkp.p, dvp.p);
      const PrefillAttention ran = as_itself ? v : PrefillAttention::V2Pipelined;
      SCOPED_TRACE(testing::Message() << prefill_attention_name(v) << " (as " << prefill_attention_name(ran) << ")");
      if (v >= PrefillAttention::V3Wgmma && hopper && bt % 8 == 0 && c.head_dim <= 128 && c.window == 0)
        EXPECT_TRUE(as_itself) << "does not run on this sm_90 device";
      CUDA_OK(cudaMemset(d1.p, 0xFF, d1.n));
      CUDA_OK(cudaMemset(d2.p, 0xFF, d2.n));
      CUDA_OK(cudaMemset(h2.p, 0xFF, h2.n));
      Status st = attention_prefill(qp, c.rows, pp, dkc.p, dvc.p, ac, static_cast<float*>(d1.p), nullptr, h1.p,
                                    GgmlType::F16, ran);
      ASSERT_TRUE(st.ok) << st.message;
      st = attention_prefill_paged(qp, c.rows, pp, static_cast<const int32_t*>(dtab.p), bt, dkp.p, dvp.p, a,
                                   static_cast<float*>(d2.p), nullptr, h2.p, v);
      ASSERT_TRUE(st.ok) << st.message;
      CUDA_OK(cudaDeviceSynchronize());
      std::vector<float> want(q.size()), got(q.size());
      CUDA_OK(cudaMemcpy(want.data(), d1.p, d1.n, cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(got.data(), d2.p, d2.n, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_TRUE(std::isfinite(got[i])) << "element " << i;
        ASSERT_EQ(got[i], want[i]) << "element " << i;
      }
      std::vector<uint16_t> want16(q.size()), got16(q.size());
      CUDA_OK(cudaMemcpy(want16.data(), h1.p, h1.n, cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(got16.data(), h2.p, h2.n, cudaMemcpyDeviceToHost));
      EXPECT_EQ(got16, want16) << "the f16 copy";
    }
  }
  AttentionArgs a;
  a.n_head = a.n_head_kv = 8, a.head_dim = 128, a.kv_type = GgmlType::F16, a.n_ctx = 64;
  DeviceBuf b(1 << 16);
  const auto* f = static_cast<const float*>(b.p);
  const auto* i = static_cast<const int32_t*>(b.p);
  EXPECT_FALSE(attention_prefill_paged(f, 4, i, i, 0, b.p, b.p, a, static_cast<float*>(b.p), nullptr).ok);  // block size 0
  EXPECT_FALSE(attention_prefill_paged(f, 4, i, nullptr, 16, b.p, b.p, a, static_cast<float*>(b.p), nullptr).ok);
}

TEST(ArgmaxRows, FirstMaximumOfEveryRow) {
  std::mt19937 rng(22);
  std::normal_distribution<float> nd(0.f, 3.f);
  for (int cols : {32000, 32001, 151936, 4, 7})
    for (int rows : {1, 3, 64}) {
      std::vector<float> l(size_t(rows) * cols);
      for (float& x : l) x = nd(rng);
      for (int r = 0; r < rows; ++r) {
        float* row = &l[size_t(r) * cols];
        const int a = int(rng() % uint32_t(cols)), b = int(rng() % uint32_t(cols));
        switch (r % 4) {
          case 0: row[a] = row[b] = 40.f; break;                        // a tie at the maximum
          case 1: row[a] = NAN, row[b] = 30.f; break;                   // NaN never wins
          case 2: std::fill(row, row + cols, -INFINITY); break;         // nothing wins: 0
          default: row[cols - 1] = 50.f; break;                         // the last column
        }
      }
      DeviceBuf dl(l.size() * 4), did(size_t(rows) * 4), dmax(size_t(rows) * 4);
      CUDA_OK(cudaMemcpy(dl.p, l.data(), dl.n, cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemset(did.p, 0xFF, did.n));
      ASSERT_TRUE(argmax_rows(dl.as<float>(), rows, cols, did.as<int32_t>(), nullptr, dmax.as<float>()).ok);
      CUDA_OK(cudaDeviceSynchronize());
      std::vector<int32_t> ids(static_cast<size_t>(rows));
      std::vector<float> mx(static_cast<size_t>(rows));
      CUDA_OK(cudaMemcpy(ids.data(), did.p, did.n, cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(mx.data(), dmax.p, dmax.n, cudaMemcpyDeviceToHost));
      for (int r = 0; r < rows; ++r) {
        const float* row = &l[size_t(r) * cols];
        const int want = host_argmax(row, cols);
        EXPECT_EQ(ids[size_t(r)], want) << "cols " << cols << " rows " << rows << " row " << r;
        if (r % 4 != 2) EXPECT_EQ(mx[size_t(r)], row[want]) << "cols " << cols << " row " << r;
      }
    }
}

}  // namespace
