// The CUDA backend's way of running a pass, played on the CPU backend: the ops are recorded into
// a step plan (backend/step_plan.h), fused with the CUDA backend's rules, and each fused node
// runs as the CPU ops it stands for. Two things the GPU reads instead of a tensor are emulated
// so that a wrong fusion decision changes the result:
//   - a pending norm (EmbedNorm, MatmulAddNorm, AllReduceAddNorm's pending_norm) is computed into a buffer of its own that only
//     the GEMVs fuse() marked as its takers read; its output tensor stays unwritten;
//   - a copy of a producer's output (x8_out, x16_out) is a snapshot taken when the producer ran,
//     and the consumers fuse() pointed at it read the snapshot.
// Right decisions give the plain CPU backend's logits bit for bit (tests/test_step_plan_model.cpp).
#pragma once

#include "backend/cpu/cpu_backend.h"
#include "backend/step_plan.h"

#include <cstring>
#include <tuple>
#include <vector>

namespace lamina::test {

class PlanOnCpu final : public Backend {
 public:
  explicit PlanOnCpu(CpuBackend& cpu) : cpu_(cpu) {}
  std::string name() const override { return "plan on " + cpu_.name(); }

  Weight load_weight(const GgufTensor& t, WeightUse use) override {
    if (tally) *tally += row_bytes(t.type, t.ne[0]) * size_t(t.nrows());
    return cpu_.load_weight(t, use);
  }
  // When set: the bytes of every weight a model's loader hands this backend are added to it.
  size_t* tally = nullptr;
  size_t memory_available() const override { return cpu_.memory_available(); }
  Tensor alloc(int64_t rows, int64_t cols) override { return cpu_.alloc(rows, cols); }
  void reset_scratch() override { flush({}, true), cpu_.reset_scratch(); }
  void init_kv_cache(int n_layer, int n_ctx, int kv_dim, GgmlType type) override { cpu_.init_kv_cache(n_layer, n_ctx, kv_dim, type); }
  size_t kv_cache_bytes() const override { return cpu_.kv_cache_bytes(); }
  int kv_rewind_floor() const override { return cpu_.kv_rewind_floor(); }
  void kv_restart() override { cpu_.kv_restart(); }
  void begin_forward(std::span<const int32_t> tokens, std::span<const int32_t> pos) override {
    flush({}, true);
    tokens_.assign(tokens.begin(), tokens.end()), pos_.assign(pos.begin(), pos.end());
    cpu_.begin_forward(tokens, pos);
  }
  bool takes_kv_layout() const override { return true; }
  void set_kv_layout(const KvLayout* layout) override {
    flush();
    cpu_.set_kv_layout(layout);
  }
  bool runs_experts() const override { return true; }
  void add_rows_scaled(Tensor dst, Tensor src, std::span<const int32_t> rows, std::span<const float> scale) override {
    flush();  // not a plan op: what was recorded runs first
    cpu_.add_rows_scaled(dst, src, rows, scale);
  }
  void read(Tensor t, float* host) override { flush(), cpu_.read(t, host); }
  void argmax_rows(Tensor logits, std::span<int32_t> out, std::span<float> max = {}, const KvLayout* = nullptr) override {
    flush({}, true), cpu_.argmax_rows(logits, out, max);
  }

  // The ops recorded as the CUDA backend records them (Plan's recording methods).
  void embed(const Weight& table, std::span<const int32_t>, Tensor out) override { plan_.embed(table, out); }
  void rmsnorm(Tensor x, const Weight& w, float eps, Tensor out) override { plan_.rmsnorm(x, w, eps, out); }
  void matmul(const Weight& w, Tensor x, Tensor out) override { plan_.matmul(w, x, out); }
  void matmul_add(const Weight& w, Tensor x, Tensor inout) override { plan_.matmul(w, x, inout, true); }
  void matmul_multi(std::span<const Weight* const> w, Tensor x, std::span<const Tensor> out) override {
    plan_.matmul_multi(w, x, out);
  }
  void add_bias(Tensor x, const Weight& b) override { plan_.add_bias(x, b); }
  void add(Tensor x, Tensor y) override { plan_.in_place(plan::Op::Add, x, y); }
  void rope(Tensor x, int n_heads, int head_dim, std::span<const int32_t>, const RopeParams& p) override {
    plan_.rope(x, n_heads, head_dim, p);
  }
  void attention(int layer, Tensor q, Tensor k, Tensor v, std::span<const int32_t> pos, const AttentionParams& p,
                 Tensor out) override {
    plan_.attention(layer, q, k, v, pos, p, out, false);
  }
  void copy_rows(Tensor src, std::span<const int32_t> rows, Tensor dst) override { plan_.copy_rows(src, rows, dst); }
  void swiglu(Tensor gate, Tensor up) override { plan_.in_place(plan::Op::Swiglu, gate, up); }
  void geglu(Tensor gate, Tensor up) override { plan_.in_place(plan::Op::Geglu, gate, up); }
  void scale(Tensor x, float s) override { plan_.scale(x, s); }
  void all_reduce_sum(Tensor t, Communicator& comm) override { plan_.all_reduce(t, comm); }

  int fused_nodes = 0, taken_norms = 0, copies_read = 0;  // what the plans did (the test asserts some happened)

 private:
  plan::Rules rules() const {
    plan::Rules r;
    r.int8_x = true, r.x8_ss_max_k = 4096, r.y8_counters = 16384;
    r.all_reduce_norm = true;  // as CudaBackend with --tp-all-reduce fused
    r.stacked = [](const Weight&) { return false; };
    r.repacked = [](const Weight&) { return false; };
    r.gemv_makes_y8 = [](const plan::Node&, bool) { return true; };
    r.head_norms_fused = [](const plan::Node&) { return true; };
    r.gemm_input = [](const Weight& w) { return w.type == GgmlType::F32 ? GgmlType::F32 : GgmlType::F16; };
    return r;
  }

