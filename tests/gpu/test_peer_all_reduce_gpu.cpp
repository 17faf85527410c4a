// The peer all-reduce kernels fused with the residual add (kernels/ops/peer_all_reduce.h) against
// the host: two ranks on GPU 0, each on its own stream with its own slots, epochs and
// grid-barrier words, as a group of two GPUs would have them on two. Several calls in a row (both
// slot parities, the epochs and the barrier's counter moving on, the two kernels interleaved),
// widths of one partly used block to 8192, the three kernels mixed in calls queued back to back,
// and calls across the wrap of the 32-bit epoch.
// x must be the rank-order sum (added to x), bit for bit on both ranks.
//   - peer_all_reduce_add_x8 (norm pending): the int8 blocks those of x * gain (host_x8, bit for
//     bit), the blocks' sums of squares within f64 rounding;
//   - peer_all_reduce_add_norm (norm computed): h = rmsnorm(x) * w within 1e-6, the same h on both
//     ranks, and its int8 blocks those of the h it wrote.
#include "gpu_test_util.h"
#include "kernels/common/q8_blocks.h"
#include "kernels/ops/peer_all_reduce.h"
#include "x8_host.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

namespace kn = lamina::kernels;

namespace {

constexpr int kRanks = 2;
constexpr int64_t kMax = 8192;

template <class T>
std::vector<T> download(const DeviceBuf& d, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), d.p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

void upload(const DeviceBuf& d, const std::vector<float>& h) {
  ASSERT_EQ(cudaMemcpy(d.p, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
}

// Two ranks' buffers and streams on GPU 0.
struct TwoRanks {
  DeviceBuf slots[kRanks] = {DeviceBuf(kn::peer_slots_bytes(kRanks, kMax)), DeviceBuf(kn::peer_slots_bytes(kRanks, kMax))};
  DeviceBuf local[kRanks] = {DeviceBuf(kn::kPeerLocalBytes), DeviceBuf(kn::kPeerLocalBytes)};
  kn::PeerAllReduce g[kRanks];
  cudaStream_t s[kRanks] = {};
  TwoRanks() {
    for (int r = 0; r < kRanks; ++r) {
      cudaMemset(slots[r].p, 0, slots[r].n);  // (no word holds an epoch yet)
      cudaMemset(local[r].p, 0, local[r].n);
      cudaStreamCreateWithFlags(&s[r], cudaStreamNonBlocking);
      g[r].ranks = kRanks, g[r].rank = r, g[r].max_elems = kMax;
      for (int p = 0; p < kRanks; ++p) g[r].slots[p] = slots[p].as<uint64_t>();
      kn::set_peer_local(g[r], local[r].p);
    }
  }
  // Both ranks' blocks as if `last` calls had run (the epoch each block ran last).
  void set_epochs(uint32_t last) {
    const std::vector<uint32_t> e(kn::kPeerMaxBlocks, last);
    for (auto& l : local) CUDA_OK(cudaMemcpy(l.p, e.data(), e.size() * 4, cudaMemcpyHostToDevice));
  }
  ~TwoRanks() {
    for (auto& st : s) cudaStreamDestroy(st);
  }
};

// One call's inputs: each rank's partial sums, the residual x (the same on both), the norm weight.
struct Inputs {
  std::vector<float> part[kRanks], x, w;
  Inputs(int64_t n, std::mt19937& rng) {
    std::normal_distribution<float> nd(0.f, 1.f);
    const size_t un = static_cast<size_t>(n);
    for (auto& p : part) {
      p.resize(un);
      for (float& v : p) v = nd(rng);
    }
    x.resize(un), w.resize(un);
    for (float& v : x) v = 4.f * nd(rng);
    for (float& v : w) v = 1.f + 0.5f * nd(rng);
    x[5] = 300.f;  // an outlier: its block keeps it wide
  }
  std::vector<float> sum() const {  // x + (part 0 + part 1): the bits every rank must have
    std::vector<float> s(x.size());
    for (size_t i = 0; i < x.size(); ++i) s[i] = x[i] + (part[0][i] + part[1][i]);
    return s;
  }
};

enum class Kind { Plain, Pending, Computed };  // peer_all_reduce, _add_x8, _add_norm

// One call of a kernel on both ranks: its inputs, each rank's buffers (outputs poisoned), the
// launch on a rank's stream, and the check of what it left.
struct Call {
  Kind kind;
  int64_t n;
  size_t un;
  Inputs in;
  DeviceBuf dw;
  std::vector<std::unique_ptr<DeviceBuf>> dpart, dx, dh, d8, dss;
  Call(Kind k, int64_t n_, std::mt19937& rng) : kind(k), n(n_), un(static_cast<size_t>(n_)), in(n_, rng), dw(un * 4) {
    upload(dw, in.w);
    for (int r = 0; r < kRanks; ++r) {
      dpart.push_back(std::make_unique<DeviceBuf>(un * 4)), dx.push_back(std::make_unique<DeviceBuf>(un * 4));
      dh.push_back(std::make_unique<DeviceBuf>(un * 4)), d8.push_back(std::make_unique<DeviceBuf>(kn::x8_bytes(n)));
      dss.push_back(std::make_unique<DeviceBuf>(un / 32 * 8));
      upload(*dpart[size_t(r)], in.part[r]);
      upload(*dx[size_t(r)], kind == Kind::Plain ? in.part[r] : in.x);  // (the plain kernel sums x in place)
      cudaMemset(d8[size_t(r)]->p, 0xA5, d8[size_t(r)]->n);  // poison
      cudaMemset(dss[size_t(r)]->p, 0xFF, dss[size_t(r)]->n);
      cudaMemset(dh[size_t(r)]->p, 0xFF, dh[size_t(r)]->n);
    }
  }
  kn::Status launch(const TwoRanks& t, int r) const {
    const size_t k = size_t(r);
    switch (kind) {
      case Kind::Plain: return kn::peer_all_reduce(t.g[r], dx[k]->as<float>(), n, t.s[r]);
      case Kind::Pending:
        return kn::peer_all_reduce_add_x8(t.g[r], dpart[k]->as<float>(), dx[k]->as<float>(), dw.as<float>(), n,
                                          d8[k]->p, dss[k]->as<double>(), t.s[r]);
      case Kind::Computed:
        return kn::peer_all_reduce_add_norm(t.g[r], dpart[k]->as<float>(), dx[k]->as<float>(), dw.as<float>(), n,
                                            1e-5f, dh[k]->as<float>(), d8[k]->p, t.s[r]);
    }
    return kn::Status::error("no such kind");
  }
  void verify() const {
    std::vector<float> want = in.sum();
    if (kind == Kind::Plain)  // part 0 + part 1 only
      for (size_t i = 0; i < un; ++i) want[i] = in.part[0][i] + in.part[1][i];
    const char* what = kind == Kind::Plain ? "plain" : kind == Kind::Pending ? "pending" : "computed";
    double ss = 0;
    for (float v : want) ss += double(v) * v;
    const float sc = float(1.0 / std::sqrt(ss / double(n) + 1e-5));
    std::vector<float> h0;
    for (int r = 0; r < kRanks; ++r) {
      const size_t k = size_t(r);
      const std::vector<float> x = download<float>(*dx[k], un);
      EXPECT_EQ(std::memcmp(x.data(), want.data(), un * 4), 0) << "x, rank " << r << ", n " << n << ", " << what;
      if (kind == Kind::Plain) continue;
      const std::vector<uint8_t> x8 = download<uint8_t>(*d8[k], kn::x8_bytes(n));
      if (kind == Kind::Pending) {
        std::vector<float> wg(un);
        for (size_t i = 0; i < un; ++i) wg[i] = want[i] * in.w[i];
        EXPECT_EQ(x8, host_x8(wg, n)) << "int8 blocks, rank " << r << ", n " << n;
        const std::vector<double> got_ss = download<double>(*dss[k], un / 32);
        for (size_t b = 0; b < un / 32; ++b) {
          double e = 0;
          for (size_t j = 0; j < 32; ++j) e += double(want[b * 32 + j]) * want[b * 32 + j];
          EXPECT_NEAR(got_ss[b], e, 1e-12 * e) << "block " << b << ", rank " << r << ", n " << n;
        }
        continue;
      }
      const std::vector<float> h = download<float>(*dh[k], un);
      int bad = 0;
      for (size_t i = 0; i < un; ++i) {
        const float e = want[i] * sc * in.w[i];
        bad += !(std::fabs(h[i] - e) <= 1e-6f * std::fabs(e) + 1e-7f);
      }
      EXPECT_EQ(bad, 0) << "h, rank " << r << ", n " << n;
      EXPECT_EQ(x8, host_x8(h, n)) << "int8 blocks of h, rank " << r << ", n " << n;
      if (r == 0) h0 = h;
      else EXPECT_EQ(std::memcmp(h.data(), h0.data(), un * 4), 0) << "h differs between the ranks, n " << n;
    }
  }
};

// Launches a call on both ranks (each waits for the other's words), then checks it.
void check_call(TwoRanks& t, Kind kind, int64_t n, std::mt19937& rng) {
  const Call c(kind, n, rng);
  CUDA_OK(cudaDeviceSynchronize());
  for (int r = 0; r < kRanks; ++r) ASSERT_TRUE(c.launch(t, r));
  CUDA_OK(cudaDeviceSynchronize());
  c.verify();
}

TEST(PeerAllReduce, AddWithPendingNormGivesTheHostsSumsBlocksAndSquares) {
  TwoRanks t;
  std::mt19937 rng(11);
  for (int64_t n : {96, 4096, 8192, 4096}) check_call(t, Kind::Pending, n, rng);
}

TEST(PeerAllReduce, AddWithTheNormComputedGivesTheHostsSumAndNorm) {
  TwoRanks t;
  std::mt19937 rng(12);
  for (int64_t n : {8192, 96, 8192, 4096, 8192}) check_call(t, Kind::Computed, n, rng);
}

// Calls across the 32-bit epoch's wrap. First a wide call at epoch 2, whose words would still
// say 2 past 96 unless consumed words are zeroed; then the epochs are set five calls before the
// wrap, whose narrow calls leave the words past 96 as they were: a wide call at epoch 0 would
// take the zeroed words as sent, and the wide call at 2 after the wrap (the epochs skip 0) the
// stale ones. Every call's sums must be the host's.
TEST(PeerAllReduce, CallsAcrossTheEpochWrapKeepTheirSums) {
  TwoRanks t;
  std::mt19937 rng(14);
  t.set_epochs(1u);
  check_call(t, Kind::Pending, 8192, rng);  // epoch 2, parity 0: every word of the slots
  t.set_epochs(0xFFFFFFFBu);
  const Kind kinds[] = {Kind::Plain, Kind::Pending, Kind::Computed};
  const int64_t widths[] = {96, 96, 96, 96, 8192, 8192, 4096, 8192};
  for (int i = 0; i < 8; ++i) check_call(t, kinds[i % 3], widths[i], rng);
}

// The three kernels mixed on the same slots and epochs, widths mixed, every call queued on both
// streams with no wait between calls, and rank 1's stream held up by the host now and then: a
// rank runs up to a call ahead of the other, and the parity slots must keep the calls apart.
// The calls are queued rank 0, rank 1, call by call: the two ranks share GPU 0 here, and CUDA
// does not promise that two streams have hardware queues of their own (after the many streams of
// the tests before, they may share one). Queued all of rank 0's first, rank 0's first call stood
// before rank 1's in such a queue with rank 0's second behind it, waiting on it: a deadlock (the
// kernels' 10 s trap, on an H100 in the whole test binary, not when run alone).
TEST(PeerAllReduce, MixedCallsQueuedBackToBackKeepEachCallsSums) {
  TwoRanks t;
  std::mt19937 rng(13);
  std::vector<std::unique_ptr<Call>> calls;
  const Kind kinds[] = {Kind::Pending, Kind::Plain, Kind::Computed, Kind::Plain, Kind::Pending, Kind::Computed};
  const int64_t widths[] = {4096, 8192, 8192, 96, 96, 4096, 2048, 4096};
  for (int i = 0; i < 24; ++i) calls.push_back(std::make_unique<Call>(kinds[i % 6], widths[(i * 5) % 8], rng));
  CUDA_OK(cudaDeviceSynchronize());
  const auto hold = [](void*) { std::this_thread::sleep_for(std::chrono::microseconds(300)); };
  for (size_t i = 0; i < calls.size(); ++i)
    for (int r = 0; r < kRanks; ++r) {
      if (r == 1 && i % 5 == 2) CUDA_OK(cudaLaunchHostFunc(t.s[r], hold, nullptr));
      ASSERT_TRUE(calls[i]->launch(t, r));
    }
  CUDA_OK(cudaDeviceSynchronize());
  for (const auto& c : calls) c->verify();
}

}  // namespace
