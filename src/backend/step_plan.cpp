#include "backend/step_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

namespace lamina::plan {

const char* op_name(Op op) {
  switch (op) {
    case Op::Embed: return "embed";
    case Op::RmsNorm: return "rmsnorm";
    case Op::Matmul: return "matmul";
    case Op::MatmulMulti: return "matmul_multi";
    case Op::Add: return "add";
    case Op::AddBias: return "add_bias";
    case Op::Scale: return "scale";
    case Op::Swiglu: return "swiglu";
    case Op::Geglu: return "geglu";
    case Op::Rope: return "rope";
    case Op::Attention: return "attention";
    case Op::CopyRows: return "copy_rows";
    case Op::AllReduce: return "all_reduce";
    case Op::EmbedNorm: return "embed+norm";
    case Op::MatmulAddNorm: return "matmul+add+norm";
    case Op::GateUp: return "gate/up+glu";
    case Op::RopeAttention: return "rope+attention";
    case Op::AddNorm: return "add+norm";
    case Op::AllReduceAddNorm: return "all_reduce+add+norm";
  }
  return "?";
}

bool overlaps(const Tensor& a, const Tensor& b) {
  return a.data && b.data && a.data < b.data + b.rows * b.cols && b.data < a.data + a.rows * a.cols;
}

namespace {

bool same(const Tensor& a, const Tensor& b) { return a.data == b.data && a.rows == b.rows && a.cols == b.cols; }

bool is_gemv_input(const Node& n, const Rules& r) {  // reads x through a GEMV
  const bool kind = n.op == Op::Matmul || n.op == Op::MatmulMulti || n.op == Op::GateUp || n.op == Op::MatmulAddNorm;
  return kind && n.x.rows <= r.gemv_max_rows;
}

// The tensor a node writes its int8 blocks or 16-bit copy of, when it can make them.
Tensor x8_target(const Node& n) {
  switch (n.op) {
    case Op::RmsNorm: return n.out;
    case Op::GateUp: return n.out;
    case Op::AddNorm: return n.norm2 ? n.out : Tensor{};
    case Op::AllReduceAddNorm: return n.pending_norm ? Tensor{} : n.out;
    case Op::Attention:
    case Op::RopeAttention: return n.out;  // (the decode and paged merges make them)
    default: return {};
  }
}

Tensor x16_target(const Node& n) {
  switch (n.op) {
    case Op::RmsNorm: return n.out;
    case Op::Swiglu: return n.x;
    case Op::GateUp: return n.out;  // (the gated GEMM of many rows)
    case Op::Attention:
    case Op::RopeAttention: return n.out;  // the prompt kernel, where it runs
    default: return {};
  }
}

// Whether node j's tensor t is read by a node after j before one writes all of it.
bool read_later(const std::vector<Node>& in, size_t j, const Tensor& t) {
  for (size_t k = j + 1; k < in.size(); ++k) {
    for (const Tensor& a : reads(in[k]))
      if (overlaps(a, t)) return true;
    for (const Tensor& w : writes(in[k]))
      if (same(w, t)) return false;
  }
  return false;
}

class Fuser {
 public:
  explicit Fuser(const Rules& r) : r_(r) {}

  // Rewrites 1-5 in one sweep: each input node is appended, then the tail is merged while a
  // pattern matches. `in` is the recorded plan (for liveness checks ahead of the tail).
  std::vector<Node> merge(const std::vector<Node>& in) {
    std::vector<Node> out;
    for (size_t j = 0; j < in.size(); ++j) {
      out.push_back(in[j]);
      while (merge_tail(out, in, j)) {}
    }
    return out;
  }

