// lamina kbench allreduce: the tensor-parallel all-reduce (issue #35) on GPUs 0..N-1, each way the
// CUDA backend can run it after a row-parallel GEMV, for a vector of each width (a decode row is
// 4096 or 8192; a batch of rows is rows x that, up to 2^20):
//   boundary    a chain of tiny kernels (a 32-element add): the floor a graph's kernel boundary sets
//   peer-ar     peer_all_reduce alone, and nccl-ar ncclAllReduce alone: the transports
//   peer        peer_all_reduce, then the add+norm kernel of one row (--tp-all-reduce peer)
//   fused       peer_all_reduce_add_x8: the sum, the add and the pending norm's blocks (the default
//               where a norm can pend)
//   fused-wide  peer_all_reduce_add_norm: the sum, the add and the norm computed (16 blocks, a grid
//               barrier; the default where no norm can pend)
//   nccl        ncclAllReduce, then the add+norm kernel of one row (--tp-all-reduce nccl)
// Widths above 16384 (batches of rows, not one row) run the transports only.
// Each rank records a CUDA graph of 64 calls on its own thread and stream; the ranks replay their
// graphs together (a barrier before each replay); µs per call is rank 0's median over the timed
// replays (CUDA events around each). Inputs are random normal floats.
#include "cmd_kbench_allreduce.h"

#include "backend/cuda/nccl_group.h"
#include "core/error.h"
#include "kernels/common/q8_blocks.h"
#include "kernels/ops/ops.h"
#include "kernels/ops/peer_all_reduce.h"

#include <fmt/format.h>

#include "kbench_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <barrier>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace lamina::cli {
namespace {

namespace kn = lamina::kernels;

constexpr int kCalls = 64;  // calls per recorded graph: a decode step of a 32-layer model has 64
const char* const kMethods[] = {"boundary", "peer-ar", "nccl-ar", "peer", "fused", "fused-wide", "nccl"};
constexpr int kMethodCount = 7;
constexpr int64_t kMaxRow = 16384;  // wider vectors are batches of rows: the transports only

void check(cudaError_t e, const char* what) { kbench_check(e, "allreduce", what); }
void check(const kn::Status& st) {
  if (!st) fail("kbench allreduce: {}", st.message);
}

// One rank's device buffers for a row of n.
struct RankBuffers {
  float *part = nullptr, *x = nullptr, *w = nullptr, *h = nullptr, *tiny = nullptr;
  void* x8 = nullptr;
  double* ss = nullptr;
  RankBuffers(int64_t n, uint64_t seed) {
    const size_t f = size_t(n) * sizeof(float);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> host(static_cast<size_t>(n));
    for (float** p : {&part, &x, &w, &h, &tiny}) {
      check(cudaMalloc(p, f), "buffers");
      for (float& v : host) v = nd(rng);
      check(cudaMemcpy(*p, host.data(), f, cudaMemcpyHostToDevice), "buffers");
    }
    check(cudaMalloc(&x8, kn::x8_bytes(n)), "buffers");
    check(cudaMalloc(&ss, size_t(n / 32) * sizeof(double)), "buffers");
  }
  ~RankBuffers() {
    for (void* p : {static_cast<void*>(part), static_cast<void*>(x), static_cast<void*>(w), static_cast<void*>(h),
                    static_cast<void*>(tiny), x8, static_cast<void*>(ss)})
      cudaFree(p);
  }
  RankBuffers(const RankBuffers&) = delete;
  RankBuffers& operator=(const RankBuffers&) = delete;
};

// One call of method m on rank r.
void launch(int m, const NcclGroup& g, int r, RankBuffers& b, int64_t n, cudaStream_t s) {
  const kn::PeerAllReduce* peer = g.peer(r);
  const float eps = 1e-5f;
  std::string why;
  switch (m) {
    case 0: return check(kn::add(b.tiny, b.tiny + 16, 16, s));
    case 1: return check(kn::peer_all_reduce(*peer, b.part, n, s));
    case 2:
      if (!nccl_all_reduce_sum(g.comm(r), b.part, size_t(n), s, &why)) fail("kbench allreduce: ncclAllReduce: {}", why);
      return;
    case 3:
      check(kn::peer_all_reduce(*peer, b.part, n, s));
      return check(kn::add_norm(b.x, b.part, nullptr, b.w, 1, n, eps, b.h, s, b.x8));
    case 4: return check(kn::peer_all_reduce_add_x8(*peer, b.part, b.x, b.w, n, b.x8, b.ss, s));
    case 5: return check(kn::peer_all_reduce_add_norm(*peer, b.part, b.x, b.w, n, eps, b.h, b.x8, s));
    case 6:
      if (!nccl_all_reduce_sum(g.comm(r), b.part, size_t(n), s, &why)) fail("kbench allreduce: ncclAllReduce: {}", why);
      return check(kn::add_norm(b.x, b.part, nullptr, b.w, 1, n, eps, b.h, s, b.x8));
  }
}

// Rank r's part of the run: for each width and method, record, replay together, time.
void rank_run(int r, const NcclGroup& g, const std::vector<int64_t>& widths, int reps, std::barrier<>& sync,
              std::vector<std::vector<double>>& us) {
  check(cudaSetDevice(r), "cudaSetDevice");
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  check(cudaEventCreate(&e0), "event");
  check(cudaEventCreate(&e1), "event");
  for (size_t wi = 0; wi < widths.size(); ++wi) {
    RankBuffers b(widths[wi], 100 * uint64_t(r) + wi);
    for (int m = 0; m < kMethodCount; ++m) {
      const bool peer = m == 1 || (m >= 3 && m <= 5);
      // (every rank sees the same group and widths: they skip the same methods)
      const bool runs = (!peer || g.peer(0)) && (m <= 2 || widths[wi] <= kMaxRow);
      sync.arrive_and_wait();
      if (!runs) continue;
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      check(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), "capture");
      for (int c = 0; c < kCalls; ++c) launch(m, g, r, b, widths[wi], s);
      check(cudaStreamEndCapture(s, &graph), "capture");
      check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
      std::vector<double> t;
      for (int i = 0; i < reps + 2; ++i) {  // two warm-up replays
        sync.arrive_and_wait();
        check(cudaEventRecord(e0, s), "event");
        check(cudaGraphLaunch(exec, s), "replay");
        check(cudaEventRecord(e1, s), "event");
        check(cudaEventSynchronize(e1), "replay");
        float ms = 0;
        check(cudaEventElapsedTime(&ms, e0, e1), "event");
        if (i >= 2) t.push_back(double(ms) * 1000.0 / kCalls);
      }
      std::sort(t.begin(), t.end());
      if (r == 0) us[wi][size_t(m)] = t[t.size() / 2];
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
    }
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(s);
}

std::vector<int64_t> parse_widths(const std::string& list) {
  std::vector<int64_t> w;
  std::stringstream in(list.empty() ? std::string("4096,8192,32768,131072,524288") : list);
  for (std::string item; std::getline(in, item, ',');) {
    int64_t v = 0;
    try {
      v = std::stoll(item);
    } catch (const std::exception&) {
      fail("--shapes: '{}' is not a width (kbench allreduce takes widths, e.g. 4096,8192)", item);
    }
    if (v < 32 || v % 32 || v > (int64_t(1) << 20)) fail("--shapes: width {} must be a multiple of 32 in 32..1048576", v);
    w.push_back(v);
  }
  return w;
}

}  // namespace

