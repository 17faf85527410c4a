// The peer all-reduce with the residual add and a pending norm (kernels/ops/peer_all_reduce.h:
// peer_all_reduce_add_x8) against the host: two ranks on GPU 0, each on its own stream with its
// own slots, flags and epochs, as a group of two GPUs would have them on two. Three calls in a
// row (both slot parities, the epochs moving on), widths of one partly used block, 16 blocks and
// 16 blocks of two passes each. x must be the rank-order sum added to x, bit for bit on both
// ranks; the int8 blocks those of x * gain (host_x8, bit for bit); the sums of squares within
// f64 rounding.
#include "gpu_test_util.h"
#include "kernels/common/q8_blocks.h"
#include "kernels/ops/peer_all_reduce.h"
#include "x8_host.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace kn = lamina::kernels;

namespace {

TEST(PeerAllReduce, AddWithPendingNormGivesTheHostsSumsBlocksAndSquares) {
  constexpr int kRanks = 2;
  constexpr int64_t kMax = 8192;
  DeviceBuf slots0(size_t(2 * kRanks * kMax) * 4), slots1(size_t(2 * kRanks * kMax) * 4);
  DeviceBuf flags0(kRanks * kn::kPeerMaxBlocks * 4), flags1(kRanks * kn::kPeerMaxBlocks * 4);
  DeviceBuf epoch0(kn::kPeerMaxBlocks * 4), epoch1(kn::kPeerMaxBlocks * 4);
  for (const DeviceBuf* b : {&flags0, &flags1, &epoch0, &epoch1}) CUDA_OK(cudaMemset(b->p, 0, b->n));
  kn::PeerAllReduce g[kRanks];
  for (int r = 0; r < kRanks; ++r) {
    g[r].ranks = kRanks, g[r].rank = r, g[r].max_elems = kMax;
    g[r].slots[0] = slots0.as<float>(), g[r].slots[1] = slots1.as<float>();
    g[r].flags[0] = flags0.as<uint32_t>(), g[r].flags[1] = flags1.as<uint32_t>();
  }
  g[0].epoch = epoch0.as<uint32_t>(), g[1].epoch = epoch1.as<uint32_t>();
  cudaStream_t s[kRanks];
  for (auto& st : s) CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t n : {96, 4096, 8192, 4096}) {
    const size_t un = static_cast<size_t>(n);
    std::vector<float> part[kRanks], x(un), gain(un);
    for (auto& p : part) {
      p.resize(un);
      for (float& v : p) v = nd(rng);
    }
    for (float& v : x) v = 4.f * nd(rng);
    for (float& v : gain) v = 1.f + 0.5f * nd(rng);
    x[5] = 300.f;  // an outlier: the block keeps it wide
    DeviceBuf dpart0(size_t(n) * 4), dpart1(size_t(n) * 4), dgain(size_t(n) * 4);
    DeviceBuf dx0(size_t(n) * 4), dx1(size_t(n) * 4);
    DeviceBuf d80(kn::x8_bytes(n)), d81(kn::x8_bytes(n)), dss0(size_t(n / 32) * 8), dss1(size_t(n / 32) * 8);
    CUDA_OK(cudaMemcpy(dpart0.p, part[0].data(), size_t(n) * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dpart1.p, part[1].data(), size_t(n) * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dgain.p, gain.data(), size_t(n) * 4, cudaMemcpyHostToDevice));
    const DeviceBuf* dx[kRanks] = {&dx0, &dx1};
    const DeviceBuf* d8[kRanks] = {&d80, &d81};
    const DeviceBuf* dss[kRanks] = {&dss0, &dss1};
    const DeviceBuf* dp[kRanks] = {&dpart0, &dpart1};
    for (int r = 0; r < kRanks; ++r) {
      CUDA_OK(cudaMemcpy(dx[r]->p, x.data(), size_t(n) * 4, cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemset(d8[r]->p, 0xA5, d8[r]->n));  // poison
      CUDA_OK(cudaMemset(dss[r]->p, 0xFF, dss[r]->n));
    }
    CUDA_OK(cudaDeviceSynchronize());
    for (int r = 0; r < kRanks; ++r)  // both ranks in flight at once: each waits for the other's flags
      ASSERT_TRUE(kn::peer_all_reduce_add_x8(g[r], dp[r]->as<float>(), dx[r]->as<float>(), dgain.as<float>(), n,
                                             d8[r]->p, dss[r]->as<double>(), s[r]));
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> want(un), wg(un);
    for (int64_t i = 0; i < n; ++i) {
      want[size_t(i)] = x[size_t(i)] + (part[0][size_t(i)] + part[1][size_t(i)]);
      wg[size_t(i)] = want[size_t(i)] * gain[size_t(i)];
    }
    const std::vector<uint8_t> want8 = host_x8(wg, n);
    for (int r = 0; r < kRanks; ++r) {
      std::vector<float> got(un);
      std::vector<uint8_t> got8(kn::x8_bytes(n));
      std::vector<double> ss(size_t(n / 32));
      CUDA_OK(cudaMemcpy(got.data(), dx[r]->p, size_t(n) * 4, cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(got8.data(), d8[r]->p, got8.size(), cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(ss.data(), dss[r]->p, ss.size() * 8, cudaMemcpyDeviceToHost));
      EXPECT_EQ(std::memcmp(got.data(), want.data(), size_t(n) * 4), 0) << "x, rank " << r << ", n " << n;
      EXPECT_EQ(got8, want8) << "int8 blocks, rank " << r << ", n " << n;
      for (int64_t b = 0; b < n / 32; ++b) {
        double w = 0;
        for (int j = 0; j < 32; ++j) w += double(want[size_t(b * 32 + j)]) * want[size_t(b * 32 + j)];
        EXPECT_NEAR(ss[size_t(b)], w, 1e-12 * w) << "block " << b << ", rank " << r << ", n " << n;
      }
    }
  }
  for (auto& st : s) CUDA_OK(cudaStreamDestroy(st));
}

}  // namespace