 private:
  bool merge_tail(std::vector<Node>& o, const std::vector<Node>& in, size_t j) {
    const size_t n = o.size();
    if (n < 2) return false;
    Node& a = o[n - 2];
    Node& b = o[n - 1];
    // 1. Matmul into a temporary that an Add then adds to inout (and nothing reads later).
    if (a.op == Op::Matmul && !a.accumulate && b.op == Op::Add && same(b.y, a.out) && !overlaps(a.out, b.x) &&
        !overlaps(a.x, b.x) && !read_later(in, j, a.out)) {
      a.out = b.x, a.accumulate = true;
      o.pop_back();
      return true;
    }
    if (b.op == Op::RmsNorm) {
      // 2. One decode row: the lookup or the GEMV writes the norm's int8 blocks; the norm pending.
      const Tensor h = b.out;
      const bool row = h.rows == 1 && b.x.rows == 1 && b.x.cols == h.cols && h.cols <= r_.x8_ss_max_k &&
                       r_.x8_rows(h) && !overlaps(b.x, h);
      if (a.op == Op::Embed && same(a.out, b.x) && row && !r_.repacked(a.w)) {
        Node f = a;
        f.op = Op::EmbedNorm, f.x = a.out, f.out = h, f.norm = b.w, f.eps = b.eps;
        replace_tail(o, 2, std::move(f));
        return true;
      }
      if (a.op == Op::Matmul && a.accumulate && same(a.out, b.x) && row && a.x.rows == 1 && !r_.stacked(a.w) &&
          a.w.rows == h.cols && h.cols / 32 <= r_.y8_counters && !overlaps(h, a.x)) {
        Node f = a;
        f.op = Op::MatmulAddNorm, f.y = a.out, f.out = h, f.norm = b.w, f.eps = b.eps, f.accumulate = false;
        if (r_.gemv_makes_y8(f, x8_of(o, n - 2, a.x))) {
          replace_tail(o, 2, std::move(f));
          return true;
        }
      }
      // 5b. The add of a block's output, then the norm of the sum.
      // (One eps for both norms: the kernel takes one.)
      const bool one_eps = a.op == Op::Add || !a.norm || a.eps == b.eps;
      if ((a.op == Op::Add || (a.op == Op::AddNorm && !a.norm2)) && one_eps && same(a.x, b.x) && !overlaps(b.out, a.x)) {
        Node f = a;
        f.op = Op::AddNorm, f.out = b.out, f.norm2 = b.w, f.eps = b.eps;
        replace_tail(o, 2, std::move(f));
        return true;
      }
    }
    // 5c. The all-reduce of a row-parallel matmul's partial sums, then their add to the residual
    // and the next norm (a rank of a tensor-parallel layer), where nothing reads the sums later.
    // One decode row (fast path): where the GEMVs' pending norms cover its width the norm stays
    // pending as after 2; a wider row's is computed in the same node.
    if (a.op == Op::AllReduce && b.op == Op::AddNorm && r_.all_reduce_norm && !r_.exact && !b.norm && b.norm2 &&
        same(b.y, a.x) && b.x.rows == 1 && b.out.rows == 1 && b.out.cols == b.x.cols && b.x.cols % 32 == 0 &&
        !overlaps(b.x, b.out) && !overlaps(a.x, b.x) && !read_later(in, j, a.x)) {
      const bool pend = b.x.cols <= r_.x8_ss_max_k && r_.x8_rows(b.out);
      Node f = b;
      f.op = Op::AllReduceAddNorm, f.comm = a.comm, f.pending_norm = pend;
      replace_tail(o, 2, std::move(f));
      return true;
    }
    // 3. The gate/up pair and its GLU: the GEMVs of a small batch, or a gated GEMM.
    if (a.op == Op::MatmulMulti && a.ws.size() == 2 && (b.op == Op::Swiglu || b.op == Op::Geglu) &&
        same(b.x, a.outs[0]) && same(b.y, a.outs[1]) &&
        (a.x.rows <= r_.gemv_max_rows || (r_.gemm_glu && r_.gemm_glu(a.ws[0]))) && !r_.exact &&
        a.ws[0].type == a.ws[1].type && r_.repacked(a.ws[0]) == r_.repacked(a.ws[1]) && !read_later(in, j, a.outs[1])) {
      Node f;
      f.op = Op::GateUp, f.x = a.x, f.out = a.outs[0], f.w = a.ws[0], f.w2 = a.ws[1];
      f.glu = b.op == Op::Geglu ? Glu::Gelu : Glu::Silu;
      replace_tail(o, 2, std::move(f));
      return true;
    }
    // 5a. A block's output normalised, then added to the residual stream (Gemma's post-norms).
    if (a.op == Op::RmsNorm && b.op == Op::Add && same(b.y, a.out) && !overlaps(a.out, b.x) &&
        !overlaps(a.x, b.x) && !read_later(in, j, a.out)) {
      Node f = b;
      f.op = Op::AddNorm, f.y = a.x, f.norm = a.w, f.eps = a.eps;
      replace_tail(o, 2, std::move(f));
      return true;
    }
    // 4. RoPE of q and k, then the attention that stores k and v (q/k head norms before).
    if (b.op == Op::Attention && n >= 3) return merge_attention(o, in, j);
    return false;
  }

