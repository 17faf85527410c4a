#include "engine/kv_blocks.h"

#include "core/error.h"

#include <algorithm>
#include <utility>

namespace lamina {

KvBlockManager::KvBlockManager(int n_blocks, int block_tokens, bool prefix_cache, KvWindowPool window)
    : block_tokens_(block_tokens), prefix_cache_(prefix_cache), blocks_(size_t(n_blocks)) {
  if (n_blocks <= 0 || block_tokens <= 0) fail("KV blocks: {} blocks of {} tokens", n_blocks, block_tokens);
  for (int32_t b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
  if (window.n_blocks == 0) return;
  if (window.n_blocks < 0 || window.window <= 0)
    fail("KV blocks: a window pool of {} blocks for a window of {} positions", window.n_blocks, window.window);
  window_ = window.window;
  wblocks_.resize(size_t(window.n_blocks));
  for (int32_t b = window.n_blocks - 1; b >= 0; --b) wfree_.push_back(b);
}

const KvBlockManager::Seq& KvBlockManager::live(SeqId id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) fail("KV blocks: no sequence {}", id);
  return it->second;
}

KvBlockManager::Seq& KvBlockManager::live(SeqId id) { return const_cast<Seq&>(std::as_const(*this).live(id)); }

uint64_t KvBlockManager::key_hash(int32_t parent, std::span<const int32_t> tokens) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ uint64_t(uint32_t(parent));
  for (int32_t t : tokens) {
    h ^= uint64_t(uint32_t(t)) + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ull;
  }
  return h;
}

int32_t KvBlockManager::find_registered(int32_t parent, std::span<const int32_t> tokens) const {
  const auto [lo, hi] = index_.equal_range(key_hash(parent, tokens));
  for (auto it = lo; it != hi; ++it) {
    const Block& b = blocks_[size_t(it->second)];
    if (b.parent == parent && std::equal(b.tokens.begin(), b.tokens.end(), tokens.begin(), tokens.end())) return it->second;
  }
  return -1;
}

void KvBlockManager::unregister(int32_t id) {
  detach_w(id);
  Block& b = blocks_[size_t(id)];
  const auto [lo, hi] = index_.equal_range(key_hash(b.parent, b.tokens));
  for (auto it = lo; it != hi; ++it)
    if (it->second == id) {
      index_.erase(it);
      break;
    }
  b.registered = false;
  b.parent = -1;
  b.tokens.clear();
}

namespace {
// A pool's next block: its last free one, or (evicted) its least recently freed cached one; the
// caller checked that the pool has one.
std::pair<int32_t, bool> pop_block(std::vector<int32_t>& free, std::list<int32_t>& lru) {
  if (!free.empty()) {
    const int32_t id = free.back();
    free.pop_back();
    return {id, false};
  }
  const int32_t id = lru.front();
  lru.pop_front();
  return {id, true};
}
}  // namespace

int32_t KvBlockManager::take_block() {
  const auto [id, evicted] = pop_block(free_, lru_);
  if (evicted) unregister(id);
  blocks_[size_t(id)].refs = 1;
  return id;
}

void KvBlockManager::release(int32_t id) {
  Block& b = blocks_[size_t(id)];
  if (--b.refs > 0) return;
  if (b.registered) b.lru = lru_.insert(lru_.end(), id);
  else free_.push_back(id);
}

