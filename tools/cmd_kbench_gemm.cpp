// lamina kbench gemm: every GEMM variant (each at its best config; --best: the best variant
// only) next to cuBLAS measured in the same run: µs (median), TFLOP/s and % of cuBLAS.
// cuBLAS is cublasGemmEx in the same layout (C = A W^T, A [m][k] and W [n][k] row-major), with
// fp32 compute and TF32 off for the f32 rows, and the f16 GEMM for quantised weights. Both sides
// rotate their weights through copies larger than twice the L2 cache (HBM reads). The best
// production variant per shape is recorded in the tune cache (~/.cache/lamina/tune-gemm.json).
#include "cmd_kbench_gemm.h"
#include "tune_shapes.h"

#include "core/error.h"

#include <fmt/format.h>

#if defined(LAMINA_HAVE_CUDA)
#include "kernels/autotune/autotune.h"
#include "kernels/common/timing.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemv/gemv.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <vector>
#endif

#include <sstream>

namespace lamina::cli {

#if defined(LAMINA_HAVE_CUDA)
using namespace lamina::kernels;

namespace {

struct Entry {
  int64_t m, n, k;
  std::vector<std::string> types;
};

// Without --shapes: square f32/f16/bf16 problems, the SGEMM set and the Llama-2-7B / Llama-3-8B
// matrices at 128-4096 prompt rows; with --types, only those matrices, in the types asked.
std::vector<Entry> default_entries(const std::string& types) {
  std::vector<Entry> e;
  if (types.empty()) {
    for (int64_t s : {4096, 8192}) e.push_back({s, s, s, {"f32", "f16", "bf16"}});
    for (int64_t s : {2048, 4096, 8192}) e.push_back({s, s, 1024, {"f32"}});  // the seeds' SGEMM set
  }
  const std::vector<std::string> model_types = types.empty() ? std::vector<std::string>{"f16", "q8_0", "q4_0", "q4_K"}
                                                             : split_list(types);
  for (int64_t m : {128, 512, 2048, 4096})
    for (auto [n, k] : {std::pair<int64_t, int64_t>{4096, 4096}, {12288, 4096}, {11008, 4096}, {4096, 11008},
                        {14336, 4096}, {4096, 14336}})
      e.push_back({m, n, k, model_types});
  return e;
}

double time_cublas(cublasHandle_t h, GgmlType t, int64_t m, int64_t n, int64_t k, int reps, cudaStream_t s) {
  const bool f32 = t == GgmlType::F32;
  const cudaDataType_t dt = f32 ? CUDA_R_32F : t == GgmlType::BF16 ? CUDA_R_16BF : CUDA_R_16F;
  const size_t elt = f32 ? 4 : 2;
  // W rotates through copies that exceed twice the L2 cache, as lamina's variants' does
  // (gemm_time_variants): each launch reads its weights from HBM.
  const int copies = rotation_copies(size_t(n * k) * elt);
  std::vector<void*> ws(size_t(copies), nullptr);
  void *a = nullptr, *c = nullptr;
  if (cudaMalloc(&a, size_t(m * k) * elt) != cudaSuccess || cudaMalloc(&c, size_t(m * n) * 4) != cudaSuccess)
    fail("cuBLAS baseline: out of device memory for {}x{}x{}", m, n, k);
  for (int i = 0; i < copies; ++i)
    if (cudaMalloc(&ws[size_t(i)], size_t(n * k) * elt) != cudaSuccess)
      fail("cuBLAS baseline: out of device memory for {} copies of a {}x{} weight", copies, n, k);
  if (f32) {
    fill_random_floats(static_cast<float*>(a), size_t(m * k), 21, 1.f, s);
    for (int i = 0; i < copies; ++i) fill_random_floats(static_cast<float*>(ws[size_t(i)]), size_t(n * k), 22 + uint64_t(i), 1.f, s);
  } else {
    fill_random_bytes(a, size_t(m * k) * elt, 21, s);
    for (int i = 0; i < copies; ++i) fill_random_bytes(ws[size_t(i)], size_t(n * k) * elt, 22 + uint64_t(i), s);
  }
  const float alpha = 1.f, beta = 0.f;
  // Column-major view: C^T [n][m] = W [k x n]^T * A^T [k x m].
  const double us = median_time_us(
      [&](int i) {
        cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k), &alpha, ws[size_t(i % copies)], dt, int(k), a, dt,
                     int(k), &beta, c, CUDA_R_32F, int(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      },
      2, reps, s);
  cudaStreamSynchronize(s);
  cudaFree(a);
  for (void* w : ws) cudaFree(w);
  cudaFree(c);
  return us;
}

}  // namespace

void run_kbench_gemm(const KbenchGemmArgs& a) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaSetDevice(dev) != cudaSuccess) fail("no CUDA device available");
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, dev);
  cudaStream_t s;
  if (cudaStreamCreate(&s) != cudaSuccess) fail("no CUDA device available");
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) fail("cuBLAS initialisation failed");
  cublasSetStream(h, s);
  cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);  // no TF32 for the f32 rows
  std::vector<Entry> entries;
  if (a.shapes.empty()) {
    entries = default_entries(a.types);
  } else {
    for (const auto& sh : split_list(a.shapes)) {
      Entry e{};
      if (std::sscanf(sh.c_str(), "%ldx%ldx%ld", &e.m, &e.n, &e.k) != 3 || e.m <= 0 || e.n <= 0 || e.k <= 0)
        fail("bad shape '{}' (want MxNxK)", sh);
      e.types = split_list(a.types.empty() ? "f16" : a.types);
      entries.push_back(e);
    }
  }
  fmt::print("device: {} ({} SMs)\n\n", prop.name, prop.multiProcessorCount);
  fmt::print("| {:<18} | {:<5} | {:<56} | {:>10} | {:>8} | {:>8} |\n", "M x N x K", "type", "variant (config)", "µs",
             "TFLOP/s", "% cuBLAS");
  fmt::print("|{:-<20}|{:-<7}|{:-<58}|{:->12}|{:->10}|{:->10}|\n", "", "", "", "", "", "");
  for (const auto& e : entries) {
    const std::string shape = fmt::format("{}x{}x{}", e.m, e.n, e.k);
    const double flops = 2.0 * double(e.m) * double(e.n) * double(e.k);
    std::map<GgmlType, double> cublas;
    for (const auto& tn : e.types) {
      const auto t = parse_type(tn);
      if (!t) fail("unknown type '{}'", tn);
      const bool quant = *t != GgmlType::F32 && *t != GgmlType::F16 && *t != GgmlType::BF16;
      const GgmlType base_t = quant ? GgmlType::F16 : *t;
      if (!cublas.count(base_t)) cublas[base_t] = time_cublas(h, base_t, e.m, e.n, e.k, a.reps, s);
      const double base = cublas[base_t];
      auto row = [&](const std::string& name, double us) {
        fmt::print("| {:<18} | {:<5} | {:<56.56} | {:>10.1f} | {:>8.1f} | {:>7.1f}% |\n", shape, tn, name, us,
                   flops / (us * 1e-6) / 1e12, 100.0 * base / us);
      };
      row(fmt::format("cuBLAS ({} GemmEx)", type_name(base_t)), base);
      GemmProblem p;
      p.a_type = base_t == GgmlType::F32 ? GgmlType::F32 : base_t;
      p.b_type = *t;
      p.b_layout = repacked_layout_preferred(*t) ? WeightLayout::Repacked : WeightLayout::Gguf;  // as the backend loads it
      p.m = e.m, p.n = e.n, p.k = e.k, p.lda = e.k, p.ldb = e.k, p.ldc = e.n;
      p.b_col_major = true;
      // Teaching rungs are slow: time them only up to 4096^3 worth of work unless --all.
      const bool ladder = a.all || flops <= 2.0 * 4096.0 * 4096.0 * 4096.0;
      std::vector<GemmTiming> timings;
      for (const auto& tm : gemm_time_variants(p, true, true, s, a.reps))
        if (ladder || !tm.variant->teaching) timings.push_back(tm);
      std::map<std::string, GemmTiming> best_per;
      for (const auto& tm : timings) {
        auto it = best_per.find(tm.variant->name);
        if (it == best_per.end() || tm.us < it->second.us) best_per[tm.variant->name] = tm;
      }
      std::vector<GemmTiming> rows;
      for (const auto& v : gemm_variants())
        if (best_per.count(v.name)) rows.push_back(best_per[v.name]);
      if (a.configs && !a.best) rows = timings;  // (in the registry's order)
      if (a.best && !rows.empty())
        rows = {*std::min_element(rows.begin(), rows.end(), [](auto& x, auto& y) { return x.us < y.us; })};
      for (const auto& tm : rows) row(std::string(tm.variant->name) + " (" + tm.config.str() + ")", tm.us);
      std::fflush(stdout);
    }
  }
  TuneCache::get("gemm").save();
  cublasDestroy(h);
  cudaStreamDestroy(s);
}
#else
void run_kbench_gemm(const KbenchGemmArgs&) { fail("this lamina was built without CUDA: kbench needs an NVIDIA GPU build"); }
#endif

}  // namespace lamina::cli
