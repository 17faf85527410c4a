// The CUDA backend's matmuls, norms and elementwise ops, with the bookkeeping of the copies the
// next op reads (16-bit GEMM inputs, int8 blocks for the GEMVs, a pending norm).
#include "backend/cuda/cuda_backend.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_op.h"
#include "kernels/common/q8_blocks.h"
#include "kernels/dequant/dequant.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemv/gemv.h"
#include "kernels/ops/ops.h"

#include <cuda_runtime.h>

#include <algorithm>

namespace lamina {

namespace kn = kernels;

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

// An op wrote `t`: its 16-bit and int8-block copies, if any, are stale.
void CudaBackend::wrote(Tensor t) {
  if (shadow_.src == t.data) shadow_ = {};
  if (shadow8_.src == t.data) shadow8_ = {};
}

// Rows a GEMV will take (<= 8, the fast path, whole int8 blocks) get an int8 copy made by the
// op that writes them; the copy becomes the shadow once that op has run.
bool CudaBackend::wants_x8(Tensor out) const {
  return int8_x_ && !exact_ && out.rows <= kn::kGemvMaxBatch && out.cols % 32 == 0;
}

void* CudaBackend::make_x8(Tensor out) {
  return wants_x8(out) ? scratch_bytes(size_t(out.rows) * kn::x8_bytes(out.cols)) : nullptr;
}

const void* CudaBackend::x8(Tensor x) const {
  const bool same = shadow8_.src == x.data && shadow8_.rows == x.rows && shadow8_.cols == x.cols;
  return same ? shadow8_.data : nullptr;
}

void CudaBackend::embed(const Weight& table, std::span<const int32_t> tokens, Tensor out) {
  settle(out);
  check("embed", int64_t(tokens.size()) == n_in_, "token ids differ from begin_forward's");
  check("embed", !info(table).repacked, "the embedding table must stay in GGUF blocks");
  run_op("embed", double(out.rows) * (double(row_bytes(table.type, table.cols)) + out.cols * 4.0), 0, [&] {
    return kn::dequantize_rows(table.type, table.data, table.cols, dev_tokens(), out.rows, out.data, stream_);
  });
  wrote(out);
}

// One decode row: the lookup also writes the int8 blocks of out * norm and their sums of squares
// (kernels' RowsX8), and the norm stays pending as after matmul_add_norm: the first layer's
// Q/K/V GEMV applies it (x8_ss), with no norm kernel between. Otherwise embed, then rmsnorm.
void CudaBackend::embed_norm(const Weight& table, std::span<const int32_t> tokens, Tensor out, const Weight& norm,
                             float eps, Tensor h) {
  const bool fits = out.rows == 1 && h.rows == 1 && out.cols == h.cols && out.cols <= kn::kX8SsMaxK &&
                    wants_x8(h) && !info(table).repacked && !overlaps(out, h);
  if (!fits) return Backend::embed_norm(table, tokens, out, norm, eps, h);
  drop_overwritten_norm(h, out);
  settle(out, h);
  check("embed", int64_t(tokens.size()) == n_in_, "token ids differ from begin_forward's");
  kn::RowsX8 x8;
  x8.q = static_cast<uint8_t*>(make_x8(h));
  x8.gain = static_cast<const float*>(norm.data);
  x8.ss = static_cast<double*>(scratch_bytes(size_t(out.cols / 32) * sizeof(double)));
  const double bytes = double(row_bytes(table.type, table.cols)) + out.cols * 4.0 + double(kn::x8_bytes(out.cols));
  // The step's inputs not yet uploaded: the lookup reads its token from the staging itself
  // (not in a paged pass: its tables travel by the upload, which copies them first).
  kn::StagedInputs in;
  if (lookup_upload_ && inputs_staged_ && n_in_ == 1 && paged_words_ == 0) {
    in = {host_in_dev_, dev_in_, int64_t(in_capacity_), dev_sampled_, seen_dev_, table.rows};
    inputs_staged_ = false;
    upload_enqueued_ = true;
  }
  run_op("embed+norm", bytes, 0, [&] {
    return kn::dequantize_rows(table.type, table.data, table.cols, in.src ? nullptr : dev_tokens(), 1, out.data,
                               stream_, x8, in);
  });
  wrote(out);
  wrote(h);
  pending_norm_ = {out, h, x8.gain, eps, x8.q, x8.ss};
}

void CudaBackend::rmsnorm(Tensor x, const Weight& w, float eps, Tensor out) {
  drop_overwritten_norm(out, x);
  settle(x, out);
  wrote(out);
  const auto* wf = static_cast<const float*>(w.data);
  const bool apart = x.data + x.rows * x.cols <= out.data || out.data + out.rows * out.cols <= x.data;
  if (defer_norm_ && apart && wants_x8(out)) {  // rows for a dp4a GEMV: the norm goes into it
    pending_norm_ = {x, out, wf, eps};
    return;
  }
  run_rmsnorm(x, wf, eps, out);
}

void CudaBackend::run_rmsnorm(Tensor x, const float* w, float eps, Tensor out) {
  // Rows that will feed a GEMM get a 16-bit copy made in the same pass.
  // Rows that will feed a GEMV get an int8-block copy.
  void* h = nullptr;
  if (out.rows > kn::kGemvMaxBatch && !exact_) h = scratch_bytes(size_t(out.rows * out.cols) * 2);
  void* q8 = make_x8(out);
  run_op("rmsnorm", double(x.rows * x.cols) * (h ? 10.0 : 8.0), 0, [&] {
    return kn::rmsnorm(x.data, w, x.rows, x.cols, eps, out.data, h, act16_, stream_, q8);
  });
  shadow_ = h ? Shadow{out.data, out.rows * out.cols, h, act16_} : Shadow{};
  if (q8) shadow8_ = {out.data, out.rows, out.cols, q8};
}

void CudaBackend::settle_one(const Tensor& t) {
  if (pending_norm_.w && (overlaps(t, pending_norm_.x) || overlaps(t, pending_norm_.out))) settle_all();
}

void CudaBackend::settle_all() {
  if (!pending_norm_.w) return;
  const PendingNorm n = pending_norm_;
  pending_norm_ = {};
  run_rmsnorm(n.x, n.w, n.eps, n.out);
}

// A pending norm whose output is about to be overwritten (and is not read by the op) is dead.
void CudaBackend::drop_overwritten_norm(Tensor out, Tensor reads) {
  const PendingNorm& n = pending_norm_;
  if (n.w && out.data == n.out.data && out.rows == n.out.rows && out.cols == n.out.cols && !overlaps(reads, n.out))
    pending_norm_ = {};
}

void CudaBackend::take_norm(Tensor x, kn::GemvProblem& p) {
  const PendingNorm& n = pending_norm_;
  if (!n.w || x.data != n.out.data || x.rows != n.out.rows || x.cols != n.out.cols) return;
  p.x = n.x.data, p.x8 = nullptr;
  p.norm_w = n.w, p.norm_eps = n.eps, p.norm_out = n.out.data;
  if (n.ss) {  // made by the GEMV that wrote x: out stays unwritten, the norm pending for others
    p.x8 = n.x8, p.x8_ss = n.ss, p.norm_out8 = nullptr;
    return;
  }
  p.norm_out8 = make_x8(n.out);
  if (p.norm_out8) shadow8_ = {n.out.data, n.out.rows, n.out.cols, p.norm_out8};
  pending_norm_ = {};
}

void CudaBackend::gemv_x(Tensor x, kn::GemvProblem& p) {
  if (x.rows <= kn::kGemvMaxBatch) {
    p.x8 = x8(x);
    take_norm(x, p);
  }
  if (!p.norm_w) settle(x);  // x is the pending norm's output, taken as its parts
}

const void* CudaBackend::x16(Tensor x, GgmlType type) {
  if (shadow_.src == x.data && shadow_.n == x.rows * x.cols && shadow_.type == type) return shadow_.data;
  void* h = scratch_bytes(size_t(x.rows * x.cols) * 2);
  run_op("convert", double(x.rows * x.cols) * 6.0, 0, [&] { return kn::convert_f32(x.data, x.rows * x.cols, type, h, stream_); });
  return h;
}

// out = x . w^T (+ out when accumulate).
void CudaBackend::run_matmul(const Weight& w, const DevWeight& d, Tensor x, Tensor out, bool accumulate,
                             const kn::GemvProblem* norm_y, const kn::GemvArgmax* argmax) {
  check("matmul", !d.stack || !d.repacked, "a part of a repacked stack is only multiplied together with the other parts");
  const kn::WeightLayout layout = d.repacked ? kn::WeightLayout::Repacked : kn::WeightLayout::Gguf;
  const double flops = 2.0 * double(x.rows) * double(w.rows) * double(w.cols);
  // The GEMV fields every 8-row slice shares: weight, decode rows' int8 x or the pending RMSNorm
  // of x, and matmul_add_norm's y8 fields (norm_y).
  kn::GemvProblem base = norm_y ? *norm_y : kn::GemvProblem{};
  base.wtype = w.type, base.layout = layout, base.w = w.data, base.n = w.rows, base.k = w.cols;
  if (argmax) base.argmax = *argmax;
  gemv_x(x, base);
  settle(out);
  wrote(out);
  if (x.rows > kn::kGemvMaxBatch && !exact_) {
    kn::GemmProblem p;
    p.b_type = w.type;
    p.b_layout = layout;
    p.a_type = w.type == GgmlType::F32 ? GgmlType::F32 : w.type == GgmlType::BF16 ? GgmlType::BF16 : GgmlType::F16;
    p.c_type = GgmlType::F32;
    p.m = x.rows, p.n = w.rows, p.k = w.cols;
    p.a = p.a_type == GgmlType::F32 ? static_cast<const void*>(x.data) : x16(x, p.a_type);
    p.lda = x.cols;
    p.b = w.data;
    p.ldb = w.cols;
    p.c = out.data;
    p.ldc = out.cols;
    p.beta = accumulate ? 1.f : 0.f;
    p.workspace = gemm_work_, p.workspace_bytes = gemm_work_bytes_;
    const double bytes = double(d.bytes) + double(x.rows * (x.cols * 2 + out.cols * 4));
    if (try_op(op_name(accumulate ? "gemm+res" : "gemm", w), bytes, flops, [&] { return kn::gemm(p, stream_); }).ok) return;
    // no GEMM variant for this type: q6_K of many rows through f16 (below), else GEMVs over 8-row slices
    if (x.rows > 4 * kn::kGemvMaxBatch && d.repacked && w.type == GgmlType::Q6_K) {
      p.a_type = p.b_type = GgmlType::F16;
      p.a = x16(x, GgmlType::F16);
      p.b_layout = kn::WeightLayout::Gguf;
      return q6k_by_f16(w, p, accumulate);
    }
  }
  const double bytes = double(d.bytes) * double((x.rows + 7) / 8) + double(x.rows * x.cols) * 4.0;
  const char* kind = norm_y          ? "gemv+res+norm"
                     : base.norm_w   ? (accumulate ? "gemv+norm+res" : "gemv+norm")
                     : accumulate    ? "gemv+res"
                                     : "gemv";
  run_op(op_name(kind, w), bytes, flops, [&] {
    for (int64_t r0 = 0; r0 < x.rows; r0 += kn::kGemvMaxBatch) {
      kn::GemvProblem p = base;
      if (!base.norm_w) p.x = x.data + r0 * x.cols;  // (a pending norm's x: decode rows, one slice)
      p.batch = int(std::min<int64_t>(kn::kGemvMaxBatch, x.rows - r0));
      p.y = out.data + r0 * out.cols;
      p.residual = accumulate ? p.y : nullptr;
      if (kn::Status st = exact_ ? gemv_exact(p, stream_) : kn::gemv(p, stream_); !st) return st;
    }
    return kn::Status::success();
  });
}

// A q6_K matmul of many rows (the batching engine's logits, a prompt through a Q4_K_M file's
// q6_K tensors): 8-row GEMV slices would read the matrix once per 8 rows, so the matrix is
// dequantised to f16 in slices of up to 4096 of its rows (32 MiB of scratch at k = 4096) and each
// slice multiplied by the f16 GEMM into its columns of out. p: the GEMM problem with A in f16.
void CudaBackend::q6k_by_f16(const Weight& w, kn::GemmProblem p, bool accumulate) {
  const int64_t slice = std::min<int64_t>(w.rows, 4096);
  void* b = scratch_bytes(size_t(slice) * size_t(w.cols) * 2);
  float* c = static_cast<float*>(p.c);
  for (int64_t r0 = 0; r0 < w.rows; r0 += slice) {
    const int64_t n = std::min(slice, w.rows - r0);
    run_op("dequant q6_K", double(n) * double(w.cols) * (210.0 / 256 + 2), 0,
           [&] { return kn::dequant_q6k_repacked(w.data, w.rows, w.cols, r0, n, b, stream_); });
    p.n = n, p.b = b, p.ldb = w.cols, p.c = c + r0;
    run_op(op_name(accumulate ? "gemm+res (f16)" : "gemm (f16)", w), double(n) * double(w.cols) * 2 + double(p.m * (p.k * 2 + n * 4)),
           2.0 * double(p.m) * double(n) * double(w.cols), [&] { return kn::gemm(p, stream_); });
  }
}

void CudaBackend::matmul(const Weight& w, Tensor x, Tensor out) { run_matmul(w, info(w), x, out, false); }

// One logits row: the GEMV also leaves its greedy id where the sampling kernel would.
void CudaBackend::matmul_logits(const Weight& w, Tensor x, Tensor out) {
  argmax_of_ = nullptr;
  if (!fused_argmax_ || exact_ || x.rows != 1 || out.rows != 1) return matmul(w, x, out);
  kn::GemvArgmax a;
  a.key = argmax_words_;
  a.count = reinterpret_cast<unsigned*>(argmax_words_ + 1);
  a.id = host_id_dev_;
  a.id2 = dev_sampled_;
  a.parity = dev_pos() + (n_in_ - 1);  // the logits row's position: host_id_[position & 1]
  run_matmul(w, info(w), x, out, false, nullptr, &a);
  argmax_of_ = out.data;
}

// Parts of one stack, in order and complete: one matmul over the stack. Its output is written
// in place when the outputs lie back to back (one row: q, k, v allocated one after the other),
// else into scratch and split by columns.
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

void CudaBackend::matmul_multi(std::span<const Weight* const> w, Tensor x, std::span<const Tensor> out) {
  for (const Tensor& o : out) settle(o);
  Weight stacked;
  DevWeight ds;
  if (!whole_stack(w, stacked, ds)) {
    for (size_t i = 0; i < w.size(); ++i) matmul(*w[i], x, out[i]);
    return;
  }
  // Prompt rows of a plain (not repacked) stack: one GEMM per part straight into its output.
  // Measured at pp512 on the 7B f16 model: three 4096-wide GEMMs cost less than the stacked
  // GEMM plus the three column copies (see docs/benchmarks.md).
  if (x.rows > kn::kGemvMaxBatch && !ds.repacked) {
    for (size_t i = 0; i < w.size(); ++i) matmul(*w[i], x, out[i]);
    return;
  }
  const int64_t rows = stacked.rows;
  bool adjacent = x.rows == 1;
  for (size_t i = 1; i < out.size() && adjacent; ++i) adjacent = out[i].data == out[i - 1].data + out[i - 1].cols;
  if (adjacent) return run_matmul(stacked, ds, x, Tensor{out[0].data, 1, rows}, false);
  Tensor all = alloc(x.rows, rows);
  run_matmul(stacked, ds, x, all, false);
  int64_t c0 = 0;
  for (const Tensor& o : out) {
    run_op("split columns", double(o.rows * o.cols) * 8.0, 0,
           [&] { return kn::copy_columns(all.data, all.rows, all.cols, c0, o.cols, o.data, stream_); });
    wrote(o);
    c0 += o.cols;
  }
}

void CudaBackend::matmul_add(const Weight& w, Tensor x, Tensor inout) { run_matmul(w, info(w), x, inout, true); }

// One decode row: the GEMV that adds to inout also writes the int8 blocks of inout * norm and
// their sums of squares (GemvProblem::y8_gain, y8_ss); the norm stays pending, and the GEMVs
// that read out take those (x8_ss) and scale by the RMS. Otherwise matmul_add, then rmsnorm.
void CudaBackend::matmul_add_norm(const Weight& w, Tensor x, Tensor inout, const Weight& norm, float eps, Tensor out) {
  drop_overwritten_norm(out, x);
  const DevWeight& d = info(w);
  kn::GemvProblem p;
  p.wtype = w.type, p.layout = d.repacked ? kn::WeightLayout::Repacked : kn::WeightLayout::Gguf;
  p.n = w.rows, p.k = w.cols, p.batch = 1, p.x8 = x8(x);
  p.y8_count = y8_count_;
  const bool fits = x.rows == 1 && wants_x8(out) && !d.stack && inout.rows == 1 && out.rows == 1 &&
                    inout.cols == out.cols && w.rows == out.cols && out.cols <= kn::kX8SsMaxK &&
                    out.cols / 32 <= int64_t(kY8Counters) && !overlaps(out, inout) && !overlaps(out, x);
  if (!fits || !kn::gemv_makes_y8(p)) {
    matmul_add(w, x, inout);
    rmsnorm(inout, norm, eps, out);
    return;
  }
  settle(out);
  p.y8 = make_x8(out);
  p.y8_gain = static_cast<const float*>(norm.data);
  p.y8_ss = static_cast<double*>(scratch_bytes(size_t(out.cols / 32) * sizeof(double)));
  run_matmul(w, d, x, inout, true, &p);
  wrote(out);
  pending_norm_ = {inout, out, p.y8_gain, eps, p.y8, p.y8_ss};
}

void CudaBackend::ffn_gate_up(const Weight& gate, const Weight& up, Tensor x, Tensor out, Glu act) {
  const DevWeight& dg = info(gate);
  if (x.rows <= kn::kGemvMaxBatch && gate.type == up.type && dg.repacked == info(up).repacked && !exact_) {
    kn::GemvProblem p;
    p.gelu = act == Glu::Gelu;
    p.wtype = gate.type;
    p.layout = dg.repacked ? kn::WeightLayout::Repacked : kn::WeightLayout::Gguf;
    p.w = gate.data, p.w_up = up.data;
    p.n = gate.rows, p.k = gate.cols;
    p.x = x.data, p.batch = int(x.rows), p.y = out.data;
    gemv_x(x, p);
    settle(out);
    // The down projection multiplies out next: its int8 copy is made in the same kernel, by the
    // warps that complete each 32-row block (counters in y8_count_).
    wrote(out);
    p.y8 = make_x8(out);
    p.y8_count = out.cols / 32 <= int64_t(kY8Counters) ? y8_count_ : nullptr;
    run_op(op_name(p.norm_w ? "gemv+norm gate/up" : "gemv gate/up", gate), 2.0 * double(dg.bytes), 4.0 * double(x.rows * gate.rows * gate.cols),
           [&] { return kn::gemv(p, stream_); });
    if (p.y8) shadow8_ = {out.data, out.rows, out.cols, p.y8};
    return;
  }
  Tensor u = alloc(x.rows, up.rows);
  matmul(gate, x, out);
  matmul(up, x, u);
  if (act == Glu::Gelu) geglu(out, u);
  else swiglu(out, u);
}

void CudaBackend::add_bias(Tensor x, const Weight& b) {
  settle(x);
  run_op("add_bias", double(x.rows * x.cols) * 8.0, 0,
         [&] { return kn::add_bias(x.data, static_cast<const float*>(b.data), x.rows, x.cols, stream_); });
  wrote(x);
}

void CudaBackend::add(Tensor x, Tensor y) {
  settle(x, y);
  run_op("add", double(x.rows * x.cols) * 12.0, 0, [&] { return kn::add(x.data, y.data, x.rows * x.cols, stream_); });
  wrote(x);
}

void CudaBackend::swiglu(Tensor gate, Tensor up) {
  settle(gate, up);
  // Rows that will feed a GEMM (the down projection) get their 16-bit copy in the same pass.
  const int64_t n = gate.rows * gate.cols;
  void* h = gate.rows > kn::kGemvMaxBatch && !exact_ && n % 4 == 0 ? scratch_bytes(size_t(n) * 2) : nullptr;
  wrote(gate);
  run_op("swiglu", double(n) * (h ? 14.0 : 12.0), 0,
         [&] { return kn::swiglu(gate.data, up.data, n, stream_, h, act16_); });
  if (h) shadow_ = Shadow{gate.data, n, h, act16_};
}

void CudaBackend::add_norm(Tensor x, Tensor y, const Weight* y_norm, const Weight* norm, float eps, Tensor h) {
  check("add_norm", x.rows == y.rows && x.cols == y.cols && (!norm || (h.rows == x.rows && h.cols == x.cols)),
        "shapes differ");
  if (norm) drop_overwritten_norm(h, x);  // (defer_norm: a pending norm into h is dead)
  settle(x, y);
  if (norm) settle(h);
  wrote(x);
  if (norm) wrote(h);
  void* h8 = norm ? make_x8(h) : nullptr;
  const auto f = [](const Weight* w) { return w ? static_cast<const float*>(w->data) : nullptr; };
  run_op(norm ? "add+norm" : "add", double(x.rows * x.cols) * (norm ? 16.0 : 12.0), 0, [&] {
    return kn::add_norm(x.data, y.data, f(y_norm), f(norm), x.rows, x.cols, eps, norm ? h.data : nullptr, stream_, h8);
  });
  if (h8) shadow8_ = {h.data, h.rows, h.cols, h8};
}

void CudaBackend::geglu(Tensor gate, Tensor up) {
  settle(gate, up);
  wrote(gate);
  const int64_t n = gate.rows * gate.cols;
  run_op("geglu", double(n) * 12.0, 0, [&] { return kn::geglu(gate.data, up.data, n, stream_); });
}

void CudaBackend::scale(Tensor x, float s) {
  settle(x);
  wrote(x);
  run_op("scale", double(x.rows * x.cols) * 8.0, 0, [&] { return kn::scale(x.data, s, x.rows * x.cols, stream_); });
}

}  // namespace lamina
