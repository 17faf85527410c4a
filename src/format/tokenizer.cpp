// Vocabulary loading from GGUF metadata, special-token partitioning, and decoding.
// The two merge algorithms live in tokenizer_spm.cpp and tokenizer_bpe.cpp.
#include "format/tokenizer.h"

#include "core/error.h"
#include "format/gguf.h"
#include "format/pretokenize.h"
#include "format/unicode.h"

#include <algorithm>
#include <list>

namespace lamina {

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

namespace {

constexpr std::string_view kEogTexts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                          "<|endoftext|>", "<|eom_id|>", "<EOT>"};

}  // namespace

Tokenizer Tokenizer::from_gguf(const GgufFile& f) {
  Tokenizer t;
  const std::string model = f.get_string("tokenizer.ggml.model").value_or("");
  if (model.empty()) fail("{}: missing key 'tokenizer.ggml.model' (no tokenizer in this file)", f.path());
  if (model == "llama") {
    t.kind_ = Kind::Spm;
    t.bos_ = 1; t.eos_ = 2; t.unk_ = 0;
    t.add_bos_ = true; t.add_space_prefix_ = true;
  } else if (model == "gpt2") {
    t.kind_ = Kind::Bpe;
    t.bos_ = 11; t.eos_ = 11;
    t.pre_ = f.get_string("tokenizer.ggml.pre").value_or("default");
    const PretokenizerSpec spec = pretokenizer_spec(t.pre_);
    t.pretok_ = std::make_unique<Pretokenizer>(spec.regexes);
    t.ignore_merges_ = spec.ignore_merges;
    t.add_bos_ = spec.add_bos;
    t.clean_spaces_ = spec.clean_spaces;
  } else {
    fail("{}: tokenizer model '{}' is not supported (only 'llama' and 'gpt2')", f.path(), model);
  }

  const auto* tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (!tokens || tokens->empty()) fail("{}: missing or empty 'tokenizer.ggml.tokens'", f.path());
  const size_t n = tokens->size();
  if (n > size_t(INT32_MAX)) fail("{}: {} tokens is too many", f.path(), n);
  t.tokens_ = *tokens;
  for (size_t i = 0; i < n; ++i)
    if (t.tokens_[i].empty()) t.tokens_[i] = "[EMPTY_" + std::to_string(i) + "]";

  t.scores_.assign(n, 0.f);
  if (auto sc = f.get_float_array("tokenizer.ggml.scores")) {
    if (sc->size() != n) fail("{}: 'tokenizer.ggml.scores' has {} entries for {} tokens", f.path(), sc->size(), n);
    for (size_t i = 0; i < n; ++i) t.scores_[i] = float((*sc)[i]);
  }
  t.attrs_.assign(n, TokenAttr::Normal);
  if (auto ty = f.get_int_array("tokenizer.ggml.token_type")) {
    if (ty->size() != n) fail("{}: 'tokenizer.ggml.token_type' has {} entries for {} tokens", f.path(), ty->size(), n);
    for (size_t i = 0; i < n; ++i) {
      const int64_t v = (*ty)[i];
      if (v < 0 || v > 6) fail("{}: token {} has unknown token type {}", f.path(), i, v);
      t.attrs_[i] = TokenAttr(v);
    }
  }
  t.index_.reserve(n);
  for (size_t i = 0; i < n; ++i) t.index_.emplace(t.tokens_[i], Token(i));

  if (t.kind_ == Kind::Bpe) {
    const auto* merges = f.get_string_array("tokenizer.ggml.merges");
    if (!merges) fail("{}: gpt2 tokenizer without 'tokenizer.ggml.merges'", f.path());
    t.merges_.reserve(merges->size());
    for (size_t r = 0; r < merges->size(); ++r) {
      const std::string& m = (*merges)[r];
      const size_t sp = m.find(' ', 1);
      if (sp == std::string::npos) fail("{}: merge #{} '{}' has no separating space", f.path(), r, m);
      t.merges_.emplace(m, int(r));  // keyed by "left right"; first occurrence keeps its rank
    }
  }

  auto id_key = [&](const char* key, Token& dst) {
    if (auto v = f.get_int(key)) {
      if (*v >= 0 && uint64_t(*v) < n) dst = Token(*v);
      else if (*v >= int64_t(n)) {}  // llama.cpp ignores out-of-range ids
    }
  };
  id_key("tokenizer.ggml.bos_token_id", t.bos_);
  id_key("tokenizer.ggml.eos_token_id", t.eos_);
  id_key("tokenizer.ggml.unknown_token_id", t.unk_);
  id_key("tokenizer.ggml.eot_token_id", t.eot_);
  if (auto v = f.get_bool("tokenizer.ggml.add_bos_token")) t.add_bos_ = *v;
  if (auto v = f.get_bool("tokenizer.ggml.add_eos_token")) t.add_eos_ = *v;
  if (auto v = f.get_bool("tokenizer.ggml.add_space_prefix")) t.add_space_prefix_ = *v;
  if (!t.valid(t.bos_)) t.bos_ = -1;
  if (!t.valid(t.eos_)) t.eos_ = -1;
  if (!t.valid(t.unk_)) t.unk_ = -1;

  // End-of-generation set: eos, eot and tokens whose text marks the end of a turn.
  auto add_eog = [&](Token id) {
    if (id >= 0 && std::find(t.eog_.begin(), t.eog_.end(), id) == t.eog_.end()) t.eog_.push_back(id);
  };
  add_eog(t.eos_);
  add_eog(t.eot_);
  for (auto txt : kEogTexts) {
    const Token id = t.find(txt);
    if (id < 0) continue;
    t.attrs_[size_t(id)] = TokenAttr::Control;
    add_eog(id);
    if (t.eot_ < 0 && txt != "<|eom_id|>") t.eot_ = id;
  }

  for (size_t i = 0; i < n; ++i) {
    const TokenAttr a = t.attrs_[i];
    if (a == TokenAttr::Control || a == TokenAttr::UserDefined || a == TokenAttr::Unknown)
      t.special_cache_.push_back(Token(i));
  }
  std::stable_sort(t.special_cache_.begin(), t.special_cache_.end(), [&](Token a, Token b) {
    return t.tokens_[size_t(a)].size() > t.tokens_[size_t(b)].size();
  });
  return t;
}

