#include "engine/engine.h"

#include "core/error.h"
#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <numeric>

namespace lamina {
namespace {

// A draw that is the row's argmax: temperature 0 and no repetition penalty.

int n_blocks_for(Session& s, const EngineOptions& o) {
  if (o.block_tokens < 1) fail("engine: blocks of {} tokens", o.block_tokens);
  const int n = s.n_ctx() / o.block_tokens;
  if (n < 1) fail("engine: a cache of {} positions holds no block of {}", s.n_ctx(), o.block_tokens);
  return n;
}

SchedulerOptions schedule_for(Session& s, SchedulerOptions o) {
  if (o.max_step_tokens == 0) o.max_step_tokens = std::max(s.backend().engine_step_tokens(), o.max_running);
  return o;
}

// The window layers' pool: between steps a running sequence holds the blocks of its last window
// (ceil((window - 1) / block) + 1) and its current block; a step's prompt chunks add their
// positions' blocks, one more each for a chunk that starts inside a block. So many blocks always
// let some sequence go on (Scheduler::next_step preempts otherwise). None when that is not fewer
// than the main pool's, or the model has no window layer.
KvWindowPool window_pool_for(Session& s, const EngineOptions& o) {
  const std::vector<int> windows = s.config().layer_windows();
  const int window = windows.empty() ? 0 : *std::max_element(windows.begin(), windows.end());
  if (!o.window_pool || window <= 0) return {};
  const int64_t bt = o.block_tokens, blocks = n_blocks_for(s, o);
  const int64_t running = std::min<int64_t>(o.schedule.max_running, blocks);
  const int64_t step = schedule_for(s, o.schedule).max_step_tokens;
  const int64_t need = running * ((window - 1 + bt - 1) / bt + 2) + (step + bt - 1) / bt + running;
  if (need >= blocks) return {};
  return {window, int(need)};
}

}  // namespace

Engine::Engine(Session& session, EngineOptions o)
    : session_(session), opt_(o), kv_(n_blocks_for(session, o), o.block_tokens, o.prefix_cache, window_pool_for(session, o)),
      sched_(kv_, schedule_for(session, o.schedule)) {
  if (!session.backend().takes_kv_layout())
    fail("the {} backend does not run several sequences at once yet (use -d cpu)", session.backend().name());
  session.keep_kv_rows(kv_.windowed() ? kv_.window_blocks() * kv_.block_tokens() : session.n_ctx());
  session.check_activation_room(sched_.step_tokens());
  stats_.kv_blocks = kv_.n_blocks();
  stats_.kv_window_blocks = kv_.window_blocks();
}

Engine::~Engine() { stop(); }

int64_t Engine::submit(Request r, TokenCallback cb) {
  if (r.prompt.empty()) fail("request: empty prompt");
  if (r.max_tokens < 1) fail("request: max_tokens must be at least 1, got {}", r.max_tokens);
  const uint32_t vocab = session_.config().n_vocab;
  for (int32_t t : r.prompt)
    if (t < 0 || uint32_t(t) >= vocab) fail("request: token id {} is outside the vocabulary of {}", t, vocab);
  for (const auto& [t, b] : r.logit_bias)
    if (t < 0 || uint32_t(t) >= vocab || !std::isfinite(b))
      fail("request: logit bias {} for token id {} (the vocabulary has {})", b, t, vocab);
  const size_t need = r.prompt.size() + size_t(r.max_tokens);
  if (need > size_t(capacity_tokens()))
    fail("request: {} prompt tokens and {} to generate do not fit the KV cache of {} positions", r.prompt.size(),
         r.max_tokens, capacity_tokens());
  std::lock_guard lk(mu_);
  const int64_t id = next_id_++;
  stats_.prompt_tokens += int64_t(r.prompt.size());
  Live l;
  l.sampler = std::make_unique<Sampler>(r.sampling);
  if (r.constraint) l.constraint = r.constraint();
  l.req = std::move(r);
  l.cb = std::move(cb);
  submitted_.emplace_back(id, std::move(l));
  open_.insert(id);
  wake_.notify_one();
  return id;
}

bool Engine::cancel(int64_t id) {
  std::lock_guard lk(mu_);
  if (!open_.count(id)) return false;
  cancelled_.push_back(id);
  wake_.notify_one();
  return true;
}

void Engine::admit_pending() {
  std::vector<std::pair<int64_t, Live>> sub;
  std::vector<int64_t> can;
  {
    std::lock_guard lk(mu_);
    sub.swap(submitted_);
    can.swap(cancelled_);
  }
  for (auto& [id, l] : sub) {
    sched_.submit(id, l.req.prompt);
    live_.emplace(id, std::move(l));
  }
  for (int64_t id : can) {
    if (!live_.count(id)) continue;  // ended meanwhile
    sched_.cancel(id);
    end(id, -1, Finish::Cancelled);
  }
}

TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int top) {
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float v : logits) sum += std::exp(double(v) - mx);
  const double lse = double(mx) + std::log(sum);
  TokenLogprobs lp;
  lp.logprob = float(double(logits[size_t(token)]) - lse);
  if (top <= 0) return lp;  // (no vocabulary-sized id list for the token alone)
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  const size_t k = std::min(size_t(top), ids.size());
  std::partial_sort(ids.begin(), ids.begin() + long(k), ids.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  });
  for (size_t i = 0; i < k; ++i) lp.top.emplace_back(ids[i], float(double(logits[size_t(ids[i])]) - lse));
  return lp;
}

