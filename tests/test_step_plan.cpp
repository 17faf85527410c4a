// The step plan's fusion pass (backend/step_plan.h) on hand-built plans: which nodes merge,
// which GEMVs take a pending norm or a producer's int8 blocks, where a norm is computed after
// all, and what stays apart (prompt rows, exact mode, a tensor read again later).
#include "backend/step_plan.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <memory>
#include <vector>

namespace lamina::plan {
namespace {

// Activations at distinct addresses of one arena (the pass never dereferences them).
struct Arena {
  std::vector<float> mem = std::vector<float>(1 << 22);
  size_t used = 0;
  Tensor alloc(int64_t rows, int64_t cols) {
    Tensor t{mem.data() + used, rows, cols};
    used += size_t(rows * cols);
    return t;
  }
};

const float kWeightBytes[64] = {};
Weight weight(int64_t rows, int64_t cols, int tag, GgmlType t = GgmlType::Q4_0) {
  return Weight{t, cols, rows, &kWeightBytes[tag]};
}

Rules rules(bool exact = false) {
  Rules r;
  r.exact = exact, r.int8_x = true, r.x8_ss_max_k = 4096, r.y8_counters = 16384;
  r.stacked = [](const Weight&) { return false; };
  r.repacked = [](const Weight&) { return false; };
  r.gemv_makes_y8 = [](const Node&, bool) { return true; };
  r.head_norms_fused = [](const Node&) { return true; };
  r.gemm_input = [](const Weight& w) { return w.type == GgmlType::F32 ? GgmlType::F32 : GgmlType::F16; };
  return r;
}

Node op(Op o, Tensor x, Tensor out = {}) {
  Node n;
  n.op = o, n.x = x, n.out = out;
  return n;
}
Node norm(Tensor x, Tensor out, int tag) {
  Node n = op(Op::RmsNorm, x, out);
  n.w = weight(1, x.cols, tag, GgmlType::F32);
  n.eps = 1e-5f;
  return n;
}
Node matmul(Tensor x, Tensor out, int tag, bool acc = false) {
  Node n = op(Op::Matmul, x, out);
  n.w = weight(out.cols, x.cols, tag), n.accumulate = acc;
  return n;
}
Node multi(Tensor x, std::vector<Tensor> outs, int tag) {
  Node n = op(Op::MatmulMulti, x);
  for (size_t i = 0; i < outs.size(); ++i) n.ws.push_back(weight(outs[i].cols, x.cols, tag + int(i)));
  n.outs = std::move(outs);
  return n;
}
Node rope(Tensor x, int heads) {
  Node n = op(Op::Rope, x);
  n.n_heads = heads, n.head_dim = int(x.cols / heads), n.rope.n_rot = n.head_dim;
  return n;
}
Node attention(Tensor q, Tensor k, Tensor v, Tensor out, int heads, int kv_heads) {
  Node n = op(Op::Attention, q, out);
  n.y = k, n.z = v, n.attn.n_head = heads, n.attn.n_head_kv = kv_heads, n.attn.head_dim = int(q.cols / heads);
  return n;
}
Node binary(Op o, Tensor x, Tensor y) {
  Node n = op(o, x);
  n.y = y;
  return n;
}

std::vector<Op> ops(const Plan& p) {
  std::vector<Op> v;
  for (const Node& n : p.nodes()) v.push_back(n.op);
  return v;
}

// One Llama layer of a decode step, then the output norm and the logits, as the model records them.
struct DecodeStep {
  Arena a;
  int64_t T, E = 256, F = 512, V = 1024;
  Tensor x, h, q, k, v, att, g, u, logits;
  Plan p;
  explicit DecodeStep(int64_t rows) : T(rows) {
    x = a.alloc(T, E), h = a.alloc(T, E), q = a.alloc(T, E), k = a.alloc(T, 64), v = a.alloc(T, 64);
    att = a.alloc(T, E), g = a.alloc(T, F), u = a.alloc(T, F), logits = a.alloc(T, V);
    p.add(op(Op::Embed, {}, x));
    p.nodes().back().w = weight(V, E, 60);
    p.add(norm(x, h, 1));
    p.add(multi(h, {q, k, v}, 10));
    p.add(rope(q, 4));
    p.add(rope(k, 1));
    p.add(attention(q, k, v, att, 4, 1));
    p.add(matmul(att, x, 20, true));
    p.add(norm(x, h, 2));
    p.add(multi(h, {g, u}, 30));
    p.add(binary(Op::Swiglu, g, u));
    p.add(matmul(g, x, 40, true));
    p.add(norm(x, h, 3));
    p.add(matmul(h, logits, 50));
  }
};

TEST(StepPlan, DecodeStepFusesIntoTheDecodeChain) {
  DecodeStep s(1);
  s.p.fuse(rules(), s.logits, true);
  ASSERT_EQ(ops(s.p), (std::vector<Op>{Op::EmbedNorm, Op::MatmulMulti, Op::RopeAttention, Op::MatmulAddNorm, Op::GateUp,
                                       Op::MatmulAddNorm, Op::Matmul}))
      << s.p.str();
  const auto& n = s.p.nodes();
  EXPECT_EQ(n[1].norm_from, 0);  // Q/K/V take the lookup's pending norm
  EXPECT_TRUE(n[2].x8_out);      // the attention writes the Wo GEMV's int8 blocks
  EXPECT_EQ(n[3].x8_from, 2);
  EXPECT_EQ(n[3].y.data, s.x.data);  // Wo adds to the residual, h = rmsnorm(x) pending
  EXPECT_EQ(n[4].norm_from, 3);      // gate/up take it
  EXPECT_EQ(n[4].glu, Glu::Silu);
  EXPECT_TRUE(n[4].x8_out);
  EXPECT_EQ(n[5].x8_from, 4);
  EXPECT_EQ(n[6].norm_from, 5);  // the logits GEMV takes the output norm
  EXPECT_TRUE(n[6].argmax);
  for (const Node& m : n) EXPECT_EQ(m.x16_from, -1);
}

TEST(StepPlan, PromptRowsTakeSixteenBitCopiesAndNoPendingNorms) {
  DecodeStep s(16);
  s.p.fuse(rules(), s.logits, true);
  ASSERT_EQ(ops(s.p), (std::vector<Op>{Op::Embed, Op::RmsNorm, Op::MatmulMulti, Op::RopeAttention, Op::Matmul, Op::RmsNorm,
                                       Op::MatmulMulti, Op::Swiglu, Op::Matmul, Op::RmsNorm, Op::Matmul}))
      << s.p.str();
  const auto& n = s.p.nodes();
  EXPECT_TRUE(n[1].x16_out);
  EXPECT_EQ(n[2].x16_from, 1);
  EXPECT_EQ(n[4].x16_from, 3);  // the prompt attention's copy for the Wo GEMM
  EXPECT_TRUE(n[4].accumulate);
  EXPECT_EQ(n[6].x16_from, 5);
  EXPECT_EQ(n[8].x16_from, 7);  // SwiGLU's copy for W_down
  EXPECT_FALSE(n[10].argmax);   // 16 rows of logits
  // the norms' outputs are read only through their copies: no f32 rows written; the prompt
  // attention's output and SwiGLU's (read in f32 by the GLU, in place) keep theirs
  EXPECT_TRUE(n[1].out16_only && n[5].out16_only && n[9].out16_only);
  EXPECT_FALSE(n[3].out16_only || n[7].out16_only);
  for (const Node& m : n) EXPECT_EQ(m.norm_from, -1);
}

// Where the backend has a gated GEMM, prompt rows of gate/up and the GLU become one GateUp that
// reads the norm's 16-bit copy and writes only the down projection's; a GLU output read again
// later in f32 keeps its f32 rows; exact mode and a backend without one keep the three nodes.
TEST(StepPlan, PromptRowsOfGateUpBecomeOneGatedGemm) {
  Rules r = rules();
  r.gemm_glu = [](const Weight& w) { return w.type == GgmlType::Q4_0; };
  DecodeStep s(16);
  s.p.fuse(r, s.logits, true);
  ASSERT_EQ(ops(s.p), (std::vector<Op>{Op::Embed, Op::RmsNorm, Op::MatmulMulti, Op::RopeAttention, Op::Matmul, Op::RmsNorm,
                                       Op::GateUp, Op::Matmul, Op::RmsNorm, Op::Matmul}))
      << s.p.str();
  const auto& n = s.p.nodes();
  EXPECT_EQ(n[6].x16_from, 5);
  EXPECT_TRUE(n[6].x16_out);
  EXPECT_TRUE(n[6].out16_only);
  EXPECT_EQ(n[7].x16_from, 6);
  EXPECT_TRUE(n[7].accumulate);

  DecodeStep again(16);  // the GLU output also added to the residual afterwards: f32 rows kept
  again.p.add(binary(Op::Add, again.x, again.g));
  again.p.fuse(r, {}, true);
  const auto& m = again.p.nodes();
  ASSERT_EQ(m[6].op, Op::GateUp) << again.p.str();
  EXPECT_TRUE(m[6].x16_out);
  EXPECT_FALSE(m[6].out16_only);

  r.gemm_glu = [](const Weight&) { return false; };
  DecodeStep none(16);
  none.p.fuse(r, none.logits, true);
  EXPECT_EQ(none.p.nodes()[7].op, Op::Swiglu) << none.p.str();
  Rules re = rules(true);
  re.gemm_glu = [](const Weight&) { return true; };
  DecodeStep exact(16);
  exact.p.fuse(re, exact.logits, true);
  EXPECT_EQ(exact.p.nodes()[7].op, Op::Swiglu) << exact.p.str();
}

TEST(StepPlan, ExactModeMakesNoCopiesAndNoPendingNorms) {
  DecodeStep s(1);
  s.p.fuse(rules(true), s.logits, true);
  ASSERT_EQ(ops(s.p), (std::vector<Op>{Op::Embed, Op::RmsNorm, Op::MatmulMulti, Op::RopeAttention, Op::Matmul, Op::RmsNorm,
                                       Op::MatmulMulti, Op::Swiglu, Op::Matmul, Op::RmsNorm, Op::Matmul}))
      << s.p.str();
  for (const Node& m : s.p.nodes()) {
    EXPECT_FALSE(m.x8_out || m.x16_out || m.argmax);
    EXPECT_EQ(m.norm_from, -1);
  }
}

// A pending norm whose output another op reads is computed (an RmsNorm inserted) right before it;
// one whose output is overwritten unread is dropped; at the end of a plan that is not the pass's
// end it is computed.
TEST(StepPlan, PendingNormComputedOnlyWhereNeeded) {
  Arena a;
  const Tensor x = a.alloc(1, 64), h = a.alloc(1, 64), y = a.alloc(1, 64), o = a.alloc(1, 32);
  Plan p;
  p.add(op(Op::Embed, {}, x));
  p.nodes().back().w = weight(100, 64, 1);
  p.add(norm(x, h, 2));
  p.add(matmul(h, o, 3));
  p.add(binary(Op::Add, y, h));  // reads h: the norm must have run
  p.fuse(rules(), {}, true);
  ASSERT_EQ(ops(p), (std::vector<Op>{Op::EmbedNorm, Op::Matmul, Op::RmsNorm, Op::Add})) << p.str();
  EXPECT_EQ(p.nodes()[1].norm_from, 0);
  EXPECT_EQ(p.nodes()[2].x.data, x.data);
  EXPECT_EQ(p.nodes()[2].out.data, h.data);

  Plan dead;
  dead.add(op(Op::Embed, {}, x));
  dead.nodes().back().w = weight(100, 64, 1);
  dead.add(norm(x, h, 2));
  dead.add(matmul(h, o, 3));
  dead.add(norm(y, h, 4));  // h overwritten, unread
  dead.fuse(rules(), {}, false);
  EXPECT_EQ(ops(dead), (std::vector<Op>{Op::EmbedNorm, Op::Matmul, Op::RmsNorm})) << dead.str();

  for (bool end : {true, false}) {
    Plan tail;
    tail.add(op(Op::Embed, {}, x));
    tail.nodes().back().w = weight(100, 64, 1);
    tail.add(norm(x, h, 2));
    tail.add(matmul(h, o, 3));
    tail.fuse(rules(), {}, end);
    EXPECT_EQ(tail.nodes().size(), end ? 2u : 3u) << tail.str();
    if (!end) {
      EXPECT_EQ(tail.nodes().back().op, Op::RmsNorm);
    }
  }
}

// Gemma's post-norms: the block output normalised and added, then the next norm, in one node.
TEST(StepPlan, PostNormAddAndNextNormBecomeOneNode) {
  Arena a;
  const Tensor x = a.alloc(1, 64), att = a.alloc(1, 64), proj = a.alloc(1, 64), pn = a.alloc(1, 64), h = a.alloc(1, 64),
               o = a.alloc(1, 32);
  Plan p;
  p.add(matmul(att, proj, 1));
  p.add(norm(proj, pn, 2));
  p.add(binary(Op::Add, x, pn));
  p.add(norm(x, h, 3));
  p.add(matmul(h, o, 4));
  p.fuse(rules(), {}, true);
  ASSERT_EQ(ops(p), (std::vector<Op>{Op::Matmul, Op::AddNorm, Op::Matmul})) << p.str();
  const Node& f = p.nodes()[1];
  EXPECT_EQ(f.x.data, x.data);
  EXPECT_EQ(f.y.data, proj.data);
  EXPECT_EQ(f.out.data, h.data);
  EXPECT_TRUE(f.norm && f.norm2);
  EXPECT_TRUE(f.x8_out);
  EXPECT_EQ(p.nodes()[2].x8_from, 1);
}

// Q/K head norms before RoPE go into the RoPE + cache store kernel, q and k taken from before them.
TEST(StepPlan, HeadNormsJoinTheRotation) {
  Arena a;
  const Tensor q = a.alloc(1, 256), k = a.alloc(1, 64), v = a.alloc(1, 64), att = a.alloc(1, 256);
  const Tensor qn = a.alloc(4, 64), kn = a.alloc(1, 64);
  Plan p;
  p.add(norm(Tensor{q.data, 4, 64}, qn, 1));
  p.add(norm(Tensor{k.data, 1, 64}, kn, 2));
  p.add(rope(Tensor{qn.data, 1, 256}, 4));
  p.add(rope(Tensor{kn.data, 1, 64}, 1));
  p.add(attention(Tensor{qn.data, 1, 256}, Tensor{kn.data, 1, 64}, v, att, 4, 1));
  Rules r = rules();
  p.fuse(r, {}, true);
  ASSERT_EQ(ops(p), (std::vector<Op>{Op::RopeAttention})) << p.str();
  EXPECT_EQ(p.nodes()[0].x.data, q.data);
  EXPECT_EQ(p.nodes()[0].y.data, k.data);
  EXPECT_TRUE(p.nodes()[0].norm && p.nodes()[0].norm2);

  Plan apart;  // the kernel does not take these heads: the five ops stay
  apart.add(norm(Tensor{q.data, 4, 64}, qn, 1));
  apart.add(norm(Tensor{k.data, 1, 64}, kn, 2));
  apart.add(rope(Tensor{qn.data, 1, 256}, 4));
  apart.add(rope(Tensor{kn.data, 1, 64}, 1));
  apart.add(attention(Tensor{qn.data, 1, 256}, Tensor{kn.data, 1, 64}, v, att, 4, 1));
  r.head_norms_fused = [](const Node&) { return false; };
  apart.fuse(r, {}, true);
  EXPECT_EQ(apart.nodes().size(), 5u) << apart.str();
}

// A matmul into a temporary that an add then adds to the residual accumulates in place, unless
// the temporary is read again.
TEST(StepPlan, MatmulThenAddAccumulatesUnlessTheProductIsReadAgain) {
  Arena a;
  const Tensor x = a.alloc(2, 64), in = a.alloc(2, 32), t = a.alloc(2, 64), o = a.alloc(2, 64);
  Plan p;
  p.add(matmul(in, t, 1));
  p.add(binary(Op::Add, x, t));
  p.fuse(rules(), {}, true);
  ASSERT_EQ(ops(p), (std::vector<Op>{Op::Matmul}));
  EXPECT_TRUE(p.nodes()[0].accumulate);
  EXPECT_EQ(p.nodes()[0].out.data, x.data);

  Plan again;
  again.add(matmul(in, t, 1));
  again.add(binary(Op::Add, x, t));
  again.add(binary(Op::Add, o, t));
  again.fuse(rules(), {}, true);
  EXPECT_EQ(ops(again), (std::vector<Op>{Op::Matmul, Op::Add, Op::Add})) << again.str();
}

// A copy is read only while nothing else has written its tensor.
TEST(StepPlan, CopiesAreNotReadAfterTheTensorIsWrittenAgain) {
  Arena a;
  const Tensor x = a.alloc(2, 64), h = a.alloc(2, 64), b = a.alloc(2, 64), o = a.alloc(2, 32);
  Plan p;
  p.add(norm(x, h, 1));
  p.add(binary(Op::Add, h, b));  // h changed after the norm wrote its blocks
  p.add(matmul(h, o, 2));
  p.fuse(rules(), {}, true);
  ASSERT_EQ(p.nodes().size(), 3u) << p.str();
  EXPECT_FALSE(p.nodes()[0].x8_out);
  EXPECT_EQ(p.nodes()[2].x8_from, -1);
}

// A rank of a tensor-parallel layer: Wo's partial sums t (of the attention output att)
// all-reduced, added to the residual x, the next norm into h, and the GEMV h -> o that reads it;
// `more` adds nodes after those.
struct RankLayer {
  Arena a;
  const Tensor att = a.alloc(1, 128), t = a.alloc(1, 256), x = a.alloc(1, 256), h = a.alloc(1, 256), o = a.alloc(1, 64);
  const std::unique_ptr<Communicator> group = single_rank();
  Plan fused(const Rules& r, std::initializer_list<Node> more = {}, Tensor result = {}) const {
    Plan p;
    p.add(matmul(att, t, 1));
    p.all_reduce(t, *group);
    p.add(binary(Op::Add, x, t));
    p.add(norm(x, h, 2));
    p.add(matmul(h, o, 3));
    for (const Node& n : more) p.add(n);
    p.fuse(r, result, true);
    return p;
  }
};

// The matmul must not fold into the add (the sum of the ranks comes between); without a fused
// all-reduce the add and the next norm still fuse, and the next GEMV takes that norm's int8 blocks.
TEST(StepPlan, AnAllReduceKeepsTheMatmulApartAndTheAddNormFuses) {
  const RankLayer l;
  const Plan p = l.fused(rules(), {}, l.o);
  ASSERT_EQ(ops(p), (std::vector<Op>{Op::Matmul, Op::AllReduce, Op::AddNorm, Op::Matmul})) << p.str();
  const auto& n = p.nodes();
  EXPECT_FALSE(n[0].accumulate);
  EXPECT_EQ(n[1].x.data, l.t.data);
  EXPECT_EQ(n[1].comm, l.group.get());
  EXPECT_TRUE(n[2].x8_out);
  EXPECT_EQ(n[3].x8_from, 2);
}

// Where the backend has it, the all-reduce, the residual add and the next norm of one row become
// one node that leaves the norm pending for the next GEMV; not when the partial sums are read
// again later.
TEST(StepPlan, TheAllReduceFusesWithTheAddAndTheNorm) {
  const RankLayer l;
  Rules r = rules();
  r.all_reduce_norm = true;
  const Plan again = l.fused(r, {binary(Op::Add, l.o, Tensor{l.t.data, 1, 64})});
  EXPECT_EQ(again.nodes()[1].op, Op::AllReduce) << again.str();
  const Plan p = l.fused(r);
  ASSERT_EQ(ops(p), (std::vector<Op>{Op::Matmul, Op::AllReduceAddNorm, Op::Matmul})) << p.str();
  const auto& n = p.nodes();
  EXPECT_EQ(n[1].comm, l.group.get());
  EXPECT_EQ(n[1].x.data, l.x.data);
  EXPECT_EQ(n[1].y.data, l.t.data);
  EXPECT_EQ(n[1].out.data, l.h.data);
  // The norm pending, as after a MatmulAddNorm.
  EXPECT_TRUE(n[1].pending_norm);
  EXPECT_FALSE(n[1].x8_out);
  EXPECT_EQ(n[2].norm_from, 1);
  EXPECT_EQ(n[2].x8_from, -1);
}

// A row wider than the pending norms' sums of squares cover: without the fused all-reduce the
// all-reduce stays apart and the add+norm makes the next GEMV's int8 blocks; with it one node
// computes the norm and makes them; where a later op reads the norm's output, a norm is inserted
// after a pending node. Exact mode fuses nothing.
TEST(StepPlan, TheAllReducesNormIsComputedWhereItCannotPend) {
  const RankLayer l;
  Rules r = rules();
  r.x8_ss_max_k = 128;
  const Plan apart = l.fused(r);
  ASSERT_EQ(ops(apart), (std::vector<Op>{Op::Matmul, Op::AllReduce, Op::AddNorm, Op::Matmul})) << apart.str();
  EXPECT_TRUE(apart.nodes()[2].x8_out);
  EXPECT_EQ(apart.nodes()[3].x8_from, 2);

  r.all_reduce_norm = true;
  const Plan wide = l.fused(r);
  ASSERT_EQ(ops(wide), (std::vector<Op>{Op::Matmul, Op::AllReduceAddNorm, Op::Matmul})) << wide.str();
  EXPECT_FALSE(wide.nodes()[1].pending_norm);
  EXPECT_TRUE(wide.nodes()[1].x8_out);
  EXPECT_EQ(wide.nodes()[2].x8_from, 1);
  EXPECT_EQ(wide.nodes()[2].norm_from, -1);

  Rules exact = rules(true);
  exact.all_reduce_norm = true;
  const Plan e = l.fused(exact);
  EXPECT_EQ(e.nodes()[1].op, Op::AllReduce) << e.str();

  Rules pend = rules();
  pend.all_reduce_norm = true;
  const Plan p = l.fused(pend, {binary(Op::Add, l.h, l.x)});  // reads h itself: the norm computed first
  ASSERT_EQ(ops(p), (std::vector<Op>{Op::Matmul, Op::AllReduceAddNorm, Op::Matmul, Op::RmsNorm, Op::Add})) << p.str();
  const auto& n = p.nodes();
  EXPECT_TRUE(n[1].pending_norm);
  EXPECT_EQ(n[2].norm_from, 1);
  EXPECT_EQ(n[3].x.data, l.x.data);
  EXPECT_EQ(n[3].out.data, l.h.data);
  EXPECT_EQ(n[3].w.data, n[1].norm2.data);
}

}  // namespace
}  // namespace lamina::plan
