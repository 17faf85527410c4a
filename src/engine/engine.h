// The batching engine (issue #30): many sequences at once over one model. Requests are
// submitted from any thread; each step runs one forward over every running sequence's next
// token and, within the step's token budget, chunks of waiting prompts (engine/scheduler.h), on
// the paged KV cache (engine/kv_blocks.h) with prefix sharing. Every request samples with its own
// sampler (its own seed) and streams its tokens to a callback; it can be cancelled at any time.
//
// One thread drives the device: either the caller, through step(), or the engine's own thread
// (start() / stop()). Callbacks run on the driving thread.
//
// The engine runs on the session's model, backend and KV cache (the cache's positions become
// blocks); the backend must take paged layouts (Backend::takes_kv_layout: the CPU backend today).
#pragma once

#include "backend/sampling_params.h"
#include "engine/kv_blocks.h"
#include "engine/scheduler.h"
#include "engine/session.h"

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace lamina {

class Sampler;

// What a request may generate (JSON mode): the engine draws only tokens the constraint allows,
// hands it each token taken, and ends the request (Finish::Stop) once it is complete. One per
// sequence: Request::constraint makes it.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  virtual bool allows(int32_t token) const = 0;
  virtual void take(int32_t token) = 0;
  virtual bool complete() const = 0;
};

struct Request {
  std::vector<int32_t> prompt;
  SamplerParams sampling;       // with its own seed
  int max_tokens = 128;         // generated tokens at most
  std::vector<int32_t> stop;    // ids that end the generation (sent, then done)
  int logprobs = -1;            // >= 0: each token's log probability and this many alternatives'
  // Added to the named tokens' logits before each draw (OpenAI's logit_bias; the log
  // probabilities stay the model's).
  std::vector<std::pair<int32_t, float>> logit_bias;
  std::function<std::unique_ptr<TokenConstraint>()> constraint;  // optional: one per sequence
};

// A token's log probability under the model: the log-softmax of its logits row (before the
// sampler's penalties and temperature), and the `Request::logprobs` most probable tokens' (the
// lower id first among equals).
struct TokenLogprobs {
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};
TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int top);

enum class Finish { None, Stop, Length, Cancelled, Error };

// One streamed token (token < 0 when a request ends without one: cancelled, or an error).
struct TokenEvent {
  int64_t id = 0;
  int32_t token = -1;
  Finish finish = Finish::None;  // set on the request's last event
  std::string error;             // with Finish::Error: what failed
  std::optional<TokenLogprobs> logprobs;  // with Request::logprobs >= 0 and a token
};
using TokenCallback = std::function<void(const TokenEvent&)>;

struct EngineOptions {
  int block_tokens = 16;     // positions per KV block
  bool prefix_cache = true;  // share the blocks of prompt prefixes computed before
  // Sliding-window layers (Gemma 3's local layers) take their blocks from a pool of their own
  // (KvWindowPool), as large as every running sequence's windows and a step's prompt chunks need:
  // their cache holds that many rows instead of the whole context. false: they use the main
  // blocks (every row of every layer kept).
  bool window_pool = true;
  // Seeded draws in backend memory where it follows the host Sampler's rules (Backend::
  // draws_on_device): no logits row read (on several GPUs each rank ranks its share's best tokens
  // and the host draws from them merged). false: every sampled row read and drawn on the host.
  bool device_sampling = true;
  SchedulerOptions schedule;
};

struct EngineStats {
  int64_t steps = 0, step_tokens = 0;   // forwards run and the rows they took
  int64_t prompt_tokens = 0;            // prompt tokens submitted
  int64_t cached_tokens = 0;            // of those, found in the prefix cache (not computed)
  int64_t generated = 0, preemptions = 0;
  int kv_used_blocks = 0, kv_blocks = 0;  // after the last step
  int kv_window_used_blocks = 0, kv_window_blocks = 0;  // the window pool's (0 without one)
  int running = 0, waiting = 0;           // sequences, after the last step
};

