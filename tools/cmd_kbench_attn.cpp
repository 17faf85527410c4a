// lamina kbench attn: every prompt-attention rung (PrefillAttention) on a causal prompt of each
// length, one head shape (default Llama-3-8B's: 32 query heads, 8 KV heads, head_dim 128), with
// the ceilings measured or read in the same run:
//   TFLOP/s   4 x head_dim x n_head x T (T + 1) / 2 over the median time (the causal products'
//             FLOPs; skipped tiles count for nothing)
//   % peak    of SMs x clock x 4096 f16 FLOP per SM and clock (sm_90's dense tensor-core rate,
//             at the device's reported maximum clock; on another architecture the column is
//             only indicative)
//   % cuBLAS  of cublasGemmEx f16 (f32 accumulation) on a 8192^3 GEMM in the same run: what the
//             tensor cores give a plain dense product here
// Inputs are fresh random data: q f32 normal, the caches f16 from random floats. The prompt
// starts at position 0 and fills the cache (n_ctx = T). Each rung also runs with its 16-bit copy
// of the output (out16), as the prompt pass does.
#include "cmd_kbench_attn.h"
#include "tune_shapes.h"

#include "core/error.h"

#include <fmt/format.h>

#if defined(LAMINA_HAVE_CUDA)
#include "kernels/common/timing.h"
#include "kernels/ops/ops.h"

#include <cublas_v2.h>
#include "kbench_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <vector>
#endif

namespace lamina::cli {

#if defined(LAMINA_HAVE_CUDA)
namespace {

namespace kn = lamina::kernels;

void check(cudaError_t e, const char* what) { kbench_check(e, "attn", what); }

struct DevBuf : KbenchBuf {
  explicit DevBuf(size_t n) : KbenchBuf(n, "attn") {}
};

std::vector<int64_t> parse_lengths(const std::string& s) {
  std::vector<int64_t> v = parse_whole_list(s, 1, int64_t(1) << 20, "kbench attn: prompt length");
  if (v.empty()) fail("kbench attn: no prompt lengths");
  return v;
}

// cuBLAS f16 TFLOP/s on an n^3 GEMM (f32 accumulation): the dense tensor-core rate in this run.
double cublas_tflops(int64_t n, int reps, cudaStream_t s) {
  cublasHandle_t h = nullptr;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) fail("kbench attn: cublasCreate failed");
  cublasSetStream(h, s);
  const size_t bytes = size_t(n * n) * 2;
  DevBuf a(bytes), b(bytes), c(size_t(n * n) * 4);
  kn::fill_random_bytes(a.p, bytes, 21, s);
  kn::fill_random_bytes(b.p, bytes, 22, s);
  const float alpha = 1.f, beta = 0.f;
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  const double us = kn::median_time_us(
      [&](int) {
        const cublasStatus_t r = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(n), int(n), &alpha, a.p, CUDA_R_16F,
                                              int(n), b.p, CUDA_R_16F, int(n), &beta, c.p, CUDA_R_32F, int(n),
                                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (r != CUBLAS_STATUS_SUCCESS) st = r;
      },
      3, reps, s);
  cublasDestroy(h);
  if (st != CUBLAS_STATUS_SUCCESS) fail("kbench attn: the cuBLAS baseline GEMM failed (status {})", int(st));
  return 2.0 * double(n) * double(n) * double(n) / (us * 1e6);
}

}  // namespace