  bool merge_attention(std::vector<Node>& o, const std::vector<Node>& in, size_t j) {
    const size_t n = o.size();
    const Node& att = o[n - 1];
    const Node& rq = o[n - 3];
    const Node& rk = o[n - 2];
    if (rq.op != Op::Rope || rk.op != Op::Rope || rq.x.data != att.x.data || rk.x.data != att.y.data ||
        rq.n_heads != att.attn.n_head || rk.n_heads != att.attn.n_head_kv || rq.head_dim != att.attn.head_dim ||
        !same_rope(rq.rope, rk.rope))
      return false;
    Node f = att;
    f.op = Op::RopeAttention, f.rope = rq.rope;
    size_t take = 3;
    if (n >= 5 && o[n - 5].op == Op::RmsNorm && o[n - 4].op == Op::RmsNorm && o[n - 5].out.data == att.x.data &&
        o[n - 4].out.data == att.y.data) {  // the head norms: q and k taken from before them
      const Node& nq = o[n - 5];
      const Node& nk = o[n - 4];
      f.x = Tensor{nq.x.data, att.x.rows, att.x.cols}, f.y = Tensor{nk.x.data, att.y.rows, att.y.cols};
      f.norm = nq.w, f.norm2 = nk.w, f.eps = nq.eps;
      if (!r_.head_norms_fused(f) || read_later(in, j, nq.out) || read_later(in, j, nk.out)) return false;
      take = 5;
    } else if (n >= 4 && o[n - 4].op == Op::RmsNorm && (o[n - 4].out.data == att.x.data || o[n - 4].out.data == att.y.data)) {
      return false;  // one head norm only: not the composed op's shape
    }
    replace_tail(o, take, std::move(f));
    return true;
  }

  static bool same_rope(const RopeParams& a, const RopeParams& b) {
    return a.n_rot == b.n_rot && a.base == b.base && a.freq_scale == b.freq_scale && a.neox == b.neox &&
           a.freq_factors == b.freq_factors && a.attn_factor == b.attn_factor;
  }

  static void replace_tail(std::vector<Node>& o, size_t k, Node f) {
    o.resize(o.size() - k);
    o.push_back(std::move(f));
  }

  // Whether x will come as int8 blocks: the last node of o that writes it makes them.
  bool x8_of(const std::vector<Node>& o, size_t before, const Tensor& x) const {
    if (!r_.x8_rows(x)) return false;
    for (size_t k = before; k-- > 0;) {
      const auto wr = writes(o[k]);
      if (std::any_of(wr.begin(), wr.end(), [&](const Tensor& t) { return overlaps(t, x); }))
        return same(x8_target(o[k]), x);
    }
    return false;
  }