// A draw among the tokens the sequence's constraint allows: a few draws are tried (each refused
// token leaves the row), then the row keeps only the allowed tokens; -1 when it allows none (the
// request then ends without a token).
int32_t Engine::constrained_draw(Live& l, std::vector<float>& row, std::span<const int32_t> history) {
  constexpr float kOut = -std::numeric_limits<float>::infinity();
  for (int tries = 0; tries < 8; ++tries) {
    const int32_t t = l.sampler->sample(row, history);
    if (l.constraint->allows(t)) return l.constraint->take(t), t;
    row[size_t(t)] = kOut;
  }
  bool any = false;
  for (size_t i = 0; i < row.size(); ++i) {
    if (row[i] == kOut) continue;
    if (l.constraint->allows(int32_t(i))) any = true;
    else row[i] = kOut;
  }
  if (!any) return -1;
  const int32_t t = l.sampler->sample(row, history);
  l.constraint->take(t);
  return t;
}

bool Engine::device_greedy(const Live& l) const {
  return l.sampler->params().plain_greedy() && l.req.logprobs < 0 && l.req.logit_bias.empty() && !l.constraint;
}

// A draw the backend makes in its own memory (no host row: no log probabilities, bias or
// constraint), by the host Sampler's rules, with the request's own uniform.
bool Engine::device_draw(const Live& l) const {
  return opt_.device_sampling && l.req.logprobs < 0 && l.req.logit_bias.empty() && !l.constraint &&
         session_.backend().draws_on_device(l.sampler->params());
}

void Engine::device_draws(std::span<const Scheduler::SeqId> ids, std::span<const uint8_t> plain, bool with_uniform,
                          DeviceDraws& out) {
  out.penalties.reserve(ids.size());  // (no reallocation: the draws' spans stay valid)
  for (size_t r = 0; r < ids.size(); ++r) {
    Live& l = live_.at(ids[r]);
    if (plain[r] || !device_draw(l)) continue;
    const SamplerParams& p = l.sampler->params();
    out.penalties.push_back(l.sampler->penalty_ids(sched_.tokens(ids[r])));
    const double u = with_uniform && p.temperature > 0.f ? l.sampler->next_uniform() : 0.0;
    out.draws.push_back({int64_t(r), &p, out.penalties.back(), u});
    out.rows.push_back(r);
  }
}

void Engine::end(int64_t id, int32_t token, Finish f, const std::string& error, std::optional<TokenLogprobs> lp) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  const TokenCallback cb = std::move(it->second.cb);
  live_.erase(it);
  {
    std::lock_guard lk(mu_);
    open_.erase(id);
  }
  if (cb) cb(TokenEvent{id, token, f, error, std::move(lp)});
}

