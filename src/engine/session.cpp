#include "engine/session.h"

#include "core/error.h"
#include "core/thread_pool.h"
#include "format/quant.h"
#include "model/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <tuple>

namespace lamina {

size_t kv_bytes_per_position(const ModelConfig& c, GgmlType kv_type) {
  return 2 * size_t(c.n_layer) * size_t(c.n_head_kv) * size_t(c.head_dim) * (kv_type == GgmlType::F16 ? 2 : 4);
}

BackendOptions backend_options(const SessionOptions& o) {
  BackendOptions b;
  b.device = o.device, b.n_threads = o.n_threads, b.exact_matmul = o.exact_matmul, b.cpu_isa = o.cpu_isa;
  b.cuda = o.cuda;
  return b;
}

namespace {

constexpr size_t kDefaultKvShare = 4;  // the default context's KV cache: at most 1/4 of free memory

// Activation memory one forward pass of n_batch rows needs (the model's scratch tensors with
// 16-bit copies for the GEMM inputs), plus the all-rows logits of `lamina logits`.
size_t scratch_estimate(const ModelConfig& c, int n_batch) {
  const size_t E = c.n_embd, QD = size_t(c.n_head) * c.head_dim, KVD = size_t(c.n_head_kv) * c.head_dim;
  const size_t per_row = (4 * E + 2 * QD + 2 * KVD + 3 * size_t(c.n_ff)) * 6 + size_t(c.n_vocab) * 4;
  return per_row * size_t(n_batch) + (size_t(256) << 20);
}

}  // namespace

size_t model_weight_bytes(const GgufFile& f, const ModelConfig& c, const TpPlan* plan) {
  size_t sum = 0;  // (Q5_0 and IQ4_NL matrices counted as Q8_0: at most that)
  for (const auto& t : f.tensors()) {
    int64_t rows = t.nrows(), cols = t.ne[0];
    if (plan) std::tie(cols, rows) = tp_held_shape(*plan, c, t);
    const GgmlType held = held_as_q8_0(t.type) ? GgmlType::Q8_0 : t.type;
    sum += held != t.type || plan ? row_bytes(held, cols) * size_t(rows) : t.nbytes;
  }
  if (!f.find_tensor("output.weight"))  // tied: bound twice (lookup table and matmul layout)
    if (const GgufTensor* e = f.find_tensor("token_embd.weight"))
      sum += plan ? row_bytes(e->type, e->ne[0]) * size_t(plan->vocab.count) : e->nbytes;
  return sum;
}

Session::Session(const SessionOptions& o) : opt_(o), file_(GgufFile::open(o.model_path)), tok_(Tokenizer::from_gguf(file_)) {
  if (o.n_ctx < 0) fail("--ctx must be positive, got {}", o.n_ctx);
  const int n = o.tensor_parallel;
  if (n < 1) fail("--tensor-parallel must be at least 1, got {}", n);
  if (n > 1) {
    const ModelConfig cfg = ModelConfig::from_gguf(file_);
    const int64_t ff_block = tp_ff_block(file_);
    for (int r = 0; r < n; ++r)  // (a split that does not divide: refused first)
      rank_plans_.push_back(TpPlan::make(cfg, n, r, ff_block));
    // (the small all-reduces: up to tp_peer_rows residual rows)
    if (o.tp_peer_rows < 1 || o.tp_peer_rows > 256) fail("--tp-peer-rows {}: 1 to 256", o.tp_peer_rows);
    devices_ = make_device_group(backend_options(o), n, int64_t(cfg.n_embd) * o.tp_peer_rows);
    group_ = std::make_unique<ThreadGroup>(n);
  }
  Rank r0;
  const int n_ctx = make_rank(0, r0, o.n_ctx);
  comm0_ = std::move(r0.comm), backend_ = std::move(r0.backend), model_ = std::move(r0.model);
  if (tok_.n_vocab() != model_->config().n_vocab)
    fail("{}: tokenizer has {} tokens but the model's vocabulary is {}", o.model_path, tok_.n_vocab(),
         model_->config().n_vocab);
  if (n > 1) workers_ = std::make_unique<RankWorkers>(n, [this, n_ctx](int rank, Rank& r) { make_rank(rank, r, n_ctx); });
}

int Session::make_rank(int rank, Rank& r, int n_ctx) {
  const SessionOptions& o = opt_;
  const int n = o.tensor_parallel;
  BackendOptions bo = backend_options(o);
  std::optional<LlamaModel::TpRank> tp;
  ModelConfig cfg = ModelConfig::from_gguf(file_);
  if (n > 1) {
    devices_->configure(rank, bo);
    bo.n_threads = std::max(1, usable_threads(o.n_threads) / n);
    if (!bo.cuda.nccl) bo.cuda.graphs = false;  // (an all-reduce in host memory cannot be recorded)
    r.comm = group_->member(rank);
    tp = LlamaModel::TpRank{rank_plans_[size_t(rank)], r.comm.get()};
  }
  r.backend = make_backend(bo);
  Backend& be = *r.backend;
  const std::string where = n > 1 ? fmt::format("{} (rank {} of {})", be.name(), rank, n) : be.name();
  const size_t weights = model_weight_bytes(file_, cfg, tp ? &tp->plan : nullptr);
  const size_t scratch = scratch_estimate(cfg, o.n_batch);
  const size_t avail0 = be.memory_available();
  if (weights + scratch > avail0)
    fail("{} does not fit on {}: its weights need {} plus {} for activations, {} is available", o.model_path, where,
         format_bytes(weights), format_bytes(scratch), format_bytes(avail0));
  r.model = std::make_unique<LlamaModel>(file_, be, tp ? &*tp : nullptr);
  if (tp) cfg.n_head_kv = uint32_t(tp->plan.kv_heads.count);  // the rank's KV heads
  const size_t per_pos = kv_bytes_per_position(cfg, o.kv_type);
  const size_t free_now = be.memory_available();
  const size_t avail = free_now > scratch ? free_now - scratch : 0;
  if (n_ctx == 0) {
    // The default context takes at most a quarter of what is free: a file declaring a huge
    // context_length must not claim the machine (an explicit --ctx may use all of it).
    n_ctx = int(std::min<size_t>({cfg.n_ctx_train, avail / kDefaultKvShare / per_pos, size_t(INT32_MAX)}));
    if (n_ctx < 16)
      fail("not enough memory on {} for a KV cache: {:.1f} MiB per 1k positions, {} available", where,
           double(per_pos) * 1024 / (1 << 20), format_bytes(avail));
  } else {
    // An explicit context: what the backend would hold for it (the CUDA backend backs one
    // sequence's sliding-window layers with their windows only; the batching engine later needs
    // every row, and says so where that does not fit).
    const size_t need = be.kv_bytes_for(n_ctx, int(cfg.n_head_kv * cfg.head_dim), o.kv_type, cfg.layer_windows(), o.n_batch);
    if (need > avail)
      fail("a context of {} positions needs {} of KV cache on {} but only {} is available (lower --ctx)", n_ctx,
           format_bytes(need), where, format_bytes(avail));
  }
  r.model->init_cache(n_ctx, o.kv_type, o.n_batch);
  be.set_profiling(o.profile);
  return n_ctx;
}

void Session::check_activation_room(int rows) {
  if (rows <= opt_.n_batch) return;  // (the constructor checked n_batch rows)
  const size_t need = scratch_estimate(config(), rows), avail = backend().memory_available();
  if (need > avail)
    fail("steps of {} tokens need about {} for activations on {} but {} is free (lower --max-step-tokens or --ctx)",
         rows, format_bytes(need), backend_name(), format_bytes(avail));
}

std::string Session::backend_name() const {
  return opt_.tensor_parallel > 1 ? fmt::format("{} x{}", backend_->name(), opt_.tensor_parallel) : backend_->name();
}

Session::~Session() {
  if (workers_ && opt_.cuda.graph_timing && rank_timing_.passes) {
    const double n = double(rank_timing_.passes);
    fmt::print(stderr, "rank 0, per pass over {} passes: {:.1f} us in forward (launch), {:.1f} us in the read (its GPU), "
               "{:.1f} us waiting for the other ranks\n", rank_timing_.passes, rank_timing_.forward_us / n,
               rank_timing_.read_us / n, rank_timing_.others_us / n);
  }
}

void Session::in_batches(std::span<const int32_t> tokens, bool all_logits, const BatchPass& pass) {
  if (tokens.empty()) fail("eval: no tokens");
  if (history_.size() + tokens.size() > size_t(n_ctx()))
    fail("{} tokens do not fit in the context: {} of {} positions are used (raise --ctx)", tokens.size(),
         history_.size(), n_ctx());
  std::vector<int32_t> pos;
  for (size_t b = 0; b < tokens.size(); b += size_t(opt_.n_batch)) {
    const size_t n = std::min(tokens.size() - b, size_t(opt_.n_batch));
    pos.resize(n);
    for (size_t i = 0; i < n; ++i) pos[i] = int32_t(history_.size() + i);
    const auto chunk = tokens.subspan(b, n);
    using L = LlamaModel::Logits;
    pass(chunk, pos, all_logits ? L::All : b + n == tokens.size() ? L::Last : L::None);
    history_.insert(history_.end(), chunk.begin(), chunk.end());
  }
}

// Runs the tokens in batches of n_batch; returns the last batch's logits in backend memory (every
// row of every batch is copied to logits_ when all_logits).
Tensor Session::eval_device(std::span<const int32_t> tokens, bool all_logits) {
  logits_.clear();
  Tensor out;
  in_batches(tokens, all_logits, [&](std::span<const int32_t> chunk, std::span<const int32_t> pos, LlamaModel::Logits mode) {
    out = model_->forward(chunk, pos, mode);
    if (all_logits) {
      chunk_.resize(size_t(out.rows * out.cols));
      backend_->read(out, chunk_.data());
      logits_.insert(logits_.end(), chunk_.begin(), chunk_.end());
    }
  });
  return out;
}

void Session::run_ranks(const std::function<Tensor(LlamaModel&)>& fwd, int64_t rows, int64_t base_row,
                        std::span<const uint8_t> greedy_only, std::span<const Backend::RowDraw> draws) {
  const int n = opt_.tensor_parallel;
  const int64_t V = config().n_vocab;
  rank_logits_.resize(size_t(n)), rank_best_.resize(size_t(n)), rank_cands_.resize(size_t(n));
  int64_t n_greedy = 0;
  for (uint8_t g : greedy_only) n_greedy += g != 0;
  if (!greedy_only.empty() && int64_t(greedy_only.size()) != rows) fail("run_ranks: {} flags for {} rows", greedy_only.size(), rows);
  std::vector<uint8_t> unread(greedy_only.begin(), greedy_only.end());  // rows whose logits no rank reads back
  unread.resize(size_t(rows), 0);
  for (const Backend::RowDraw& d : draws) {
    if (d.row < 0 || d.row >= rows) fail("run_ranks: a draw on row {} of {}", d.row, rows);
    unread[size_t(d.row)] = 1;
  }
  const bool some_unread = std::any_of(unread.begin(), unread.end(), [](uint8_t u) { return u != 0; });
  using Clock = std::chrono::steady_clock;
  const auto us = [](Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration<double, std::micro>(to - from).count();
  };
  const auto pass = [&](int rank, LlamaModel& m, Backend& be) {
    const auto t0 = Clock::now();
    const Tensor out = fwd(m);
    const auto t1 = Clock::now();
    if (rank == 0) rank_timing_.forward_us += us(t0, t1);
    const TpRange v = rank_plans_[size_t(rank)].vocab;
    auto& best = rank_best_[size_t(rank)];
    best.assign(size_t(rows), {-INFINITY, -1});
    auto& cands = rank_cands_[size_t(rank)];
    cands.assign(draws.size(), {});
    if (rows == 0 || v.count == 0) return;
    const Tensor last = out.rows_view(out.rows - rows, rows);
    std::vector<float>& host = rank_logits_[size_t(rank)];
    const auto keep = [&](int64_t i, const float* row) {  // row i into logits_, and its pick
      std::copy_n(row, v.count, logits_.begin() + (base_row + i) * V + v.first);
      const float* top = std::max_element(row, row + v.count);  // (the first of equal maxima: the lowest id)
      best[size_t(i)] = {*top, int32_t(v.first + (top - row))};
    };
    if (!draws.empty()) {  // the draws' best tokens of this share, its penalty ids in its columns
      std::vector<std::vector<int32_t>> local(draws.size());
      std::vector<Backend::RowDraw> mine(draws.begin(), draws.end());
      for (size_t i = 0; i < draws.size(); ++i) {
        for (int32_t id : draws[i].penalty_ids)
          if (id >= v.first && id < v.first + v.count) local[i].push_back(int32_t(id - v.first));
        mine[i].penalty_ids = local[i];
      }
      be.top_candidates(last, mine, cands);
      for (auto& list : cands)
        for (TpPick& c : list) c.second += int32_t(v.first);
    }
    if (n_greedy) {  // greedy rows: the id and the maximum made on the device, no row read
      std::vector<int32_t> ids(static_cast<size_t>(rows));
      std::vector<float> top(static_cast<size_t>(rows));
      be.argmax_rows(last, ids, top);
      for (int64_t i = 0; i < rows; ++i)
        if (greedy_only[size_t(i)]) best[size_t(i)] = {top[size_t(i)], int32_t(v.first + ids[size_t(i)])};
    }
    if (some_unread) {  // the other rows one by one
      host.resize(size_t(v.count));
      for (int64_t i = 0; i < rows; ++i)
        if (!unread[size_t(i)]) be.read(last.rows_view(i, 1), host.data()), keep(i, host.data());
    } else {
      host.resize(size_t(rows * v.count));
      be.read(last, host.data());
      for (int64_t i = 0; i < rows; ++i) keep(i, host.data() + i * v.count);
    }
    if (rank == 0) rank_timing_.read_us += us(t1, Clock::now());
  };
  workers_->post([&](int rank, Rank& r) { pass(rank, *r.model, *r.backend); });
  std::exception_ptr e0;
  try {
    pass(0, *model_, *backend_);
  } catch (...) {
    e0 = std::current_exception();
  }
  const auto w0 = Clock::now();
  workers_->wait();
  rank_timing_.others_us += us(w0, Clock::now());
  ++rank_timing_.passes;
  if (e0) std::rethrow_exception(e0);
}

int32_t Session::ranks_greedy(int64_t row) const {
  std::vector<TpPick> picks;
  for (const auto& best : rank_best_) picks.push_back(best[size_t(row)]);
  return tp_merge_picks(picks).second;
}

void Session::eval_ranks(std::span<const int32_t> tokens, bool all_logits, bool greedy) {
  const int64_t V = config().n_vocab;
  logits_.clear();
  const uint8_t only[] = {1};
  in_batches(tokens, all_logits, [&](std::span<const int32_t> chunk, std::span<const int32_t> pos, LlamaModel::Logits mode) {
    using L = LlamaModel::Logits;
    const int64_t rows = mode == L::All ? int64_t(chunk.size()) : mode == L::Last ? 1 : 0;
    const int64_t base_row = int64_t(logits_.size()) / V;
    logits_.resize(logits_.size() + size_t(rows * V));
    const bool pick_only = greedy && rows == 1 && !all_logits;
    run_ranks([&](LlamaModel& m) { return m.forward(chunk, pos, mode); }, rows, base_row,
              pick_only ? std::span<const uint8_t>(only) : std::span<const uint8_t>());
  });
}

const std::vector<float>& Session::forward_batch_ranks(std::span<const int32_t> tokens, std::span<const int32_t> pos,
                                                       const KvLayout& layout, std::span<const int32_t> pick,
                                                       std::span<const uint8_t> greedy_only, std::vector<int32_t>& greedy,
                                                       std::span<const Backend::RowDraw> draws,
                                                       std::vector<std::vector<TpPick>>* best) {
  if (!workers_) fail("forward_batch_ranks: the session has one rank");
  if (greedy_only.size() != pick.size()) fail("forward_batch_ranks: {} flags for {} rows", greedy_only.size(), pick.size());
  if (!draws.empty() && !best) fail("forward_batch_ranks: draws without a place for their candidates");
  const int64_t rows = int64_t(pick.size());
  logits_.resize(size_t(rows * config().n_vocab));  // (only the rows that sample are written, and read)
  run_ranks([&](LlamaModel& m) { return m.forward_batch(tokens, pos, layout, pick); }, rows, 0, greedy_only, draws);
  greedy.resize(size_t(rows));
  for (int64_t r = 0; r < rows; ++r) greedy[size_t(r)] = ranks_greedy(r);
  if (best) {  // each draw's best tokens over the ranks: top-k of them (one for a greedy draw)
    best->assign(draws.size(), {});
    std::vector<std::vector<TpPick>> lists(rank_cands_.size());
    for (size_t i = 0; i < draws.size(); ++i) {
      for (size_t r = 0; r < rank_cands_.size(); ++r) lists[r] = std::move(rank_cands_[r][i]);
      const SamplerParams& p = *draws[i].params;
      (*best)[i] = tp_merge_candidates(lists, p.temperature <= 0.f ? 1 : size_t(std::max(p.top_k, 1)));
    }
  }
  return logits_;
}

void Session::each_backend(const std::function<void(Backend&)>& f) {
  if (workers_) workers_->post([&](int, Rank& r) { f(*r.backend); });
  f(*backend_);
  if (workers_) workers_->wait();
}

void Session::keep_kv_rows(int window_rows) {
  const size_t before = backend_->memory_available();
  each_backend([&](Backend& b) { b.kv_keep_rows(window_rows); });
  // The --ctx check counted the smaller cache: what it grew by must leave the activations room.
  const size_t after = backend_->memory_available(), need = scratch_estimate(config(), opt_.n_batch);
  if (after < before && after < need)
    fail("several sequences at once keep every row of the KV cache on {}: {} is left for activations, which need "
         "about {} (lower --ctx)", backend_name(), format_bytes(after), format_bytes(need));
}

void Session::reset() {
  history_.clear();
  each_backend([](Backend& b) { b.kv_restart(); });
}

void Session::rewind(int n_past) {
  n_past = std::clamp(n_past, 0, int(history_.size()));
  std::mutex mu;
  int floor = 0;  // the highest of the ranks' (each gives its cache back on its own)
  each_backend([&](Backend& b) {
    const int f = b.kv_rewind_floor();
    const std::lock_guard<std::mutex> lock(mu);
    floor = std::max(floor, f);
  });
  if (n_past == 0 || n_past < floor) {  // (from the start: the kept tokens evaluated again)
    const std::vector<int32_t> keep(history_.begin(), history_.begin() + n_past);
    reset();
    if (!keep.empty()) eval(keep);
    return;
  }
  history_.resize(size_t(n_past));
}

const std::vector<float>& Session::eval(std::span<const int32_t> tokens, bool all_logits) {
  if (workers_) {
    eval_ranks(tokens, all_logits);
    return logits_;
  }
  const Tensor out = eval_device(tokens, all_logits);
  if (!all_logits) {
    logits_.resize(size_t(out.cols));
    backend_->read(out.rows_view(out.rows - 1, 1), logits_.data());
  }
  return logits_;
}

int32_t Session::eval_sample(std::span<const int32_t> tokens, Sampler& sampler, bool more) {
  if (workers_) {  // plain greedy: the ranks' device picks merged; else sampled over the gathered row
    const bool greedy = sampler.params().plain_greedy();
    eval_ranks(tokens, false, greedy);
    if (greedy) return ranks_greedy(0);  // (Sampler's greedy rule over the row)
    return sampler.sample(logits_, history_);
  }
  const Tensor out = eval_device(tokens, false);
  if (backend_->draws_on_device(sampler.params())) {  // (the host Sampler's rules exactly: else the row is read back)
    const std::vector<int32_t> ids = sampler.penalty_ids(history_);
    const double u = sampler.params().temperature > 0.f ? sampler.next_uniform() : 0.0;
    return backend_->sample(out, sampler.params(), ids, u, more);
  }
  logits_.resize(size_t(out.cols));
  backend_->read(out, logits_.data());
  return sampler.sample(logits_, history_);
}

}  // namespace lamina
