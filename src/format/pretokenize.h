// BPE pre-tokenizer: splits text into words by a sequence of regexes (PCRE2, Unicode
// properties). Each regex re-splits every current piece into its matches and the unmatched
// gaps between them; both are kept. The regex lists per tokenizer.ggml.pre are llama.cpp's.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lamina {

struct PretokenizerSpec {
  std::vector<std::string> regexes;
  bool ignore_merges = false;
  bool add_bos = false;
  bool clean_spaces = true;
};

// The spec for a tokenizer.ggml.pre value; throws lamina::Error naming an unknown value.
PretokenizerSpec pretokenizer_spec(std::string_view pre);

class Pretokenizer {
 public:
  explicit Pretokenizer(const std::vector<std::string>& regexes);
  ~Pretokenizer();
  // Words of `text` (UTF-8; invalid bytes are replaced by U+FFFD first).
  std::vector<std::string> split(std::string_view text) const;

 private:
  struct Compiled;
  std::vector<std::unique_ptr<Compiled>> res_;
};

}  // namespace lamina
