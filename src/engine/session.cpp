#include "engine/session.h"

#include "core/error.h"
#include "format/quant.h"
#include "model/sampler.h"

#include <algorithm>
#include <cstdint>

namespace lamina {

size_t kv_bytes_per_position(const ModelConfig& c, GgmlType kv_type) {
  return 2 * size_t(c.n_layer) * size_t(c.n_head_kv) * size_t(c.head_dim) * (kv_type == GgmlType::F16 ? 2 : 4);
}

BackendOptions backend_options(const SessionOptions& o) {
  return BackendOptions{o.device, o.n_threads, o.exact_matmul, o.cpu_isa, o.cuda};
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

Session::Session(const SessionOptions& o) : opt_(o), file_(GgufFile::open(o.model_path)), tok_(Tokenizer::from_gguf(file_)) {
  if (o.n_ctx < 0) fail("--ctx must be positive, got {}", o.n_ctx);
  backend_ = make_backend(backend_options(o));
  const ModelConfig cfg = ModelConfig::from_gguf(file_);
  size_t weight_bytes = 0;  // (Q5_0 and IQ4_NL matrices are held as Q8_0)
  for (const auto& t : file_.tensors())
    weight_bytes += held_as_q8_0(t.type) ? row_bytes(GgmlType::Q8_0, t.ne[0]) * size_t(t.nrows()) : t.nbytes;
  if (!file_.find_tensor("output.weight"))  // tied: bound twice (lookup table and matmul layout)
    if (const GgufTensor* e = file_.find_tensor("token_embd.weight")) weight_bytes += e->nbytes;
  const size_t scratch = scratch_estimate(cfg, o.n_batch);
  const size_t avail0 = backend_->memory_available();
  if (weight_bytes + scratch > avail0)
    fail("{} does not fit on {}: its weights need {} plus {} for activations, {} is available",
         o.model_path, backend_->name(), format_bytes(weight_bytes), format_bytes(scratch), format_bytes(avail0));
  model_ = std::make_unique<LlamaModel>(file_, *backend_);
  const ModelConfig& c = model_->config();
  if (tok_.n_vocab() != c.n_vocab)
    fail("{}: tokenizer has {} tokens but the model's vocabulary is {}", o.model_path, tok_.n_vocab(), c.n_vocab);
  const size_t per_pos = kv_bytes_per_position(c, o.kv_type);
  const size_t free_now = backend_->memory_available();
  const size_t avail = free_now > scratch ? free_now - scratch : 0;
  int n_ctx = o.n_ctx;
  if (n_ctx == 0) {
    // The default context takes at most a quarter of what is free: a file declaring a huge
    // context_length must not claim the machine (an explicit --ctx may use all of it).
    n_ctx = int(std::min<size_t>({c.n_ctx_train, avail / kDefaultKvShare / per_pos, size_t(INT32_MAX)}));
    if (n_ctx < 16)
      fail("not enough memory on {} for a KV cache: {:.1f} MiB per 1k positions, {} available", backend_->name(),
           double(per_pos) * 1024 / (1 << 20), format_bytes(avail));
  } else if (size_t(n_ctx) * per_pos > avail) {
    fail("a context of {} positions needs {} of KV cache on {} but only {} is available (lower --ctx)", n_ctx,
         format_bytes(size_t(n_ctx) * per_pos), backend_->name(), format_bytes(avail));
  }
  model_->init_cache(n_ctx, o.kv_type);
  backend_->set_profiling(o.profile);
}

Session::~Session() = default;

// Runs the tokens in batches of n_batch; returns the last batch's logits in backend memory (every
// row of every batch is copied to logits_ when all_logits).
Tensor Session::eval_device(std::span<const int32_t> tokens, bool all_logits) {
  if (tokens.empty()) fail("eval: no tokens");
  if (history_.size() + tokens.size() > size_t(n_ctx()))
    fail("{} tokens do not fit in the context: {} of {} positions are used (raise --ctx)", tokens.size(),
         history_.size(), n_ctx());
  logits_.clear();
  std::vector<int32_t> pos;
  Tensor out;
  for (size_t b = 0; b < tokens.size(); b += size_t(opt_.n_batch)) {
    const size_t n = std::min(tokens.size() - b, size_t(opt_.n_batch));
    pos.resize(n);
    for (size_t i = 0; i < n; ++i) pos[i] = int32_t(history_.size() + i);
    const auto chunk = tokens.subspan(b, n);
    const bool last = b + n == tokens.size();
    using L = LlamaModel::Logits;
    out = model_->forward(chunk, pos, all_logits ? L::All : last ? L::Last : L::None);
    history_.insert(history_.end(), chunk.begin(), chunk.end());
    if (all_logits) {
      chunk_.resize(size_t(out.rows * out.cols));
      backend_->read(out, chunk_.data());
      logits_.insert(logits_.end(), chunk_.begin(), chunk_.end());
    }
  }
  return out;
}

const std::vector<float>& Session::eval(std::span<const int32_t> tokens, bool all_logits) {
  const Tensor out = eval_device(tokens, all_logits);
  if (!all_logits) {
    logits_.resize(size_t(out.cols));
    backend_->read(out.rows_view(out.rows - 1, 1), logits_.data());
  }
  return logits_;
}

int32_t Session::eval_sample(std::span<const int32_t> tokens, Sampler& sampler, bool more) {
  const Tensor out = eval_device(tokens, false);
  if (backend_->samples_on_device()) {
    const std::vector<int32_t> ids = sampler.penalty_ids(history_);
    const double u = sampler.params().temperature > 0.f ? sampler.next_uniform() : 0.0;
    return backend_->sample(out, sampler.params(), ids, u, more);
  }
  logits_.resize(size_t(out.cols));
  backend_->read(out, logits_.data());
  return sampler.sample(logits_, history_);
}

}  // namespace lamina
