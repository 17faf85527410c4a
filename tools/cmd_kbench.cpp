// lamina kbench gemv: every GEMV variant (its best config; --best: the best variant only) next
// to cuBLAS measured in the same run: µs (median over rotated weight buffers that exceed L2, one
// launch between two events), graph µs (per launch inside a CUDA graph of back-to-back launches,
// as a decode step runs them), then from the graph time: GB/s over the bytes read (W + x), % of
// the device-to-device copy bandwidth measured at start, and the speed-up over cuBLAS
// (cublasGemmEx, same dtypes; f16 for quantised types; also timed both ways).
// A developer tool (built with -DLAMINA_KBENCH=ON: it links cuBLAS for its baseline).
#include "cmd_kbench_allreduce.h"
#include "cmd_kbench_attn.h"
#include "cmd_kbench_cpu.h"
#include "cmd_kbench_experts.h"
#include "cmd_kbench_gemm.h"
#include "cli_checks.h"
#include "commands.h"
#include "core/error.h"
#include "tune_shapes.h"

#include <fmt/format.h>

#if defined(LAMINA_HAVE_CUDA)
#include "format/gguf.h"
#include "kernels/autotune/autotune.h"
#include "kernels/common/timing.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemv/gemv_tune.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <set>
#endif

namespace lamina::cli {
namespace {

struct KbenchArgs {
  std::string family;
  std::string shapes;  // family default when empty
  std::string batches;  // gemv default when empty: 1,2,4,8 (1 with --decode)
  std::string types;   // family default when empty
  bool best = false, all = false;
  bool configs = false;  // gemm, gemv: every config's row
  bool decode = false;   // gemv: as the decode step runs them (batch 1, x as int8 blocks, y8 made)
  bool x8 = false;       // gemv: x as int8 blocks made by the op before, at any batch (the engine's small steps)
  KbenchCpuArgs cpu;     // cpu: its own options (shapes, types and reps copied from above)
  bool gate_up = false;  // gemv: each shape as the gate/up pair with its fused SwiGLU (implies decode)
  int reps = 20;
  int tp = 2;            // allreduce: GPUs 0..tp-1
  KbenchAttnArgs attn;   // attn: the head shape (lengths and reps copied from above)
};

#if defined(LAMINA_HAVE_CUDA)
using namespace lamina::kernels;

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("{}: {}", what, cudaGetErrorString(e));
}

struct Times {
  double us, graph_us;
  double best() const { return graph_us > 0 ? graph_us : us; }
};

// cuBLAS y = W x with W [n][k] row-major in `dt`, x [batch][k] in `dt` (f16 for quantised types).
Times time_cublas(cublasHandle_t h, cudaDataType_t dt, size_t elt, int64_t n, int64_t k, int batch, int reps,
                   cudaStream_t s) {
  const size_t wbytes = size_t(n) * size_t(k) * elt;
  const int copies = rotation_copies(wbytes);
  std::vector<void*> ws(static_cast<size_t>(copies));
  void *x = nullptr, *y = nullptr;
  for (auto& w : ws) {
    cuda_check(cudaMalloc(&w, wbytes), "cuBLAS baseline: weights");
    fill_random_bytes(w, wbytes, 5, s);
  }
  cuda_check(cudaMalloc(&x, size_t(batch) * size_t(k) * elt), "cuBLAS baseline: x");
  cuda_check(cudaMalloc(&y, size_t(batch) * size_t(n) * 4), "cuBLAS baseline: y");
  fill_random_bytes(x, size_t(batch) * size_t(k) * elt, 6, s);
  const float alpha = 1.f, beta = 0.f;
  const auto run = [&](int i) {
    cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(n), batch, int(k), &alpha, ws[size_t(i % copies)], dt, int(k), x, dt,
                 int(k), &beta, y, CUDA_R_32F, int(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  const Times t{median_time_us(run, 3, reps, s), graph_time_us(run, std::max(copies, 8), 5, s)};
  cudaStreamSynchronize(s);
  for (void* w : ws) cudaFree(w);
  cudaFree(x);
  cudaFree(y);
  return t;
}

void run_kbench_gemv(KbenchArgs a) {
  if (a.shapes.empty()) a.shapes = "4096x4096,12288x4096,11008x4096,4096x11008,14336x4096,4096x14336,32000x4096,128256x4096";
  if (a.types.empty()) a.types = "f16,bf16,f32,q8_0,q4_0,q4_1,q5_0,q5_1,q2_K,q3_K,q4_K,q5_K,q6_K,iq4_nl,iq4_xs";
  if (a.gate_up && !a.x8) a.decode = true;
  if (a.decode && !a.batches.empty() && a.batches != "1") fail("--decode and --gate-up time batch 1 only (--x8: any batch)");
  if (a.batches.empty()) a.batches = a.decode ? "1" : "1,2,4,8";
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaSetDevice(dev) != cudaSuccess) fail("no CUDA device available");
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, dev);
  cudaStream_t s;
  cuda_check(cudaStreamCreate(&s), "stream");
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) fail("cuBLAS initialisation failed");
  cublasSetStream(h, s);
  const double copy_gbs = copy_bandwidth_gbs(size_t(1) << 30, s);
  fmt::print("device: {} ({} SMs, L2 {} MiB), copy bandwidth {:.0f} GB/s (read + write, 1 GiB D2D)\n\n", prop.name,
             prop.multiProcessorCount, l2_cache_bytes() >> 20, copy_gbs);
  fmt::print("| {:<12} | {:>2} | {:<5} | {:<42} | {:>9} | {:>9} | {:>7} | {:>6} | {:>8} |\n", "N x K", "b", "type",
             "variant (config)", "µs", "graph µs", "GB/s", "% copy", "vs cuBLAS");
  fmt::print("|{:-<14}|{:-<4}|{:-<7}|{:-<44}|{:->11}|{:->11}|{:->9}|{:->8}|{:->10}|\n", "", "", "", "", "", "", "", "", "");
  for (const auto& shape : split_list(a.shapes)) {
    int64_t n = 0, k = 0;
    if (std::sscanf(shape.c_str(), "%ldx%ld", &n, &k) != 2 || n <= 0 || k <= 0) fail("bad shape '{}' (want NxK)", shape);
    for (const auto& bs : split_list(a.batches)) {
      const int batch = std::stoi(bs);
      if (batch < 1 || batch > kGemvMaxBatch) fail("batch {} out of range 1..8", batch);
      std::map<std::string, Times> cublas_us;  // by dtype
      for (const auto& tn : split_list(a.types)) {
        const auto t = parse_type(tn);
        if (!t) fail("unknown type '{}'", tn);
        if (k % traits(*t).block_elems) continue;
        const bool fp = *t == GgmlType::F16 || *t == GgmlType::BF16 || *t == GgmlType::F32;
        const cudaDataType_t dt = *t == GgmlType::F32 ? CUDA_R_32F : *t == GgmlType::BF16 ? CUDA_R_16BF : CUDA_R_16F;
        const size_t elt = *t == GgmlType::F32 ? 4 : 2;
        const std::string key = fp ? std::string(type_name(*t)) : "f16";
        // (the gate/up pair against one cuBLAS GEMV over both matrices' rows)
        const int64_t n_blas = a.gate_up ? 2 * n : n;
        if (!cublas_us.count(key)) cublas_us[key] = time_cublas(h, dt, elt, n_blas, k, batch, a.reps, s);
        const Times base = cublas_us[key];
        auto row = [&](const std::string& name, Times tm, size_t wbytes) {
          const double gbs = double(wbytes + size_t(batch) * size_t(k) * 4) / (tm.best() * 1e-6) / 1e9;
          fmt::print("| {:<12} | {:>2} | {:<5} | {:<42.42} | {:>9.2f} | {:>9.2f} | {:>7.0f} | {:>5.1f}% | {:>8.2f}x |\n",
                     shape, batch, tn, name, tm.us, tm.graph_us, gbs, 100.0 * gbs / copy_gbs, base.best() / tm.best());
        };
        row("cuBLAS (" + key + " GemmEx)", base, size_t(n_blas) * size_t(k) * elt);
        for (WeightLayout layout : {WeightLayout::Gguf, WeightLayout::Repacked}) {
          GemvProblem p;
          p.wtype = *t;
          p.layout = layout;
          p.n = n;
          p.k = k;
          p.batch = batch;
          p.w = p.x = nullptr;
          // --decode: as the decode step runs Q/K/V, Wo, gate/up and W_down
          const bool x8 = (a.decode || a.x8) && k % 32 == 0;
          mark_inputs(p, a.gate_up, x8, a.decode && x8 && n % 32 == 0 && layout == WeightLayout::Repacked);
          const auto timings = gemv_time_variants(p, true, s, a.reps);
          std::map<std::string, GemvTiming> best_per;
          for (const auto& tm : timings) {
            auto it = best_per.find(tm.variant->name);
            if (it == best_per.end() || tm.best_us() < it->second.best_us()) best_per[tm.variant->name] = tm;
          }
          std::vector<GemvTiming> rows;
          if (a.configs && !a.best) rows = timings;  // every config that ran (graph µs -1: its graph failed)
          else
            for (const auto& v : gemv_variants())
              if (best_per.count(v.name)) rows.push_back(best_per[v.name]);
          if (a.best && !rows.empty())
            rows = {*std::min_element(rows.begin(), rows.end(), [](auto& x, auto& y) { return x.best_us() < y.best_us(); })};
          for (const auto& tm : rows)
            row(std::string(tm.variant->name) + " (" + tm.config.str() + ")", Times{tm.us, tm.graph_us},
                gemv_weight_bytes(p));
        }
        std::fflush(stdout);
      }
    }
  }
  cublasDestroy(h);
  cudaStreamDestroy(s);
}