Token Tokenizer::find(std::string_view text) const {
  auto it = index_.find(std::string(text));
  return it == index_.end() ? -1 : it->second;
}

bool Tokenizer::is_eog(Token t) const { return std::find(eog_.begin(), eog_.end(), t) != eog_.end(); }

std::vector<Token> Tokenizer::tokenize(std::string_view text, bool add_special, bool parse_special) const {
  // 1. Partition into raw-text fragments and special tokens (longest special tokens first).
  struct Frag { Token tok; size_t begin, len; };  // tok < 0: raw text [begin, begin+len)
  std::list<Frag> frags;
  if (!text.empty()) frags.push_back({-1, 0, text.size()});
  for (Token sp : special_cache_) {
    const TokenAttr a = attrs_[size_t(sp)];
    if (!parse_special && (a == TokenAttr::Control || a == TokenAttr::Unknown)) continue;
    const std::string& st = tokens_[size_t(sp)];
    for (auto it = frags.begin(); it != frags.end(); ++it) {
      if (it->tok >= 0) continue;
      const std::string_view raw = text.substr(it->begin, it->len);
      const size_t m = raw.find(st);
      if (m == std::string_view::npos) continue;
      const size_t b = it->begin, len = it->len;
      auto pos = frags.erase(it);
      if (m > 0) frags.insert(pos, {-1, b, m});
      it = frags.insert(pos, {sp, b + m, st.size()});
      const size_t rest = len - m - st.size();
      if (rest > 0) frags.insert(pos, {-1, b + m + st.size(), rest});
      // `it` now points at the token; the loop continues with the right remainder.
    }
  }

  // 2. Tokenise each raw fragment.
  std::vector<Token> out;
  if (add_special && add_bos_ && bos_ >= 0) out.push_back(bos_);
  bool prev_special = true;  // SPM: the start of the input counts as "after a special token"
  for (const Frag& fr : frags) {
    if (fr.tok >= 0) {
      out.push_back(fr.tok);
      prev_special = true;
      continue;
    }
    std::string piece(text.substr(fr.begin, fr.len));
    if (kind_ == Kind::Spm) {
      if (add_space_prefix_ && prev_special) piece.insert(0, 1, ' ');
      tokenize_spm(piece, out);
    } else {
      tokenize_bpe(piece, out);
    }
    prev_special = false;
  }
  if (add_special && add_eos_ && eos_ >= 0) out.push_back(eos_);
  return out;
}