bool Engine::step() {
  admit_pending();
  const Step st = sched_.next_step();
  if (st.seqs.empty()) {  // cancellations may still have freed blocks
    std::lock_guard lk(mu_);
    stats_.kv_used_blocks = kv_.used_blocks();
    stats_.kv_window_used_blocks = kv_.window_used_blocks();
    stats_.running = int(sched_.running()), stats_.waiting = int(sched_.waiting());
    return false;
  }
  // The pass: each sequence's rows in turn, with its blocks; the logits of the rows that sample.
  std::vector<int32_t> tokens, pos, row_seq, pick;
  KvLayout layout;
  layout.block_tokens = kv_.block_tokens();
  for (size_t i = 0; i < st.seqs.size(); ++i) {
    const StepSeq& s = st.seqs[i];
    const std::vector<int32_t>& all = sched_.tokens(s.id);
    for (int j = 0; j < s.n; ++j) {
      tokens.push_back(all[size_t(s.pos + j)]);
      pos.push_back(s.pos + j);
      row_seq.push_back(int32_t(i));
    }
    if (s.logits) pick.push_back(int32_t(tokens.size()) - 1);
    layout.tables.push_back(kv_.block_table(s.id));
    if (kv_.windowed()) layout.window_tables.push_back(kv_.window_table(s.id));
  }
  layout.row_seq = row_seq;
  // (no pick: keys and values only)
  SampledRows rows;
  if (session_.tensor_parallel() > 1) {
    rows = ranks_rows(st, tokens, pos, layout, pick);
  } else {
    const Tensor out = session_.model().forward_batch(tokens, pos, layout, pick);
    KvLayout next;  // (after the pass: reserving blocks may move the tables layout points into)
    rows = sampled_rows(st, out, next_layout(st, row_seq, next) ? &next : nullptr);
  }
  // One draw per sampling row, in the step's order.
  std::vector<std::pair<Scheduler::SeqId, int32_t>> sampled, going_on;
  std::vector<std::pair<int64_t, Finish>> ended;
  std::vector<std::optional<TokenLogprobs>> lps;  // per sampled token
  std::vector<float> biased;
  size_t row = 0;
  for (const StepSeq& s : st.seqs) {
    if (!s.logits) continue;
    Live& l = live_.at(s.id);
    const size_t r = row++;
    int32_t t = rows.greedy[r];
    if (t < 0 && l.req.logit_bias.empty() && !l.constraint) {
      t = l.sampler->sample(rows.logits(r), sched_.tokens(s.id));
    } else if (t < 0) {  // a copy of the row, biased or constrained (the log probabilities below are the model's)
      const std::span<const float> raw = rows.logits(r);
      biased.assign(raw.begin(), raw.end());
      for (const auto& [id, b] : l.req.logit_bias) biased[size_t(id)] += b;
      t = l.constraint ? constrained_draw(l, biased, sched_.tokens(s.id)) : l.sampler->sample(biased, sched_.tokens(s.id));
    }
    if (t >= 0) ++l.generated;  // (-1: the constraint allows no token, the request ends without one)
    sampled.emplace_back(s.id, t);
    lps.emplace_back();
    if (l.req.logprobs >= 0 && t >= 0) lps.back() = token_logprobs(rows.logits(r), t, l.req.logprobs);  // (a host row)
    const bool stop = t < 0 || std::find(l.req.stop.begin(), l.req.stop.end(), t) != l.req.stop.end() ||
                      (l.constraint && l.constraint->complete());
    const Finish f = stop ? Finish::Stop : l.generated >= l.req.max_tokens ? Finish::Length : Finish::None;
    if (f == Finish::None) going_on.emplace_back(s.id, t);
    else ended.emplace_back(s.id, f);
  }
  std::vector<Scheduler::SeqId> preempted;
  sched_.step_done(st, going_on, &preempted);
  for (const auto& [id, f] : ended) {
    if (sched_.is_running(id)) sched_.finish(id);
    else sched_.cancel(id);  // preempted by another's token in this step
  }
  {
    std::lock_guard lk(mu_);
    stats_.steps += 1;
    stats_.step_tokens += int64_t(tokens.size());
    stats_.generated += int64_t(sampled.size());
    stats_.preemptions = sched_.preemptions();
    stats_.cached_tokens = kv_.reused_tokens();
    stats_.kv_used_blocks = kv_.used_blocks();
    stats_.kv_blocks = kv_.n_blocks();
    stats_.kv_window_used_blocks = kv_.window_used_blocks();
    stats_.running = int(sched_.running()), stats_.waiting = int(sched_.waiting());
  }
  size_t e = 0;
  for (size_t k = 0; k < sampled.size(); ++k) {
    const auto [id, t] = sampled[k];
    if (e < ended.size() && ended[e].first == id) {
      end(id, t, ended[e++].second, {}, std::move(lps[k]));
    } else if (auto it = live_.find(id); it != live_.end() && it->second.cb) {
      it->second.cb(TokenEvent{id, t, Finish::None, {}, std::move(lps[k])});
    }
  }
  return true;
}

