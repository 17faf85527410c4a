// A forward pass as data: the ops the model asked for, in order, each with the tensors it reads
// and writes (a step plan), and the fusion pass that rewrites known patterns into fused kernels
// before anything is launched or captured. The CUDA backend records its ops into a Plan, fuses
// it when the pass's results are wanted (read, sample, the end of a graph capture) and then
// executes the nodes (backend/cuda/cuda_exec.cpp). Plain C++, no CUDA: the rewrites are tested
// on the CPU (tests/test_step_plan.cpp).
//
// The rewrites (fuse()), in this order:
//  1. Matmul(w, x, t) + Add(inout, t)               -> Matmul accumulating into inout
//  2. Embed(out) + RmsNorm(out -> h), one row        -> EmbedNorm: h's norm left pending
//     Matmul+ (inout) + RmsNorm(inout -> h), one row -> MatmulAddNorm: h's norm left pending
//  3. MatmulMulti(gate, up) + Swiglu/Geglu          -> GateUp (small batches; many rows where
//                                                       the backend has a gated GEMM: Rules::gemm_glu)
//  4. [RmsNorm q/k heads] + Rope q + Rope k + Attention -> RopeAttention
//  5. [RmsNorm(y)] + Add(x, y) + [RmsNorm(x -> h)]   -> AddNorm
//     AllReduce(y) + AddNorm(x, y -> h) [no norm of y], one row -> AllReduceAddNorm (where the
//                                                       backend has it: Rules::all_reduce_norm):
//                                                       h's norm left pending, or for a row too
//                                                       wide for that, computed
//  6. a pending norm (2): the GEMVs that read h take its int8 blocks and sums of squares
//     (norm_from); h itself is computed (an RmsNorm inserted) only before an op that needs it
//  7. the pass's result made by a one-row matmul     -> that GEMV also leaves the greedy id
//  8. copies: a producer writes its output's int8 blocks (x8_out) where a GEMV reads it before
//     anything else writes it, and its 16-bit copy (x16_out) where a GEMM does; an RmsNorm or
//     GateUp of many rows whose output only GEMMs read then writes that copy alone (out16_only).
#pragma once