void run_kbench_attn(const KbenchAttnArgs& args) {
  const std::vector<int64_t> lengths = parse_lengths(args.lengths.empty() ? "1024,4096,8192,16384" : args.lengths);
  if (args.n_head < 1 || args.n_head_kv < 1 || args.n_head % args.n_head_kv != 0)
    fail("kbench attn: --heads {} / --kv-heads {}: the query heads must be a multiple of the KV heads", args.n_head,
         args.n_head_kv);
  if (args.head_dim != 64 && args.head_dim != 128) fail("kbench attn: --head-dim {}: 64 or 128", args.head_dim);
  int dev = 0, sms = 0, clock_khz = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "SM count");
  check(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev), "clock");
  if (sms <= 0 || clock_khz <= 0) fail("kbench attn: the device reports {} SMs at {} kHz", sms, clock_khz);
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, dev), "device properties");
  const double peak = double(sms) * double(clock_khz) * 1e3 * 4096.0 / 1e12;
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  const double cublas = cublas_tflops(8192, args.reps, s);
  fmt::print("{}: {} SMs at {} MHz: f16 dense peak {:.0f} TFLOP/s; cuBLAS f16 8192^3 GEMM {:.0f} TFLOP/s ({:.0f} %)\n",
             prop.name, sms, clock_khz / 1000, peak, cublas, 100.0 * cublas / peak);
  fmt::print("heads {} / {} (query / KV), head_dim {}, causal, from position 0; median of {} launches\n\n", args.n_head,
             args.n_head_kv, args.head_dim, args.reps);
  fmt::print("| tokens | rung | µs | TFLOP/s | % peak | % cuBLAS | rel. L2 to v2 |\n|---|---|---|---|---|---|---|\n");
  const int hd = args.head_dim;
  for (const int64_t t : lengths) {
    const size_t qn = size_t(t) * size_t(args.n_head) * hd, kvn = size_t(t) * size_t(args.n_head_kv) * hd;
    DevBuf q(qn * 4), kc(kvn * 2), vc(kvn * 2), out(qn * 4), out16(qn * 2), pos(size_t(t) * 4);
    kn::fill_random_floats(static_cast<float*>(q.p), qn, 31 + uint64_t(t), 1.f, s);
    {  // the caches: random floats rounded to f16 (random bytes would hold NaNs and infinities)
      DevBuf tmp(kvn * 4);
      for (int which = 0; which < 2; ++which) {
        kn::fill_random_floats(static_cast<float*>(tmp.p), kvn, 41 + uint64_t(t) + uint64_t(which), 1.f, s);
        const kn::Status st = kn::convert_f32(static_cast<float*>(tmp.p), int64_t(kvn), GgmlType::F16, which ? vc.p : kc.p, s);
        if (!st) fail("kbench attn: {}", st.message);
      }
    }
    std::vector<int32_t> hpos(static_cast<size_t>(t));
    for (int64_t i = 0; i < t; ++i) hpos[size_t(i)] = int32_t(i);
    check(cudaMemcpy(pos.p, hpos.data(), hpos.size() * 4, cudaMemcpyHostToDevice), "positions");
    // (a copy from pageable memory may return before its DMA lands, and `s` does not wait for the
    // legacy stream: the inputs are whole before the first launch)
    check(cudaDeviceSynchronize(), "uploads");
    kn::AttentionArgs a;
    a.n_head = args.n_head, a.n_head_kv = args.n_head_kv, a.head_dim = hd, a.n_ctx = int(t);
    a.scale = 1.f / std::sqrt(float(hd));
    const double flops = 4.0 * hd * args.n_head * double(t) * double(t + 1) / 2.0;
    std::vector<float> ref, got(qn);  // v2's output, and each rung's, for the agreement column
    for (auto v : kn::kPrefillAttentionRungs) {
      kn::Status st = kn::Status::success();
      const double us = kn::median_time_us(
          [&](int) {
            const kn::Status r = kn::attention_prefill(static_cast<float*>(q.p), t, static_cast<int32_t*>(pos.p), kc.p,
                                                       vc.p, a, static_cast<float*>(out.p), s, out16.p, GgmlType::F16, v);
            if (!r) st = r;
          },
          2, args.reps, s);
      if (!st) fail("kbench attn: {}: {}", kn::prefill_attention_name(v), st.message);
      const double tf = flops / (us * 1e6);
      const bool itself = kn::prefill_attention_runs(v, a, static_cast<float*>(q.p), kc.p, vc.p);
      check(cudaStreamSynchronize(s), "attention");
      check(cudaMemcpy(got.data(), out.p, qn * 4, cudaMemcpyDeviceToHost), "output");
      if (v == kn::PrefillAttention::V2Pipelined) ref = got;
      double e = 0, n = 0;
      if (v != kn::PrefillAttention::V1Mma && v != kn::PrefillAttention::V2Pipelined)
        for (size_t i = 0; i < qn; ++i) e += double(got[i] - ref[i]) * double(got[i] - ref[i]), n += double(ref[i]) * ref[i];
      fmt::print("| {} | {}{} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {} |\n", t, kn::prefill_attention_name(v),
                 itself ? "" : " (ran as v2_pipelined)", us, tf, 100.0 * tf / peak, 100.0 * tf / cublas,
                 n > 0 ? fmt::format("{:.1e}", std::sqrt(e / n)) : std::string("-"));
    }
  }
  check(cudaStreamDestroy(s), "stream");
}

#else

void run_kbench_attn(const KbenchAttnArgs&) { fail("this lamina was built without CUDA: kbench needs an NVIDIA GPU build"); }

#endif

}  // namespace lamina::cli
