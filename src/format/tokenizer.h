// Tokenizers built from GGUF metadata, matching llama.cpp's llama-vocab behaviour:
//   - "llama": SentencePiece BPE by merge scores with byte fallback (Llama 2, Mistral)
//   - "gpt2":  byte-level BPE by merge ranks, with the pre-tokenizer regexes that
//              tokenizer.ggml.pre selects (Llama 3, SmolLM2, Qwen2, StarCoder, ...)
// See ../shared/docs/formats.md §4.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace lamina {

class GgufFile;
using Token = int32_t;

enum class TokenAttr : uint8_t {
  Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6,
};

class Pretokenizer;  // regex splitter (pretokenize.h)

class Tokenizer {
 public:
  enum class Kind { Spm, Bpe };

  static Tokenizer from_gguf(const GgufFile& f);  // throws lamina::Error
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // add_special: add BOS/EOS as the model asks; parse_special: match CONTROL tokens in text.
  std::vector<Token> tokenize(std::string_view text, bool add_special, bool parse_special) const;
  // Bytes of one token (special tokens only when `special`), as llama.cpp's token_to_piece.
  std::string token_to_piece(Token t, bool special = false) const;
  // Whole-sequence decoding as llama.cpp's detokenize (leading-space and clean-up rules).
  std::string detokenize(const std::vector<Token>& ids, bool remove_special = false,
                         bool unparse_special = false) const;

  Kind kind() const { return kind_; }
  std::string_view model_name() const { return kind_ == Kind::Spm ? "llama" : "gpt2"; }
  const std::string& pre() const { return pre_; }
  size_t n_vocab() const { return tokens_.size(); }
  const std::string& text(Token t) const { return tokens_.at(size_t(t)); }
  TokenAttr attr(Token t) const { return attrs_.at(size_t(t)); }
  bool valid(Token t) const { return t >= 0 && size_t(t) < tokens_.size(); }
  Token bos() const { return bos_; }
  Token eos() const { return eos_; }
  Token eot() const { return eot_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool is_eog(Token t) const;
  Token find(std::string_view text) const;  // -1 when absent

 private:
  Tokenizer() = default;
  void tokenize_spm(const std::string& text, std::vector<Token>& out) const;
  void tokenize_bpe(const std::string& text, std::vector<Token>& out) const;
  void spm_resegment(const std::string& sym, std::vector<Token>& out,
                     const std::unordered_map<std::string, std::pair<std::string, std::string>>& rev) const;
  Token byte_token(uint8_t b) const;
  int merge_rank(std::string_view left, std::string_view right) const;

  Kind kind_ = Kind::Spm;
  std::string pre_;
  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<TokenAttr> attrs_;
  std::unordered_map<std::string, Token> index_;
  std::unordered_map<std::string, int> merges_;  // "left right" -> rank
  std::vector<Token> special_cache_;             // CONTROL/USER_DEFINED/UNKNOWN, longest first
  std::vector<Token> eog_;
  Token bos_ = -1, eos_ = -1, eot_ = -1, unk_ = -1;
  bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = false;
  bool ignore_merges_ = false, clean_spaces_ = false;
  std::unique_ptr<Pretokenizer> pretok_;
};

}  // namespace lamina
