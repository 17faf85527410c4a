// CUDA backend: the whole forward pass on one GPU over the kernel library (kernels/).
//
// Memory: weights are uploaded once from the mapped GGUF (matmul weights of Q4_0/Q4_1/Q8_0/
// Q6_K repacked into the GEMV/GEMM plane layout on the device); the KV cache is preallocated;
// activations come from a device bump allocator kept across passes. When that allocator has to
// grow, recorded graphs are dropped (their addresses would be stale).
//
// Ops are recorded into the pass's step plan (backend/step_plan.h, cuda_ops.cpp) and launched by
// flush() once fused (cuda_exec.cpp). Matmuls: <= 8 rows go to gemv() (fused epilogues: residual
// add, SwiGLU of the gate/up pair, the next norm's int8 blocks); more rows go to gemm() with the
// input rounded to f16/bf16 (by the op that produced it where the plan says so) and beta = 1 for
// the residual add. Weight types without a GEMM variant run as GEMVs over 8-row slices.
//
// A decode step is captured as a CUDA graph once and replayed: token ids and positions are read
// from device buffers that the graph's first kernel fills from pinned host memory, and every
// kernel takes its sequence length from those positions, so the graph needs no update between
// steps. In a generation loop the next step's graph goes out before the host has the sampled id
// (run-ahead, cuda_graphs.cpp), so the host's turn between steps leaves no gap on the GPU.
#pragma once

#include "backend/backend.h"
#include "backend/cuda_options.h"
#include "backend/step_plan.h"
#include "backend/cuda/cuda_kv_memory.h"
#include "backend/cuda/graph_timing.h"
#include "kernels/common/status.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemv/gemv.h"
#include "kernels/ops/ops.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
typedef struct CUgraphExec_st* cudaGraphExec_t;

namespace lamina {

int cuda_device_count();

class CudaBackend final : public Backend {
 public:
  // exact: f32 activations for every matmul (GEMV variants that keep x in f32), for checks.
  CudaBackend(int device, bool exact = false, const CudaOptions& options = {});
  ~CudaBackend() override;
  std::string name() const override;

  Weight load_weight(const GgufTensor& t, WeightUse use) override;
  std::vector<Weight> load_stacked(std::span<const GgufTensor* const> ts) override;
  bool copies_weights() const override { return true; }  // (each upload completes before it returns)
  // Larger steps run the engine's GEMMs nearer the tensor cores' rate; 2048 gave the most at 128
  // users of 512 to 4096 (docs/benchmarks.md, thirty-sixth session).
  int engine_step_tokens() const override { return 2048; }
  size_t memory_available() const override;
  size_t memory_used() const override;
  Tensor alloc(int64_t rows, int64_t cols) override;
  void reset_scratch() override;
  void set_kv_windows(std::span<const int> window, int pass_rows) override;
  void init_kv_cache(int n_layer, int n_ctx, int kv_dim, GgmlType type) override;
  size_t kv_bytes_for(int n_ctx, int kv_dim, GgmlType type, std::span<const int> window, int pass_rows) const override;
  size_t kv_cache_bytes() const override;
  void kv_keep_rows(int window_rows) override;
  int kv_rewind_floor() const override { return kv_mem_.rewind_floor(); }

