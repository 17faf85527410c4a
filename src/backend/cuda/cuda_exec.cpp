// Running the step plan: the fusion rules of this backend, flush() (fuse, then launch every
// node in order), and the nodes that are one kernel each (lookups, norms, element-wise ops).
// Matmuls are in cuda_matmul.cpp, RoPE and attention in cuda_attention.cpp.
#include "backend/cuda/cuda_backend.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_op.h"
#include "kernels/common/q8_blocks.h"
#include "kernels/dequant/dequant.h"
#include "kernels/gemv/gemv.h"
#include "kernels/ops/ops.h"

#include <cuda_runtime.h>

#include <algorithm>

namespace lamina {

using plan::Node;
using plan::Op;

plan::Rules CudaBackend::fusion_rules() const {
  plan::Rules r;
  r.gemv_max_rows = gemv_max_rows_;
  r.exact = exact_, r.int8_x = int8_x_, r.fused_argmax = fused_argmax_;
  using AR = CudaOptions::AllReduce;
  r.all_reduce_norm = peer_ && all_reduce_ == AR::Fused;
  r.x8_ss_max_k = kn::kX8SsMaxK;
  r.y8_counters = int64_t(kY8Counters);
  r.stacked = [this](const Weight& w) { return info(w).stack != nullptr; };
  r.repacked = [this](const Weight& w) { return info(w).repacked; };
  r.gemv_makes_y8 = [this](const Node& n, bool x8) {
    static const int marker = 0;  // (dispatch looks at which inputs are given, not at their addresses)
    kn::GemvProblem p;
    p.wtype = n.w.type, p.layout = info(n.w).repacked ? kn::WeightLayout::Repacked : kn::WeightLayout::Gguf;
    p.n = n.w.rows, p.k = n.w.cols, p.batch = 1, p.x8 = x8 ? &marker : nullptr;
    p.y8_count = y8_count_;
    return kn::gemv_makes_y8(p);
  };
  r.head_norms_fused = [this](const Node& n) {
    kn::AttentionArgs a;
    a.n_head = n.attn.n_head, a.n_head_kv = n.attn.n_head_kv, a.head_dim = n.attn.head_dim;
    kn::RopeArgs ra;
    ra.n_heads = n.attn.n_head, ra.head_dim = n.attn.head_dim, ra.n_rot = n.rope.n_rot;
    return kn::head_norms_supported(a, ra);
  };
  r.gemm_input = [](const Weight& w) { return gemm_input_type(w.type); };
  r.gemm_glu = [this](const Weight& w) { return takes_gated_gemm(w); };
  return r;
}

void CudaBackend::flush(Tensor result, bool pass_end) {
  if (plan_.empty()) return;
  plan::Plan p = std::move(plan_);  // (cleared first: an error below leaves no half-run plan)
  plan_.clear();
  // A tensor left in 16 bits only by an earlier plan: widened if this plan reads it before writing
  // all of it, forgotten once a node writes it (the next layer's GLU output, in its place).
  for (const Node& n : p.nodes()) {
    if (only16_.empty()) break;
    for (const Tensor& t : plan::reads(n)) widen_only16(t);
    forget_written(n, only16_.size());
  }
  p.fuse(fusion_rules(), result, pass_end);
  if (profiling_) plans_[n_in_] = p.str();  // --profile shows each pass size's fused plan
  Run r{p.nodes(), std::vector<Made>(p.nodes().size())};
  for (size_t i = 0; i < p.nodes().size(); ++i) {
    const size_t before = only16_.size();
    exec(p.nodes()[i], r, r.made[i]);
    forget_written(p.nodes()[i], before);  // (the node's own entries, from `before` on, stay)
  }
}

void CudaBackend::exec(const Node& n, Run& r, Made& m) {
  switch (n.op) {
    case Op::Embed:
    case Op::EmbedNorm: return exec_embed(n, m);
    case Op::RmsNorm: return exec_rmsnorm(n, m);
    case Op::Matmul:
    case Op::MatmulAddNorm: return exec_matmul(n, r, m);
    case Op::MatmulMulti: return exec_matmul_multi(n, r);
    case Op::GateUp: return exec_gate_up(n, r, m);
    case Op::Rope: return exec_rope(n);
    case Op::Attention: return exec_attention(n, m);
    case Op::RopeAttention: return exec_rope_attention(n, m);
    case Op::CopyRows: return exec_copy_rows(n);
    case Op::AllReduce: return exec_all_reduce(n);
    case Op::AllReduceAddNorm: return exec_all_reduce_add_norm(n, m);
    default: return exec_elementwise(n, m);
  }
}

void* CudaBackend::x8_scratch(const Node& n, Tensor out) {
  return n.x8_out ? scratch_bytes(size_t(out.rows) * kn::x8_bytes(out.cols)) : nullptr;
}

// The lookup; fused with the norm after it (one decode row), it also writes the int8 blocks of
// out * norm and their sums of squares (kernels' RowsX8), and the norm stays pending: the GEMVs
// that read h take those (x8_ss) and scale by the RMS.
void CudaBackend::exec_embed(const Node& n, Made& m) {
  const bool fused = n.op == Op::EmbedNorm;
  const Tensor e = fused ? n.x : n.out;
  kn::RowsX8 x8;
  if (fused) {
    m.x8 = scratch_bytes(kn::x8_bytes(e.cols));
    m.ss = static_cast<double*>(scratch_bytes(size_t(e.cols / 32) * sizeof(double)));
    x8 = {static_cast<uint8_t*>(m.x8), static_cast<const float*>(n.norm.data), m.ss};
  }
  // The step's inputs not yet uploaded: a one-row lookup reads its token from the staging itself
  // (not in a paged pass: its tables travel by the upload, which copies them first).
  kn::StagedInputs in;
  if (fused && lookup_upload_ && inputs_staged_ && n_in_ == 1 && paged_words_ == 0) {
    in = {host_in_dev_, dev_in_, int64_t(in_capacity_), dev_sampled_, seen_dev_, n.w.rows};
    inputs_staged_ = false;
    upload_enqueued_ = true;
  }
  const double bytes = double(e.rows) * (double(row_bytes(n.w.type, n.w.cols)) + e.cols * 4.0) +
                       (fused ? double(kn::x8_bytes(e.cols)) : 0.0);
  run_op(fused ? "embed+norm" : "embed", bytes, 0, [&] {
    return kn::dequantize_rows(n.w.type, n.w.data, n.w.cols, in.src ? nullptr : dev_tokens(), e.rows, e.data, stream_,
                               x8, in);
  });
}

// Rows a GEMM reads next get a 16-bit copy made in the same pass, rows a GEMV reads an int8 copy.
void CudaBackend::exec_rmsnorm(const Node& n, Made& m) {
  void* h = n.x16_out ? scratch_bytes(size_t(n.out.rows * n.out.cols) * 2) : nullptr;
  m.x8 = x8_scratch(n, n.out);
  m.x16 = h;
  const bool only16 = n.out16_only && h;
  run_op("rmsnorm", double(n.x.rows * n.x.cols) * (only16 ? 6.0 : h ? 10.0 : 8.0), 0, [&] {
    return kn::rmsnorm(n.x.data, static_cast<const float*>(n.w.data), n.x.rows, n.x.cols, n.eps,
                       only16 ? nullptr : n.out.data, h, act16_, stream_, m.x8);
  });
  if (only16) only16_.emplace_back(n.out, h);
}

void CudaBackend::exec_elementwise(const Node& n, Made& m) {
  const Tensor x = n.x;
  const int64_t len = x.rows * x.cols;
  const auto f = [](const Weight& w) { return w ? static_cast<const float*>(w.data) : nullptr; };
  switch (n.op) {
    case Op::Add:
      return run_op("add", double(len) * 12.0, 0, [&] { return kn::add(x.data, n.y.data, len, stream_); });
    case Op::AddBias:
      return run_op("add_bias", double(len) * 8.0, 0,
                    [&] { return kn::add_bias(x.data, f(n.w), x.rows, x.cols, stream_); });
    case Op::Scale:
      return run_op("scale", double(len) * 8.0, 0, [&] { return kn::scale(x.data, n.s, len, stream_); });
    case Op::Geglu:
      return run_op("geglu", double(len) * 12.0, 0, [&] { return kn::geglu(x.data, n.y.data, len, stream_); });
    case Op::Swiglu: {  // a GEMM's input (the down projection) gets its 16-bit copy in the same pass
      void* h = n.x16_out && len % 4 == 0 ? scratch_bytes(size_t(len) * 2) : nullptr;
      m.x16 = h;
      return run_op("swiglu", double(len) * (h ? 14.0 : 12.0), 0,
                    [&] { return kn::swiglu(x.data, n.y.data, len, stream_, h, act16_); });
    }
    case Op::AddNorm: {  // x += [rmsnorm(y) * norm] y, then out = rmsnorm(x) * norm2: one pass over the rows
      const bool h = bool(n.norm2);
      m.x8 = h ? x8_scratch(n, n.out) : nullptr;
      return run_op(h ? "add+norm" : "add", double(len) * (h ? 16.0 : 12.0), 0, [&] {
        return kn::add_norm(x.data, n.y.data, f(n.norm), f(n.norm2), x.rows, x.cols, n.eps, h ? n.out.data : nullptr,
                            stream_, m.x8);
      });
    }
    default: check(plan::op_name(n.op), false, "no kernel for this node");
  }
}

void CudaBackend::finish() {
  flush();
  cuda_check(cudaStreamSynchronize(stream_), "finish");
}

// Entries before `end` whose tensor n writes whole: its f32 rows are n's now (or n's own entry's).
void CudaBackend::forget_written(const Node& n, size_t end) {
  if (std::min(end, only16_.size()) == 0) return;  // (most passes have none: no writes() list built)
  const auto first_kept = only16_.begin() + ptrdiff_t(std::min(end, only16_.size()));
  const std::vector<Tensor> w = plan::writes(n);
  only16_.erase(std::remove_if(only16_.begin(), first_kept, [&](const std::pair<Tensor, const void*>& e) {
                  return std::any_of(w.begin(), w.end(), [&](const Tensor& t) {
                    return e.first.data >= t.data && e.first.data + e.first.rows * e.first.cols <= t.data + t.rows * t.cols;
                  });
                }),
                first_kept);
}

void CudaBackend::widen(const void* x16, Tensor f32) {
  run_op("widen", double(f32.rows * f32.cols) * 6.0, 0,
         [&] { return kn::dequantize_rows(act16_, x16, f32.cols, nullptr, f32.rows, f32.data, stream_); });
}

void CudaBackend::widen_only16(Tensor t) {
  std::erase_if(only16_, [&](const std::pair<Tensor, const void*>& e) {
    if (!plan::overlaps(e.first, t)) return false;
    widen(e.second, e.first);
    return true;
  });
}

// Not a plan op: a mixture of experts routes on the host between its expert matmuls (the model
// reads the router's logits and never records such passes), so what was recorded runs first and
// the weighted rows are added at once.
void CudaBackend::add_rows_scaled(Tensor dst, Tensor src, std::span<const int32_t> rows, std::span<const float> scale) {
  check("add_rows_scaled", int64_t(rows.size()) == src.rows && scale.size() == rows.size() && src.cols == dst.cols,
        "shapes differ");
  for (int32_t r : rows)
    if (r < 0 || r >= dst.rows) fail("add_rows_scaled: row {} of {}", r, dst.rows);
  if (rows.empty()) return;
  flush();
  widen_only16(dst);
  widen_only16(src);
  if (rows.size() == 1) {  // (decode: one token's expert) the row and scale as kernel arguments, no uploads
    run_op("add_rows_scaled", double(src.cols) * 12.0, double(src.cols) * 2.0,
           [&] { return kn::add_row_scaled(dst.data, src.data, dst.cols, rows[0], scale[0], stream_); });
    return;
  }
  auto* idx = static_cast<int32_t*>(scratch_bytes(rows.size() * sizeof(int32_t)));
  auto* sc = static_cast<float*>(scratch_bytes(scale.size() * sizeof(float)));
  cuda_check(cudaMemcpyAsync(idx, rows.data(), rows.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream_), "add_rows_scaled");
  cuda_check(cudaMemcpyAsync(sc, scale.data(), scale.size() * sizeof(float), cudaMemcpyHostToDevice, stream_), "add_rows_scaled");
  run_op("add_rows_scaled", double(src.rows * src.cols) * 12.0, double(src.rows * src.cols) * 2.0, [&] {
    return kn::add_rows_scaled(dst.data, src.data, dst.cols, idx, sc, int64_t(rows.size()), stream_);
  });
}

void CudaBackend::read(Tensor t, float* host) {
  flush();
  widen_only16(t);
  cuda_check(cudaMemcpyAsync(host, t.data, size_t(t.rows * t.cols) * sizeof(float), cudaMemcpyDeviceToHost, stream_),
             "read");
  cuda_check(cudaStreamSynchronize(stream_), "read");
  collect_profile();
}

}  // namespace lamina