  const Rules& r_;
};


enum class Fate { Taken, Dead, Needed };

// What becomes of pending norm i at node j: a GEMV takes it, j overwrites its output unread
// (dead), or j touches its input or output otherwise (the norm must be computed first).
std::optional<Fate> fate_at(const std::vector<Node>& v, size_t i, size_t j, const Rules& r) {
  const Node& p = v[i];
  const Node& n = v[j];
  if (is_gemv_input(n, r) && same(n.x, p.out)) return Fate::Taken;
  const auto rd = reads(n), wr = writes(n);
  const bool reads_out = std::any_of(rd.begin(), rd.end(), [&](const Tensor& t) { return overlaps(t, p.out); });
  if (!reads_out && std::any_of(wr.begin(), wr.end(), [&](const Tensor& t) { return same(t, p.out); })) return Fate::Dead;
  const Tensor in = pending_input(p);
  for (const auto* ts : {&rd, &wr})
    for (const Tensor& t : *ts)
      if (overlaps(t, in) || overlaps(t, p.out)) return Fate::Needed;
  return std::nullopt;
}

Node norm_of(const Node& p) {  // the pending norm as an op of its own
  Node n;
  n.op = Op::RmsNorm, n.x = pending_input(p), n.w = pending_weight(p), n.eps = p.eps, n.out = p.out;
  return n;
}

// 6. Each pending norm: computed (an RmsNorm inserted) before the first node that needs it, or
// at the end when the pass goes on after these nodes; then its takers marked.
std::vector<Node> settle_pending(std::vector<Node> v, const Rules& r, bool pass_end) {
  std::vector<std::pair<size_t, Node>> inserts;  // (before index, node)
  for (size_t i = 0; i < v.size(); ++i) {
    if (!pending(v[i])) continue;
    size_t j = i + 1;
    std::optional<Fate> f;
    for (; j < v.size(); ++j)
      if ((f = fate_at(v, i, j, r)) && *f != Fate::Taken) break;
    if ((f && *f == Fate::Needed) || (j == v.size() && !pass_end)) inserts.emplace_back(j, norm_of(v[i]));
  }
  if (!inserts.empty()) {
    std::stable_sort(inserts.begin(), inserts.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<Node> w;
    size_t next = 0;
    for (size_t i = 0; i <= v.size(); ++i) {
      while (next < inserts.size() && inserts[next].first == i) w.push_back(std::move(inserts[next++].second));
      if (i < v.size()) w.push_back(std::move(v[i]));
    }
    v = std::move(w);
  }
  for (size_t i = 0; i < v.size(); ++i) {
    if (!pending(v[i])) continue;
    for (size_t j = i + 1; j < v.size(); ++j) {
      const std::optional<Fate> f = fate_at(v, i, j, r);
      if (f && *f == Fate::Taken) v[j].norm_from = int(i);
      else if (f) break;
    }
  }
  return v;
}

// 8. The copies of x a GEMV or GEMM reads, made by the node that wrote x.
void mark_copies(std::vector<Node>& v, const Rules& r) {
  for (size_t j = 0; j < v.size(); ++j) {
    Node& c = v[j];
    const bool gemv = is_gemv_input(c, r);
    const bool kind = c.op == Op::Matmul || c.op == Op::MatmulMulti || c.op == Op::GateUp;
    const bool gemm = kind && c.x.rows > r.gemv_max_rows && !r.exact;
    if (c.norm_from >= 0 || !(gemv ? r.x8_rows(c.x) : gemm)) continue;
    if (gemm && r.gemm_input(c.op == Op::MatmulMulti ? c.ws[0] : c.w) != GgmlType::F16) continue;
    for (size_t k = j; k-- > 0;) {  // the last node that wrote any of x
      const auto wr = writes(v[k]);
      if (std::none_of(wr.begin(), wr.end(), [&](const Tensor& t) { return overlaps(t, c.x); })) continue;
      if (gemv && same(x8_target(v[k]), c.x)) v[k].x8_out = true, c.x8_from = int(k);
      if (gemm && same(x16_target(v[k]), c.x)) v[k].x16_out = true, c.x16_from = int(k);
      break;
    }
  }
  // A norm's or gated GEMM's output of many rows that only its copy's readers read (before
  // anything writes it again).
  for (size_t k = 0; k < v.size(); ++k) {
    Node& g = v[k];
    if ((g.op != Op::GateUp && g.op != Op::RmsNorm) || !g.x16_out || g.x.rows <= r.gemv_max_rows) continue;
    g.out16_only = true;
    for (size_t j = k + 1; j < v.size() && g.out16_only; ++j) {
      const auto rd = reads(v[j]);
      if (v[j].x16_from != int(k) && std::any_of(rd.begin(), rd.end(), [&](const Tensor& t) { return overlaps(t, g.out); }))
        g.out16_only = false;
      const auto wr = writes(v[j]);
      if (std::any_of(wr.begin(), wr.end(), [&](const Tensor& t) { return same(t, g.out); })) break;
    }
  }
}

}  // namespace

bool pending(const Node& n) {
  return n.op == Op::EmbedNorm || n.op == Op::MatmulAddNorm || (n.op == Op::AllReduceAddNorm && n.pending_norm);
}
// The pending norm's input: the embedding row, the residual the GEMV added to, or the residual
// the all-reduce added to.
Tensor pending_input(const Node& n) { return n.op == Op::MatmulAddNorm ? n.y : n.x; }
const Weight& pending_weight(const Node& n) { return n.op == Op::AllReduceAddNorm ? n.norm2 : n.norm; }

std::vector<Tensor> reads(const Node& n) {
  switch (n.op) {
    case Op::Embed:
    case Op::EmbedNorm: return {};
    case Op::Matmul: return n.accumulate ? std::vector<Tensor>{n.x, n.out} : std::vector<Tensor>{n.x};
    case Op::Add:
    case Op::Swiglu:
    case Op::Geglu:
    case Op::MatmulAddNorm:
    case Op::AddNorm:
    case Op::AllReduceAddNorm: return {n.x, n.y};
    case Op::Attention:
    case Op::RopeAttention: return {n.x, n.y, n.z};
    default: return {n.x};
  }
}

std::vector<Tensor> writes(const Node& n) {
  switch (n.op) {
    case Op::Embed:
    case Op::RmsNorm:
    case Op::Matmul:
    case Op::Attention:
    case Op::CopyRows:
    case Op::GateUp: return {n.out};
    case Op::MatmulMulti: return n.outs;
    case Op::EmbedNorm: return {n.x, n.out};
    case Op::MatmulAddNorm: return {n.y, n.out};
    case Op::RopeAttention: return {n.x, n.y, n.out};
    case Op::AddNorm: return n.norm2 ? std::vector<Tensor>{n.x, n.out} : std::vector<Tensor>{n.x};
    case Op::AllReduceAddNorm: return {n.x, n.y, n.out};  // (y: the partial sums, summed in place)
    default: return {n.x};  // in place
  }
}

namespace {
Node node(Op op, Tensor x, Tensor out = {}, const Weight& w = {}) {
  Node n;
  n.op = op, n.x = x, n.out = out, n.w = w;
  return n;
}
}  // namespace

void Plan::embed(const Weight& table, Tensor out) { add(node(Op::Embed, {}, out, table)); }

void Plan::rmsnorm(Tensor x, const Weight& w, float eps, Tensor out) {
  Node n = node(Op::RmsNorm, x, out, w);
  n.eps = eps;
  add(std::move(n));
}

void Plan::matmul(const Weight& w, Tensor x, Tensor out, bool accumulate) {
  Node n = node(Op::Matmul, x, out, w);
  n.accumulate = accumulate;
  add(std::move(n));
}

void Plan::matmul_multi(std::span<const Weight* const> w, Tensor x, std::span<const Tensor> out) {
  Node n = node(Op::MatmulMulti, x);
  for (const Weight* wi : w) n.ws.push_back(*wi);
  n.outs.assign(out.begin(), out.end());
  add(std::move(n));
}

void Plan::in_place(Op op, Tensor x, Tensor y) {
  Node n = node(op, x);
  n.y = y;
  add(std::move(n));
}

void Plan::add_bias(Tensor x, const Weight& b) { add(node(Op::AddBias, x, {}, b)); }

void Plan::scale(Tensor x, float s) {
  Node n = node(Op::Scale, x);
  n.s = s;
  add(std::move(n));
}

void Plan::rope(Tensor x, int n_heads, int head_dim, const RopeParams& p) {
  Node n = node(Op::Rope, x);
  n.n_heads = n_heads, n.head_dim = head_dim, n.rope = p;
  add(std::move(n));
}

void Plan::attention(int layer, Tensor q, Tensor k, Tensor v, std::span<const int32_t> pos, const AttentionParams& p,
                     Tensor out, bool each_position) {
  Node n = node(Op::Attention, q, out);
  n.y = k, n.z = v, n.layer = layer, n.attn = p, n.pos_first = pos.front(), n.pos_last = pos.back();
  if (each_position) n.ids.assign(pos.begin(), pos.end());
  add(std::move(n));
}

void Plan::copy_rows(Tensor src, std::span<const int32_t> rows, Tensor dst) {
  Node n = node(Op::CopyRows, src, dst);
  n.ids.assign(rows.begin(), rows.end());
  add(std::move(n));
}

void Plan::all_reduce(Tensor x, Communicator& comm) {
  Node n = node(Op::AllReduce, x);
  n.comm = &comm;
  add(std::move(n));
}

void Plan::fuse(const Rules& r, Tensor result, bool pass_end) {
  nodes_ = Fuser(r).merge(nodes_);
  nodes_ = settle_pending(std::move(nodes_), r, pass_end);
  // 7. The pass's logits row, made by a one-row GEMV: it also leaves the greedy id.
  if (result.data && result.rows == 1 && r.fused_argmax && !r.exact)
    for (size_t k = nodes_.size(); k-- > 0;) {
      const auto wr = writes(nodes_[k]);
      if (std::none_of(wr.begin(), wr.end(), [&](const Tensor& t) { return overlaps(t, result); })) continue;
      Node& m = nodes_[k];
      m.argmax = m.op == Op::Matmul && !m.accumulate && same(m.out, result) && m.x.rows == 1;
      break;
    }
  mark_copies(nodes_, r);
}

std::string Node::str() const {
  auto shape = [](const Tensor& t) { return fmt::format("{}x{}", t.rows, t.cols); };
  std::string r = fmt::format("{:<16} x {}", op_name(op), shape(x));
  if (w) r += fmt::format(" w {} {}x{}", type_name(w.type), w.rows, w.cols);
  if (!ws.empty()) r += fmt::format(" ({} weights)", ws.size());
  if (out.data) r += fmt::format(" -> {}", shape(out));
  if (accumulate) r += " +=";
  if (norm_from >= 0) r += fmt::format(" takes norm of #{}", norm_from);
  if (x8_from >= 0) r += fmt::format(" x8 from #{}", x8_from);
  if (x16_from >= 0) r += fmt::format(" x16 from #{}", x16_from);
  if (out16_only) r += " 16-bit out only";
  if (argmax) r += " argmax";
  if (pending_norm) r += " norm pending";
  return r;
}

std::string Plan::str() const {
  std::string s;
  for (size_t i = 0; i < nodes_.size(); ++i) s += fmt::format("#{:<3} {}\n", i, nodes_[i].str());
  return s;
}

}  // namespace lamina::plan
