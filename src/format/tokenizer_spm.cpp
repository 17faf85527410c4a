// SentencePiece-style BPE by merge scores (tokenizer.ggml.model = "llama"), formats.md §4.2.
// Symbols are UTF-8 characters in a linked list; adjacent pairs whose concatenation is a vocab
// entry are merged best-score first (ties: leftmost); unknown symbols fall back to bytes.
#include "format/tokenizer.h"
#include "format/unicode.h"

#include <fmt/format.h>

#include <queue>

namespace lamina {
namespace {

struct Sym {
  int prev, next;
  size_t begin, len;  // byte span in the escaped text
};
struct Bigram {
  int left, right;
  float score;
  size_t len;
};
struct BigramOrder {  // max-heap by score, then smallest left index
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

Token Tokenizer::byte_token(uint8_t b) const {
  const Token t = find(fmt::format("<0x{:02X}>", b));
  return t >= 0 ? t : find(std::string(1, char(b)));
}

void Tokenizer::spm_resegment(const std::string& sym, std::vector<Token>& out,
                              const std::unordered_map<std::string, std::pair<std::string, std::string>>& rev) const {
  const Token t = find(sym);
  if (t >= 0) {
    out.push_back(t);
    return;
  }
  auto it = rev.find(sym);
  if (it == rev.end()) {
    for (char c : sym) {
      const Token b = byte_token(uint8_t(c));
      if (b >= 0) out.push_back(b);
    }
    return;
  }
  spm_resegment(it->second.first, out, rev);
  spm_resegment(it->second.second, out, rev);
}

void Tokenizer::tokenize_spm(const std::string& raw, std::vector<Token>& out) const {
  std::string text;  // ' ' -> U+2581
  for (char c : raw) text += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);

  std::vector<Sym> syms;
  for (size_t off = 0; off < text.size();) {
    const size_t len = std::min(size_t(utf8_len(static_cast<unsigned char>(text[off]))), text.size() - off);
    syms.push_back({int(syms.size()) - 1, int(syms.size()) + 1, off, len});
    off += len;
  }
  if (syms.empty()) return;
  syms.back().next = -1;

  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  std::unordered_map<std::string, std::pair<std::string, std::string>> rev;
  auto try_add = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const std::string a = text.substr(syms[size_t(l)].begin, syms[size_t(l)].len);
    const std::string b = text.substr(syms[size_t(r)].begin, syms[size_t(r)].len);
    const std::string joined = a + b;
    const Token t = find(joined);
    if (t < 0) return;
    queue.push({l, r, scores_[size_t(t)], joined.size()});
    rev[joined] = {a, b};
  };
  for (size_t i = 1; i < syms.size(); ++i) try_add(int(i) - 1, int(i));

  while (!queue.empty()) {
    const Bigram bg = queue.top();
    queue.pop();
    Sym& l = syms[size_t(bg.left)];
    Sym& r = syms[size_t(bg.right)];
    if (l.len == 0 || r.len == 0 || l.len + r.len != bg.len) continue;  // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[size_t(r.next)].prev = bg.left;
    try_add(l.prev, bg.left);
    try_add(bg.left, l.next);
  }
  for (int i = 0; i != -1; i = syms[size_t(i)].next)
    spm_resegment(text.substr(syms[size_t(i)].begin, syms[size_t(i)].len), out, rev);
}

}  // namespace lamina
