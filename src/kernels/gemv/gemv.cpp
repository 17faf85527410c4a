// GEMV registry, argument validation, dispatch through the autotune cache, and tuning.
#include "kernels/gemv/gemv.h"

#include "kernels/autotune/autotune.h"
#include "kernels/common/q8_blocks.h"
#include "kernels/common/timing.h"
#include "kernels/gemv/gemv_internal.h"
#include "kernels/gemv/gemv_tune.h"
#include "kernels/ops/ops.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>

namespace lamina::kernels {

std::string GemvConfig::str() const {
  return "rows=" + std::to_string(rows) + ",warps=" + std::to_string(warps) + ",unroll=" + std::to_string(unroll);
}

static GemvConfig parse_config(const std::string& s) {
  GemvConfig c;
  std::sscanf(s.c_str(), "rows=%d,warps=%d,unroll=%d", &c.rows, &c.warps, &c.unroll);
  return c;
}

const std::vector<GemvVariant>& gemv_variants() {
  static const std::vector<GemvVariant> v = [] {
    std::vector<GemvVariant> out;
    register_float_variants(out);
    register_quant_variants(out);
    register_dp4a_variants(out);
    register_mma_variants(out);
    register_qmma_variants(out);
    register_q4k_variants(out);
    register_q6k_variants(out);
    register_q2k_variants(out);
    register_q3k_variants(out);
    register_iq4xs_variants(out);
    register_q51_variants(out);
    return out;
  }();
  return v;
}

const GemvVariant* find_gemv_variant(const std::string& name) {
  for (const auto& v : gemv_variants())
    if (name == v.name) return &v;
  return nullptr;
}

size_t gemv_weight_bytes(const GemvProblem& p) {
  const size_t one = p.layout == WeightLayout::Repacked ? gemv_repacked_bytes(p.wtype, p.n, p.k)
                                                        : row_bytes(p.wtype, p.k) * size_t(p.n);
  return one * (p.w_up ? 2 : 1);
}

// The ladder's teaching rungs: plain y = W x (no epilogues), not candidates for production.
static bool teaching_rung(const GemvVariant& v) {
  const std::string n = v.name;
  return n.rfind("v", 0) == 0 && n != "v4_tuned" && n != "v5_stream" && n != "v6_mma";
}

Status gemv_validate(const GemvProblem& p, const GemvVariant& v) {
  const std::string name = v.name;
  if (!v.supports(p.wtype)) return Status::error(name + ": weight type " + std::string(type_name(p.wtype)) + " not supported");
  if (p.layout != v.layout) return Status::error(name + ": wrong weight layout (repacked vs GGUF)");
  if (!p.w || !p.x || !p.y) return Status::error(name + ": null pointer");
  if (p.n <= 0 || p.k <= 0) return Status::error(name + ": bad shape");
  if (p.batch < 1 || p.batch > kGemvMaxBatch) return Status::error(name + ": batch must be 1..8");
  if (p.batch > v.max_batch) return Status::error(name + ": batch must be 1.." + std::to_string(v.max_batch));
  if (p.k % traits(p.wtype).block_elems) return Status::error(name + ": k is not a multiple of the block size");
  const bool epilogue = p.bias || p.residual || p.w_up;
  if (epilogue && (teaching_rung(v) || name == "v4_tuned")) return Status::error(name + ": ladder rungs take no epilogue");
  auto aligned = [](const void* q, size_t a) { return reinterpret_cast<uintptr_t>(q) % a == 0; };
  if (!aligned(p.w, 16) || (p.w_up && !aligned(p.w_up, 16)) || !aligned(p.x, 16))
    return Status::error(name + ": W and x must be 16-byte aligned");
  if (p.x8 && (!aligned(p.x8, 16) || p.k % 32)) return Status::error(name + ": x8 must be 16-byte aligned, k a multiple of 32");
  if (p.y8 && (!aligned(p.y8, 16) || p.n % 32)) return Status::error(name + ": y8 must be 16-byte aligned, n a multiple of 32");
  if (p.norm_w && (!p.norm_out || !aligned(p.norm_out, 16))) return Status::error(name + ": norm_w needs a 16-byte aligned norm_out");
  if (p.norm_w && p.norm_out8 && (!aligned(p.norm_out8, 16) || p.k % 32))
    return Status::error(name + ": norm_out8 must be 16-byte aligned, k a multiple of 32");
  if (p.x8_ss && (!p.norm_w || !p.x8)) return Status::error(name + ": x8_ss goes with norm_w and x8");
  if (p.x8_ss && v.takes_x8_ss && (p.batch != 1 || p.k > kX8SsMaxK))
    return Status::error(name + ": x8_ss is taken for batch 1 and k <= " + std::to_string(kX8SsMaxK) + " only");
  if ((p.y8_gain || p.y8_ss) && (!p.y8 || p.n % 32)) return Status::error(name + ": y8_gain / y8_ss go with y8");
  if (p.argmax.id && (p.batch != 1 || !p.argmax.key || !p.argmax.count))
    return Status::error(name + ": argmax is for batch 1 and needs its key and count words");
  return Status::success();
}

static std::string tune_key(const GemvProblem& p) {
  return std::string("gemv|") + std::string(type_name(p.wtype)) + (p.layout == WeightLayout::Repacked ? "|repacked" : "|gguf") +
         "|" + std::to_string(p.n) + "x" + std::to_string(p.k) + "|b" + std::to_string(p.batch) +
         (p.w_up ? "|gateup" : "") + (p.x8 ? "|x8" : "") + (p.norm_w ? "|norm" : "") + (p.y8 && p.y8_count ? "|y8" : "") +
         "|" + device_key();
}

// The default when a shape is untuned: the fastest rung that takes the problem.
static const GemvVariant* default_variant(const GemvProblem& p) {
  for (const char* name : {"q_dp4a", "q4k_dp4a", "q5k_dp4a", "q6k_dp4a", "q2k_dp4a", "q3k_dp4a", "iq4xs_dp4a", "q51_dp4a", "v5_stream", "q_generic"}) {
    const GemvVariant* v = find_gemv_variant(name);
    if (v && v->supports(p.wtype) && v->layout == p.layout) return v;
  }
  return nullptr;
}

// The tuned entry for p, the first found of: its own shape's; with norm_w, the same shape's with
// x8 given (tune times a pending norm's GEMV so); each of those without the int8 copy of y; then
// the shape's without x8. (Decode's gate/up takes a pending norm and makes y8: tuned as x8 y8.)
static std::optional<TuneEntry> tuned_entry(const GemvProblem& p) {
  static const char marker = 0;
  std::array<GemvProblem, 5> tries;  // (no allocation: gemv() runs this per launch)
  size_t n = 0;
  tries[n++] = p;
  if (p.norm_w) {
    tries[n] = p, tries[n].norm_w = nullptr, tries[n].x8 = &marker;
    ++n;
  }
  for (size_t i = 0, m = n; i < m && p.y8; ++i) tries[n] = tries[i], tries[n++].y8 = nullptr;
  if (p.x8 || p.norm_w) tries[n] = tries[n - 1], tries[n++].x8 = nullptr;
  auto& cache = TuneCache::get("gemv");
  for (size_t i = 0; i < n; ++i)
    if (auto e = cache.find(tune_key(tries[i]))) return e;
  return std::nullopt;
}

// The variant and config gemv() runs for p.
static const GemvVariant* dispatch(const GemvProblem& p, GemvConfig& c) {
  const auto e = tuned_entry(p);
  if (const GemvVariant* v = e ? find_gemv_variant(e->variant) : nullptr) {
    c = parse_config(e->config);
    return v;
  }
  const GemvVariant* v = default_variant(p);
  if (v) c = v->configs.front();
  return v;
}

bool gemv_makes_y8(const GemvProblem& p) {
  GemvConfig c;
  const GemvVariant* v = dispatch(p, c);
  return v && v->writes_y8 && p.y8_count;
}

std::string gemv_choice(const GemvProblem& p) {
  GemvConfig c;
  const GemvVariant* v = dispatch(p, c);
  return v ? std::string(v->name) + "(" + c.str() + ")" : "";
}

Status gemv(const GemvProblem& p, cudaStream_t s) {
  GemvConfig c;
  const GemvVariant* v = dispatch(p, c);
  if (!v) return Status::error("gemv: no variant for weight type " + std::string(type_name(p.wtype)));
  if (p.argmax.id && (p.batch != 1 || !p.argmax.key || !p.argmax.count))
    return Status::error("gemv: argmax is for batch 1 and needs its key and count words");
  if ((p.y8_gain || p.y8_ss) && !(v->writes_y8 && p.y8_count))
    return Status::error(std::string("gemv: y8_gain / y8_ss need a variant that makes y8 (") + v->name + " does not)");
  const bool split = p.norm_w && p.x8 && p.x8_ss && v->takes_x8_ss && p.batch == 1 && p.k <= kX8SsMaxK;
  GemvProblem q = p;
  if (!split) q.x8_ss = nullptr;
  if (p.norm_w && !split && !v->fuses_norm) {  // the norm in a kernel of its own, then the variant on its output
    if (Status st = rmsnorm(p.x, p.norm_w, p.batch, p.k, p.norm_eps, p.norm_out, nullptr, GgmlType::F16, s, p.norm_out8); !st)
      return st;
    q.x = p.norm_out, q.x8 = p.norm_out8, q.norm_w = nullptr;
  }
  const bool own_argmax = v->writes_argmax;
  if (!own_argmax) q.argmax = {};
  if (Status st = gemv_validate(q, *v); !st) return st;
  if (Status st = v->launch(q, c, s); !st) return st;
  if (p.y8 && !(v->writes_y8 && p.y8_count))
    if (Status st = quantize_x8(p.y, p.batch, p.n, p.y8, s); !st) return st;
  if (p.argmax.id && !own_argmax) {  // the greedy path of the sampling kernel: one block over y
    SampleArgs greedy;
    greedy.also = p.argmax.id2;
    greedy.parity = p.argmax.parity;
    return sample(p.y, int(p.n), greedy, nullptr, p.argmax.id, s);
  }
  return Status::success();
}

std::vector<GemvTiming> gemv_time_variants(const GemvProblem& shape, bool all_configs, cudaStream_t s, int reps) {
  std::vector<GemvTiming> out;
  // Rotate through enough weight copies that together they exceed twice the L2 cache.
  const size_t wbytes = gemv_weight_bytes(shape) / (shape.w_up ? 2 : 1);
  const int copies = rotation_copies(wbytes);
  std::vector<void*> ws(size_t(copies), nullptr), ups(size_t(copies), nullptr);
  float *x = nullptr, *y = nullptr;
  void* x8 = nullptr;  // when shape.x8 is set: the int8 blocks of x (made below, once x is filled)
  bool ok = cudaMalloc(&x, size_t(shape.batch) * size_t(shape.k) * 4) == cudaSuccess &&
            cudaMalloc(&y, size_t(shape.batch) * size_t(shape.n) * 4) == cudaSuccess;
  if (ok && shape.x8) {
    ok = cudaMalloc(&x8, size_t(shape.batch) * x8_bytes(shape.k)) == cudaSuccess;
  }
  // When shape.y8 and y8_count are set: y's int8 copy made in the epilogue, with a gain and the
  // sums of squares (matmul_add_norm's producer), as decode's Wo, gate/up and W_down run.
  void *y8 = nullptr, *y8_count = nullptr, *y8_ss = nullptr;
  float* y8_gain = nullptr;
  const bool with_y8 = shape.y8 && shape.y8_count && shape.n % 32 == 0;
  if (ok && with_y8) {
    ok = cudaMalloc(&y8, size_t(shape.batch) * x8_bytes(shape.n)) == cudaSuccess &&
         cudaMalloc(&y8_count, size_t(shape.n / 32) * sizeof(unsigned)) == cudaSuccess &&
         cudaMalloc(&y8_ss, size_t(shape.batch) * size_t(shape.n / 32) * sizeof(double)) == cudaSuccess &&
         cudaMalloc(&y8_gain, size_t(shape.n) * sizeof(float)) == cudaSuccess &&
         cudaMemsetAsync(y8_count, 0, size_t(shape.n / 32) * sizeof(unsigned), s) == cudaSuccess;
    if (ok) fill_random_floats(y8_gain, size_t(shape.n), 9, 1.f, s);
  }
  for (int i = 0; i < copies && ok; ++i) {
    ok = cudaMalloc(&ws[size_t(i)], wbytes) == cudaSuccess;
    if (ok) fill_random_bytes(ws[size_t(i)], wbytes, 100 + uint64_t(i), s);
    if (ok && shape.w_up) {
      ok = cudaMalloc(&ups[size_t(i)], wbytes) == cudaSuccess;
      if (ok) fill_random_bytes(ups[size_t(i)], wbytes, 200 + uint64_t(i), s);
    }
  }
  if (ok) {
    fill_random_floats(x, size_t(shape.batch) * size_t(shape.k), 7, 1.f, s);
    if (x8) ok = quantize_x8(x, shape.batch, shape.k, x8, s).ok;
  }
  if (ok) {
    for (const auto& v : gemv_variants()) {
      GemvProblem p = shape;
      p.w = ws[0];
      p.w_up = shape.w_up ? ups[0] : nullptr;
      p.x = x;
      p.x8 = x8;
      p.y = y;
      p.y8 = y8, p.y8_count = static_cast<unsigned*>(y8_count);
      p.y8_gain = y8_gain, p.y8_ss = static_cast<double*>(y8_ss);
      if (with_y8 && !v.writes_y8) continue;
      if (!gemv_validate(p, v)) continue;
      const size_t n_cfg = all_configs ? v.configs.size() : 1;
      for (size_t c = 0; c < n_cfg; ++c) {
        bool launched = true;
        const auto run = [&](int i) {
          p.w = ws[size_t(i % copies)];
          if (shape.w_up) p.w_up = ups[size_t(i % copies)];
          launched = v.launch(p, v.configs[c], s).ok && launched;
        };
        const double us = median_time_us(run, 3, reps, s);
        if (!launched || cudaGetLastError() != cudaSuccess) continue;
        const double graph_us = graph_time_us(run, std::max(copies, 8), 5, s);
        out.push_back({&v, v.configs[c], us, launched ? graph_us : -1});
      }
    }
  }
  cudaStreamSynchronize(s);
  for (void* w : ws) cudaFree(w);
  for (void* u : ups) cudaFree(u);
  cudaFree(x);
  cudaFree(y);
  cudaFree(x8);
  cudaFree(y8);
  cudaFree(y8_count);
  cudaFree(y8_ss);
  cudaFree(y8_gain);
  return out;
}

std::optional<GemvTiming> gemv_tune(const GemvProblem& shape, cudaStream_t s, const std::string& skip_list) {
  const auto timings = gemv_time_variants(shape, true, s, 20);
  const GemvTiming* best = nullptr;
  const std::string skip = ";" + skip_list + ";";
  const auto skipped = [&](const GemvTiming& t) {
    const std::string name = t.variant->name;
    return skip.find(";" + name + ";") != std::string::npos ||
           skip.find(";" + name + "(" + t.config.str() + ");") != std::string::npos;
  };
  for (const auto& t : timings) {
    if (teaching_rung(*t.variant) || !t.variant->tuner_picks || skipped(t)) continue;
    if (!best || t.best_us() < best->best_us()) best = &t;
  }
  if (!best) return std::nullopt;
  auto& cache = TuneCache::get("gemv");
  cache.put(tune_key(shape), {best->variant->name, best->config.str(), best->best_us()});
  return *best;
}

}  // namespace lamina::kernels