class Engine {
 public:
  // Takes over the session's model and cache (the session must not be used meanwhile).
  Engine(Session& session, EngineOptions o);
  ~Engine();

  // Thread-safe. Throws lamina::Error for a request that can never run (empty prompt, ids
  // outside the vocabulary, longer than the cache or the model's context).
  int64_t submit(Request r, TokenCallback cb);
  // Thread-safe: the request ends with Finish::Cancelled (false if it had ended already).
  bool cancel(int64_t id);

  // One step on the calling thread; false when there was nothing to run.
  bool step();
  // Steps until no request is waiting or running (the calling thread drives).
  void run_until_idle();
  // The engine's own driving thread, sleeping while idle.
  void start();
  void stop();

  EngineStats stats() const;
  const KvBlockManager& kv() const { return kv_; }
  int capacity_tokens() const { return kv_.n_blocks() * kv_.block_tokens(); }
  int step_tokens() const { return sched_.step_tokens(); }  // each step's token budget

 private:
  struct Live {
    Request req;
    TokenCallback cb;
    std::unique_ptr<Sampler> sampler;
    std::unique_ptr<TokenConstraint> constraint;
    int generated = 0;
  };
  // What a step's sampling rows give the host: a greedy id (>= 0) or a logits row.
  struct SampledRows {
    std::vector<int32_t> greedy;  // per row: the backend's argmax or draw, or -1
    std::vector<int64_t> at;      // per row: its row in host, or -1
    std::vector<float> host;
    const float* rows = nullptr;  // the rows where they are not in host (the session's, with several ranks)
    int64_t vocab = 0;
    std::span<const float> logits(size_t r) const { return {(rows ? rows : host.data()) + at[r] * vocab, size_t(vocab)}; }
  };
  SampledRows sampled_rows(const Step& st, Tensor out, const KvLayout* next);
  bool next_layout(const Step& st, std::span<const int32_t> row_seq, KvLayout& next);
  SampledRows ranks_rows(const Step& st, std::span<const int32_t> tokens, std::span<const int32_t> pos,
                         const KvLayout& layout, std::span<const int32_t> pick);
  void admit_pending();  // moves submitted requests and cancellations into the scheduler
  void end(int64_t id, int32_t token, Finish f, const std::string& error = {}, std::optional<TokenLogprobs> lp = {});
  // Whether a sequence's draw is the backend's argmax (plain greedy, no log probabilities, logit
  // bias or constraint asked).
  bool device_greedy(const Live& l) const;
  bool device_draw(const Live& l) const;
  // The picked rows (their sequences: ids) that are not plain greedy and that the backend draws
  // (device_draw): each with its request's parameters and penalty ids, and, where the backend
  // makes the whole draw (with_uniform), the request's next uniform.
  struct DeviceDraws {
    std::vector<Backend::RowDraw> draws;
    std::vector<std::vector<int32_t>> penalties;  // (the draws' penalty_ids point here)
    std::vector<size_t> rows;                     // the draws' rows
  };
  void device_draws(std::span<const Scheduler::SeqId> ids, std::span<const uint8_t> plain, bool with_uniform,
                    DeviceDraws& out);
  int32_t constrained_draw(Live& l, std::vector<float>& row, std::span<const int32_t> history);

  Session& session_;
  EngineOptions opt_;
  KvBlockManager kv_;
  Scheduler sched_;
  std::map<int64_t, Live> live_;

  mutable std::mutex mu_;  // guards the pending lists, next_id_, stats_ and the thread's state
  std::condition_variable wake_;
  std::vector<std::pair<int64_t, Live>> submitted_;
  std::vector<int64_t> cancelled_;
  std::set<int64_t> open_;  // submitted and not ended
  int64_t next_id_ = 1;
  EngineStats stats_;
  std::thread driver_;
  bool stopping_ = false;
};

}  // namespace lamina