std::string Tokenizer::token_to_piece(Token t, bool special) const {
  if (!valid(t)) return {};
  const TokenAttr a = attrs_[size_t(t)];
  const std::string& txt = tokens_[size_t(t)];
  if (a == TokenAttr::Control || a == TokenAttr::Unknown) return special ? txt : std::string();
  if (a == TokenAttr::Byte) {
    if (kind_ == Kind::Spm && txt.size() == 6 && txt.starts_with("<0x"))
      return std::string(1, char(std::stoi(txt.substr(3, 2), nullptr, 16)));
  }
  if (kind_ == Kind::Spm) {
    std::string out;  // "▁" (E2 96 81) -> ' '
    for (size_t i = 0; i < txt.size(); ++i) {
      if (i + 2 < txt.size() && uint8_t(txt[i]) == 0xE2 && uint8_t(txt[i + 1]) == 0x96 &&
          uint8_t(txt[i + 2]) == 0x81) {
        out += ' ';
        i += 2;
      } else {
        out += txt[i];
      }
    }
    return out;
  }
  if (a == TokenAttr::UserDefined) return txt;
  std::string out;  // byte-level: map each code point back to its byte
  for (uint32_t cp : utf8_decode(txt)) {
    const int b = unicode_to_byte(cp);
    if (b >= 0) out += char(b);
    else utf8_append(out, cp);
  }
  return out;
}

std::string Tokenizer::detokenize(const std::vector<Token>& ids, bool remove_special,
                                  bool unparse_special) const {
  size_t first = 0, last = ids.size();
  bool remove_space = add_space_prefix_;
  if (remove_special && add_bos_ && last > first && ids[first] == bos_) {
    remove_space = false;
    ++first;
  }
  if (remove_special && add_eos_ && last > first && ids[last - 1] == eos_) --last;
  std::string text;
  for (size_t i = first; i < last; ++i) {
    std::string piece = token_to_piece(ids[i], unparse_special);
    if (remove_space && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    remove_space = false;
    text += piece;
  }
  if (clean_spaces_) {
    std::string o;  // " ?", " !", " .", " ,"  ->  drop the space
    for (size_t i = 0; i < text.size(); ++i) {
      const char x = text[i];
      if (x == ' ' && i + 1 < text.size() &&
          (text[i + 1] == '?' || text[i + 1] == '!' || text[i + 1] == '.' || text[i + 1] == ','))
        continue;
      o += x;
    }
    text.swap(o);
    o.clear();  // " ' " -> "'"
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] == ' ' && i + 2 < text.size() && text[i + 1] == '\'' && text[i + 2] == ' ' && i > 0) {
        o += '\'';
        i += 2;
        continue;
      }
      o += text[i];
    }
    text.swap(o);
    o.clear();  // " 's", " 'm", " 're", " 've" -> drop the space
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] == ' ' && i + 2 < text.size() && text[i + 1] == '\'') {
        const char a = text[i + 2], b = i + 3 < text.size() ? text[i + 3] : '\0';
        if (a == 's' || a == 'm' || (a == 'r' && b == 'e') || (a == 'v' && b == 'e')) continue;
      }
      o += text[i];
    }
    text.swap(o);
  }
  return text;
}

}  // namespace lamina