  void begin_forward(std::span<const int32_t> tokens, std::span<const int32_t> pos) override;
  bool takes_kv_layout() const override { return true; }
  bool runs_ahead() const override { return run_ahead_ && graphs_enabled_ && !profiling_; }
  void set_kv_layout(const KvLayout* layout) override;
  void copy_rows(Tensor src, std::span<const int32_t> rows, Tensor dst) override;
  bool runs_experts() const override { return true; }
  void add_rows_scaled(Tensor dst, Tensor src, std::span<const int32_t> rows, std::span<const float> scale) override;
  // A mixture of experts' rows by a route in device memory (cuda_experts.cpp; which passes:
  // backend/moe_policy.h).
  bool routes_experts(int64_t rows, int64_t n_expert, int64_t k) const override;
  void index_experts(std::span<const Weight> experts) override;
  void route_experts(Tensor logits, int k, bool renorm, Tensor route) override;
  void experts_matmul(std::span<const Weight> w, std::span<const Weight> w_up, Glu act, Tensor x, Tensor route,
                      Tensor out) override;
  void add_routed(Tensor y, Tensor d, Tensor route) override;
  void experts_ffn(std::span<const Weight> gate, std::span<const Weight> up, std::span<const Weight> down, Glu act, Tensor h,
                   Tensor route, Tensor x) override;
  void argmax_rows(Tensor logits, std::span<int32_t> out, std::span<float> max = {}, const KvLayout* next = nullptr) override;
  // The ops record nodes of the pass's step plan (backend/step_plan.h); flush() fuses and runs
  // them when the pass's results are wanted (read, sample, argmax_rows, the end of a capture).
  void embed(const Weight& table, std::span<const int32_t> tokens, Tensor out) override;
  void rmsnorm(Tensor x, const Weight& w, float eps, Tensor out) override;
  void matmul(const Weight& w, Tensor x, Tensor out) override;
  void matmul_multi(std::span<const Weight* const> w, Tensor x, std::span<const Tensor> out) override;
  void matmul_add(const Weight& w, Tensor x, Tensor inout) override;
  void add_bias(Tensor x, const Weight& b) override;
  void add(Tensor x, Tensor y) override;
  void rope(Tensor x, int n_heads, int head_dim, std::span<const int32_t> pos, const RopeParams& p) override;
  void attention(int layer, Tensor q, Tensor k, Tensor v, std::span<const int32_t> pos,
                 const AttentionParams& p, Tensor out) override;
  void swiglu(Tensor gate, Tensor up) override;
  void geglu(Tensor gate, Tensor up) override;
  void scale(Tensor x, float s) override;
  // Tensor parallelism: through NCCL on the GPUs when CudaOptions::nccl is set, else through
  // `comm` in host memory (cuda_collectives.cpp).
  void all_reduce_sum(Tensor t, Communicator& comm) override;
  void read(Tensor t, float* host) override;

  bool replay(uint64_t key, Tensor& out) override;
  bool capture_begin(uint64_t key) override;
  void capture_end(Tensor out) override;
  void capture_abort() override;

  int32_t sample(Tensor logits, const SamplerParams& p, std::span<const int32_t> penalty_ids, double u,
                 bool more = false) override;
  bool draws_on_device(const SamplerParams& p) const override;
  void sample_rows(Tensor logits, std::span<const RowDraw> draws, std::span<int32_t> out) override;
  void top_candidates(Tensor logits, std::span<const RowDraw> draws,
                      std::vector<std::vector<std::pair<float, int32_t>>>& out) override;

  void set_profiling(bool on) override;
  std::string profile_report() override;
  void profile_reset() override;

  cudaStream_t stream() const { return stream_; }
  // Runs the ops recorded so far and waits for them (before the host writes device memory that
  // they read or write, as tests do).
  void finish();
  // `lamina tune`: the GEMV and GEMM problems the step plans launch while a collector is set
  // (null: none), as launched.
  struct MatmulProblems {
    std::vector<kernels::GemvProblem> gemv;
    std::vector<kernels::GemmProblem> gemm;
  };
  void collect_matmul_problems(MatmulProblems* into) { problems_ = into; }
  void set_graphs(bool on) { graphs_enabled_ = on; }  // off: every pass runs eagerly (tests)
  int recorded_graphs() const;  // passes recorded so far (tests)
  // The engine's run-ahead (argmax_rows with next): steps launched ahead, and those the next
  // pass took (tests, --graph-timing).
  long run_ahead_launched() const { return ahead_rows_launched_; }
  long run_ahead_taken() const { return ahead_rows_taken_; }

