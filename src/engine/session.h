// A session: one model, its tokenizer, a backend and a KV cache holding one conversation.
// This is the engine's public entry point (load a model, feed tokens, read logits).
#pragma once

#include "backend/backend.h"
#include "engine/backend_factory.h"
#include "engine/rank_workers.h"
#include "core/units.h"
#include "format/gguf.h"
#include "format/tokenizer.h"
#include "model/llama.h"

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace lamina {

struct SessionOptions {
  std::string model_path;
  int n_ctx = 0;            // 0: the model's training context, capped to fit memory
  int n_threads = 0;        // 0: all cores
  int n_batch = 512;        // prompt tokens per forward pass
  GgmlType kv_type = GgmlType::F16;
  bool exact_matmul = false;  // f32 activations for quantised weights (see CpuBackend)
  std::string device = "auto";  // "cuda", "cpu", or "auto" (cuda when a GPU is present)
  std::string cpu_isa = "auto"; // CPU dot-product kernels: "auto" or "scalar"
  bool profile = false;         // per-op timing in the backend (Backend::profile_report)
  CudaOptions cuda;             // the CUDA backend's choices (defaults: the fastest measured paths)
  // Ranks each layer splits over (issue #35): GPUs 0 .. N-1 through NCCL on CUDA, or thread ranks
  // on the CPU (each with n_threads / N threads). 1: the whole model on one device.
  int tensor_parallel = 1;
  // With tensor parallelism on CUDA: all-reduces of up to this many residual rows take the peer
  // kernel over NVLink, larger ones NCCL (the peer buffers hold this many rows).
  int tp_peer_rows = 8;
};

class Sampler;

class Session {
 public:
  explicit Session(const SessionOptions& o);  // throws lamina::Error
  ~Session();

  const Tokenizer& tokenizer() const { return tok_; }
  const ModelConfig& config() const { return model_->config(); }
  const GgufFile& file() const { return file_; }
  // Rank 0's backend with tensor parallelism (its GPU's share of the memory and time).
  Backend& backend() { return *backend_; }
  int tensor_parallel() const { return opt_.tensor_parallel; }
  std::string backend_name() const;  // the backend's name, "xN" with N ranks
  LlamaModel& model() { return *model_; }
  int n_ctx() const { return model_->n_ctx(); }
  int n_past() const { return int(history_.size()); }
  const std::vector<int32_t>& history() const { return history_; }
  // Every rank's cache keeps every row of every global layer, and the first window_rows of every
  // sliding-window layer, from now on (the batching engine's pages, shared between sequences, in
  // place of the window layers' give-back; window_rows: its window pool's, or n_ctx).
  void keep_kv_rows(int window_rows);

  // Appends tokens to the conversation (in batches of n_batch) and returns the logits of the
  // last one (all_logits: of every token, [n][n_vocab]). Throws if the context would overflow.
  const std::vector<float>& eval(std::span<const int32_t> tokens, bool all_logits = false);
  // Appends tokens and samples the next one from the last token's logits — in backend memory
  // when the backend can (the host then waits only for the id), else on the host. more: the
  // caller will most likely pass the sampled id back next (a generation loop that goes on); the
  // backend may then start that step before the host has the id (Backend::sample).
  int32_t eval_sample(std::span<const int32_t> tokens, Sampler& sampler, bool more = false);
  void reset();  // forget the conversation (the cache is overwritten)
  // Fails in one line when forwards of `rows` rows (more than n_batch: the batching engine's
  // steps) would not find their activations' memory free on the backend.
  void check_activation_room(int rows);
  // The batching engine's pass with several ranks (LlamaModel::forward_batch on every rank, each
  // with its KV heads of the same paged blocks): greedy[r] = picked row r's greedy id, and the
  // logits of the picked rows not flagged greedy_only in host memory ([pick.size()][n_vocab];
  // the flagged rows' logits are not written: their ids come from each rank's device), valid until
  // the next pass. draws (rows of pick, not flagged; the backend draws_on_device their
  // parameters; penalty ids of the whole vocabulary): their rows are not read either; best[i] gets
  // draw i's best tokens over the ranks, each rank's from its device, merged
  // (Sampler::sample_sorted's input).
  const std::vector<float>& forward_batch_ranks(std::span<const int32_t> tokens, std::span<const int32_t> pos,
                                                const KvLayout& layout, std::span<const int32_t> pick,
                                                std::span<const uint8_t> greedy_only, std::vector<int32_t>& greedy,
                                                std::span<const Backend::RowDraw> draws = {},
                                                std::vector<std::vector<TpPick>>* best = nullptr);
  // Keeps the first n_past tokens of the conversation (e.g. to re-run a prompt); positions are
  // reused. Below the backend's kv_rewind_floor (its sliding-window layers gave those positions'
  // cache back) the kept tokens are evaluated again from the start.
  void rewind(int n_past);

 private:
  SessionOptions opt_;
  GgufFile file_;
  Tokenizer tok_;
  // Tensor parallelism: the devices' group and the ranks' host collectives (declared first: they
  // go last), rank 0's member (rank 0 is backend_ and model_, on this thread), ranks 1 .. N-1
  // (declared last: they go first).
  std::unique_ptr<DeviceGroup> devices_;
  std::unique_ptr<ThreadGroup> group_;
  std::unique_ptr<Communicator> comm0_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<LlamaModel> model_;
  std::vector<int32_t> history_;
  std::vector<float> logits_, chunk_;
  // Each rank's host copy of its logits, and the greedy pick (logit, id) of its share of the
  // last row (the greedy draw without penalty merges these instead of scanning the vocabulary).
  std::vector<TpPlan> rank_plans_;  // each rank's share (made once, before any rank loads)
  std::vector<std::vector<float>> rank_logits_;
  std::vector<std::vector<TpPick>> rank_best_;  // [rank][row]
  std::vector<std::vector<std::vector<TpPick>>> rank_cands_;  // [rank][draw]: its share's best tokens
  // --graph-timing with several ranks: rank 0's host time per pass in the forward call (graph
  // launch or eager launches), in the read (waiting for its GPU), and waiting for the other ranks.
  struct RankTiming {
    double forward_us = 0, read_us = 0, others_us = 0;
    long passes = 0;
  } rank_timing_;
  std::unique_ptr<RankWorkers> workers_;

  // Makes rank `rank`'s backend and model (the whole model with one rank) and checks that they
  // fit; n_ctx 0 sizes the cache from the free memory. Returns the context it made.
  int make_rank(int rank, Rank& r, int n_ctx);
  // Runs tokens after the history in batches of n_batch (pass per batch: its tokens, positions
  // and the logits it must give), extending the history; throws if they do not fit the context.
  using BatchPass = std::function<void(std::span<const int32_t>, std::span<const int32_t>, LlamaModel::Logits)>;
  void in_batches(std::span<const int32_t> tokens, bool all_logits, const BatchPass& pass);
  Tensor eval_device(std::span<const int32_t> tokens, bool all_logits);
  // eval with several ranks: every rank runs each batch; logits_ gets the whole vocabulary's
  // logits (every row when all_logits, else the last), each rank writing its rows of it. greedy
  // (the last row only): the row is not read, only its pick made (ranks_greedy(0)).
  void eval_ranks(std::span<const int32_t> tokens, bool all_logits, bool greedy = false);
  // Runs fwd on every rank at once (they meet in the pass's all-reduces); each rank then writes
  // the last `rows` rows of its logits, its columns of the vocabulary, into logits_ from row
  // base_row on (disjoint ranges: no two ranks write one element), and its pick of each row
  // into rank_best_[rank][row]. Rows flagged in greedy_only (one flag per row, or none) are not
  // read: their picks come from the backend's argmax_rows; nor are the rows of draws: each rank
  // puts its share's best tokens of each draw into rank_cands_[rank][draw] (global ids).
  void run_ranks(const std::function<Tensor(LlamaModel&)>& fwd, int64_t rows, int64_t base_row,
                 std::span<const uint8_t> greedy_only = {}, std::span<const Backend::RowDraw> draws = {});
  // Row r's greedy id over the ranks' picks: the largest logit, the lowest id among equal ones.
  int32_t ranks_greedy(int64_t row) const;
  // f on every rank's backend (each holds its share of every layer's cache), rank 0's here and
  // the others' on their threads, at once; returns when all have run it.
  void each_backend(const std::function<void(Backend&)>& f);
};

// The backend options a session's options ask for.
BackendOptions backend_options(const SessionOptions& o);

// Bytes of KV cache one position needs.
size_t kv_bytes_per_position(const ModelConfig& c, GgmlType kv_type);

// Bytes of weights a backend holds for file f: the whole model's (plan null) or a rank's shares
// (tp_held_shape), Q5_0 and IQ4_NL matrices counted as the Q8_0 the CPU and CUDA's exact mode hold
// them as (CUDA's fast path holds their own bytes: the figure is then an upper bound), tied
// embeddings twice (lookup table and matmul). The figure the memory check compares.
size_t model_weight_bytes(const GgufFile& f, const ModelConfig& c, const TpPlan* plan);

}  // namespace lamina
