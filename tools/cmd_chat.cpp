// lamina chat: an interactive conversation using the model's chat template
// (tokenizer.chat_template, recognised as llama.cpp does) or --template NAME.
// Each turn re-renders the conversation, keeps the cached prefix and evaluates only new tokens.
// Ctrl-C stops a reply in progress; at the prompt, Ctrl-C or Ctrl-D ends the chat.
#include "cli_checks.h"
#include "commands.h"
#include "core/error.h"
#include "format/unicode.h"
#include "model/chat.h"
#include "session_args.h"

#include <fmt/format.h>

#include <csignal>
#include <cstdio>
#include <iostream>

namespace lamina::cli {
namespace {

volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_sigint(int) { g_interrupted = 1; }

struct ChatArgs {
  SessionArgs s;
  SamplingArgs sampling;
  std::string system, tmpl;
  int n_predict = -1;
};

void run_chat(const ChatArgs& a) {
  Session sess(a.s.resolve());
  const Tokenizer& tok = sess.tokenizer();
  const ChatTemplate tmpl = pick_chat_template(a.tmpl, sess);
  Sampler sampler(a.sampling.resolve());
  std::vector<ChatMessage> msgs;
  if (!a.system.empty()) msgs.push_back({"system", a.system});
  bool failed = false;  // a message did not fit: the exit status says so at the end

  struct sigaction sa {};
  sa.sa_handler = on_sigint;  // no SA_RESTART: a blocked read returns, so Ctrl-C ends the prompt
  sigaction(SIGINT, &sa, nullptr);
  fmt::print(stderr, "lamina chat: {} ({} template, context {}). Ctrl-C stops a reply; Ctrl-D or Ctrl-C at the prompt ends.\n",
             sess.config().name.empty() ? sess.file().path() : sess.config().name, chat_template_name(tmpl), sess.n_ctx());
  for (;;) {
    fmt::print(stderr, "\n> ");
    std::fflush(stderr);
    g_interrupted = 0;
    std::string line;
    if (!std::getline(std::cin, line) || g_interrupted) break;
    if (line.empty()) continue;
    msgs.push_back({"user", line});
    std::vector<int32_t> ids = tok.tokenize(apply_chat_template(tmpl, msgs, true), true, true);
    // Past the context, the oldest messages after the system prompt go first, a note each time.
    const size_t first = !msgs.empty() && msgs[0].role == "system" ? 1 : 0;
    while (ids.size() >= size_t(sess.n_ctx()) && msgs.size() > first + 1) {
      size_t drop = 1;  // a user message with its reply
      if (msgs[first].role == "user" && msgs.size() > first + 2 && msgs[first + 1].role == "assistant") drop = 2;
      msgs.erase(msgs.begin() + std::ptrdiff_t(first), msgs.begin() + std::ptrdiff_t(first + drop));
      ids = tok.tokenize(apply_chat_template(tmpl, msgs, true), true, true);
      fmt::print(stderr, "lamina: the conversation outgrew the context of {}: the oldest message{} left it\n", sess.n_ctx(),
                 drop > 1 ? "s" : "");
    }
    // Reuse the cached prefix; evaluate only what is new.
    size_t common = 0;
    const auto& hist = sess.history();
    while (common < hist.size() && common < ids.size() && hist[common] == ids[common]) ++common;
    if (common == ids.size()) --common;  // at least one token to produce logits
    if (ids.size() >= size_t(sess.n_ctx())) {  // this message alone does not fit
      fmt::print(stderr, "lamina: the message ({} tokens with the template) does not fit the context of {} (raise --ctx)\n",
                 ids.size(), sess.n_ctx());
      msgs.pop_back();
      failed = true;
      continue;
    }
    sess.rewind(int(common));
    int32_t next = sess.eval_sample(std::span<const int32_t>(ids).subspan(common), sampler, a.n_predict != 0);
    Utf8Stream out;
    std::string reply;
    int n = 0;
    while (!g_interrupted && (a.n_predict < 0 || n < a.n_predict)) {
      if (tok.is_eog(next)) break;
      const std::string piece = tok.token_to_piece(next);
      reply += piece;
      std::fputs(out.push(piece).c_str(), stdout);
      std::fflush(stdout);
      ++n;
      if (sess.n_past() >= sess.n_ctx()) break;
      next = sess.eval_sample(std::span<const int32_t>(&next, 1), sampler, a.n_predict < 0 || n < a.n_predict);
    }
    std::fputs(out.flush().c_str(), stdout);
    std::fputs("\n", stdout);
    if (g_interrupted) fmt::print(stderr, "[stopped]\n");
    msgs.push_back({"assistant", reply});
  }
  fmt::print(stderr, "\n");
  if (failed) fail("chat: a message did not fit the context of {} (raise --ctx)", sess.n_ctx());
}

}  // namespace

Run add_chat(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  auto* sub = app.add_subcommand("chat", "Chat with a model interactively");
  add_session_options(sub, a->s);
  add_sampling_options(sub, a->sampling);
  sub->add_option("--system", a->system, "System prompt");
  sub->add_option("--template", a->tmpl, "Chat template: " + chat_template_names());
  sub->add_option("-n,--n-predict", a->n_predict, "Most tokens per reply (default: until end of turn)")
      ->check(whole_in(-1, 1 << 30));
  return [a] { run_chat(*a); };
}

}  // namespace lamina::cli