 private:
  struct DevWeight {
    bool repacked = false;  // the GEMV/GEMM plane layout (gemv_repack) instead of GGUF blocks
    size_t bytes = 0;
    // Part of a stack (load_stacked): the whole matrix, this part's first row, the part index.
    // A part's Weight::data points at its first row in the quant plane (a key, not a matrix,
    // when repacked).
    const void* stack = nullptr;
    int64_t stack_rows = 0, row0 = 0;
    int part = 0;
  };
  struct Chunk {
    void* base = nullptr;
    size_t size = 0;
  };
  struct OpTimes {  // --profile: CUDA events around each op
    double ms = 0;
    double bytes = 0, flops = 0;
    int calls = 0;
  };

  void* dev_alloc(size_t bytes, const char* what);
  void* scratch_bytes(size_t bytes);
  void compact_scratch();
  void upload(void* dst, const void* src, size_t bytes);
  const DevWeight& info(const Weight& w) const;
  void upload_matrix(const GgufTensor& t, const void* host, int64_t rows, bool repack, void* dst);
  void check(const char* op, bool ok, const std::string& msg) const;
  // --profile
  void op_begin();
  void op_end(const std::string& name, double bytes, double flops);
  template <class F> kernels::Status try_op(const std::string& name, double bytes, double flops, F&& launch);
  template <class F> void run_op(const std::string& name, double bytes, double flops, F&& launch);

