// lamina run: generates text from a prompt, streaming it to stdout; a summary on stderr.
#include "cli_checks.h"
#include "commands.h"
#include "core/error.h"
#include "format/unicode.h"
#include "session_args.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>

namespace lamina::cli {
namespace {

struct RunArgs {
  SessionArgs s;
  SamplingArgs sampling;
  std::string prompt, file;
  int n_predict = -1;
  bool no_display_prompt = false;
};

using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

void run_run(const RunArgs& a) {
  Session sess(a.s.resolve());
  const Tokenizer& tok = sess.tokenizer();
  const std::vector<int32_t> prompt = tok.tokenize(a.prompt, true, true);
  if (prompt.empty()) fail("the prompt tokenises to nothing");
  if (prompt.size() >= size_t(sess.n_ctx()))
    fail("the prompt has {} tokens but the context holds {} (raise --ctx)", prompt.size(), sess.n_ctx());
  Sampler sampler(a.sampling.resolve());

  if (!a.no_display_prompt) {
    std::fputs(a.prompt.c_str(), stdout);
    std::fflush(stdout);
  }
  if (a.s.opt.profile) sess.backend().profile_reset();
  const auto t0 = Clock::now();
  const int limit = a.n_predict < 0 ? sess.n_ctx() : a.n_predict;
  int32_t next = sess.eval_sample(prompt, sampler, limit > 1);
  const auto t1 = Clock::now();
  const std::string prompt_profile = a.s.opt.profile ? sess.backend().profile_report() : "";
  if (a.s.opt.profile) sess.backend().profile_reset();
  Utf8Stream out;
  int n_gen = 0;
  while (n_gen < limit) {
    if (tok.is_eog(next)) break;
    ++n_gen;
    std::fputs(out.push(tok.token_to_piece(next)).c_str(), stdout);
    std::fflush(stdout);
    if (sess.n_past() >= sess.n_ctx() || n_gen == limit) break;  // context full, or enough
    next = sess.eval_sample(std::span<const int32_t>(&next, 1), sampler, n_gen + 1 < limit);
  }
  std::fputs(out.flush().c_str(), stdout);
  std::fputs("\n", stdout);
  const auto t2 = Clock::now();
  fmt::print(stderr, "\nprompt: {} tokens in {:.2f} s ({:.1f} t/s) | generated: {} tokens in {:.2f} s ({:.1f} t/s) | {}\n",
             prompt.size(), seconds(t0, t1), double(prompt.size()) / seconds(t0, t1), n_gen, seconds(t1, t2),
             n_gen ? double(n_gen) / seconds(t1, t2) : 0.0, sess.backend_name());
  print_memory_summary(sess);
  if (a.s.opt.profile)
    fmt::print(stderr, "\nprompt ({} tokens):\n{}\ngeneration ({} tokens):\n{}", prompt.size(), prompt_profile, n_gen,
               sess.backend().profile_report());
}

}  // namespace

Run add_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  auto* sub = app.add_subcommand("run", "Generate text from a prompt");
  add_session_options(sub, a->s);
  add_sampling_options(sub, a->sampling);
  sub->add_option("-p,--prompt", a->prompt, "Prompt text")->required();
  sub->add_option("-n,--n-predict", a->n_predict, "Tokens to generate (default: until end of text or a full context)")
      ->check(whole_in(-1, 1 << 30));
  sub->add_flag("--no-display-prompt", a->no_display_prompt, "Do not echo the prompt");
  return [a] { run_run(*a); };
}

}  // namespace lamina::cli