void run_kbench_allreduce(const KbenchAllReduceArgs& a) {
  const std::vector<int64_t> widths = parse_widths(a.widths);
  if (a.ranks < 2) fail("kbench allreduce: --tp must be 2 or more");
  const NcclGroup g(a.ranks, *std::max_element(widths.begin(), widths.end()));
  std::vector<std::vector<double>> us(widths.size(), std::vector<double>(kMethodCount, -1.0));
  std::barrier<> sync(a.ranks);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(size_t(a.ranks));
  for (int r = 0; r < a.ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        rank_run(r, g, widths, a.reps, sync, us);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
        sync.arrive_and_drop();
      }
    });
  for (auto& t : threads) t.join();
  for (const std::string& e : errors)
    if (!e.empty()) fail("{}", e);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  fmt::print("kbench allreduce: {} x {}, one row, {} calls per graph, µs per call (rank 0's median of {} replays){}\n",
             a.ranks, prop.name, kCalls, a.reps, g.peer(0) ? "" : "; no peer access: peer methods skipped");
  fmt::print("| width |");
  for (const char* m : kMethods) fmt::print(" {:>10} |", m);
  fmt::print("\n|---|");
  for (int m = 0; m < kMethodCount; ++m) fmt::print("---|");
  fmt::print("\n");
  for (size_t wi = 0; wi < widths.size(); ++wi) {
    fmt::print("| {:>5} |", widths[wi]);
    for (double v : us[wi]) {
      if (v < 0) fmt::print(" {:>10} |", "-");
      else fmt::print(" {:>10.2f} |", v);
    }
    fmt::print("\n");
  }
}

}  // namespace lamina::cli