// The next step's layout when that step is most likely this one's rows again, each one position
// on: every sequence decoding (one row, greedy on the device), none ending by length at this
// token, nothing waiting or just submitted; each sequence's block for its next token is reserved.
// The backend may then start that step before it hands over this step's ids (run-ahead:
// Backend::argmax_rows), so that the host's turn between steps leaves no gap on the device. A
// sequence that stops at this token instead, or a request that arrives meanwhile, makes the next
// step another one: the step that ran ahead is then wasted work, its keys and values past the
// end of a sequence that is ending or (the same values) at the position its next step writes.
bool Engine::next_layout(const Step& st, std::span<const int32_t> row_seq, KvLayout& next) {
  if (!session_.backend().runs_ahead() || sched_.waiting() > 0) return false;
  {
    std::lock_guard lk(mu_);
    if (!submitted_.empty() || !cancelled_.empty()) return false;
  }
  for (const StepSeq& s : st.seqs) {
    const Live& l = live_.at(s.id);
    if (s.n != 1 || !s.logits || l.generated + 1 >= l.req.max_tokens || !device_greedy(l)) return false;
  }
  for (const StepSeq& s : st.seqs)
    if (!kv_.reserve_next(s.id)) return false;
  next.block_tokens = kv_.block_tokens();
  next.row_seq = row_seq;
  for (const StepSeq& s : st.seqs) {
    next.tables.push_back(kv_.block_table(s.id));
    if (kv_.windowed()) next.window_tables.push_back(kv_.window_table(s.id));
  }
  return true;
}

// Plain greedy rows (temperature <= 0, no repetition penalty) take the backend's argmax, one id
// per row; the rows the backend draws (device_draw) one draw each; the others read their logits
// rows (all at once when they are most of the rows).
// next: the next step's layout when it may run ahead (next_layout).
Engine::SampledRows Engine::sampled_rows(const Step& st, Tensor out, const KvLayout* next) {
  SampledRows rows;
  rows.vocab = out.cols;
  std::vector<uint8_t> plain;
  std::vector<Scheduler::SeqId> ids;  // the rows' sequences, in order
  for (const StepSeq& s : st.seqs)
    if (s.logits) plain.push_back(device_greedy(live_.at(s.id))), ids.push_back(s.id);
  const size_t n = plain.size(), n_plain = size_t(std::count(plain.begin(), plain.end(), uint8_t(1)));
  rows.greedy.assign(n, -1);
  if (n_plain) session_.backend().argmax_rows(out, rows.greedy, {}, n_plain == n ? next : nullptr);
  rows.at.assign(n, -1);
  if (n_plain == n) return rows;
  for (size_t r = 0; r < n; ++r)
    if (!plain[r]) rows.greedy[r] = -1;  // (argmax_rows gave every row its argmax)
  // Seeded draws in backend memory, each with its request's next uniform (the host draw's own,
  // so the ids do not depend on where they are drawn).
  DeviceDraws dd;
  device_draws(ids, plain, true, dd);
  if (!dd.draws.empty()) {
    std::vector<int32_t> drawn(dd.draws.size());
    session_.backend().sample_rows(out, dd.draws, drawn);
    for (size_t i = 0; i < dd.rows.size(); ++i) rows.greedy[dd.rows[i]] = drawn[i], plain[dd.rows[i]] = 1;
  }
  const size_t n_host = size_t(std::count(plain.begin(), plain.end(), uint8_t(0)));
  if (n_host == 0) return rows;
  const bool all = 2 * n_host > n;
  rows.host.resize(size_t(all ? n : n_host) * size_t(out.cols));
  size_t k = 0;
  for (size_t r = 0; r < n; ++r) {
    if (plain[r]) continue;
    rows.at[r] = int64_t(all ? r : k++);
    if (!all) session_.backend().read(out.rows_view(int64_t(r), 1), rows.host.data() + rows.at[r] * out.cols);
  }
  if (all) session_.backend().read(out, rows.host.data());
  return rows;
}

