#include "model/session.h"

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"

#include <algorithm>
#include <fstream>
#include <thread>

namespace lamina {

namespace {

size_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  size_t kb = 0;
  while (in >> key >> kb) {
    if (key == "MemAvailable:") return kb * 1024;
    in.ignore(256, '\n');
  }
  return size_t(8) << 30;
}

}  // namespace

size_t kv_bytes_per_position(const ModelConfig& c, GgmlType kv_type) {
  return 2 * size_t(c.n_layer) * size_t(c.n_head_kv) * size_t(c.head_dim) * (kv_type == GgmlType::F16 ? 2 : 4);
}

Session::Session(const SessionOptions& o) : opt_(o), file_(GgufFile::open(o.model_path)), tok_(Tokenizer::from_gguf(file_)) {
  const int threads = o.n_threads > 0 ? o.n_threads : int(std::max(1u, std::thread::hardware_concurrency()));
  backend_ = std::make_unique<CpuBackend>(threads, o.exact_matmul);
  model_ = std::make_unique<LlamaModel>(file_, *backend_);
  const ModelConfig& c = model_->config();
  if (tok_.n_vocab() != c.n_vocab)
    fail("{}: tokenizer has {} tokens but the model's vocabulary is {}", o.model_path, tok_.n_vocab(), c.n_vocab);
  const size_t per_pos = kv_bytes_per_position(c, o.kv_type);
  const size_t avail = available_memory_bytes() / 2;  // leave room for weights' pages and scratch
  int n_ctx = o.n_ctx;
  if (n_ctx < 0) fail("--ctx must be positive, got {}", n_ctx);
  if (n_ctx == 0) {
    n_ctx = int(std::min<size_t>(c.n_ctx_train, avail / per_pos));
    if (n_ctx < 16)
      fail("not enough memory for a KV cache: {:.1f} MiB per 1k positions, {:.1f} MiB available",
           double(per_pos) * 1024 / (1 << 20), double(avail) / (1 << 20));
  } else if (size_t(n_ctx) * per_pos > avail) {
    fail("a context of {} positions needs {:.1f} MiB of KV cache but only {:.1f} MiB is available (lower --ctx)",
         n_ctx, double(size_t(n_ctx) * per_pos) / (1 << 20), double(avail) / (1 << 20));
  }
  model_->init_cache(n_ctx, o.kv_type);
}

Session::~Session() = default;

const std::vector<float>& Session::eval(std::span<const int32_t> tokens, bool all_logits) {
  if (tokens.empty()) fail("eval: no tokens");
  if (history_.size() + tokens.size() > size_t(n_ctx()))
    fail("{} tokens do not fit in the context: {} of {} positions are used (raise --ctx)", tokens.size(),
         history_.size(), n_ctx());
  const size_t V = config().n_vocab;
  logits_.clear();
  std::vector<int32_t> pos;
  for (size_t b = 0; b < tokens.size(); b += size_t(opt_.n_batch)) {
    const size_t n = std::min(tokens.size() - b, size_t(opt_.n_batch));
    pos.resize(n);
    for (size_t i = 0; i < n; ++i) pos[i] = int32_t(history_.size() + i);
    const auto chunk = tokens.subspan(b, n);
    const bool last = b + n == tokens.size();
    model_->forward(chunk, pos, all_logits, chunk_);
    history_.insert(history_.end(), chunk.begin(), chunk.end());
    if (all_logits) logits_.insert(logits_.end(), chunk_.begin(), chunk_.end());
    else if (last) logits_.assign(chunk_.end() - long(V), chunk_.end());
  }
  return logits_;
}

}  // namespace lamina
