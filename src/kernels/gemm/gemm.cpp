// GEMM registry, argument validation, dispatch through the autotune cache, and timing.
#include "kernels/gemm/gemm.h"

#include "kernels/autotune/autotune.h"
#include "kernels/common/timing.h"
#include "kernels/gemm/gemm_internal.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdio>

namespace lamina::kernels {

std::string GemmConfig::str() const {
  return "bm=" + std::to_string(bm) + ",bn=" + std::to_string(bn) + ",bk=" + std::to_string(bk) +
         ",stages=" + std::to_string(stages) + (splits > 1 ? ",splits=" + std::to_string(splits) : "");
}

static GemmConfig parse_config(const std::string& s) {
  GemmConfig c;
  std::sscanf(s.c_str(), "bm=%d,bn=%d,bk=%d,stages=%d,splits=%d", &c.bm, &c.bn, &c.bk, &c.stages, &c.splits);
  return c;
}

const std::vector<GemmVariant>& gemm_variants() {
  static const std::vector<GemmVariant> v = [] {
    std::vector<GemmVariant> out;
    register_sgemm_variants(out);
    register_sgemm_async_variants(out);
    register_hgemm_variants(out);
    register_wgmma_variants(out);
    register_qgemm_wgmma_variants(out);
    register_qgemm_variants(out);
    return out;
  }();
  return v;
}

const GemmVariant* find_gemm_variant(const std::string& name) {
  for (const auto& v : gemm_variants())
    if (name == v.name) return &v;
  return nullptr;
}

static bool is_quant(GgmlType t) { return t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::BF16; }
static size_t elt_bytes(GgmlType t) { return t == GgmlType::F32 ? 4 : 2; }

size_t gemm_b_bytes(const GemmProblem& p) {
  if (is_quant(p.b_type))
    return p.b_layout == WeightLayout::Repacked ? gemv_repacked_bytes(p.b_type, p.n, p.k) : row_bytes(p.b_type, p.k) * size_t(p.n);
  return size_t(p.b_col_major ? p.n : p.k) * size_t(p.ldb) * elt_bytes(p.b_type);
}

size_t gemm_workspace_bytes(const GemmProblem& p, const GemmConfig& c) {
  return c.splits > 1 ? size_t(c.splits) * size_t(p.m) * size_t(p.n) * sizeof(float) : 0;
}

bool gemm_takes(const GemmVariant& v, const GemmProblem& p) { return v.supports(p) && (!p.b_up || v.gated_config); }

bool gemm_config_takes(const GemmVariant& v, const GemmProblem& p, const GemmConfig& c) {
  return gemm_takes(v, p) && (!p.b_up || v.gated_config(c));
}

Status gemm_validate(const GemmProblem& p, const GemmVariant& v) {
  const std::string name = v.name;
  if (p.groups) return Status::error(name + ": a problem grouped by expert goes to gemm_experts");
  if (p.b_up && !v.gated_config) return Status::error(name + ": takes no gated problem");
  if (p.b_up && (p.alpha != 1.f || p.beta != 0.f)) return Status::error(name + ": a gated problem has alpha 1 and beta 0");
  if (!v.supports(p))
    return Status::error(name + ": does not take A " + std::string(type_name(p.a_type)) + (p.a_col_major ? " (col)" : " (row)") +
                         ", B " + std::string(type_name(p.b_type)) + (p.b_col_major ? " (col)" : " (row)") + ", C " +
                         std::string(type_name(p.c_type)));
  if (!p.a || !p.b || !p.c) return Status::error(name + ": null pointer");
  if (p.b_up && reinterpret_cast<uintptr_t>(p.b_up) % 16) return Status::error(name + ": B_up must be 16-byte aligned");
  if (p.m <= 0 || p.n <= 0 || p.k <= 0) return Status::error(name + ": bad shape");
  if (p.lda < (p.a_col_major ? p.m : p.k)) return Status::error(name + ": lda too small");
  if (!is_quant(p.b_type) && p.ldb < (p.b_col_major ? p.k : p.n)) return Status::error(name + ": ldb too small");
  if (p.has_parts()) {
    if (!v.column_parts) return Status::error(name + ": takes no column parts of C");
    if (p.beta != 0.f) return Status::error(name + ": column parts of C take beta 0");
    int64_t col = 0, ld = p.ldc;
    for (const GemmProblem::ColumnPart& part : p.parts) {
      if (!part.c) break;
      if (part.col0 <= col || part.col0 >= p.n || part.col0 % 8) return Status::error(name + ": bad column part");
      if (ld < part.col0 - col) return Status::error(name + ": ldc too small for a column part");
      col = part.col0, ld = part.ldc;
    }
    if (ld < p.n - col) return Status::error(name + ": ldc too small for a column part");
  } else if (p.ldc < p.n) {
    return Status::error(name + ": ldc too small");
  }
  auto aligned = [](const void* q, size_t a) { return reinterpret_cast<uintptr_t>(q) % a == 0; };
  if (p.a_type != GgmlType::F32) {  // tensor-core variants copy 16-byte chunks of A and B
    if (p.k % 8 || p.lda % 8 || !aligned(p.a, 16) || !aligned(p.b, 16))
      return Status::error(name + ": k and lda must be multiples of 8 and A, B 16-byte aligned");
    if (!is_quant(p.b_type) && p.ldb % 8) return Status::error(name + ": ldb must be a multiple of 8");
    if (is_quant(p.b_type) && p.k % traits(p.b_type).block_elems)
      return Status::error(name + ": k is not a multiple of the weight block size");
  }
  return Status::success();
}

static std::string tune_key(const GemmProblem& p) {
  return std::string("gemm|") + std::string(type_name(p.a_type)) + (p.a_col_major ? "c" : "r") + "|" +
         std::string(type_name(p.b_type)) + (p.b_col_major ? "c" : "r") + (p.b_layout == WeightLayout::Repacked ? "p" : "") +
         "|" + std::string(type_name(p.c_type)) + "|" + std::to_string(p.m) + "x" + std::to_string(p.n) + "x" +
         std::to_string(p.k) + (p.b_up ? (p.gelu ? "|geglu" : "|swiglu") : "") + "|" + device_key();
}

// Tiles of C a config cuts p into.
static int64_t tiles_of(const GemmProblem& p, const GemmConfig& c) {
  return ((p.m + c.bm - 1) / c.bm) * ((p.n + c.bn - 1) / c.bn);
}

// Untuned: the config (without split-K) whose tiles fill the SMs best — the fewest waves of
// tiles times the tile's area, ties to the earlier (larger-tile) config. At M = 512, N = 4096
// the default 128x256 tile gives 64 tiles for 132 SMs; 128x128 gives 128. Where that leaves more
// than half the SMs idle (the batching engine's decode rows: M = 16..128 against N = 4096 is 32
// tiles), the split-K config with the most splits whose blocks still fit in one wave, if the
// workspace holds its partial sums. (The tuner keys on the exact M, which the engine's passes
// vary step by step.)
static GemmConfig untuned_config(const GemmProblem& p, const GemmVariant& v) {
  static const int sms = [] {
    int dev = 0, n = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    return std::max(n, 1);
  }();
  GemmConfig best = v.configs.front();
  int64_t best_cost = INT64_MAX;
  for (const GemmConfig& c : v.configs) {
    if (c.splits > 1 || !gemm_config_takes(v, p, c)) continue;
    const int64_t tiles = tiles_of(p, c);
    const int64_t cost = (tiles + sms - 1) / sms * int64_t(c.bm) * c.bn;
    if (cost < best_cost) best = c, best_cost = cost;
  }
  const int64_t tiles = tiles_of(p, best);
  if (2 * tiles > sms || p.b_up) return best;
  GemmConfig split = best;
  for (const GemmConfig& c : v.configs) {
    const int64_t t = tiles_of(p, c);
    // (bm <= 128: the 256-row split configs are for the tuner to find at 256-512 rows; taken here
    // they put a few rows in 256-row tiles: the engine's 16-128-row steps ran 8-17 % slower.)
    if (c.bm <= 128 && c.splits > split.splits && t * c.splits <= sms && p.k % (int64_t(c.splits) * c.bk) == 0 &&
        gemm_workspace_bytes(p, c) <= p.workspace_bytes)
      split = c;
  }
  return split;
}

// The problem's own entry, or (borrowed set) one of the next two larger power-of-two buckets'.
static std::optional<TuneEntry> tuned_entry(const GemmProblem& p, bool& borrowed) {
  const TuneCache& cache = TuneCache::get("gemm");
  borrowed = false;
  if (auto e = cache.find(tune_key(p))) return e;
  if (p.m > kGemmBucketMaxM) return std::nullopt;
  GemmProblem q = p;
  q.m = 1;
  while (q.m < p.m) q.m *= 2;
  for (int i = 0; i < 2; ++i, q.m *= 2)
    if (q.m != p.m)
      if (auto e = cache.find(tune_key(q))) {
        borrowed = true;
        return e;
      }
  return std::nullopt;
}

GemmChoice gemm_choice(const GemmProblem& p) {
  bool borrowed = false;
  if (auto e = tuned_entry(p, borrowed))
    if (const GemmVariant* v = find_gemm_variant(e->variant); v && gemm_takes(*v, p)) {
      GemmConfig c = parse_config(e->config);
      // No room for split-K, a config a gated problem cannot take, or a larger bucket's 256-row
      // tiles that would be half empty or worse here.
      if (gemm_workspace_bytes(p, c) > p.workspace_bytes || !gemm_config_takes(*v, p, c) ||
          (borrowed && c.bm > 128 && 2 * p.m <= c.bm))
        c = untuned_config(p, *v);
      return {v, c, true};
    }
  for (const char* name : {"q3_wgmma_rs", "q2_wgmma", "q1_mma", "h2_wgmma", "h1_mma", "s6_cp_async"}) {  // untuned: the top rung that takes it
    const GemmVariant* v = find_gemm_variant(name);
    if (v && gemm_takes(*v, p)) return {v, untuned_config(p, *v), false};
  }
  return {};
}

Status gemm(const GemmProblem& p, cudaStream_t s) {
  const GemmChoice c = gemm_choice(p);
  if (!c.variant) return Status::error("gemm: no variant takes these types and layouts");
  if (Status st = gemm_validate(p, *c.variant); !st) return st;
  return c.variant->launch(p, c.config, s);
}

std::vector<GemmTiming> gemm_time_variants(const GemmProblem& shape, bool all_configs, bool record, cudaStream_t s,
                                           int reps) {
  std::vector<GemmTiming> out;
  GemmProblem p = shape;
  const size_t a_bytes = size_t(p.a_col_major ? p.k : p.m) * size_t(p.lda) * elt_bytes(p.a_type);
  const size_t b_bytes = gemm_b_bytes(p), c_bytes = size_t(p.m) * size_t(p.ldc) * elt_bytes(p.c_type);
  size_t ws_bytes = 0;
  for (const auto& v : gemm_variants())
    for (const auto& c : v.configs) ws_bytes = std::max(ws_bytes, gemm_workspace_bytes(p, c));
  // The weights rotate through copies that together exceed twice the L2 cache, so that each
  // launch reads its W from HBM as a model's step does (a 4096 x 4096 q4_0 W is 9 MB: held in
  // L2, the small-row shapes timed the cache, not the kernel's latency to memory).
  const int copies = rotation_copies(b_bytes * (p.b_up ? 2 : 1));
  std::vector<void*> bs(size_t(copies), nullptr), ups(size_t(copies), nullptr);
  void *a = nullptr, *c = nullptr, *ws = nullptr;
  bool ok = cudaMalloc(&a, a_bytes) == cudaSuccess && cudaMalloc(&c, c_bytes) == cudaSuccess &&
            (ws_bytes == 0 || cudaMalloc(&ws, ws_bytes) == cudaSuccess);
  // Fresh random data: f32 operands as floats; 16-bit and quantised ones as random bytes
  // (the speed of the tensor cores does not depend on the values).
  for (int i = 0; i < copies && ok; ++i) {
    ok = cudaMalloc(&bs[size_t(i)], b_bytes) == cudaSuccess && (!p.b_up || cudaMalloc(&ups[size_t(i)], b_bytes) == cudaSuccess);
    if (!ok) break;
    if (p.b_type == GgmlType::F32) fill_random_floats(static_cast<float*>(bs[size_t(i)]), b_bytes / 4, 12 + 2 * uint64_t(i), 1.f, s);
    else fill_random_bytes(bs[size_t(i)], b_bytes, 12 + 2 * uint64_t(i), s);
    if (p.b_up) fill_random_bytes(ups[size_t(i)], b_bytes, 13 + 2 * uint64_t(i), s);
  }
  if (ok) {
    if (p.a_type == GgmlType::F32) fill_random_floats(static_cast<float*>(a), a_bytes / 4, 11, 1.f, s);
    else fill_random_bytes(a, a_bytes, 11, s);
    p.a = a, p.b = bs[0], p.b_up = ups[0], p.c = c, p.workspace = ws, p.workspace_bytes = ws_bytes;
    for (const auto& v : gemm_variants()) {
      if (!gemm_validate(p, v)) continue;
      int timed = 0;
      for (size_t ci = 0; ci < v.configs.size() && (all_configs || timed == 0); ++ci) {
        if (!gemm_config_takes(v, p, v.configs[ci])) continue;
        ++timed;
        bool launched = true;
        const double us = median_time_us(
            [&](int i) {
              GemmProblem q = p;
              q.b = bs[size_t(i % copies)], q.b_up = ups[size_t(i % copies)];
              launched = v.launch(q, v.configs[ci], s).ok && launched;
            },
            2, reps, s);
        if (launched && cudaGetLastError() == cudaSuccess) out.push_back({&v, v.configs[ci], us});
      }
    }
  }
  cudaStreamSynchronize(s);
  cudaFree(a);
  for (int i = 0; i < copies; ++i) cudaFree(bs[size_t(i)]), cudaFree(ups[size_t(i)]);
  cudaFree(c);
  cudaFree(ws);
  if (record) {
    const GemmTiming* best = nullptr;
    for (const auto& t : out)
      if (!t.variant->teaching && (!best || t.us < best->us)) best = &t;
    if (best) TuneCache::get("gemm").put(tune_key(shape), {best->variant->name, best->config.str(), best->us});
  }
  return out;
}

}  // namespace lamina::kernels
