// The CUDA backend's matmul nodes: GEMVs for up to 8 rows (taking x's int8 blocks or a pending
// norm where the step plan says so), GEMMs above (taking x's 16-bit copy where one was made).
#include "backend/cuda/cuda_backend.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_op.h"
#include "kernels/common/q8_blocks.h"
#include "kernels/dequant/dequant.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemv/gemv.h"
#include "kernels/ops/ops.h"
#include "kernels/ops/moe_router.h"

#include <cuda_runtime.h>

#include <algorithm>

namespace lamina {

namespace kn = kernels;
using plan::Node;
using plan::Op;

namespace {

// The GEMV that keeps x in f32 (--exact-matmul): per-element decode for quantised blocks.
kn::Status gemv_exact(const kn::GemvProblem& p, cudaStream_t s) {
  const bool flt = float_type(p.wtype);
  const kn::GemvVariant* v = kn::find_gemv_variant(flt ? "v5_stream" : "q_generic");
  if (!v) return kn::Status::error("no exact GEMV variant");
  if (kn::Status st = kn::gemv_validate(p, *v); !st) return st;
  return v->launch(p, v->configs.front(), s);
}

}  // namespace

// The fields of x a GEMV takes: the pending norm whose output x is (its input, weight, and the
// int8 blocks and sums of squares its producer made), or x's int8 blocks.
void CudaBackend::gemv_input(const Node& n, const Run& r, kn::GemvProblem& p) const {
  if (n.norm_from >= 0) {
    const Node& pn = r.nodes[size_t(n.norm_from)];
    const Made& pm = r.made[size_t(n.norm_from)];
    p.x = plan::pending_input(pn).data;
    p.norm_w = static_cast<const float*>(plan::pending_weight(pn).data), p.norm_eps = pn.eps, p.norm_out = pn.out.data;
    p.x8 = pm.x8, p.x8_ss = pm.ss, p.norm_out8 = nullptr;
    return;
  }
  if (n.x8_from >= 0) p.x8 = r.made[size_t(n.x8_from)].x8;
}

const void* CudaBackend::x16_input(const Node& n, const Run& r) const {
  return n.x16_from >= 0 ? r.made[size_t(n.x16_from)].x16 : nullptr;
}

namespace {
// Whether x's producer wrote only its 16-bit copy (a gated GEMM: Node::out16_only).
bool only16(const Node& n, const std::vector<Node>& nodes) { return n.x16_from >= 0 && nodes[size_t(n.x16_from)].out16_only; }
}  // namespace

// out = x . w^T (+ out when accumulate). base: the GEMV fields every 8-row slice shares (x's
// int8 blocks or pending norm, the y8 fields of a MatmulAddNorm, the argmax); x16: x's 16-bit
// copy for a GEMM, or null (then converted here); x16_only: x's f32 rows are made from x16 here
// if a path needs them.
void CudaBackend::run_matmul(const Weight& w, const DevWeight& d, Tensor x, Tensor out, bool accumulate,
                             const kn::GemvProblem& base_in, const void* x16, bool x16_only) {
  check("matmul", !d.stack || !d.repacked, "a part of a repacked stack is only multiplied together with the other parts");
  check("matmul", !x16_only || x16, "x has neither its f32 rows nor a 16-bit copy");
  const auto f32_x = [&] {  // (once: x then points at the widened rows)
    if (!x16_only) return;
    const Tensor f = alloc(x.rows, x.cols);
    widen(x16, f);
    x = f, x16_only = false;
  };
  const kn::WeightLayout layout = d.repacked ? kn::WeightLayout::Repacked : kn::WeightLayout::Gguf;
  const double flops = 2.0 * double(x.rows) * double(w.rows) * double(w.cols);
  kn::GemvProblem base = base_in;
  base.wtype = w.type, base.layout = layout, base.w = w.data, base.n = w.rows, base.k = w.cols;
  // A small f32 matrix (a mixture of experts' router: n_expert <= kMoeRouteMaxExperts rows of
  // n_embd) times several rows of x: router_matmul, not the SGEMM rungs, whose 128 x 128 tiles
  // leave most SMs idle over so few columns (251 µs a layer of a 512-token prompt of
  // Qwen3-30B-A3B's shape), nor 8-row GEMV slices, a warp a column (208 µs a 64-row step):
  // docs/benchmarks.md, sixty-first session. (A large f32 matrix stays on the GEMM.)
  const auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (w.type == GgmlType::F32 && w.rows <= kn::kMoeRouteMaxExperts && w.cols % 4 == 0 && x.rows > 1 && !accumulate &&
      !base.norm_w && !base.y8 && !base.bias && !exact_ && aligned16(w.data) && (x16_only || aligned16(x.data))) {
    f32_x();
    const int splits = kn::router_matmul_splits(x.rows, int(w.rows), w.cols, sm_count_);
    float* parts = splits > 1 ? alloc(int64_t(splits) * x.rows, w.rows).data : nullptr;
    run_op(op_name("router", w), double(d.bytes) + double(x.rows * (x.cols + out.cols)) * 4.0, flops, [&] {
      return kn::router_matmul(x.data, x.rows, x.cols, static_cast<const float*>(w.data), int(w.rows), out.data, parts, splits,
                               stream_);
    });
    return;
  }
  if (x.rows > gemv_max_rows_ && !exact_) {
    const auto a16 = [&](GgmlType t) {
      if (x16 && t == act16_) return x16;
      f32_x();
      return convert(x, t);
    };
    const GgmlType a_type = gemm_input_type(w.type);
    if (a_type == GgmlType::F32) f32_x();
    const void* a = a_type == GgmlType::F32 ? static_cast<const void*>(x.data) : a16(a_type);
    kn::GemmProblem p = gemm_of(w, d, x, a_type, a);
    p.c = out.data, p.ldc = out.cols;
    p.beta = accumulate ? 1.f : 0.f;
    const double bytes = double(d.bytes) + double(x.rows * (x.cols * 2 + out.cols * 4));
    if (problems_) problems_->gemm.push_back(p);
    if (try_op(op_name(accumulate ? "gemm+res" : "gemm", w), bytes, flops, [&] { return kn::gemm(p, stream_); }).ok) return;
    // No GEMM variant for this type (or none that takes this problem): many rows through f16 (below:
    // a repacked type that dequant_repacked takes from 33 rows; a quantised matrix left in the GGUF
    // layout from 129: its way through f32 moves about 10 bytes per weight, what 16 slices of a
    // 5-bit GEMV read), else GEMVs over 8-row slices.
    const bool planes = d.repacked && kn::dequant_repacked_takes(w.type);
    const bool gguf = !d.repacked && w.type != GgmlType::F32 && x.rows > 16 * kn::kGemvMaxBatch;
    if (x.rows > 4 * kn::kGemvMaxBatch && (planes || gguf)) {
      p.a_type = p.b_type = GgmlType::F16;
      p.a = a16(GgmlType::F16);
      p.b_layout = kn::WeightLayout::Gguf;
      return by_f16(w, d, p, accumulate);
    }
  }
  f32_x();
  const double bytes = double(d.bytes) * double((x.rows + 7) / 8) + double(x.rows * x.cols) * 4.0;
  const char* kind = base.y8_ss     ? "gemv+res+norm"
                     : base.norm_w  ? (accumulate ? "gemv+norm+res" : "gemv+norm")
                     : accumulate   ? "gemv+res"
                                    : "gemv";
  run_op(op_name(kind, w), bytes, flops, [&] {
    for (int64_t r0 = 0; r0 < x.rows; r0 += kn::kGemvMaxBatch) {
      kn::GemvProblem p = base;
      if (!base.norm_w) p.x = x.data + r0 * x.cols;  // (a pending norm's x: one decode row)
      p.batch = int(std::min<int64_t>(kn::kGemvMaxBatch, x.rows - r0));
      p.y = out.data + r0 * out.cols;
      p.residual = accumulate ? p.y : nullptr;
      if (problems_) problems_->gemv.push_back(p);
      if (kn::Status st = exact_ ? gemv_exact(p, stream_) : kn::gemv(p, stream_); !st) return st;
    }
    return kn::Status::success();
  });
}

const void* CudaBackend::convert(Tensor x, GgmlType type) {
  void* h = scratch_bytes(size_t(x.rows * x.cols) * 2);
  run_op("convert", double(x.rows * x.cols) * 6.0, 0, [&] { return kn::convert_f32(x.data, x.rows * x.cols, type, h, stream_); });
  return h;
}

// A matmul of many rows that no GEMM variant takes (every repacked type has one on Hopper where k is
// a multiple of 256, as the K-quants' super-blocks make it; a GPU before Hopper, or a matrix of a
// 32-element block type of another k; q4_1's planes are not among dequant_repacked's and stay on
// the GEMV slices): 8-row GEMV slices would read the
// matrix once per 8 rows, so the matrix is dequantised to f16 in slices of its rows (8M elements:
// 16 MiB, and 32 MiB of f32 on the way for the GGUF layout) and each slice multiplied by the f16
// GEMM into its columns of out. Repacked planes (dequant_repacked_takes) are dequantised to f16
// directly; the GGUF layout through dequantize_rows' f32. p: the GEMM problem with A in f16.
void CudaBackend::by_f16(const Weight& w, const DevWeight& d, kn::GemmProblem p, bool accumulate) {
  constexpr int64_t kSliceElems = int64_t(8) << 20;
  const int64_t slice = std::min<int64_t>(w.rows, std::max<int64_t>(128, kSliceElems / w.cols / 128 * 128));
  const bool direct = d.repacked && kn::dequant_repacked_takes(w.type);
  void* b = scratch_bytes(size_t(slice) * size_t(w.cols) * 2);
  float* f32 = direct ? nullptr : static_cast<float*>(scratch_bytes(size_t(slice) * size_t(w.cols) * 4));
  const size_t rb = row_bytes(w.type, w.cols);
  float* c = static_cast<float*>(p.c);
  for (int64_t r0 = 0; r0 < w.rows; r0 += slice) {
    const int64_t n = std::min(slice, w.rows - r0);
    const double elems = double(n) * double(w.cols);
    if (direct) {
      run_op(op_name("dequant", w), elems * (double(d.bytes) / double(w.rows * w.cols) + 2), 0,
             [&] { return kn::dequant_repacked(w.type, w.data, w.rows, w.cols, r0, n, b, stream_); });
    } else {
      run_op(op_name("dequant", w), double(n) * double(rb) + elems * 4, 0, [&] {
        return kn::dequantize_rows(w.type, static_cast<const uint8_t*>(w.data) + size_t(r0) * rb, w.cols, nullptr, n, f32, stream_);
      });
      run_op("convert", elems * 6, 0, [&] { return kn::convert_f32(f32, n * w.cols, GgmlType::F16, b, stream_); });
    }
    p.n = n, p.b = b, p.ldb = w.cols, p.c = c + r0;
    run_op(op_name(accumulate ? "gemm+res (f16)" : "gemm (f16)", w), elems * 2 + double(p.m * (p.k * 2 + n * 4)),
           2.0 * double(p.m) * elems, [&] { return kn::gemm(p, stream_); });
  }
}

// Matmul, or MatmulAddNorm: one decode row whose GEMV adds to the residual (y) and also writes
// the int8 blocks of y * norm and their sums of squares (GemvProblem::y8_gain, y8_ss); the norm
// stays pending for the GEMVs that read out (fuse() marked them). With argmax (the pass's
// logits row), the GEMV also leaves its greedy id where the sampling kernel would.
void CudaBackend::exec_matmul(const Node& n, Run& r, Made& m) {
  kn::GemvProblem p;
  gemv_input(n, r, p);
  const bool fused_norm = n.op == Op::MatmulAddNorm;
  const Tensor out = fused_norm ? n.y : n.out;
  if (fused_norm) {
    m.x8 = scratch_bytes(kn::x8_bytes(n.out.cols));
    m.ss = static_cast<double*>(scratch_bytes(size_t(n.out.cols / 32) * sizeof(double)));
    p.y8 = m.x8, p.y8_count = y8_count_, p.y8_gain = static_cast<const float*>(n.norm.data), p.y8_ss = m.ss;
  }
  if (n.argmax) {
    p.argmax.key = argmax_words_;
    p.argmax.count = reinterpret_cast<unsigned*>(argmax_words_ + 1);
    p.argmax.id = host_id_dev_;
    p.argmax.id2 = dev_sampled_;
    p.argmax.parity = dev_pos() + (n_in_ - 1);  // the logits row's position: host_id_[position & 1]
  }
  run_matmul(n.w, info(n.w), n.x, out, n.accumulate || fused_norm, p, x16_input(n, r), only16(n, r.nodes));
  if (n.argmax) argmax_of_ = out.data;
}

// The parts w of one stack (load_stacked), in order and complete: the stack as one weight.
bool CudaBackend::whole_stack(std::span<const Weight* const> w, Weight& stacked, DevWeight& ds) {
  const DevWeight& d0 = info(*w[0]);
  bool whole = d0.stack != nullptr;
  int64_t rows = 0;
  for (size_t i = 0; i < w.size() && whole; ++i) {
    const DevWeight& d = info(*w[i]);
    whole = d.stack == d0.stack && d.part == int(i) && d.row0 == rows;
    rows += w[i]->rows;
  }
  if (!whole || rows != d0.stack_rows) return false;
  stacked = Weight{w[0]->type, w[0]->cols, rows, d0.stack};
  ds = DevWeight{d0.repacked, d0.bytes * size_t(rows) / size_t(w[0]->rows)};
  return true;
}

void CudaBackend::exec_matmul_multi(const Node& n, Run& r) {
  kn::GemvProblem base;
  gemv_input(n, r, base);
  const void* x16 = x16_input(n, r);
  const Tensor x = n.x;
  std::vector<const Weight*> w;
  for (const Weight& wi : n.ws) w.push_back(&wi);
  Weight stacked;
  DevWeight ds;
  const auto each = [&] {
    for (size_t i = 0; i < w.size(); ++i) run_matmul(*w[i], info(*w[i]), x, n.outs[i], false, base, x16, only16(n, r.nodes));
  };
  if (!whole_stack(w, stacked, ds)) return each();
  // Prompt rows: the stack as one GEMM writing each part's columns in place, where the GEMM for
  // the shape takes parts (f16 stacks too: one 12288-wide GEMM for Q/K/V runs nearer the tensor
  // cores' peak than three 4096-wide ones). Else, for a plain (not repacked) stack, one matmul
  // per part straight into its output: cheaper than the stacked GEMM plus column copies.
  if (x.rows > gemv_max_rows_ && !exact_ && gemm_into_parts(stacked, ds, x, n.outs, x16)) return;
  if (x.rows > gemv_max_rows_ && !ds.repacked) return each();
  // The stack as one matmul: in place when the outputs lie back to back (one row: q, k, v
  // allocated one after the other), else into scratch and split by columns.
  bool adjacent = x.rows == 1;
  for (size_t i = 1; i < n.outs.size() && adjacent; ++i) adjacent = n.outs[i].data == n.outs[i - 1].data + n.outs[i - 1].cols;
  if (adjacent) return run_matmul(stacked, ds, x, Tensor{n.outs[0].data, 1, stacked.rows}, false, base, x16, only16(n, r.nodes));
  Tensor all = alloc(x.rows, stacked.rows);
  run_matmul(stacked, ds, x, all, false, base, x16, only16(n, r.nodes));
  int64_t c0 = 0;
  for (const Tensor& o : n.outs) {
    run_op("split columns", double(o.rows * o.cols) * 8.0, 0,
           [&] { return kn::copy_columns(all.data, all.rows, all.cols, c0, o.cols, o.data, stream_); });
    c0 += o.cols;
  }
}

// Many rows of a stack as one GEMM that writes each part's columns straight into its output
// (GemmProblem::parts: no scratch C, no column copies), where A is the pass's f16 copy of x and
// the GEMM chosen for the shape takes column parts. False: the caller takes the other way.
bool CudaBackend::gemm_into_parts(const Weight& w, const DevWeight& d, Tensor x, std::span<const Tensor> outs,
                                  const void* x16) {
  if (!x16 || act16_ != GgmlType::F16 || gemm_input_type(w.type) != GgmlType::F16 || outs.size() > 3) return false;
  kn::GemmProblem p = gemm_of(w, d, x, GgmlType::F16, x16);
  p.c = outs[0].data, p.ldc = outs[0].cols;
  int64_t col = outs[0].cols;
  for (size_t i = 1; i < outs.size(); ++i) {
    p.parts[i - 1] = {col, outs[i].data, outs[i].cols};
    col += outs[i].cols;
  }
  const kn::GemmChoice choice = kn::gemm_choice(p);
  if (!choice.variant || !choice.variant->column_parts || !kn::gemm_validate(p, *choice.variant).ok) return false;
  if (problems_) problems_->gemm.push_back(p);
  const double bytes = double(d.bytes) + double(x.rows * (x.cols * 2 + w.rows * 4));
  return try_op(op_name("gemm", w), bytes, 2.0 * double(x.rows * w.rows * w.cols),
                [&] { return choice.variant->launch(p, choice.config, stream_); })  // (chosen and checked above: what gemm() does)
      .ok;
}

// The GEMM of x's rows by w (C = A w^T, C in f32), A given in a_type: types, layout, shape, the
// operands and the split-K workspace; C, ldc and beta are the caller's.
kn::GemmProblem CudaBackend::gemm_of(const Weight& w, const DevWeight& d, Tensor x, GgmlType a_type, const void* a) const {
  kn::GemmProblem p;
  p.a_type = a_type, p.b_type = w.type, p.c_type = GgmlType::F32;
  p.b_layout = d.repacked ? kn::WeightLayout::Repacked : kn::WeightLayout::Gguf;
  p.m = x.rows, p.n = w.rows, p.k = w.cols;
  p.a = a, p.lda = x.cols, p.b = w.data, p.ldb = w.cols;
  p.workspace = gemm_work_, p.workspace_bytes = gemm_work_bytes_;
  return p;
}

// The gate/up pair of a small batch in one GEMV with the GLU in its epilogue; the down
// projection's int8 blocks of out made in the same kernel, by the warps that complete each
// 32-row block (counters in y8_count_).
void CudaBackend::exec_gate_up(const Node& n, Run& r, Made& m) {
  if (n.x.rows > gemv_max_rows_) return exec_gate_up_gemm(n, r, m);
  const DevWeight& dg = info(n.w);
  kn::GemvProblem p;
  p.gelu = n.glu == Glu::Gelu;
  p.wtype = n.w.type;
  p.layout = dg.repacked ? kn::WeightLayout::Repacked : kn::WeightLayout::Gguf;
  p.w = n.w.data, p.w_up = n.w2.data;
  p.n = n.w.rows, p.k = n.w.cols;
  p.x = n.x.data, p.batch = int(n.x.rows), p.y = n.out.data;
  gemv_input(n, r, p);
  m.x8 = p.y8 = x8_scratch(n, n.out);
  p.y8_count = n.out.cols / 32 <= int64_t(kY8Counters) ? y8_count_ : nullptr;
  if (problems_) problems_->gemv.push_back(p);
  run_op(op_name(p.norm_w ? "gemv+norm gate/up" : "gemv gate/up", n.w), 2.0 * double(dg.bytes),
         4.0 * double(n.x.rows * n.w.rows * n.w.cols), [&] { return kn::gemv(p, stream_); });
}

// Whether the gated GEMM takes this gate/up pair's type and layout (and the step's 16-bit type
// is the f16 it reads): the step plan's rule 3 for many rows (Rules::gemm_glu).
bool CudaBackend::takes_gated_gemm(const Weight& w) const {
  if (!gated_gemm_ || act16_ != GgmlType::F16 || gemm_input_type(w.type) != GgmlType::F16) return false;
  static const int marker = 0;  // (the variants look at which operands are given, not at them)
  kn::GemmProblem p = gemm_of(w, info(w), Tensor{nullptr, 64, w.cols}, GgmlType::F16, nullptr);
  p.b_up = &marker;
  for (const kn::GemmVariant& v : kn::gemm_variants())
    if (!v.teaching && kn::gemm_takes(v, p)) return true;
  return false;
}

// Many rows of gate/up and the GLU as one gated GEMM (kernels' GemmProblem::b_up): out =
// act(x . w^T) * (x . w2^T), written as the down projection's 16-bit input alone where the
// plan says only that reads it (out16_only), else in f32 (and its copy converted). Without a
// gated variant after all: two GEMMs and the GLU kernel.
void CudaBackend::exec_gate_up_gemm(const Node& n, Run& r, Made& m) {
  const DevWeight& dg = info(n.w);
  const Tensor x = n.x, out = n.out;
  const void* x16 = x16_input(n, r);
  check("gate/up", x16 || !only16(n, r.nodes), "x has neither its f32 rows nor a 16-bit copy");
  kn::GemmProblem p = gemm_of(n.w, dg, x, GgmlType::F16, x16 && act16_ == GgmlType::F16 ? x16 : convert(x, GgmlType::F16));
  p.b_up = n.w2.data, p.gelu = n.glu == Glu::Gelu;
  void* h = n.x16_out ? scratch_bytes(size_t(out.rows * out.cols) * 2) : nullptr;
  p.c_type = n.out16_only ? act16_ : GgmlType::F32;
  p.c = n.out16_only ? h : out.data, p.ldc = out.cols;
  if (problems_) problems_->gemm.push_back(p);
  const double bytes = 2.0 * double(dg.bytes) + double(x.rows * x.cols) * 2 + double(out.rows * out.cols) * (n.out16_only ? 2 : 4);
  const double flops = 4.0 * double(x.rows * n.w.rows * n.w.cols);
  if (try_op(op_name("gemm gate/up", n.w), bytes, flops, [&] { return kn::gemm(p, stream_); }).ok) {
    m.x16 = h;
    if (n.out16_only) only16_.emplace_back(out, h);
    if (h && !n.out16_only)
      run_op("convert", double(out.rows * out.cols) * 6.0, 0,
             [&] { return kn::convert_f32(out.data, out.rows * out.cols, act16_, h, stream_); });
    return;
  }
  const Tensor up = alloc(out.rows, out.cols);
  run_matmul(n.w, dg, x, out, false, {}, x16, only16(n, r.nodes));
  run_matmul(n.w2, info(n.w2), x, up, false, {}, x16, only16(n, r.nodes));
  const int64_t len = out.rows * out.cols;
  run_op(n.glu == Glu::Gelu ? "geglu" : "swiglu", double(len) * 12.0, 0, [&] {
    return n.glu == Glu::Gelu ? kn::geglu(out.data, up.data, len, stream_) : kn::swiglu(out.data, up.data, len, stream_);
  });
  if (h) run_op("convert", double(len) * 6.0, 0, [&] { return kn::convert_f32(out.data, len, act16_, h, stream_); });
  m.x16 = h;
}

}  // namespace lamina
