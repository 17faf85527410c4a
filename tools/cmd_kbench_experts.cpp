// lamina kbench experts: a mixture of experts' GEMVs for a step of T tokens, each picking k
// experts at random (distinct in a token, fresh routes rotated across launches), both launches
// side by side: gemv_experts (a block row a (token, pick) pair, each reading its expert's matrix)
// and gemv_experts_grouped (a block row an expert, reading it once for all its pairs), and the
// grouped GEMM (Hopper) as the CUDA backend runs it for many pairs: moe_sort, gather_rows_f16,
// gemm_experts and scatter_rows, timed together, and the GEMM alone in each of its launch shapes
// (gemm_experts.h; where the backend takes the GEMM, more than 2 pairs an expert). Each
// matrix of a model's shape: the gate/up pair (x a row a token) and the down matrix (x a row a
// pair). Columns: µs a launch inside a CUDA graph of back-to-back launches (as a decode step runs
// them), the experts' bytes the step must read (the distinct experts picked, averaged over the
// routes) over that time in GB/s, and its % of the device-to-device copy bandwidth measured at
// start. (No cuBLAS row: it has no routed GEMV; the copy is the ceiling.)
#include "cmd_kbench_experts.h"
#include "tune_shapes.h"

#include "core/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#if defined(LAMINA_HAVE_CUDA)
#include "format/ggml_type.h"
#include "kernels/common/timing.h"
#include "kernels/gemv/gemv.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_experts.h"
#include "kernels/gemv/gemv_experts_grouped.h"
#include "kernels/ops/ops.h"

#include "kbench_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <random>
#include <set>
#include <vector>
#endif