  // ---- the step plan (cuda_exec.cpp) ----
  // The pass's ops as recorded since the last flush; flush() fuses them (Plan::fuse, with this
  // backend's rules) and launches each node in order (into the graph being captured, if any).
  plan::Plan plan_;
  MatmulProblems* problems_ = nullptr;
  void record_in_place(plan::Op op, Tensor x, Tensor y);
  void flush_prompt_part();
  void record_matmul(const Weight& w, Tensor x, Tensor out, bool accumulate);
  plan::Rules fusion_rules() const;
  void flush(Tensor result = {}, bool pass_end = false);
  // What a node wrote beside its output while the plan ran, for the nodes that fuse() marked to
  // read it: int8 blocks (with their sums of squares for a pending norm), a 16-bit copy.
  struct Made {
    void* x8 = nullptr;
    double* ss = nullptr;
    const void* x16 = nullptr;
  };
  struct Run {
    const std::vector<plan::Node>& nodes;
    std::vector<Made> made;
  };
  void exec(const plan::Node& n, Run& r, Made& m);
  void exec_embed(const plan::Node& n, Made& m);
  void exec_rmsnorm(const plan::Node& n, Made& m);
  void exec_elementwise(const plan::Node& n, Made& m);
  // Matmuls (cuda_matmul.cpp). gemv_input: the fields of x a GEMV takes (its int8 blocks, or
  // the pending norm whose output x is); x16: the 16-bit copy of x a GEMM takes, or null.
  void exec_matmul(const plan::Node& n, Run& r, Made& m);
  void exec_matmul_multi(const plan::Node& n, Run& r);
  void exec_gate_up(const plan::Node& n, Run& r, Made& m);
  void exec_gate_up_gemm(const plan::Node& n, Run& r, Made& m);
  // This pass's norm and gated GEMM outputs written in 16 bits only (Node::out16_only: the plan
  // saw only GEMMs read them), with their copies: widened to f32 in place should a later plan or
  // the host read them after all; an entry ends when a node writes its tensor or a pass begins.
  std::vector<std::pair<Tensor, const void*>> only16_;
  void widen(const void* x16, Tensor f32);  // f32 = the 16-bit rows x16 (act16_)
  void widen_only16(Tensor t);
  void forget_written(const plan::Node& n, size_t end);
  bool takes_gated_gemm(const Weight& w) const;
  void gemv_input(const plan::Node& n, const Run& r, kernels::GemvProblem& p) const;
  const void* x16_input(const plan::Node& n, const Run& r) const;
  const void* convert(Tensor x, GgmlType type);  // x rounded to 16 bits in scratch
  // x16_only: x's f32 rows were never written (its producer made only the 16-bit copy x16).
  void run_matmul(const Weight& w, const DevWeight& d, Tensor x, Tensor out, bool accumulate,
                  const kernels::GemvProblem& base, const void* x16, bool x16_only = false);
  void by_f16(const Weight& w, const DevWeight& d, kernels::GemmProblem p, bool accumulate);
  // Scratch for out's int8 blocks where a GEMV reads them (fuse() marked n.x8_out), else null.
  void* x8_scratch(const plan::Node& n, Tensor out);
  bool whole_stack(std::span<const Weight* const> w, Weight& stacked, DevWeight& ds);
  bool gemm_into_parts(const Weight& w, const DevWeight& d, Tensor x, std::span<const Tensor> outs, const void* x16);
  kernels::GemmProblem gemm_of(const Weight& w, const DevWeight& d, Tensor x, GgmlType a_type, const void* a) const;
  // Attention: the layer's cache and kernel arguments (after checking the positions), and the
  // attention kernels over it (prefill or flash-decoding) once k and v are stored.
  struct LayerCache {
    kernels::AttentionArgs a;
    void* k = nullptr;
    void* v = nullptr;
  };
  LayerCache layer_cache(const plan::Node& n) const;
  // Attention nodes (cuda_attention.cpp): RoPE alone, the cache store and attention, the fused
  // RoPE + cache store (+ the decode attention in one kernel at short context).
  void exec_rope(const plan::Node& n);
  void exec_attention(const plan::Node& n, Made& m);
  void exec_rope_attention(const plan::Node& n, Made& m);
  void attend(const LayerCache& c, const plan::Node& n, Made& m);
  // The batching engine's paged cache (set_kv_layout, cuda_paged.cpp): the pass's layout, and
  // each row's cache slot and the sequences' block tables (kernels::PagedKv), staged with the
  // pass's inputs in pinned memory [slots | row_seq | tables], then, where the layout has a window
  // pool's tables, [window slots | window tables], and copied to the device by the pass's input
  // upload (a node of a recorded graph: the tables' stride is fixed by the length bucket, so that
  // a recorded pass always copies the same number of words).
  const KvLayout* layout_ = nullptr;
  struct PagedPass {
    const int32_t* slots = nullptr;  // device [rows]
    kernels::PagedKv kv;
    const int32_t* wslots = nullptr;  // the window layers' (the same as slots and kv without a window pool)
    kernels::PagedKv wkv;
    const int32_t* slots_for(int window) const { return window > 0 ? wslots : slots; }
    const kernels::PagedKv& kv_for(int window) const { return window > 0 ? wkv : kv; }
  } paged_;
  int32_t* host_paged_ = nullptr;  // pinned staging
  int32_t* dev_paged_ = nullptr;
  size_t paged_capacity_ = 0;      // words of each
  size_t paged_words_ = 0;         // staged for this pass (0: not a paged pass)
  void stage_paged(std::span<const int32_t> pos);
  const PagedPass& paged_pass();  // the staged tables, uploaded
  void attend_paged(const LayerCache& c, const plan::Node& n, Made& m);
  // The engine's decode rows through one kernel (attention_decode_rope_paged): at most this many
  // rows, and at most one wave of blocks (rows x query heads <= the SM count; Llama-3-8B on an
  // H200: 4 rows). Larger steps keep the two kernels (docs/benchmarks.md, forty-sixth session).
  static constexpr int64_t kPagedOneKernelRows = 8;
  bool paged_one_kernel(const plan::Node& n, const LayerCache& c, const kernels::RopeArgs& r, bool qk) const;
  void attend_paged_rows(const LayerCache& c, const plan::Node& n, int64_t r0, int64_t r1, void* out8, void* out16);
  void exec_copy_rows(const plan::Node& n);
  void exec_all_reduce(const plan::Node& n);
  void exec_all_reduce_add_norm(const plan::Node& n, Made& m);
  CudaOptions::AllReduce all_reduce_ = CudaOptions::AllReduce::Fused;  // CudaOptions::all_reduce
  ncclComm* nccl_ = nullptr;         // CudaOptions::nccl: this rank's NCCL communicator, or none
  const kernels::PeerAllReduce* peer_ = nullptr;  // CudaOptions::peer: the one-shot all-reduce, or none
  std::vector<float> host_reduce_;   // an all-reduce in host memory (no NCCL communicator)
  // (bytes, flops) of attention over the cache for the profile.
  std::pair<double, double> attention_cost(const plan::Node& n) const;
  kernels::RopeArgs rope_args(int n_heads, int head_dim, const RopeParams& p);
  size_t kv_elem_bytes() const { return kv_type_ == GgmlType::F16 ? 2 : 4; }
  std::string op_name(const char* kind, const Weight& w) const;
  void collect_profile();

