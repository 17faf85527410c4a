#include "format/pretokenize.h"

#include "core/error.h"
#include "format/unicode.h"

#include <pcre2.h>

#include <array>

namespace lamina {
namespace {

// GPT-2's pattern and Llama 3's, in the form llama.cpp's hand-written splitters actually run:
// a trailing `\s+` fallback, the "other" class limited to assigned code points (\p{Cn} excluded),
// and any remaining code point emitted on its own.
constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}\p{Cn}]+|\s+(?!\S)|\s+|(?s:.))";
constexpr const char* kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}\p{Cn}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+|(?s:.))";
constexpr const char* kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// DeepSeek-LLM's letter class lists the cased letters (Lu, Ll, Lt) range by range: \p{L&}.
constexpr const char* kDeepseekLlmLetters = R"(\s?\p{L&}+)";

// Unicode White_Space (llama.cpp's \s) also holds U+0085, which PCRE2's \s leaves out.
std::string widen_whitespace(std::string_view re) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    if (c == '\\' && i + 1 < re.size()) {
      const char n = re[++i];
      if (n == 's') out += in_class ? R"(\s\x{85})" : R"([\s\x{85}])";
      else if (n == 'S' && !in_class) out += R"([^\s\x{85}])";
      else { out += c; out += n; }
      continue;
    }
    if (c == '[' && !in_class) in_class = true;
    else if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

PretokenizerSpec pretokenizer_spec(std::string_view pre) {
  const std::string gpt2 = kGpt2;
  PretokenizerSpec s;
  auto is = [&](std::initializer_list<std::string_view> names) {
    for (auto n : names)
      if (pre == n) return true;
    return false;
  };
  if (is({"default", ""})) {
    s.regexes = {R"([\p{P}\$\+<=>\^~\|]+)", gpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"};
  } else if (is({"llama3", "llama-v3", "llama-bpe", "falcon3", "dbrx", "smaug-bpe"})) {
    s.regexes = {kLlama3};
    s.ignore_merges = true;
    s.add_bos = !is({"dbrx", "smaug-bpe"});
  } else if (is({"tekken"})) {
    s.regexes = {kLlama3};
    s.ignore_merges = true;
    s.add_bos = true;
  } else if (is({"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2"})) {
    s.regexes = {kQwen2};
    s.clean_spaces = is({"stablelm2"});
  } else if (is({"deepseek-llm"})) {
    s.regexes = {"[\r\n]", kDeepseekLlmLetters, R"(\s?[!-/:-~！-／：-～‘-‟　-。]+)", R"(\s+$)",
                 "[一-龥ࠀ-一가-퟿]+", R"(\p{N}+)"};
    s.clean_spaces = false;
  } else if (is({"deepseek-coder"})) {
    s.regexes = {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", "[一-龥ࠀ-一가-퟿]+", R"(\p{N})"};
    s.clean_spaces = false;
  } else if (is({"deepseek-v3"})) {
    s.regexes = {R"(\p{N}{1,3})", "[一-龥぀-ゟ゠-ヿ]+",
                 R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
    s.clean_spaces = false;
  } else if (is({"falcon"})) {
    s.regexes = {R"([\p{P}\$\+<=>\^~\|`]+)", gpt2, "[0-9][0-9][0-9]"};
  } else if (is({"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"})) {
    s.regexes = {R"(\p{N})", gpt2};
    s.clean_spaces = !is({"command-r", "smollm"});
  } else if (is({"gpt-2", "phi-2", "roberta-bpe", "mpt", "olmo", "jais", "gigachat", "poro-chat",
                 "viking", "bloom", "gpt3-finnish"}) ||
             pre.starts_with("jina-")) {
    s.regexes = {gpt2};
  } else {
    fail("unknown pre-tokenizer '{}' (tokenizer.ggml.pre)", pre);
  }
  return s;
}

struct Pretokenizer::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

Pretokenizer::Pretokenizer(const std::vector<std::string>& regexes) {
  for (const auto& r : regexes) {
    const std::string pat = widen_whitespace(r);
    int err = 0;
    PCRE2_SIZE err_off = 0;
    auto c = std::make_unique<Compiled>();
    c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(),
                            PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY | PCRE2_MATCH_INVALID_UTF,
                            &err, &err_off, nullptr);
    if (!c->code) {
      std::array<PCRE2_UCHAR, 256> msg{};
      pcre2_get_error_message(err, msg.data(), msg.size());
      fail("pre-tokenizer regex does not compile at {}: {}", err_off,
           reinterpret_cast<const char*>(msg.data()));
    }
    pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE);  // best effort: falls back to the interpreter
    res_.push_back(std::move(c));
  }
}

Pretokenizer::~Pretokenizer() = default;

std::vector<std::string> Pretokenizer::split(std::string_view raw) const {
  std::string text;
  text.reserve(raw.size());
  for (uint32_t cp : utf8_decode(raw)) utf8_append(text, cp);

  struct Piece { size_t begin, end; };
  std::vector<Piece> pieces{{0, text.size()}};
  if (text.empty()) pieces.clear();
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(
      pcre2_match_data_create(1, nullptr), &pcre2_match_data_free);
  for (const auto& re : res_) {
    std::vector<Piece> next;
    for (const Piece& p : pieces) {
      const auto* subj = reinterpret_cast<PCRE2_SPTR>(text.data() + p.begin);
      const size_t len = p.end - p.begin;
      size_t pos = 0, last = 0;
      while (pos < len) {
        const int rc = pcre2_match(re->code, subj, len, pos, 0, md.get(), nullptr);
        if (rc < 0) break;
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
        if (ov[1] == ov[0]) {  // empty match: step over one character
          pos = ov[0] + size_t(utf8_len(static_cast<unsigned char>(text[p.begin + ov[0]])));
          continue;
        }
        if (ov[0] > last) next.push_back({p.begin + last, p.begin + ov[0]});
        next.push_back({p.begin + ov[0], p.begin + ov[1]});
        last = pos = ov[1];
      }
      if (last < len) next.push_back({p.begin + last, p.end});
    }
    pieces = std::move(next);
  }
  std::vector<std::string> words;
  words.reserve(pieces.size());
  for (const Piece& p : pieces) words.emplace_back(text.substr(p.begin, p.end - p.begin));
  return words;
}

}  // namespace lamina
