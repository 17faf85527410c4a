// The CUDA backend's ops as the model calls them: each checks its arguments and records a node
// of the pass's step plan (backend/step_plan.h); nothing is launched here. flush()
// (cuda_exec.cpp) fuses the plan and launches it.
#include "backend/cuda/cuda_backend.h"

#include "backend/cuda/cuda_op.h"

namespace lamina {

using plan::Node;
using plan::Op;

namespace {

Node node(Op op, Tensor x, Tensor out = {}) {
  Node n;
  n.op = op, n.x = x, n.out = out;
  return n;
}

}  // namespace

void CudaBackend::embed(const Weight& table, std::span<const int32_t> tokens, Tensor out) {
  check("embed", int64_t(tokens.size()) == n_in_ && out.rows == n_in_, "token ids differ from begin_forward's");
  check("embed", !info(table).repacked, "the embedding table must stay in GGUF blocks");
  check("embed", out.cols == table.cols, "the output's width differs from the table's");
  Node n = node(Op::Embed, {}, out);
  n.w = table;
  plan_.add(std::move(n));
}

void CudaBackend::rmsnorm(Tensor x, const Weight& w, float eps, Tensor out) {
  check("rmsnorm", x.rows == out.rows && x.cols == out.cols && w.cols == x.cols, "shapes differ");
  Node n = node(Op::RmsNorm, x, out);
  n.w = w, n.eps = eps;
  plan_.add(std::move(n));
}

void CudaBackend::matmul(const Weight& w, Tensor x, Tensor out) {
  check("matmul", x.cols == w.cols && out.rows == x.rows && out.cols == w.rows, "shapes differ");
  const DevWeight& d = info(w);
  check("matmul", !d.stack || !d.repacked, "a part of a repacked stack is only multiplied together with the other parts");
  Node n = node(Op::Matmul, x, out);
  n.w = w;
  plan_.add(std::move(n));
}

void CudaBackend::matmul_add(const Weight& w, Tensor x, Tensor inout) {
  matmul(w, x, inout);
  plan_.nodes().back().accumulate = true;
}

void CudaBackend::matmul_multi(std::span<const Weight* const> w, Tensor x, std::span<const Tensor> out) {
  check("matmul_multi", !w.empty() && w.size() == out.size(), "one output per weight");
  for (size_t i = 0; i < w.size(); ++i)
    check("matmul_multi", x.cols == w[i]->cols && out[i].rows == x.rows && out[i].cols == w[i]->rows, "shapes differ");
  Node n = node(Op::MatmulMulti, x);
  for (const Weight* wi : w) n.ws.push_back(*wi);
  n.outs.assign(out.begin(), out.end());
  plan_.add(std::move(n));
}

void CudaBackend::add_bias(Tensor x, const Weight& b) {
  check("add_bias", b.cols == x.cols, "shapes differ");
  Node n = node(Op::AddBias, x);
  n.w = b;
  plan_.add(std::move(n));
}

void CudaBackend::add(Tensor x, Tensor y) { record_in_place(Op::Add, x, y); }
void CudaBackend::swiglu(Tensor gate, Tensor up) { record_in_place(Op::Swiglu, gate, up); }
void CudaBackend::geglu(Tensor gate, Tensor up) { record_in_place(Op::Geglu, gate, up); }

// x op= y, element by element (add, swiglu, geglu).
void CudaBackend::record_in_place(Op op, Tensor x, Tensor y) {
  check(plan::op_name(op), x.rows == y.rows && x.cols == y.cols, "shapes differ");
  Node n = node(op, x);
  n.y = y;
  plan_.add(std::move(n));
}

void CudaBackend::scale(Tensor x, float s) {
  Node n = node(Op::Scale, x);
  n.s = s;
  plan_.add(std::move(n));
}

void CudaBackend::rope(Tensor x, int n_heads, int head_dim, std::span<const int32_t> pos, const RopeParams& p) {
  check("rope", int64_t(pos.size()) == n_in_ && x.rows == n_in_, "positions differ from begin_forward's");
  check("rope", int64_t(n_heads) * head_dim == x.cols, "heads differ from the row's width");
  Node n = node(Op::Rope, x);
  n.n_heads = n_heads, n.head_dim = head_dim, n.rope = p;
  plan_.add(std::move(n));
}

void CudaBackend::attention(int layer, Tensor q, Tensor k, Tensor v, std::span<const int32_t> pos,
                            const AttentionParams& p, Tensor out) {
  layer_cache(layer, q, pos, p);  // (its checks)
  check("attention", k.rows == q.rows && v.rows == q.rows && out.rows == q.rows, "rows differ");
  Node n = node(Op::Attention, q, out);
  n.y = k, n.z = v, n.layer = layer, n.attn = p;
  n.pos_first = pos.front(), n.pos_last = pos.back();
  if (layout_) n.ids.assign(pos.begin(), pos.end());  // each row's own length (paged costs)
  plan_.add(std::move(n));
}

void CudaBackend::copy_rows(Tensor src, std::span<const int32_t> rows, Tensor dst) {
  check("copy_rows", int64_t(rows.size()) == dst.rows && src.cols == dst.cols, "shapes differ");
  for (int32_t r : rows)
    if (r < 0 || r >= src.rows) fail("copy_rows: row {} of {}", r, src.rows);
  Node n = node(Op::CopyRows, src, dst);
  n.ids.assign(rows.begin(), rows.end());
  plan_.add(std::move(n));
}

}  // namespace lamina