#include "backend/backend.h"

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace lamina::plan {

enum class Op : uint8_t {
  // Plain ops, as the model asks for them.
  Embed,          // out = table w [tokens of the pass]
  RmsNorm,        // out = rmsnorm(x) * w
  Matmul,         // out = x . w^T (+ out when accumulate)
  MatmulMulti,    // outs[i] = x . ws[i]^T (Q/K/V, gate/up)
  Add,            // x += y
  AddBias,        // x[t] += w
  Scale,          // x *= s
  Swiglu,         // x = silu(x) * y
  Geglu,          // x = gelu(x) * y
  Rope,           // x rotated in place (n_heads heads of head_dim)
  Attention,      // k (y), v (z) stored at the pass's positions of `layer`; out = attention of q (x)
  CopyRows,       // out = x[ids]
  AllReduce,      // x = the sum of every rank's x (tensor parallelism; comm), in place
  // Made by fuse().
  EmbedNorm,      // Embed into x, then out = rmsnorm(x) * norm, pending
  MatmulAddNorm,  // y += x . w^T, then out = rmsnorm(y) * norm, pending
  GateUp,         // out = act(x . w^T) * (x . w2^T)
  RopeAttention,  // [q, k heads normed by norm, norm2], RoPE of q (x) and k (y), Attention
  AddNorm,        // x += [rmsnorm(y) * norm] y, then [out = rmsnorm(x) * norm2]
  AllReduceAddNorm,  // x += the sum of every rank's y (comm), then out = rmsnorm(x) * norm2 [pending]
};

const char* op_name(Op op);

struct Node {
  Op op = Op::Embed;
  Tensor x, y, z, out;           // operands (see Op)
  std::vector<Tensor> outs;      // MatmulMulti
  std::vector<Weight> ws;        // MatmulMulti
  Weight w, w2, norm, norm2;     // matrices, biases, norm weights (an absent one is empty)
  float eps = 0.f, s = 1.f;
  bool accumulate = false;       // Matmul: out += x . w^T
  Glu glu = Glu::Silu;
  int layer = 0, n_heads = 0, head_dim = 0;
  RopeParams rope;
  AttentionParams attn;
  int32_t pos_first = 0, pos_last = 0;  // the pass's positions (Rope, Attention): first and last
  std::vector<int32_t> ids;             // CopyRows; Attention: every row's position (paged costs)
  Communicator* comm = nullptr;         // AllReduce: the rank's group

  // Set by fuse().
  int norm_from = -1;    // a GEMV of x taking the pending norm of node norm_from (x8 and sums of squares)
  bool argmax = false;   // a one-row GEMV that also leaves the greedy id of its output
  bool x8_out = false;   // writes the int8 blocks of its output tensor (out, or x for in-place ops)
  bool x16_out = false;  // writes the 16-bit copy of its output tensor
  bool pending_norm = false;  // AllReduceAddNorm: out not written; its norm pending, as a MatmulAddNorm's
  int x8_from = -1;      // reads x's int8 blocks, written by that node
  int x16_from = -1;     // reads x's 16-bit copy, written by that node
  bool out16_only = false;  // RmsNorm, GateUp of many rows: writes the 16-bit copy of out and not out
                            // itself (every later reader of out takes the copy)

  std::string str() const;  // one line: the op and its shapes
};

// What the pass needs to know about the backend that runs the plan.
struct Rules {
  int gemv_max_rows = 8;           // a matmul of more rows is a GEMM
  bool exact = false;              // f32 activations everywhere: no int8 or 16-bit copies
  bool int8_x = false;             // quantised matrices loaded: GEMVs take int8 blocks of x
  bool fused_argmax = true;
  bool all_reduce_norm = false;    // the all-reduce fuses with the residual add and the next norm
                                   // (pending where the row allows, else computed)
  int64_t x8_ss_max_k = 0;         // widest row a pending norm's sums of squares cover
  int64_t y8_counters = 0;         // int8-block counters of the GEMVs' epilogues (n / 32 at most)
  // Facts about weights and kernels the backend answers.
  std::function<bool(const Weight&)> stacked;            // part of a stacked matrix (load_stacked)
  std::function<bool(const Weight&)> repacked;           // in the GEMV/GEMM plane layout
  // MatmulAddNorm: its GEMV writes the norm's int8 blocks itself (x8: x comes as int8 blocks).
  std::function<bool(const Node&, bool x8)> gemv_makes_y8;
  std::function<bool(const Node&)> head_norms_fused;     // RopeAttention with q/k head norms runs fused
  // The 16-bit type a GEMM with this weight reads x in (F16 or BF16), or F32 for none.
  std::function<GgmlType(const Weight&)> gemm_input;
  // A gated GEMM (the GLU in its epilogue) takes gate and up matrices of this kind (many rows).
  std::function<bool(const Weight&)> gemm_glu;

  // A tensor whose rows a GEMV reads as int8 blocks.
  bool x8_rows(Tensor t) const { return int8_x && !exact && t.rows <= gemv_max_rows && t.cols % 32 == 0; }
};

// A node whose norm is left pending (2, 5c): the GEMVs that read its out take the int8 blocks of
// pending_input * pending_weight and their sums of squares, and scale by the RMS themselves.
bool pending(const Node& n);
Tensor pending_input(const Node& n);
const Weight& pending_weight(const Node& n);

// The tensors a node reads and writes (a fused node's, too).
std::vector<Tensor> reads(const Node& n);
std::vector<Tensor> writes(const Node& n);
bool overlaps(const Tensor& a, const Tensor& b);

class Plan {
 public:
  // Recording: one node per plain op, as Backend's ops (the backend checks the arguments first).
  void embed(const Weight& table, Tensor out);
  void rmsnorm(Tensor x, const Weight& w, float eps, Tensor out);
  void matmul(const Weight& w, Tensor x, Tensor out, bool accumulate = false);
  void matmul_multi(std::span<const Weight* const> w, Tensor x, std::span<const Tensor> out);
  void in_place(Op op, Tensor x, Tensor y);  // Add, Swiglu, Geglu: x op= y
  void add_bias(Tensor x, const Weight& b);
  void scale(Tensor x, float s);
  void rope(Tensor x, int n_heads, int head_dim, const RopeParams& p);
  // each_position: keep every row's position (the paged path's costs), not only the first and last.
  void attention(int layer, Tensor q, Tensor k, Tensor v, std::span<const int32_t> pos, const AttentionParams& p,
                 Tensor out, bool each_position);
  void copy_rows(Tensor src, std::span<const int32_t> rows, Tensor dst);
  void all_reduce(Tensor x, Communicator& comm);

  void add(Node n) { nodes_.push_back(std::move(n)); }
  bool empty() const { return nodes_.empty(); }
  void clear() { nodes_.clear(); }
  std::vector<Node>& nodes() { return nodes_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  // Applies the rewrites above. result: the tensor the caller reads next (the pass's logits), or
  // empty; pass_end: nothing after these nodes reads this pass's tensors again, so a pending
  // norm no node took is dropped rather than computed.
  void fuse(const Rules& r, Tensor result, bool pass_end);
  std::string str() const;  // the plan, a node per line (lamina bench --plan, tests)

 private:
  std::vector<Node> nodes_;
};

}  // namespace lamina::plan