#else
void run_kbench_gemv(const KbenchArgs&) { fail("this lamina was built without CUDA: kbench needs an NVIDIA GPU build"); }
#endif

void run_kbench(const KbenchArgs& a) {
  if (a.family == "cpu") {
    KbenchCpuArgs c = a.cpu;
    c.shapes = a.shapes, c.types = a.types, c.reps = a.reps == 20 ? 5 : a.reps;  // CPU matmuls are long
    return run_kbench_cpu(c);
  }
  if (a.family == "gemv") return run_kbench_gemv(a);
#if defined(LAMINA_HAVE_CUDA)
  if (a.family == "allreduce") return run_kbench_allreduce(KbenchAllReduceArgs{a.tp, a.shapes, a.reps});
  if (a.family == "experts") return run_kbench_experts(KbenchExpertsArgs{a.shapes, a.batches, a.types, a.reps});
  if (a.family == "attn") {
    KbenchAttnArgs t = a.attn;
    t.lengths = a.shapes, t.reps = a.reps == 20 ? 10 : a.reps;  // long prompts: fewer repetitions by default
    return run_kbench_attn(t);
  }
#endif
  if (a.family == "gemm") {
    const int reps = a.reps == 20 ? 10 : a.reps;  // GEMMs are long: fewer repetitions by default
    return run_kbench_gemm(KbenchGemmArgs{a.shapes, a.types, a.best, a.all, a.configs, reps});
  }
  fail("unknown kernel family '{}' (available: gemv, gemm, attn, experts, allreduce, cpu)", a.family);
}

}  // namespace