// With several ranks the pass gives the greedy id of every picked row and, for the rows that
// sample, their logits in host memory (Session::forward_batch_ranks; a plain greedy row's id
// comes from each rank's device, no row crossing to the host).
Engine::SampledRows Engine::ranks_rows(const Step& st, std::span<const int32_t> tokens, std::span<const int32_t> pos,
                                       const KvLayout& layout, std::span<const int32_t> pick) {
  SampledRows rows;
  rows.vocab = session_.config().n_vocab;
  std::vector<uint8_t> plain;
  std::vector<Scheduler::SeqId> ids;  // the rows' sequences, in order
  for (const StepSeq& s : st.seqs)
    if (s.logits) plain.push_back(device_greedy(live_.at(s.id))), ids.push_back(s.id);
  // Draws the ranks' devices rank: each rank's best tokens of its share, merged here, then the
  // request's own Sampler draws from them (sample_sorted: the id and generator use of sample()).
  DeviceDraws dd;
  device_draws(ids, plain, false, dd);
  std::vector<int32_t> greedy;
  std::vector<std::vector<TpPick>> best;
  rows.rows = session_.forward_batch_ranks(tokens, pos, layout, pick, plain, greedy, dd.draws, &best).data();
  for (size_t r = 0; r < plain.size(); ++r) {
    rows.greedy.push_back(plain[r] ? greedy[r] : -1);
    rows.at.push_back(plain[r] ? -1 : int64_t(r));
  }
  for (size_t i = 0; i < dd.rows.size(); ++i) {
    rows.greedy[dd.rows[i]] = live_.at(ids[dd.rows[i]]).sampler->sample_sorted(best[i]);
    rows.at[dd.rows[i]] = -1;
  }
  return rows;
}

void Engine::run_until_idle() {
  for (;;) {
    if (step()) continue;
    std::lock_guard lk(mu_);
    if (submitted_.empty() && cancelled_.empty()) return;
  }
}

void Engine::start() {
  std::lock_guard lk(mu_);
  if (driver_.joinable()) return;
  stopping_ = false;
  driver_ = std::thread([this] {
    for (;;) {
      {
        std::unique_lock lk2(mu_);
        wake_.wait(lk2, [&] { return stopping_ || !submitted_.empty() || !cancelled_.empty() || !open_.empty(); });
        if (stopping_) return;
      }
      try {
        step();
      } catch (const std::exception& ex) {  // the pass failed: every request ends with the reason
        std::vector<int64_t> ids;
        for (const auto& [id, l] : live_) ids.push_back(id);
        for (int64_t id : ids) {
          if (sched_.is_running(id)) sched_.finish(id);
          else sched_.cancel(id);
          end(id, -1, Finish::Error, ex.what());
        }
      }
    }
  });
}

void Engine::stop() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
    wake_.notify_all();
  }
  if (driver_.joinable()) driver_.join();
}

EngineStats Engine::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

}  // namespace lamina
