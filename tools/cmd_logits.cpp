// lamina logits: runs a prompt and prints the top-K logits of the last position
// (id<TAB>logit<TAB>piece); --all FILE writes every position's logits as raw little-endian
// float32 [n_tokens][n_vocab].
#include "cli_checks.h"
#include "commands.h"
#include "core/error.h"
#include "core/files.h"
#include "session_args.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <memory>
#include <numeric>
#include <optional>

namespace lamina::cli {
namespace {

struct LogitsArgs {
  SessionArgs s;
  std::string prompt, tokens, all_file;
  bool all_given = false;  // --all was on the command line (an empty path is refused, not ignored)
  int top = 10;
};

void run_logits(const LogitsArgs& a) {
  // Checked before the model runs; the previous file stays as it was if writing fails.
  std::optional<OutputFile> all_out;
  if (a.all_given && a.all_file.empty()) fail("--all: the output path is empty");
  if (!a.all_file.empty()) all_out.emplace(a.all_file, std::array{a.s.opt.model_path});
  Session sess(a.s.resolve());
  const Tokenizer& tok = sess.tokenizer();
  const std::vector<int32_t> ids = a.tokens.empty() ? tok.tokenize(a.prompt, true, true)
                                                    : parse_token_list(a.tokens, tok.n_vocab());
  if (ids.empty()) fail("the prompt tokenises to nothing");
  if (ids.size() > size_t(sess.n_ctx()))
    fail("the prompt has {} tokens but the context holds {} (raise --ctx)", ids.size(), sess.n_ctx());
  const bool all = !a.all_file.empty();
  const std::vector<float>& logits = sess.eval(ids, all);
  const size_t V = sess.config().n_vocab;
  if (all) {
    all_out->write(logits.data(), logits.size() * sizeof(float));
    all_out->commit();
  }
  const float* last = logits.data() + (all ? logits.size() - V : 0);
  std::vector<int32_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  const size_t k = std::min<size_t>(size_t(a.top), V);
  std::partial_sort(order.begin(), order.begin() + long(k), order.end(),
                    [&](int32_t x, int32_t y) { return last[x] > last[y] || (last[x] == last[y] && x < y); });
  for (size_t i = 0; i < k; ++i) {
    std::string piece = tok.token_to_piece(order[i], true);
    std::string esc;
    for (char c : piece) esc += c == '\n' ? std::string("\\n") : c == '\t' ? std::string("\\t") : std::string(1, c);
    fmt::print("{}\t{:.6f}\t{}\n", order[i], last[order[i]], esc);
  }
}

}  // namespace

Run add_logits(CLI::App& app) {
  auto a = std::make_shared<LogitsArgs>();
  auto* sub = app.add_subcommand("logits", "Print the top logits of a prompt's last position");
  add_session_options(sub, a->s);
  auto* p = sub->add_option("-p,--prompt", a->prompt, "Prompt text (BOS added as the model asks)");
  auto* t = sub->add_option("--tokens", a->tokens, "Token ids instead of a prompt, e.g. \"1 2 3\"");
  p->excludes(t);
  sub->add_option("--top", a->top, "How many logits to print")->check(whole_in(1, 1 << 30));
  auto* all = sub->add_option("--all", a->all_file, "Write every position's logits (f32 [n_tokens][n_vocab]) to FILE");
  sub->callback([p, t, all, a] {
    if (p->count() == 0 && t->count() == 0) throw CLI::RequiredError("-p or --tokens");
    a->all_given = all->count() > 0;
  });
  return [a] { run_logits(*a); };
}

}  // namespace lamina::cli