namespace lamina::cli {

#if defined(LAMINA_HAVE_CUDA)
namespace {

namespace kn = lamina::kernels;

void check(cudaError_t e, const char* what) { kbench_check(e, "experts", what); }

struct DevBuf : KbenchBuf {
  explicit DevBuf(size_t n) : KbenchBuf(n, "experts") {}
};

struct MoeShape {
  const char* name;
  int n_expert, k;        // experts, picks a token
  int64_t n_embd, n_ff;   // gate/up: n_ff x n_embd each; down: n_embd x n_ff
};
constexpr MoeShape kShapes[] = {{"qwen3-30b-a3b", 128, 8, 2048, 768}, {"mixtral-8x7b", 8, 2, 4096, 14336}};
constexpr int kRoutes = 16;  // routes rotated across the launches

// One stack of experts' matrices (n x k each, repacked layout, random bytes), its pointer table
// and its grouped GEMM's table of tensor maps (null where gemm_experts does not take them).
struct Stack {
  std::vector<std::unique_ptr<DevBuf>> mats;
  std::unique_ptr<DevBuf> table, maps;
  size_t bytes = 0;  // one matrix
  Stack(GgmlType t, int n_expert, int64_t n, int64_t k, uint64_t seed) {
    bytes = kn::gemv_repacked_bytes(t, n, k);
    std::vector<const void*> ptrs;
    for (int e = 0; e < n_expert; ++e) {
      mats.push_back(std::make_unique<DevBuf>(bytes));
      kn::fill_random_bytes(mats.back()->p, bytes, seed + uint64_t(e), nullptr);
      ptrs.push_back(mats.back()->p);
    }
    table = std::make_unique<DevBuf>(ptrs.size() * sizeof(void*));
    check(cudaMemcpy(table->p, ptrs.data(), ptrs.size() * sizeof(void*), cudaMemcpyHostToDevice), "table upload");
    if (!kn::gemm_experts_supports(t, n, k)) return;
    const std::vector<uint8_t> m = kn::gemm_experts_args(t, ptrs, n, k);
    if (m.empty()) return;
    maps = std::make_unique<DevBuf>(m.size());
    check(cudaMemcpy(maps->p, m.data(), m.size(), cudaMemcpyHostToDevice), "maps upload");
  }
};

// The grouped GEMM's problem: C [pairs][n] (f32) = A [pairs][k] (f16) times the experts' W over the tiles in `groups`.
kn::GemmProblem experts_problem(const void* maps, const void* maps_up, GgmlType t, int64_t pairs, int64_t n, int64_t k, const void* a,
                                void* c, const kn::GemmGroups* groups) {
  kn::GemmProblem p;
  p.a_type = GgmlType::F16, p.b_type = t, p.c_type = GgmlType::F32, p.b_layout = kn::WeightLayout::Repacked;
  p.m = pairs, p.n = n, p.k = k, p.a = a, p.lda = k, p.c = c, p.ldc = n, p.b = maps, p.b_up = maps_up, p.groups = groups;
  return p;
}

// The grouped GEMM's pipeline for one matrix of one step (T tokens of routes [kRoutes][T][2k]
// rotated across the launches): sort, gather, GEMM, scatter back to pair order (the backend's
// routed FFN shares one sort and gather between its two matrices and adds through the slots):
// µs a step in a graph.
double time_gemm(const void* maps, const void* maps_up, GgmlType t, const MoeShape& m, int T, bool pair, const int32_t* routes,
                 const float* x, float* y, int reps, cudaStream_t s) {
  const int64_t pairs = int64_t(T) * m.k, n = pair ? m.n_ff : m.n_embd, k = pair ? m.n_embd : m.n_ff;
  const int64_t max_tiles = pairs / kn::kGemmExpertsTileRows + m.n_expert;
  DevBuf slot_pair(size_t(pairs) * 4), tiles(size_t(max_tiles) * 16), count(4), xs(size_t(pairs * k) * 2), ys(size_t(pairs * n) * 4);
  kn::GemmGroups groups;
  groups.tiles = static_cast<const int32_t*>(tiles.p), groups.count = static_cast<const int32_t*>(count.p), groups.max_tiles = max_tiles;
  const kn::GemmProblem p = experts_problem(maps, maps_up, t, pairs, n, k, xs.p, ys.p, &groups);
  kn::Status st;
  const auto run = [&](int i) {
    const float* route = reinterpret_cast<const float*>(routes + size_t(i % kRoutes) * size_t(T) * size_t(2 * m.k));
    auto* sp = static_cast<int32_t*>(slot_pair.p);
    for (const kn::Status& r : {kn::moe_sort(route, T, m.k, m.n_expert, kn::kGemmExpertsTileRows, sp, static_cast<int32_t*>(tiles.p),
                                            static_cast<int32_t*>(count.p), s),
                               kn::gather_rows_f16(x, pair ? m.k : 1, sp, pairs, k, xs.p, s), kn::gemm_experts(p, s),
                               kn::scatter_rows(static_cast<const float*>(ys.p), sp, pairs, n, y, s)})
      if (!r) st = r;
  };
  run(0);
  check(cudaStreamSynchronize(s), "first grouped GEMM");
  if (!st) fail("kbench experts: {}", st.message);
  const double us = kn::graph_time_us(run, kRoutes, reps, s);
  return us > 0 ? us : kn::median_time_us(run, 3, reps, s);
}

// The grouped GEMM alone in launch shape l (gemm_experts.h): each route sorted once beforehand,
// the launches rotating over the routes' tiles; µs a launch in a graph, -1 where l does not take
// the problem.
double time_gemm_alone(kn::ExpertsLaunch l, const void* maps, const void* maps_up, GgmlType t, const MoeShape& m, int T, bool pair,
                       const int32_t* routes, const float* x, int reps, cudaStream_t s) {
  if (!kn::experts_launch_takes(l, pair)) return -1;
  const int64_t pairs = int64_t(T) * m.k, n = pair ? m.n_ff : m.n_embd, k = pair ? m.n_embd : m.n_ff;
  const int64_t max_tiles = pairs / kn::kGemmExpertsTileRows + m.n_expert;
  DevBuf slot_pair(size_t(pairs) * 4), tiles(size_t(kRoutes * max_tiles) * 16), count(size_t(kRoutes) * 4),
      xs(size_t(pairs * k) * 2), ys(size_t(pairs * n) * 4);
  auto* sp = static_cast<int32_t*>(slot_pair.p);
  for (int r = 0; r < kRoutes; ++r) {
    const float* route = reinterpret_cast<const float*>(routes + size_t(r) * size_t(T) * size_t(2 * m.k));
    const kn::Status st = kn::moe_sort(route, T, m.k, m.n_expert, kn::kGemmExpertsTileRows, sp,
                                       static_cast<int32_t*>(tiles.p) + size_t(r * max_tiles) * 4, static_cast<int32_t*>(count.p) + r, s);
    if (!st) fail("kbench experts: {}", st.message);
  }
  if (const kn::Status st = kn::gather_rows_f16(x, pair ? m.k : 1, sp, pairs, k, xs.p, s); !st) fail("kbench experts: {}", st.message);
  kn::Status st;
  const auto run = [&](int i) {
    kn::GemmGroups groups;
    groups.tiles = static_cast<const int32_t*>(tiles.p) + size_t((i % kRoutes) * max_tiles) * 4;
    groups.count = static_cast<const int32_t*>(count.p) + i % kRoutes, groups.max_tiles = max_tiles;
    if (const kn::Status r = kn::gemm_experts(experts_problem(maps, maps_up, t, pairs, n, k, xs.p, ys.p, &groups), l, s); !r) st = r;
  };
  run(0);
  check(cudaStreamSynchronize(s), "first grouped GEMM alone");
  if (!st) fail("kbench experts: {}", st.message);
  const double us = kn::graph_time_us(run, kRoutes, reps, s);
  return us > 0 ? us : kn::median_time_us(run, 3, reps, s);
}

}  // namespace

void run_kbench_experts(const KbenchExpertsArgs& a) {
  const std::vector<int64_t> tokens = parse_whole_list(a.tokens.empty() ? "1,4,8,16,32,64,128,256,512" : a.tokens, 1, 4096,
                                                     "kbench experts: --batch");
  std::vector<GgmlType> types;
  for (const std::string& name : split_list(a.types.empty() ? "q4_0" : a.types)) {
    const auto t = parse_type(name);
    if (!t || !kn::gemv_experts_supports(*t, 4096)) fail("kbench experts: --types {}: not a type the expert GEMVs take", name);
    types.push_back(*t);
  }
  std::vector<const MoeShape*> shapes;
  for (const std::string& name : split_list(a.models.empty() ? "qwen3-30b-a3b,mixtral-8x7b" : a.models)) {
    const MoeShape* m = nullptr;
    for (const MoeShape& s : kShapes)
      if (name == s.name) m = &s;
    if (!m) fail("kbench experts: --shapes {}: qwen3-30b-a3b or mixtral-8x7b", name);
    shapes.push_back(m);
  }
  cudaStream_t s = nullptr;
  check(cudaStreamCreate(&s), "stream");
  const double copy_gbs = kn::copy_bandwidth_gbs(size_t(1) << 30, s);
  fmt::print("device-to-device copy: {:.0f} GB/s\n\n", copy_gbs);
  fmt::print("| shape | type | matrix | tokens | pairs | experts read | one a pair µs | GB/s | grouped µs | GB/s | grouped GEMM µs | GB/s | "
             "best % copy | GEMM alone µs: {} | best GEMM alone % copy |\n",
             fmt::join(std::vector<std::string>{kn::experts_launch_name(kn::kExpertsLaunches[0]), kn::experts_launch_name(kn::kExpertsLaunches[1]),
                                                kn::experts_launch_name(kn::kExpertsLaunches[2])},
                       " / "));
  fmt::print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::mt19937 rng(7);
  for (const MoeShape* m : shapes)
    for (GgmlType t : types) {
      const Stack gate(t, m->n_expert, m->n_ff, m->n_embd, 100), up(t, m->n_expert, m->n_ff, m->n_embd, 300),
          down(t, m->n_expert, m->n_embd, m->n_ff, 500);
      for (const int64_t tokens_t : tokens) {
        const int T = int(tokens_t);
        const int pairs = T * m->k;
        // Routes: [T][2k] rows of k distinct ids ascending (then k slots the GEMVs do not read).
        std::vector<int32_t> routes(size_t(kRoutes) * size_t(T) * size_t(2 * m->k), 0);
        double distinct = 0;
        std::vector<int> all(static_cast<size_t>(m->n_expert));
        for (int r = 0; r < kRoutes; ++r) {
          std::set<int> used;
          for (int tok = 0; tok < T; ++tok) {
            for (int e = 0; e < m->n_expert; ++e) all[size_t(e)] = e;
            std::shuffle(all.begin(), all.end(), rng);
            std::sort(all.begin(), all.begin() + m->k);
            int32_t* row = &routes[(size_t(r) * size_t(T) + size_t(tok)) * size_t(2 * m->k)];
            for (int j = 0; j < m->k; ++j) row[j] = all[size_t(j)], used.insert(all[size_t(j)]);
          }
          distinct += double(used.size()) / kRoutes;
        }
        DevBuf dr(routes.size() * 4), dx(size_t(pairs) * size_t(std::max(m->n_embd, m->n_ff)) * 4),
            dy(size_t(pairs) * size_t(std::max(m->n_embd, m->n_ff)) * 4);
        check(cudaMemcpy(dr.p, routes.data(), routes.size() * 4, cudaMemcpyHostToDevice), "route upload");
        kn::fill_random_floats(static_cast<float*>(dx.p), size_t(pairs) * size_t(std::max(m->n_embd, m->n_ff)), 11, 1.f, s);
        for (bool pair : {true, false}) {
          kn::GemvExperts p;
          p.wtype = t;
          p.w = static_cast<const void* const*>(pair ? gate.table->p : down.table->p);
          p.w_up = pair ? static_cast<const void* const*>(up.table->p) : nullptr;
          p.groups = pairs, p.picks = m->k, p.ids_stride = 2 * m->k;
          p.n = pair ? m->n_ff : m->n_embd, p.k = pair ? m->n_embd : m->n_ff;
          p.x = static_cast<const float*>(dx.p), p.x_share = pair ? m->k : 1, p.x_stride = p.k;
          p.y = static_cast<float*>(dy.p);
          const auto at = [&](int i) {
            kn::GemvExperts q = p;
            q.ids = static_cast<const int32_t*>(dr.p) + size_t(i % kRoutes) * size_t(T) * size_t(2 * m->k);
            return q;
          };
          double us[3] = {-1, -1, -1};
          for (int grouped = 0; grouped < 2; ++grouped) {
            if (pairs > kn::kGemvExpertsGroupedMaxPairs) continue;
            kn::Status st;
            const auto run = [&](int i) {
              const kn::GemvExperts q = at(i);
              const kn::Status r = grouped ? kn::gemv_experts_grouped(q, m->n_expert, s) : kn::gemv_experts(q, s);
              if (!r) st = r;
            };
            run(0);
            check(cudaStreamSynchronize(s), "first launch");
            if (!st) fail("kbench experts: {}", st.message);
            us[grouped] = kn::graph_time_us(run, kRoutes, a.reps, s);
            if (us[grouped] < 0) us[grouped] = kn::median_time_us(run, 3, a.reps, s);
          }
          const Stack& w0 = pair ? gate : down;
          if (w0.maps) us[2] = time_gemm(w0.maps->p, pair ? up.maps->p : nullptr, t, *m, T, pair,
                                         static_cast<const int32_t*>(dr.p), static_cast<const float*>(dx.p),
                                         static_cast<float*>(dy.p), a.reps, s);
          std::string alone = "-";
          double alone_best = -1;
          if (w0.maps && T * m->k > 2 * m->n_expert) {  // (where the backend takes the GEMM at its default)
            std::vector<std::string> cells;
            for (kn::ExpertsLaunch l : kn::kExpertsLaunches) {
              const double t_us = time_gemm_alone(l, w0.maps->p, pair ? up.maps->p : nullptr, t, *m, T, pair,
                                                  static_cast<const int32_t*>(dr.p), static_cast<const float*>(dx.p), a.reps, s);
              cells.push_back(t_us > 0 ? fmt::format("{:.2f}", t_us) : "-");
              if (t_us > 0 && (alone_best < 0 || t_us < alone_best)) alone_best = t_us;
            }
            alone = fmt::format("{}", fmt::join(cells, " / "));
          }
          const double bytes = distinct * double((pair ? 2 : 1) * (pair ? gate.bytes : down.bytes));
          const auto gbs = [&](double t_us) { return t_us > 0 ? bytes / (t_us * 1e3) : 0.0; };
          const double best = std::max({gbs(us[0]), gbs(us[1]), gbs(us[2])});
          const auto cell = [](double v, const char* f) { return v > 0 ? fmt::format(fmt::runtime(f), v) : std::string("-"); };
          fmt::print("| {} | {} | {} | {} | {} | {:.1f} | {} | {} | {} | {} | {} | {} | {:.1f} % | {} | {} |\n", m->name, type_name(t),
                     pair ? "gate/up" : "down", T, pairs, distinct, cell(us[0], "{:.2f}"), cell(gbs(us[0]), "{:.0f}"),
                     cell(us[1], "{:.2f}"), cell(gbs(us[1]), "{:.0f}"), cell(us[2], "{:.2f}"), cell(gbs(us[2]), "{:.0f}"),
                     100.0 * best / copy_gbs, alone, alone_best > 0 ? fmt::format("{:.1f} %", 100.0 * gbs(alone_best) / copy_gbs) : "-");
        }
      }
    }
  cudaStreamDestroy(s);
}

#else
void run_kbench_experts(const KbenchExpertsArgs&) { fail("this lamina was built without CUDA: kbench needs an NVIDIA GPU build"); }
#endif

}  // namespace lamina::cli
