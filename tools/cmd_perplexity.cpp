// lamina perplexity: the model's perplexity over a text, with llama.cpp's convention (chunks of
// --ctx tokens, each evaluated from an empty context with its first token replaced by BOS where
// the model adds one, the second half of each chunk scored). With a base run (--base-model,
// --base-device, --base-exact) the same chunks also go through a second session in the same
// process, and the KL divergence of the two next-token distributions, the agreement of their top
// tokens and the change in perplexity are reported (nothing is written to disk).
#include "cli_checks.h"
#include "commands.h"
#include "core/error.h"
#include "core/files.h"
#include "model/eval_metrics.h"
#include "session_args.h"

#include <fmt/format.h>

#include <chrono>
#include <memory>

namespace lamina::cli {
namespace {

constexpr const char* kDefaultText = "/usr/share/common-licenses/GPL-3";  // on every Debian and Ubuntu system

struct PerplexityArgs {
  SessionArgs s;
  std::string file = kDefaultText;
  int chunks = 0;  // 0: every whole chunk of the text
  std::string base_model, base_device;
  bool base_exact = false;
  bool has_base() const { return !base_model.empty() || !base_device.empty() || base_exact; }
};

std::string describe(const SessionOptions& o, Session& s) {  // the backend's name says "exact matmul" where set
  return fmt::format("{} on {}", o.model_path, s.backend_name());
}

void run_perplexity(const PerplexityArgs& a) {
  const SessionOptions o = a.s.resolve();
  const int ctx = o.n_ctx;
  if (ctx < 16) fail("--ctx {} is too small for perplexity (16 or more)", ctx);
  const std::string text = read_text_file(a.file);
  Session sess(o);
  std::unique_ptr<Session> base;
  SessionOptions bo = o;
  if (a.has_base()) {
    if (!a.base_model.empty()) bo.model_path = a.base_model;
    if (!a.base_device.empty()) bo.device = a.base_device;
    bo.exact_matmul = a.base_exact;
    base = std::make_unique<Session>(bo);
    if (base->config().n_vocab != sess.config().n_vocab)
      fail("the base model's vocabulary has {} tokens, the model's {}", base->config().n_vocab, sess.config().n_vocab);
  }
  const Tokenizer& tok = sess.tokenizer();
  std::vector<int32_t> tokens = tok.tokenize(text, true, false);
  const int64_t available = int64_t(tokens.size()) / ctx;
  if (available == 0)
    fail("{}: {} tokens, fewer than one chunk of --ctx {} (lower --ctx)", a.file, tokens.size(), ctx);
  const int64_t n_chunks = a.chunks > 0 ? std::min<int64_t>(a.chunks, available) : available;
  const size_t V = sess.config().n_vocab;
  const int first = ctx / 2;  // the second half of each chunk is scored: every prediction has ctx/2 tokens before it
  fmt::print(stderr, "perplexity: {} ({} tokens), {} chunks of {} tokens, {}\n", a.file, tokens.size(), n_chunks, ctx,
             describe(o, sess));
  if (base) fmt::print(stderr, "perplexity: base {}\n", describe(bo, *base));
  PredictionStats stats;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t c = 0; c < n_chunks; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + c * ctx, tokens.begin() + (c + 1) * ctx);
    if (tok.add_bos() && tok.bos() >= 0) chunk[0] = tok.bos();
    sess.reset();
    const std::vector<float> logits = sess.eval(chunk, true);
    std::vector<float> base_logits;
    if (base) {
      base->reset();
      base_logits = base->eval(chunk, true);
    }
    for (int j = first; j + 1 < ctx; ++j) {
      const std::span<const float> row(logits.data() + size_t(j) * V, V);
      if (base) stats.add(row, std::span<const float>(base_logits.data() + size_t(j) * V, V), chunk[size_t(j) + 1]);
      else stats.add(row, chunk[size_t(j) + 1]);
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print(stderr, "[{}/{}] PPL {:.4f}{} ({:.1f} s)\n", c + 1, n_chunks, stats.ppl(),
               base ? fmt::format(", base {:.4f}, mean KLD {:.3e}, same top {:.1f} %", stats.base_ppl(), stats.mean_kld(),
                                  100 * stats.same_top())
                    : std::string(),
               secs);
  }
  fmt::print("PPL = {:.4f} ± {:.4f}\n", stats.ppl(), stats.ppl_error());
  fmt::print("scored tokens = {} ({} chunks of {}, the second half of each)\n", stats.count(), n_chunks, ctx);
  if (!base) return;
  const double d = stats.ppl() - stats.base_ppl();
  fmt::print("base PPL = {:.4f} ± {:.4f}\n", stats.base_ppl(), stats.base_ppl_error());
  fmt::print("ΔPPL = {:+.4f} ({:+.3f} %)\n", d, 100 * d / stats.base_ppl());
  fmt::print("mean KLD = {:.4e} ± {:.1e}\n", stats.mean_kld(), stats.mean_kld_error());
  fmt::print("99th percentile KLD = {:.4e}\n", stats.kld_percentile(99));
  fmt::print("max KLD = {:.4e}\n", stats.kld_percentile(100));
  fmt::print("same top token = {:.2f} ± {:.2f} %\n", 100 * stats.same_top(), 100 * stats.same_top_error());
}

}  // namespace

Run add_perplexity(CLI::App& app) {
  auto a = std::make_shared<PerplexityArgs>();
  a->s.opt.n_ctx = 512;  // the chunk length (llama.cpp's default)
  auto* sub = app.add_subcommand("perplexity", "Perplexity over a text; with a base run, KL divergence against it");
  add_session_options(sub, a->s);
  sub->add_option("-f,--file", a->file, std::string("Text to score (default: ") + kDefaultText + ")");
  sub->add_option("--chunks", a->chunks, "Chunks of --ctx tokens to score (default: every whole chunk)")
      ->check(whole_in(1, 1 << 24));
  sub->add_option("--base-model", a->base_model, "KLD: the base run's model (default: the same model)");
  sub->add_option("--base-device", a->base_device, "KLD: the base run's device, cpu or cuda (default: the same)")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}));
  sub->add_flag("--base-exact", a->base_exact, "KLD: the base run keeps activations in f32 (--exact-matmul)");
  return [a] { run_perplexity(*a); };
}

}  // namespace lamina::cli