Run add_kbench(CLI::App& app) {
  auto a = std::make_shared<KbenchArgs>();
  auto* sub = app.add_subcommand("kbench", "Benchmark a kernel family against cuBLAS (GPU), or the CPU backend's "
                                           "matmuls against this machine's limits (cpu)");
  sub->add_option("family", a->family, "Kernel family: gemv, gemm, attn (prompt attention), experts (a mixture of experts' "
                                       "routed GEMVs), allreduce (tensor "
                                       "parallelism's decode all-reduce on several GPUs) or cpu")->required();
  sub->add_option("--shapes", a->shapes,
                  "Comma-separated shapes: NxK (gemv), MxNxK (gemm), prompt lengths (attn) or row widths (allreduce)");
  sub->add_option("--batch", a->batches, "Comma-separated batch sizes (gemv, 1..8)");
  sub->add_option("--types", a->types,
                  "Comma-separated weight types (gemm without --shapes: the model matrices at 128-4096 rows in these "
                  "types only)");
  sub->add_flag("--best", a->best, "Show only the best variant per shape");
  sub->add_flag("--all", a->all, "gemm: time the teaching rungs on the largest shapes too");
  sub->add_flag("--configs", a->configs, "gemm, gemv: a row for every config of each variant, not only its fastest");
  sub->add_flag("--decode", a->decode,
                "gemv: as the decode step runs them: batch 1, x as int8 blocks, y's int8 copy made by the GEMV");
  sub->add_flag("--x8", a->x8,
                "gemv: x as int8 blocks made by the op before, at any batch (the engine's steps of up to --gemv-max-rows rows)");
  sub->add_flag("--gate-up", a->gate_up, "gemv: each NxK as the gate/up pair with its fused SwiGLU (implies --decode, or with --x8 any batch)");
  sub->add_option("-r,--reps", a->reps, "Timed repetitions (median)")->check(whole_in(5, 1000));
  sub->add_option("--tp", a->tp, "allreduce: GPUs 0..N-1 (default 2)")->check(whole_in(2, 8));
  sub->add_option("--heads", a->attn.n_head, "attn: query heads (default 32)")->check(whole_in(1, 256));
  sub->add_option("--kv-heads", a->attn.n_head_kv, "attn: KV heads (default 8)")->check(whole_in(1, 256));
  sub->add_option("--head-dim", a->attn.head_dim, "attn: head size, 64 or 128 (default 128)")->check(whole_in(64, 128));
  add_kbench_cpu_options(sub, a->cpu);
  return [a] { run_kbench(*a); };
}

}  // namespace lamina::cli
