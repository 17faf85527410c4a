// A mixture of experts' pass with its route in device memory: the router kernel, the (token, pick)
// pairs in one GEMV launch a matrix (q_dp4a_experts, or q_dp4a_experts_grouped when experts are
// picked by several tokens; through a table of the experts' device pointers made at load) and
// their weighted sum, or, for many pairs, the whole routed FFN through grouped tensor-core GEMMs
// (experts_ffn: the pairs sorted by expert on the device; a table of the experts' tensor maps made
// at load). Nothing is read back mid-pass, so
// the step records as a graph. Like add_rows_scaled these are not plan ops: what was recorded runs
// first.
#include "backend/cuda/cuda_backend.h"

#include "backend/cuda/cuda_op.h"
#include "backend/moe_policy.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/gemm_experts.h"
#include "kernels/gemv/gemv_experts_grouped.h"
#include "kernels/ops/ops.h"
#include "kernels/ops/moe_slots.h"

#include <algorithm>
#include <cstring>

namespace lamina {

namespace kn = kernels;

// A stack is indexed when q_dp4a_experts takes its matrices (repacked, one type and shape, not
// parts of a Q/K/V-style stack); one that is not leaves every stack to the host route.
void CudaBackend::index_experts(std::span<const Weight> experts) {
  bool ok = !exact_ && !experts.empty() && kn::gemv_experts_supports(experts[0].type, experts[0].cols);
  for (const Weight& w : experts) {
    const DevWeight& d = info(w);
    ok = ok && d.repacked && !d.stack && w.type == experts[0].type && w.rows == experts[0].rows && w.cols == experts[0].cols;
  }
  if (!ok) {
    experts_routable_ = false;
    return;
  }
  std::vector<const void*> ptrs;
  for (const Weight& w : experts) ptrs.push_back(w.data);
  void* table = dev_alloc(ptrs.size() * sizeof(void*), "an expert table");
  owned_.push_back(table);
  upload(table, ptrs.data(), ptrs.size() * sizeof(void*));
  expert_tables_[experts[0].data] = static_cast<const void* const*>(table);
  // The grouped GEMM's tensor maps of the same matrices (Hopper and q3_wgmma_rs's types).
  const Weight& w0 = experts[0];
  std::vector<uint8_t> maps;
  if (kn::gemm_experts_supports(w0.type, w0.rows, w0.cols)) maps = kn::gemm_experts_args(w0.type, ptrs, w0.rows, w0.cols);
  if (maps.empty()) {
    experts_gemm_ = false;
    return;
  }
  void* gemm_table = dev_alloc(maps.size(), "an expert GEMM table");
  owned_.push_back(gemm_table);
  upload(gemm_table, maps.data(), maps.size());
  expert_gemm_tables_[w0.data] = gemm_table;
}

// The rule (backend/moe_policy.h): every pass where the experts have the grouped GEMM (past
// --moe-pairs-per-expert pairs an expert, 2 by default, experts_ffn takes it); elsewhere one
// row always and several while their pairs average at most --moe-pairs-per-expert an expert.
bool CudaBackend::routes_experts(int64_t rows, int64_t n_expert, int64_t k) const {
  return moe_rows_on_device(rows, n_expert, k, moe_pairs_per_expert_, kn::kGemvExpertsGroupedMaxPairs, has_experts_gemm()) &&
         n_expert <= kn::kMoeRouteMaxExperts && k <= kn::kMoeRouteMaxPicks && experts_routable_ &&
         !expert_tables_.empty();
}

const void* const* CudaBackend::expert_table(std::span<const Weight> experts) const {
  check("experts", !experts.empty(), "no experts");
  auto it = expert_tables_.find(experts[0].data);
  check("experts", it != expert_tables_.end() && experts_routable_, "the experts were not indexed (index_experts)");
  return it->second;
}

void CudaBackend::route_experts(Tensor logits, int k, bool renorm, Tensor route) {
  check("route_experts", route.rows == logits.rows && route.cols == 2 * int64_t(k), "the route is not [rows][2k]");
  flush();
  widen_only16(logits);
  run_op("moe route", double(logits.rows * logits.cols) * 4.0, 0, [&] {
    return kn::moe_route(logits.data, logits.rows, int(logits.cols), k, renorm, route.data, stream_);
  });
}

void CudaBackend::experts_matmul(std::span<const Weight> w, std::span<const Weight> w_up, Glu act, Tensor x, Tensor route,
                                 Tensor out) {
  const int64_t rows = route.rows, k = route.cols / 2;
  const bool pair = !w_up.empty();
  check("experts_matmul", k >= 1 && route.cols == 2 * k && out.rows == rows * k && out.cols == w[0].rows, "shapes differ");
  check("experts_matmul", x.cols == w[0].cols && x.rows == (pair ? rows : rows * k), "x is a row a token (gate/up) or a pair");
  const int64_t n_expert = int64_t(w.size());
  check("experts_matmul", w_up.empty() || (w_up.size() == w.size() && w_up[0].type == w[0].type && w_up[0].rows == w[0].rows &&
                                             w_up[0].cols == w[0].cols),
        "the gate and up experts differ in type or shape");
  flush();
  widen_only16(x);
  kn::GemvExperts p;
  p.wtype = w[0].type;
  p.w = expert_table(w);
  p.w_up = pair ? expert_table(w_up) : nullptr;
  p.gelu = act == Glu::Gelu;
  p.ids = reinterpret_cast<const int32_t*>(route.data);
  p.groups = int(rows * k), p.picks = int(k), p.ids_stride = 2 * k;
  p.n = w[0].rows, p.k = w[0].cols;
  p.x = x.data, p.x_share = pair ? int(k) : 1, p.x_stride = x.cols;
  p.y = out.data;
  // One block row a pair, or (the gate/up pair at 4 pairs an expert and more) grouped by expert,
  // each expert's matrices read once (backend/moe_policy.h).
  const bool grouped = moe_grouped_launch(rows * k, n_expert, pair);
  const double pairs = double(rows * k), mats = pair ? 2.0 : 1.0;
  const double read = grouped ? kn::experts_expected(rows * k, n_expert) : pairs;
  run_op(pair ? "experts gate/up" : "experts matmul", double(info(w[0]).bytes) * read * mats,
         2.0 * pairs * double(p.n * p.k) * mats, [&] {
           return grouped ? kn::gemv_experts_grouped(p, int(n_expert), stream_) : kn::gemv_experts(p, stream_);
         });
}

// Many pairs sorted by expert on the device (moe_sort): slot_pair and the tiles of one expert's slots.
CudaBackend::SortedPairs CudaBackend::sort_pairs(Tensor route, int64_t n_expert) {
  SortedPairs sp;
  sp.rows = route.rows, sp.k = route.cols / 2, sp.pairs = sp.rows * sp.k;
  sp.max_tiles = sp.pairs / kn::kGemmExpertsTileRows + n_expert;
  sp.slot_pair = static_cast<int32_t*>(scratch_bytes(size_t(sp.pairs) * 4));
  sp.tiles = static_cast<int32_t*>(scratch_bytes(size_t(sp.max_tiles) * 16));
  sp.count = static_cast<int32_t*>(scratch_bytes(4));
  run_op("moe sort", double(sp.pairs) * 12.0, 0, [&] {
    return kn::moe_sort(route.data, sp.rows, int(sp.k), int(n_expert), kn::kGemmExpertsTileRows, sp.slot_pair, sp.tiles, sp.count,
                        stream_);
  });
  return sp;
}

// One grouped GEMM (gemm_experts) over the sorted pairs: c [pairs][w.rows] in slot order (f32 or
// f16) from a16 [pairs][w.cols] f16 in slot order; the gate/up pair with w_up.
void CudaBackend::grouped_gemm(std::span<const Weight> w, std::span<const Weight> w_up, Glu act, const SortedPairs& sp,
                               const void* a16, void* c, GgmlType c_type) {
  auto table = [&](std::span<const Weight> s) {
    auto it = expert_gemm_tables_.find(s[0].data);
    check("experts", it != expert_gemm_tables_.end(), "the experts have no GEMM table (index_experts)");
    return it->second;
  };
  const bool pair = !w_up.empty();
  const int64_t n = w[0].rows, kk = w[0].cols;
  kn::GemmGroups groups;
  groups.tiles = sp.tiles, groups.count = sp.count, groups.max_tiles = sp.max_tiles;
  kn::GemmProblem p;
  p.a_type = GgmlType::F16, p.b_type = w[0].type, p.c_type = c_type, p.b_layout = kn::WeightLayout::Repacked;
  p.m = sp.pairs, p.n = n, p.k = kk, p.a = a16, p.lda = kk, p.c = c, p.ldc = n;
  p.b = table(w), p.b_up = pair ? table(w_up) : nullptr, p.gelu = act == Glu::Gelu, p.groups = &groups;
  const double mats = pair ? 2.0 : 1.0;
  run_op(pair ? "experts gate/up gemm" : "experts gemm", double(info(w[0]).bytes) * double(w.size()) * mats,
         2.0 * double(sp.pairs * n * kk) * mats, [&] {
           using D = CudaOptions::MoeDownLaunch;
           const kn::ExpertsLaunch l = pair || moe_down_launch_ == D::Rows128 ? kn::ExpertsLaunch::Rows128
                                       : moe_down_launch_ == D::Rows256       ? kn::ExpertsLaunch::Rows256
                                                                              : kn::ExpertsLaunch::TwoBlocks;
           return kn::gemm_experts(p, l, stream_);
         });
}

bool CudaBackend::experts_gemm_takes(int64_t rows, int64_t k, int64_t n_expert) const {
  return has_experts_gemm() && moe_gemm_launch(rows, k, n_expert, moe_pairs_per_expert_, kn::kGemvExpertsGroupedMaxPairs);
}

// The whole routed FFN through the grouped GEMMs, its rows in slot order from the sort to the add:
// h gathered once as f16, the gate/up GEMM writing f16 rows (the down GEMM's A, as the gather of
// its f32 rows would round them), the down GEMM's f32 rows added to x through the pairs' slots
// (add_routed's bits). Fewer pairs: Backend's three ops.
void CudaBackend::experts_ffn(std::span<const Weight> gate, std::span<const Weight> up, std::span<const Weight> down, Glu act,
                              Tensor h, Tensor route, Tensor x) {
  const int64_t rows = route.rows, k = route.cols / 2;
  if (!experts_gemm_takes(rows, k, int64_t(gate.size()))) return Backend::experts_ffn(gate, up, down, act, h, route, x);
  check("experts_ffn", h.rows == rows && x.rows == rows && h.cols == gate[0].cols && x.cols == down[0].rows &&
                           down[0].cols == gate[0].rows, "shapes differ");
  flush();
  widen_only16(h);
  widen_only16(x);
  const SortedPairs sp = sort_pairs(route, int64_t(gate.size()));
  const int64_t e = h.cols, f = gate[0].rows;
  void* hs = scratch_bytes(size_t(sp.pairs * e) * 2);
  void* g16 = scratch_bytes(size_t(sp.pairs * f) * 2);
  const Tensor d = alloc(sp.pairs, x.cols);
  auto* pair_slot = static_cast<int32_t*>(scratch_bytes(size_t(sp.pairs) * 4));
  run_op("experts gather", double(sp.pairs * e) * 6.0, 0,
         [&] { return kn::gather_rows_f16(h.data, k, sp.slot_pair, sp.pairs, e, hs, stream_); });
  grouped_gemm(gate, up, act, sp, hs, g16, GgmlType::F16);
  grouped_gemm(down, {}, act, sp, g16, d.data, GgmlType::F32);
  run_op("add_routed", double(d.rows * d.cols + 2 * x.rows * x.cols) * 4.0, double(d.rows * d.cols) * 2.0, [&] {
    const kn::Status st = kn::moe_pair_slots(sp.slot_pair, sp.pairs, pair_slot, stream_);
    return st ? kn::add_routed_slots(x.data, d.data, rows, x.cols, route.data, int(k), pair_slot, stream_) : st;
  });
}

void CudaBackend::add_routed(Tensor y, Tensor d, Tensor route) {
  const int64_t k = route.cols / 2;
  check("add_routed", k >= 1 && route.rows == y.rows && d.rows == y.rows * k && d.cols == y.cols, "shapes differ");
  flush();
  widen_only16(y);
  widen_only16(d);
  run_op("add_routed", double(d.rows * d.cols + 2 * y.rows * y.cols) * 4.0, double(d.rows * d.cols) * 2.0,
         [&] { return kn::add_routed(y.data, d.data, y.rows, y.cols, route.data, int(k), stream_); });
}

}  // namespace lamina