std::optional<int> KvBlockManager::add_sequence(SeqId id, std::span<const int32_t> prompt) {
  if (seqs_.count(id)) fail("KV blocks: sequence {} is already admitted", id);
  if (prompt.empty()) fail("KV blocks: sequence {} has an empty prompt", id);
  const int bt = block_tokens_;
  const int need = int((prompt.size() + size_t(bt) - 1) / size_t(bt));
  // Registered blocks for the leading full blocks, leaving at least the last token to compute.
  std::vector<int32_t> hits;
  for (int32_t parent = -1; int(hits.size() + 1) * bt <= int(prompt.size()) - 1;) {
    const int32_t b = find_registered(parent, prompt.subspan(hits.size() * size_t(bt), size_t(bt)));
    if (b < 0) break;
    hits.push_back(b);
    parent = b;
  }
  if (windowed()) hits.resize(size_t(window_hits(hits)));
  // Reused blocks that sit in the LRU do not count as available for the rest.
  int reused_cached = 0;
  for (int32_t b : hits) reused_cached += blocks_[size_t(b)].refs == 0;
  if (need - int(hits.size()) > available() - reused_cached) return std::nullopt;
  Seq s;
  if (windowed()) {  // the hits' window blocks from the window of the first position to compute on
    s.wfirst = first_window_block(int(hits.size()) * bt);
    int reused_w = 0;
    for (size_t j = size_t(s.wfirst); j < hits.size(); ++j) reused_w += wblocks_[size_t(blocks_[size_t(hits[j])].wblock)].refs == 0;
    if (wavailable() - reused_w < 1) return std::nullopt;
    s.wtable.assign(size_t(s.wfirst), 0);  // (stale: read by no kernel)
    for (size_t j = size_t(s.wfirst); j < hits.size(); ++j) {
      const int32_t w = blocks_[size_t(hits[j])].wblock;
      if (wblocks_[size_t(w)].refs++ == 0) wlru_.erase(wblocks_[size_t(w)].lru);
      s.wtable.push_back(w);
    }
  }
  s.tokens.assign(prompt.begin(), prompt.end());
  for (int32_t b : hits) {
    Block& blk = blocks_[size_t(b)];
    if (blk.refs++ == 0) lru_.erase(blk.lru);
    s.table.push_back(b);
  }
  while (int(s.table.size()) < need) s.table.push_back(take_block());
  seqs_.emplace(id, std::move(s));
  reused_tokens_ += int64_t(hits.size()) * bt;
  return int(hits.size()) * bt;
}

bool KvBlockManager::append(SeqId id, int32_t token) {
  Seq& s = live(id);
  const int p = int(s.tokens.size());  // the token's position; every one before it is computed
  const bool block = s.tokens.size() == s.table.size() * size_t(block_tokens_);
  if (block && available() == 0) return false;
  if (windowed()) {
    let_go_window(s, p);
    if (p / block_tokens_ >= int(s.wtable.size())) {
      if (wavailable() == 0) return false;
      s.wtable.push_back(take_wblock());
    }
  }
  if (block) s.table.push_back(take_block());
  s.tokens.push_back(token);
  return true;
}

bool KvBlockManager::reserve_next(SeqId id) {
  Seq& s = live(id);
  const int p = int(s.tokens.size());
  const bool block = s.tokens.size() == s.table.size() * size_t(block_tokens_);
  const bool wblock = windowed() && p / block_tokens_ >= int(s.wtable.size());
  if ((block && available() == 0) || (wblock && wavailable() == 0)) return false;
  if (block) s.table.push_back(take_block());
  if (wblock) s.wtable.push_back(take_wblock());
  return true;
}

void KvBlockManager::commit(SeqId id, int n_computed) {
  Seq& s = live(id);
  const int bt = block_tokens_;
  const int full = prefix_cache_ ? std::min(n_computed, int(s.tokens.size())) / bt : 0;
  int32_t parent = -1;
  for (int i = 0; i < full; ++i) {
    const int32_t b = s.table[size_t(i)];
    Block& blk = blocks_[size_t(b)];
    const std::span<const int32_t> toks(s.tokens.data() + size_t(i) * size_t(bt), size_t(bt));
    // The first copy of a content is the one shared; a later copy (computed meanwhile by another
    // sequence) stays private, and the chain goes on from the shared one.
    const int32_t existing = blk.registered ? b : find_registered(parent, toks);
    if (existing < 0) {
      blk.registered = true;
      blk.parent = parent;
      blk.tokens.assign(toks.begin(), toks.end());
      index_.emplace(key_hash(parent, toks), b);
    }
    const int32_t shared = existing < 0 ? b : existing;
    // The window block the sequence holds for it goes with the shared copy (its own, or one
    // registered before whose window block was evicted): cached with it from now on.
    Block& reg = blocks_[size_t(shared)];
    if (windowed() && reg.wblock < 0 && i >= s.wfirst && i < int(s.wtable.size()) &&
        wblocks_[size_t(s.wtable[size_t(i)])].owner < 0) {
      reg.wblock = s.wtable[size_t(i)];
      wblocks_[size_t(reg.wblock)].owner = shared;
    }
    parent = shared;
  }
}