  Tensor copy_of(Tensor t) {
    Tensor c = cpu_.alloc(t.rows, t.cols);
    std::memcpy(c.data, t.data, size_t(t.rows * t.cols) * sizeof(float));
    return c;
  }

  void flush(Tensor result = {}, bool pass_end = false) {
    if (plan_.empty()) return;
    plan::Plan p = std::move(plan_);
    plan_.clear();
    p.fuse(rules(), result, pass_end);
    const auto& v = p.nodes();
    std::vector<Tensor> made(v.size());  // a pending norm's output, or a snapshot of a copy
    for (size_t i = 0; i < v.size(); ++i) {
      const plan::Node& n = v[i];
      fused_nodes += n.op >= plan::Op::EmbedNorm;
      Tensor x = n.x;
      if (n.norm_from >= 0) x = made[size_t(n.norm_from)], ++taken_norms;
      else if (n.x8_from >= 0) x = made[size_t(n.x8_from)], ++copies_read;
      else if (n.x16_from >= 0) x = made[size_t(n.x16_from)], ++copies_read;
      run(n, x, made[i]);
    }
  }

  // Node n with input x (a pending norm's or a copy's buffer where fuse() said so).
  void run(const plan::Node& n, Tensor x, Tensor& made) {
    using plan::Op;
    const auto norm_into_own = [&](Tensor in) {  // a pending norm: its own buffer, out untouched
      made = cpu_.alloc(n.out.rows, n.out.cols);
      cpu_.rmsnorm(in, plan::pending_weight(n), n.eps, made);
    };
    switch (n.op) {
      case Op::Embed: cpu_.embed(n.w, tokens_, n.out); break;
      case Op::EmbedNorm: cpu_.embed(n.w, tokens_, n.x), norm_into_own(n.x); break;
      case Op::RmsNorm: cpu_.rmsnorm(x, n.w, n.eps, n.out); break;
      case Op::Matmul: n.accumulate ? cpu_.matmul_add(n.w, x, n.out) : cpu_.matmul(n.w, x, n.out); break;
      case Op::MatmulAddNorm: cpu_.matmul_add(n.w, x, n.y), norm_into_own(n.y); break;
      case Op::MatmulMulti: {
        std::vector<const Weight*> w;
        for (const Weight& wi : n.ws) w.push_back(&wi);
        cpu_.matmul_multi(w, x, n.outs);
        break;
      }
      case Op::GateUp: {
        const Tensor u = cpu_.alloc(x.rows, n.w2.rows);
        const Weight* w[] = {&n.w, &n.w2};
        const Tensor o[] = {n.out, u};
        cpu_.matmul_multi(w, x, o);
        n.glu == Glu::Gelu ? cpu_.geglu(n.out, u) : cpu_.swiglu(n.out, u);
        break;
      }
      case Op::Add: cpu_.add(n.x, n.y); break;
      case Op::AddBias: cpu_.add_bias(n.x, n.w); break;
      case Op::Scale: cpu_.scale(n.x, n.s); break;
      case Op::Swiglu: cpu_.swiglu(n.x, n.y); break;
      case Op::Geglu: cpu_.geglu(n.x, n.y); break;
      case Op::Rope: cpu_.rope(n.x, n.n_heads, n.head_dim, pos_, n.rope); break;
      case Op::Attention: cpu_.attention(n.layer, n.x, n.y, n.z, pos_, n.attn, n.out); break;
      case Op::RopeAttention: {
        if (n.norm) {  // each head of q and k normalised in place
          const int64_t hd = n.attn.head_dim;
          for (auto [t, w, heads] : {std::tuple{n.x, n.norm, n.attn.n_head}, std::tuple{n.y, n.norm2, n.attn.n_head_kv}}) {
            const Tensor h{t.data, t.rows * heads, hd}, tmp = cpu_.alloc(h.rows, hd);
            cpu_.rmsnorm(h, w, n.eps, tmp);
            std::memcpy(t.data, tmp.data, size_t(h.rows * hd) * sizeof(float));
          }
        }
        cpu_.rope(n.x, n.attn.n_head, n.attn.head_dim, pos_, n.rope);
        cpu_.rope(n.y, n.attn.n_head_kv, n.attn.head_dim, pos_, n.rope);
        cpu_.attention(n.layer, n.x, n.y, n.z, pos_, n.attn, n.out);
        break;
      }
      case Op::AddNorm: cpu_.add_norm(n.x, n.y, n.norm ? &n.norm : nullptr, n.norm2 ? &n.norm2 : nullptr, n.eps, n.out); break;
      case Op::CopyRows: cpu_.copy_rows(n.x, n.ids, n.out); break;
      case Op::AllReduce: cpu_.all_reduce_sum(n.x, *n.comm); break;
      case Op::AllReduceAddNorm:
        cpu_.all_reduce_sum(n.y, *n.comm);
        if (n.pending_norm) cpu_.add(n.x, n.y), norm_into_own(n.x);
        else cpu_.add_norm(n.x, n.y, nullptr, &n.norm2, n.eps, n.out);
        break;
    }
    if (n.x8_out || n.x16_out) {  // what a GEMV or GEMM reads later: the output as it is now
      const Tensor o = n.op == Op::Swiglu ? n.x : n.out;
      made = copy_of(o);
    }
  }

  CpuBackend& cpu_;
  plan::Plan plan_;
  std::vector<int32_t> tokens_, pos_;
};

}  // namespace lamina::test
