// Paged KV memory bookkeeping for many sequences (issue #30's block manager; the backends'
// paged caches index their memory by these block ids). The cache is a pool of blocks of
// `block_tokens` positions; each sequence has a block table (its positions' blocks in order).
//
// Prefix caching: a full block whose KV has been computed is registered under its content, the
// block before it plus its tokens, so equal prefixes map to the same chain of blocks (compared
// exactly, never by hash alone). A new sequence reuses the longest registered chain of its
// prompt, reference counted; a block nobody uses any more stays registered and is evicted,
// least recently freed first, only when a block is needed. At least the prompt's last token is
// always left to compute, since its logits start the generation.
//
// Window pool: a model whose sliding-window layers (Gemma 3's local layers) read only their last
// `window` positions may give those layers a pool of their own, smaller than the main one. A
// sequence then has a second table, its window layers' blocks: those of positions a query still
// to come may read are held, the ones wholly before the window of the sequence's first position
// not yet computed are let go (their entries stay in the table, stale: no kernel reads them). A
// window block held when its main block is registered is attached to it, and stays cached with
// it (least recently freed first, evicted on its own), so that a prefix found in the cache comes
// with the window layers' keys and values of its last window; a prefix whose window blocks were
// evicted is reused only up to where they are all there.
#pragma once

#include <algorithm>
#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace lamina {

// The window layers' pool: positions a window layer's query reads (the model's largest window)
// and the pool's blocks; n_blocks 0: none (the window layers use the main tables).
struct KvWindowPool {
  int window = 0;
  int n_blocks = 0;
};

class KvBlockManager {
 public:
  using SeqId = int64_t;
  // prefix_cache false: no block is ever shared (each sequence computes its whole prompt).
  KvBlockManager(int n_blocks, int block_tokens, bool prefix_cache = true, KvWindowPool window = {});

  // Admits a sequence and its prompt: registered prefix blocks are shared, the rest allocated.
  // Returns how many leading prompt tokens already have their KV (not to be computed again), or
  // nullopt when there are not enough blocks (then nothing changes). With a window pool, one
  // window block must be free besides (hold_window takes the prompt's as it is computed).
  std::optional<int> add_sequence(SeqId id, std::span<const int32_t> prompt);
  // One more token at the end of a sequence (a block allocated when the last one is full; with a
  // window pool, its window block too, and the window blocks before its window let go); false
  // when no block is left (the caller preempts a sequence), and the tables stay as they were.
  bool append(SeqId id, int32_t token);
  // The block of the sequence's next token taken ahead of the token (append then uses it): for a
  // step started before the token is known (the engine's run-ahead). True when the table already
  // has it; false when no block is left (nothing changes). Likewise its window block.
  bool reserve_next(SeqId id);
  // Window pool: positions from .. to - 1 of the sequence are computed next (from: its first not
  // computed): the window blocks wholly before the window of `from` are let go, then those of as
  // many of the positions as the pool has blocks for are held. Returns the end of the positions
  // held (to when all are; from when none). Without a window pool: to.
  int hold_window(SeqId id, int from, int to);
  // The KV of the sequence's first n_computed tokens is now in its blocks: its full blocks up to
  // there become shareable.
  void commit(SeqId id, int n_computed);
  // The sequence leaves: its blocks are released (registered ones stay cached).
  void free_sequence(SeqId id);

  const std::vector<int32_t>& block_table(SeqId id) const;
  // The window layers' blocks of each position (entries before the held ones are stale).
  const std::vector<int32_t>& window_table(SeqId id) const;
  bool windowed() const { return !wblocks_.empty(); }
  int window_blocks() const { return int(wblocks_.size()); }
  int window_used_blocks() const;  // held by a live sequence
  int block_tokens() const { return block_tokens_; }
  bool prefix_cache() const { return prefix_cache_; }
  int n_blocks() const { return int(blocks_.size()); }
  int used_blocks() const;    // referenced by a live sequence
  int cached_blocks() const;  // unreferenced but registered (evictable)
  int free_blocks() const;    // neither
  // Positions of the used blocks that hold no token (the last block of each sequence is part full).
  double waste() const;
  bool has_sequence(SeqId id) const { return seqs_.count(id) != 0; }
  // Prompt tokens admitted with their KV found in the prefix cache, since construction.
  int64_t reused_tokens() const { return reused_tokens_; }

 private:
  struct Block {
    int refs = 0;
    bool registered = false;
    int32_t parent = -1;          // the block before it in its registered chain
    std::vector<int32_t> tokens;  // its content when registered
    std::list<int32_t>::iterator lru;
    int32_t wblock = -1;  // the window block attached (registered blocks only), or -1
  };
  struct WBlock {
    int refs = 0;
    int32_t owner = -1;  // the registered main block it is attached to, or -1
    std::list<int32_t>::iterator lru;
  };
  struct Seq {
    std::vector<int32_t> tokens;
    std::vector<int32_t> table;
    std::vector<int32_t> wtable;  // window blocks, held from wfirst on
    int wfirst = 0;
  };
  static uint64_t key_hash(int32_t parent, std::span<const int32_t> tokens);
  const Seq& live(SeqId id) const;  // an admitted sequence (throws for another id)
  Seq& live(SeqId id);

  int available() const { return int(free_.size() + lru_.size()); }
  int32_t take_block();  // a free block, or the least recently freed cached one (unregistered)
  void release(int32_t b);
  int32_t find_registered(int32_t parent, std::span<const int32_t> tokens) const;
  void unregister(int32_t b);
  // The window pool's side (kv_blocks.cpp).
  int wavailable() const { return int(wfree_.size() + wlru_.size()); }
  int first_window_block(int from) const { return std::max(0, from - window_ + 1) / block_tokens_; }
  int32_t take_wblock();  // a free window block, or the least recently freed cached one (detached)
  void release_w(int32_t w);
  void detach_w(int32_t b);  // main block b leaves the registry: its window block goes with it
  void let_go_window(Seq& s, int from);
  int window_hits(std::span<const int32_t> hits) const;  // of the leading hits, those usable

  int block_tokens_;
  bool prefix_cache_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;
  std::list<int32_t> lru_;  // cached blocks, least recently freed first
  std::unordered_multimap<uint64_t, int32_t> index_;
  std::unordered_map<SeqId, Seq> seqs_;
  int64_t reused_tokens_ = 0;
  int window_ = 0;
  std::vector<WBlock> wblocks_;
  std::vector<int32_t> wfree_;
  std::list<int32_t> wlru_;  // cached window blocks, least recently freed first
};

}  // namespace lamina
