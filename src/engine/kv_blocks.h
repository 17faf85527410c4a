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
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace lamina {

class KvBlockManager {
 public:
  using SeqId = int64_t;
  // prefix_cache false: no block is ever shared (each sequence computes its whole prompt).
  KvBlockManager(int n_blocks, int block_tokens, bool prefix_cache = true);

  // Admits a sequence and its prompt: registered prefix blocks are shared, the rest allocated.
  // Returns how many leading prompt tokens already have their KV (not to be computed again), or
  // nullopt when there are not enough blocks (then nothing changes).
  std::optional<int> add_sequence(SeqId id, std::span<const int32_t> prompt);
  // One more token at the end of a sequence (a block allocated when the last one is full);
  // false when no block is left (the caller preempts a sequence), and nothing changes.
  bool append(SeqId id, int32_t token);
  // The block of the sequence's next token taken ahead of the token (append then uses it): for a
  // step started before the token is known (the engine's run-ahead). True when the table already
  // has it; false when no block is left (nothing changes).
  bool reserve_next(SeqId id);
  // The KV of the sequence's first n_computed tokens is now in its blocks: its full blocks up to
  // there become shareable.
  void commit(SeqId id, int n_computed);
  // The sequence leaves: its blocks are released (registered ones stay cached).
  void free_sequence(SeqId id);

  const std::vector<int32_t>& block_table(SeqId id) const;
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
  };
  struct Seq {
    std::vector<int32_t> tokens;
    std::vector<int32_t> table;
  };
  static uint64_t key_hash(int32_t parent, std::span<const int32_t> tokens);

  int available() const { return int(free_.size() + lru_.size()); }
  int32_t take_block();  // a free block, or the least recently freed cached one (unregistered)
  void release(int32_t b);
  int32_t find_registered(int32_t parent, std::span<const int32_t> tokens) const;
  void unregister(int32_t b);

  int block_tokens_;
  bool prefix_cache_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;
  std::list<int32_t> lru_;  // cached blocks, least recently freed first
  std::unordered_multimap<uint64_t, int32_t> index_;
  std::unordered_map<SeqId, Seq> seqs_;
  int64_t reused_tokens_ = 0;
};

}  // namespace lamina