  int device_ = 0;
  bool exact_ = false;
  std::string gpu_name_;
  int sm_count_ = 0;
  cudaStream_t stream_ = nullptr;
  std::unordered_map<const void*, DevWeight> weights_;
  std::vector<void*> owned_;  // weight and cache allocations
  // Each indexed expert stack's table of device pointers (index_experts), by its first expert's
  // address; false once a stack could not be indexed (then every stack takes the host route).
  std::unordered_map<const void*, const void* const*> expert_tables_;
  bool experts_routable_ = true;
  const void* const* expert_table(std::span<const Weight> experts) const;
  // Each indexed stack's table of tensor maps for the grouped GEMM (kernels gemm_experts_args), by
  // its first expert's address; false once a stack has none (then many rows leave the device).
  std::unordered_map<const void*, const void*> expert_gemm_tables_;
  bool experts_gemm_ = true;
  bool has_experts_gemm() const { return experts_gemm_ && !expert_gemm_tables_.empty(); }
  // The grouped GEMM's path (cuda_experts.cpp): a route's pairs sorted by expert, and the GEMMs over them.
  struct SortedPairs {
    int64_t rows = 0, k = 0, pairs = 0, max_tiles = 0;
    int32_t* slot_pair = nullptr;  // [pairs]
    int32_t* tiles = nullptr;      // [max_tiles][4]
    int32_t* count = nullptr;      // [1]
  };
  SortedPairs sort_pairs(Tensor route, int64_t n_expert);
  void grouped_gemm(std::span<const Weight> w, std::span<const Weight> w_up, Glu act, const SortedPairs& sp, const void* a16, void* c,
                    GgmlType c_type);
  bool experts_gemm_takes(int64_t rows, int64_t k, int64_t n_expert) const;
  size_t weight_bytes_ = 0;
  GgmlType act16_ = GgmlType::F16;  // the 16-bit type GEMM inputs are rounded to
  // Prompt-attention rung (CudaOptions::prefill_attention).
  kernels::PrefillAttention prefill_attention_ = kernels::PrefillAttention::V4Overlap;
  kernels::DecodeAttention decode_attention_ = kernels::DecodeAttention::Mma;
  // Decode attention at short context in one kernel, or always the split path (CudaOptions).
  bool single_pass_attention_ = true;
  // Scratch: chunks of device memory, bump-allocated; merged into one at reset after growth.
  std::vector<Chunk> scratch_;
  size_t scratch_used_ = 0;
  uint64_t generation_ = 0;  // bumped whenever scratch or input buffers move
  // Only quantised matrices are multiplied by dp4a GEMVs: the copies are made once one is loaded.
  bool int8_x_ = false;
  // Zeroed counters a GEMV uses to make its output's int8 copy in its own epilogue
  // (GemvProblem::y8_count): one per 32 output rows.
  static constexpr size_t kY8Counters = 16384;
  unsigned* y8_count_ = nullptr;
  // Inputs of the current pass (cuda_graphs.cpp): pinned host staging [tokens | positions |
  // stamp] and its device copy [tokens | positions]. begin_forward stages them; the pass's first
  // op that reads them uploads them first (upload_inputs: one kernel that reads the staging over
  // the bus), so a recorded graph holds the upload. That kernel then writes the stamp to seen_,
  // and the host stages again only once it has seen it (wait_staging_read).
  int32_t* host_in_ = nullptr;
  const int32_t* host_in_dev_ = nullptr;  // host_in_ as the device addresses it
  int32_t* dev_in_ = nullptr;
  size_t in_capacity_ = 0;
  int64_t n_in_ = 0;
  int32_t last_pos_ = 0;          // the pass's last position
  int32_t stamp_ = 0;             // the staging's stamp
  int32_t* seen_ = nullptr;       // pinned: the stamp of the staging the last upload read
  int32_t* seen_dev_ = nullptr;   // seen_ as the device addresses it
  bool inputs_staged_ = false;    // staged since the last upload
  bool upload_enqueued_ = false;  // an upload of the staging is on the stream
  void stage_inputs(std::span<const int32_t> tokens, std::span<const int32_t> pos);
  void wait_staging_read();
  void upload_inputs();
  // A one-row pass's lookup (the plan's EmbedNorm) reads the staging itself, with no upload kernel before
  // it (kernels' StagedInputs; CudaOptions::staged_lookup).
  bool lookup_upload_ = true;
  const int32_t* dev_tokens() { upload_inputs(); return dev_in_; }
  const int32_t* dev_pos() { upload_inputs(); return dev_in_ + in_capacity_; }
  // Decode run-ahead. sample(..., more) after a replayed decode step
  // enqueues the next step's graph before it waits for the sampled id: staged with the token -1,
  // which the upload kernel replaces by the id the sampling kernel left in dev_sampled_, and the
  // next position. begin_forward recognises that step when the caller asks for it (then replay()
  // has nothing to launch); any other pass simply follows it on the stream, and rewrites the
  // cache row it wrote before reading it.
  uint64_t last_graph_ = 0;      // the graph the current pass replayed or recorded (0: none)
  bool ahead_ = false;           // a step runs ahead, at ahead_pos_, its token the sampled id
  int32_t ahead_pos_ = 0;
  uint64_t ahead_graph_ = 0;
  bool ahead_hit_ = false;       // begin_forward took the step that runs ahead
  int32_t* dev_sampled_ = nullptr;  // device: the last sampled id
  cudaEvent_t sampled_ = nullptr;   // after the sampling kernel
  bool launch_ahead();
  void launch_graph(cudaGraphExec_t exec);
  // The engine's run-ahead (argmax_rows with a next layout): after a recorded pass of one row per
  // sequence, the same graph for every row's next position, its tokens the ids the argmax kernel
  // left in dev_sampled_ (staged as -1 - row). ahead_tokens_, ahead_pos_rows_, ahead_row_seq_ and
  // ahead_tables_ (the main tables, then any window pool's) keep what it was staged with, which
  // the next pass must have to take it.
  static constexpr int64_t kSampledRows = 1024;  // dev_sampled_ and host_ids_: ids of up to this many rows
  bool ahead_rows_ = false;  // with ahead_: the step running ahead is the engine's, of n_in_ rows
  std::vector<int32_t> ahead_tokens_, ahead_pos_rows_, ahead_row_seq_;
  std::vector<std::vector<int32_t>> ahead_tables_;
  long ahead_rows_launched_ = 0, ahead_rows_taken_ = 0;
  int32_t* host_ids_ = nullptr;  // pinned: argmax_rows' ids
  bool launch_ahead_rows(const KvLayout& next);
  bool ahead_rows_match(std::span<const int32_t> tokens, std::span<const int32_t> pos) const;
  // KV cache
  GgmlType kv_type_ = GgmlType::F16;
  int kv_layers_ = 0, kv_ctx_ = 0, kv_dim_ = 0;
  // The pass's last position + 1, rounded up to a power of two >= kMinBucket. Decode in the
  // smallest bucket takes the one-kernel attention (attention_decode_rope).
  static constexpr int64_t kMinBucket = 256;
  int64_t kv_bucket_ = kMinBucket;
  int decode_splits(const kernels::AttentionArgs& a, int64_t rows) const;
  // The most flash-decoding splits a row takes at the fewest blocks: 16 positions of the length
  // bucket and 64 of the cache a split (decode_splits' base, attend_paged's cap).
  int64_t split_cap() const { return std::max<int64_t>(1, std::min<int64_t>(kv_ctx_ / 64, kv_bucket_ / 16)); }
  uint64_t graph_key(uint64_t key) const;
  // The cache's rows (the window layers' rings, cuda_kv_memory.h) and what set_kv_windows told.
  CudaKvMemory kv_mem_;
  std::vector<int> kv_windows_;
  int kv_pass_rows_ = 512;
  void* gemm_work_ = nullptr;
  size_t gemm_work_bytes_ = 0;
  std::unordered_map<const float*, float*> freq_factors_;  // host Llama 3 factors -> device copy
  // Sampling
  float* sample_scratch_ = nullptr;
  // sample_rows' and top_candidates' draws on the device: their arguments, penalty ids and work rows.
  struct StagedDraws {
    const kernels::SampleRowArgs* args = nullptr;
    const int32_t* ids = nullptr;
    float* work = nullptr;
  };
  StagedDraws stage_draws(Tensor logits, std::span<const RowDraw> draws);
  int32_t* sample_ids_ = nullptr;  // device: penalty ids
  // Pinned, two words: the sampled id of a pass at position p is in host_id_[p & 1] (written by
  // the sampling kernel or the logits GEMV), so that the step that runs ahead, whose logits GEMV
  // may complete before the host reads, writes the other word.
  int32_t* host_id_ = nullptr;
  int32_t* host_id_dev_ = nullptr;  // host_id_ as the device addresses it
  // The greedy id made by the logits GEMV (the plan's argmax; CudaOptions::fused_argmax): it writes
  // the id where the sampling kernel would (host_id_, dev_sampled_), and sample() launches
  // nothing for a greedy draw without penalty from argmax_of_, the logits row it was made from
  // in this pass (null when none).
  bool fused_argmax_ = true;
  unsigned long long* argmax_words_ = nullptr;  // device: the GEMV's key and count, zero between launches
  const float* argmax_of_ = nullptr;
  // Graphs
  struct Recorded {
    cudaGraphExec_t exec = nullptr;
    uint64_t generation = 0;
    int seen = 0;  // passes seen for this key; recorded on the second (the first warms up)
    const float* argmax_of = nullptr;  // the logits row whose greedy id the graph makes
    Tensor out;                        // where the pass leaves its result
    size_t scratch_used = 0;           // the scratch the pass takes (ops after a replay allocate past it)
  };
  std::map<uint64_t, Recorded> graphs_;
  // A replayed pass (`key`, recorded as r) becomes the current one: its result, scratch mark and
  // the logits row its greedy id comes from.
  void adopt_recorded(uint64_t key, const Recorded& r, Tensor& out);
  long graphs_recorded_ = 0, graphs_dropped_ = 0;  // reported with --graph-timing
  uint64_t capturing_ = 0;
  bool graphs_enabled_ = true;
  bool run_ahead_ = true;  // CudaOptions::run_ahead
  bool plan_parts_ = true;  // CudaOptions::prompt_plan_parts
  bool paged_prefill_ = true;  // CudaOptions::paged_prefill
  bool gated_gemm_ = true;  // CudaOptions::gated_gemm
  int moe_pairs_per_expert_ = -1;  // CudaOptions::moe_pairs_per_expert
  CudaOptions::MoeDownLaunch moe_down_launch_ = CudaOptions::MoeDownLaunch::Rows256;
  int gemv_max_rows_ = 2;  // CudaOptions::gemv_max_rows
  bool window_ring_ = true;  // CudaOptions::window_ring
  std::unique_ptr<GraphTiming> graph_timing_;  // CudaOptions::graph_timing
  // Profile
  bool profiling_ = false;
  struct Pending {
    std::string name;
    double bytes, flops;
  };
  std::vector<cudaEvent_t> event_pool_;  // [2i], [2i+1]: start and stop of pending_[i]
  std::vector<Pending> pending_;
  std::map<std::string, OpTimes> profile_;
  std::map<int64_t, std::string> plans_;  // the last fused step plan of a pass of so many rows
  double copy_gbps_ = 0, gemm_tflops_ = 0;  // rooflines measured when profiling is switched on
};

}  // namespace lamina
