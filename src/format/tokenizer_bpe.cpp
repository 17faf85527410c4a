// Byte-level BPE by merge ranks (tokenizer.ggml.model = "gpt2"), formats.md §4.3.
// Words come from the pre-tokenizer; each word's bytes are mapped through the GPT-2 byte map,
// then adjacent symbols are merged lowest rank first (ties: leftmost).
#include "format/pretokenize.h"
#include "format/tokenizer.h"
#include "format/unicode.h"

#include <queue>

namespace lamina {
namespace {

struct Sym {
  int prev, next;
  size_t begin, len;
};
struct Bigram {
  int left, right;
  int rank;
  size_t len;
};
struct BigramOrder {  // min-heap by rank, then smallest left index
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

int Tokenizer::merge_rank(std::string_view left, std::string_view right) const {
  std::string key;
  key.reserve(left.size() + right.size() + 1);
  key.append(left).append(" ").append(right);
  auto it = merges_.find(key);
  return it == merges_.end() ? -1 : it->second;
}

void Tokenizer::tokenize_bpe(const std::string& text, std::vector<Token>& out) const {
  for (const std::string& raw_word : pretok_->split(text)) {
    std::string word;
    for (char c : raw_word) word += byte_to_unicode(uint8_t(c));
    if (ignore_merges_) {
      const Token t = find(word);
      if (t >= 0) {
        out.push_back(t);
        continue;
      }
    }
    std::vector<Sym> syms;
    for (size_t off = 0; off < word.size();) {
      const size_t len = std::min(size_t(utf8_len(static_cast<unsigned char>(word[off]))), word.size() - off);
      syms.push_back({int(syms.size()) - 1, int(syms.size()) + 1, off, len});
      off += len;
    }
    if (syms.empty()) continue;
    syms.back().next = -1;
    std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
    auto sv = [&](const Sym& s) { return std::string_view(word).substr(s.begin, s.len); };
    auto try_add = [&](int l, int r) {
      if (l < 0 || r < 0) return;
      const int rank = merge_rank(sv(syms[size_t(l)]), sv(syms[size_t(r)]));
      if (rank < 0) return;
      queue.push({l, r, rank, syms[size_t(l)].len + syms[size_t(r)].len});
    };
    for (size_t i = 1; i < syms.size(); ++i) try_add(int(i) - 1, int(i));
    while (!queue.empty()) {
      const Bigram bg = queue.top();
      queue.pop();
      Sym& l = syms[size_t(bg.left)];
      Sym& r = syms[size_t(bg.right)];
      if (l.len == 0 || r.len == 0 || l.len + r.len != bg.len || l.next != bg.right) continue;
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) syms[size_t(r.next)].prev = bg.left;
      try_add(l.prev, bg.left);
      try_add(bg.left, l.next);
    }
    for (int i = 0; i != -1; i = syms[size_t(i)].next) {
      const std::string_view s = sv(syms[size_t(i)]);
      const Token t = find(s);
      if (t >= 0) {
        out.push_back(t);
        continue;
      }
      for (char c : s) {  // as llama.cpp: look up each byte as a 1-char token, drop misses
        const Token b = find(std::string(1, c));
        if (b >= 0) out.push_back(b);
      }
    }
  }
}

}  // namespace lamina
