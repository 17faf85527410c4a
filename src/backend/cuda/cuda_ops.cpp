// The CUDA backend's ops as the model calls them: each checks its arguments and records a node
// of the pass's step plan (backend/step_plan.h); nothing is launched here. flush()
// (cuda_exec.cpp) fuses the plan and launches it.
#include "backend/cuda/cuda_backend.h"

#include "backend/cuda/cuda_op.h"

namespace lamina {

void CudaBackend::embed(const Weight& table, std::span<const int32_t> tokens, Tensor out) {
  check("embed", int64_t(tokens.size()) == n_in_ && out.rows == n_in_, "token ids differ from begin_forward's");
  check("embed", !info(table).repacked, "the embedding table must stay in GGUF blocks");
  check("embed", out.cols == table.cols, "the output's width differs from the table's");
  plan_.embed(table, out);
}

void CudaBackend::rmsnorm(Tensor x, const Weight& w, float eps, Tensor out) {
  check("rmsnorm", x.rows == out.rows && x.cols == out.cols && w.cols == x.cols, "shapes differ");
  flush_prompt_part();
  plan_.rmsnorm(x, w, eps, out);
}

// A prompt pass (more rows than kPartRows, not being recorded) launches its plan a part at a time:
// before a norm that follows a matmul (a layer's boundary, where no fusion of a prompt's rows
// spans the cut), once the plan holds kPartNodes nodes. The GPU then starts on the first layers
// while the host records the rest, where a plan launched whole at the pass's end kept it waiting
// for the recording of every layer (docs/benchmarks.md, thirty-first session: 0.5-0.8 ms a pp512
// pass). Decode steps (one row a sequence, recorded as graphs) keep their plan whole.
void CudaBackend::flush_prompt_part() {
  constexpr int64_t kPartRows = 64;
  constexpr size_t kPartNodes = 16;
  if (!plan_parts_ || n_in_ <= kPartRows || capturing_ || plan_.nodes().size() < kPartNodes) return;
  const plan::Op last = plan_.nodes().back().op;
  if (last == plan::Op::Matmul) flush();
}

void CudaBackend::matmul(const Weight& w, Tensor x, Tensor out) { record_matmul(w, x, out, false); }
void CudaBackend::matmul_add(const Weight& w, Tensor x, Tensor inout) { record_matmul(w, x, inout, true); }

void CudaBackend::record_matmul(const Weight& w, Tensor x, Tensor out, bool accumulate) {
  check("matmul", x.cols == w.cols && out.rows == x.rows && out.cols == w.rows, "shapes differ");
  const DevWeight& d = info(w);
  check("matmul", !d.stack || !d.repacked, "a part of a repacked stack is only multiplied together with the other parts");
  plan_.matmul(w, x, out, accumulate);
}

void CudaBackend::matmul_multi(std::span<const Weight* const> w, Tensor x, std::span<const Tensor> out) {
  check("matmul_multi", !w.empty() && w.size() == out.size(), "one output per weight");
  for (size_t i = 0; i < w.size(); ++i)
    check("matmul_multi", x.cols == w[i]->cols && out[i].rows == x.rows && out[i].cols == w[i]->rows, "shapes differ");
  plan_.matmul_multi(w, x, out);
}

void CudaBackend::add_bias(Tensor x, const Weight& b) {
  check("add_bias", b.cols == x.cols, "shapes differ");
  plan_.add_bias(x, b);
}

void CudaBackend::add(Tensor x, Tensor y) { record_in_place(plan::Op::Add, x, y); }
void CudaBackend::swiglu(Tensor gate, Tensor up) { record_in_place(plan::Op::Swiglu, gate, up); }
void CudaBackend::geglu(Tensor gate, Tensor up) { record_in_place(plan::Op::Geglu, gate, up); }

// x op= y, element by element (add, swiglu, geglu).
void CudaBackend::record_in_place(plan::Op op, Tensor x, Tensor y) {
  check(plan::op_name(op), x.rows == y.rows && x.cols == y.cols, "shapes differ");
  plan_.in_place(op, x, y);
}

void CudaBackend::scale(Tensor x, float s) { plan_.scale(x, s); }

void CudaBackend::rope(Tensor x, int n_heads, int head_dim, std::span<const int32_t> pos, const RopeParams& p) {
  check("rope", int64_t(pos.size()) == n_in_ && x.rows == n_in_, "positions differ from begin_forward's");
  check("rope", int64_t(n_heads) * head_dim == x.cols, "heads differ from the row's width");
  plan_.rope(x, n_heads, head_dim, p);
}

void CudaBackend::attention(int layer, Tensor q, Tensor k, Tensor v, std::span<const int32_t> pos,
                            const AttentionParams& p, Tensor out) {
  check("attention", int64_t(pos.size()) == n_in_ && q.rows == n_in_, "positions differ from begin_forward's");
  check("attention", layer >= 0 && layer < kv_layers_, "layer outside the KV cache");
  if (pos.back() >= kv_ctx_) fail("position {} is outside the context of {} tokens", pos.back(), kv_ctx_);
  check("attention", k.rows == q.rows && v.rows == q.rows && out.rows == q.rows, "rows differ");
  plan_.attention(layer, q, k, v, pos, p, out, layout_ != nullptr);  // (paged: each row's own length for the costs)
}

void CudaBackend::copy_rows(Tensor src, std::span<const int32_t> rows, Tensor dst) {
  check("copy_rows", int64_t(rows.size()) == dst.rows && src.cols == dst.cols, "shapes differ");
  for (int32_t r : rows)
    if (r < 0 || r >= src.rows) fail("copy_rows: row {} of {}", r, src.rows);
  plan_.copy_rows(src, rows, dst);
}

}  // namespace lamina