void KvBlockManager::free_sequence(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  // Released from the last block back, so that a chain's later blocks are evicted before its first.
  const Seq& s = it->second;
  for (size_t j = s.wtable.size(); j-- > size_t(s.wfirst);) release_w(s.wtable[j]);
  for (auto b = s.table.rbegin(); b != s.table.rend(); ++b) release(*b);
  seqs_.erase(it);
}

const std::vector<int32_t>& KvBlockManager::block_table(SeqId id) const {
  return live(id).table;
}

const std::vector<int32_t>& KvBlockManager::window_table(SeqId id) const {
  return live(id).wtable;
}

int KvBlockManager::window_used_blocks() const { return window_blocks() - wavailable(); }

int KvBlockManager::used_blocks() const { return n_blocks() - free_blocks() - cached_blocks(); }
int KvBlockManager::cached_blocks() const { return int(lru_.size()); }
int KvBlockManager::free_blocks() const { return int(free_.size()); }

double KvBlockManager::waste() const {
  // Each used block counted once; its tokens are those of the longest sequence that holds it.
  std::vector<int> filled(blocks_.size(), 0);
  for (const auto& [id, s] : seqs_)
    for (size_t i = 0; i < s.table.size(); ++i) {
      const int in_block = int(std::min(s.tokens.size() - std::min(s.tokens.size(), i * size_t(block_tokens_)),
                                        size_t(block_tokens_)));
      filled[size_t(s.table[i])] = std::max(filled[size_t(s.table[i])], in_block);
    }
  int64_t used = 0, held = 0;
  for (size_t b = 0; b < blocks_.size(); ++b)
    if (blocks_[b].refs > 0) used += block_tokens_, held += filled[b];
  return used ? 1.0 - double(held) / double(used) : 0.0;
}

// The window pool's side.

int32_t KvBlockManager::take_wblock() {
  const auto [w, evicted] = pop_block(wfree_, wlru_);
  if (evicted) {  // detached from the registered block it was cached with
    blocks_[size_t(wblocks_[size_t(w)].owner)].wblock = -1;
    wblocks_[size_t(w)].owner = -1;
  }
  wblocks_[size_t(w)].refs = 1;
  return w;
}

void KvBlockManager::release_w(int32_t w) {
  WBlock& b = wblocks_[size_t(w)];
  if (--b.refs > 0) return;
  if (b.owner >= 0) b.lru = wlru_.insert(wlru_.end(), w);
  else wfree_.push_back(w);
}

void KvBlockManager::detach_w(int32_t b) {
  const int32_t w = blocks_[size_t(b)].wblock;
  if (w < 0) return;
  blocks_[size_t(b)].wblock = -1;
  WBlock& wb = wblocks_[size_t(w)];
  wb.owner = -1;
  if (wb.refs == 0) {
    wlru_.erase(wb.lru);
    wfree_.push_back(w);
  }
}

// The window blocks no query from position `from` on reads: let go (their entries stay, stale).
void KvBlockManager::let_go_window(Seq& s, int from) {
  const int first = first_window_block(from);
  for (; s.wfirst < first; ++s.wfirst) {
    if (s.wfirst < int(s.wtable.size())) release_w(s.wtable[size_t(s.wfirst)]);
    else s.wtable.push_back(0);  // (never held)
  }
}

int KvBlockManager::hold_window(SeqId id, int from, int to) {
  if (!windowed() || to <= from) return to;
  Seq& s = live(id);
  let_go_window(s, from);
  const int bt = block_tokens_;
  while (int(s.wtable.size()) * bt < to) {
    if (wavailable() == 0) return std::max(from, int(s.wtable.size()) * bt);
    s.wtable.push_back(take_wblock());
  }
  return to;
}

// The prefix a sequence reuses must bring the window layers' blocks of its last window: of the
// leading hits, the most whose window blocks, from the window of the first position to compute
// on, are all attached.
int KvBlockManager::window_hits(std::span<const int32_t> hits) const {
  int k = int(hits.size());
  for (; k > 0; --k) {
    bool all = true;
    for (int j = first_window_block(k * block_tokens_); j < k && all; ++j) all = blocks_[size_t(hits[size_t(j)])].wblock >= 0;
    if (all) break;
  }
  return k;
}

}  // namespace lamina
