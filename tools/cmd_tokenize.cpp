// lamina tokenize / detokenize.
#include "commands.h"
#include "core/error.h"
#include "core/files.h"
#include "format/gguf.h"
#include "format/tokenizer.h"
#include "session_args.h"

#include <fmt/format.h>


namespace lamina::cli {
namespace {

struct TokenizeArgs {
  std::string model, prompt, file;
  bool no_bos = false, parse_special = false, pieces = false;
};

void run_tokenize(const TokenizeArgs& a) {
  const GgufFile f = GgufFile::open(a.model);
  const Tokenizer tok = Tokenizer::from_gguf(f);
  const std::string text = a.file.empty() ? a.prompt : read_text_file(a.file);
  const auto ids = tok.tokenize(text, !a.no_bos, a.parse_special);
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) line += ' ';
    line += std::to_string(ids[i]);
    if (a.pieces) {
      std::string p = tok.token_to_piece(ids[i], true);
      std::string esc;
      for (char c : p) esc += c == '\n' ? std::string("\\n") : std::string(1, c);
      line += ":'" + esc + "'";
    }
  }
  fmt::print("{}\n", line);
}

struct DetokenizeArgs {
  std::string model;
  std::vector<std::string> ids;
  bool special = false;
};

void run_detokenize(const DetokenizeArgs& a) {
  const GgufFile f = GgufFile::open(a.model);
  const Tokenizer tok = Tokenizer::from_gguf(f);
  std::string all;  // accepts "1 2 3" as one argument too
  for (const auto& group : a.ids) all += group + " ";
  const std::vector<Token> ids = parse_token_list(all, tok.n_vocab());
  fmt::print("{}\n", tok.detokenize(ids, false, a.special));
}

}  // namespace

Run add_tokenize(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  auto* sub = app.add_subcommand("tokenize", "Print the token ids of a text");
  sub->add_option("-m,--model", a->model, "GGUF file with a tokenizer")->required();
  auto* p = sub->add_option("-p,--prompt", a->prompt, "Text to tokenize");
  auto* f = sub->add_option("-f,--file", a->file, "Read the text from a file");
  p->excludes(f);
  sub->add_flag("--no-bos", a->no_bos, "Add no special tokens (BOS/EOS)");
  sub->add_flag("--parse-special", a->parse_special, "Match special tokens written in the text");
  sub->add_flag("--pieces", a->pieces, "Print each token's piece next to its id");
  sub->callback([p, f] {
    if (p->count() == 0 && f->count() == 0) throw CLI::RequiredError("-p or -f");
  });
  return [a] { run_tokenize(*a); };
}

Run add_detokenize(CLI::App& app) {
  auto a = std::make_shared<DetokenizeArgs>();
  auto* sub = app.add_subcommand("detokenize", "Print the text of token ids");
  sub->add_option("-m,--model", a->model, "GGUF file with a tokenizer")->required();
  sub->add_option("ids", a->ids, "Token ids")->required();
  sub->add_flag("--special", a->special, "Render special tokens");
  return [a] { run_detokenize(*a); };
}

}  // namespace lamina::cli
