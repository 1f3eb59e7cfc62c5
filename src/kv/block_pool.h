// BlockPool: the paged KV cache's block accounting (no tensors here). Blocks are
// ref-counted; full blocks can be published under a chained hash of (parent hash,
// their tokens, adapter uid) for automatic prefix caching, and stay reusable after
// their last owner frees them until evicted (LRU among unreferenced blocks). A chain
// starts from 0, or from a request's cache salt (vLLM's cache_salt), so that requests
// with different salts never share a block.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace quiver {

class BlockPool {
 public:
  BlockPool(int num_blocks, int block_size, bool enable_prefix_caching);

  int num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  int num_free() const;  // blocks allocatable now (free + cached-unreferenced)
  int num_used() const { return num_blocks_ - num_free(); }

  // A fresh block (evicting a cached one if needed), ref count 1; nullopt when none.
  std::optional<int> allocate();
  void free(int block);  // drops one reference

  // Chained hash of one full block.
  static uint64_t hash_block(uint64_t parent_hash, std::span<const int32_t> tokens, uint64_t lora_uid);
  // The root of the chains of requests with this cache salt (never 0, the unsalted root).
  static uint64_t salt_root(std::string_view salt);
  // Longest run of cached full blocks for these tokens (each hit gains a reference), the
  // chain starting from `root`.
  std::vector<int> match_prefix(std::span<const int32_t> tokens, uint64_t lora_uid, uint64_t root = 0);
  // Publishes a full block under its hash (no-op if caching is off or already published).
  void publish(int block, uint64_t hash);
  // Forgets every published block, as vLLM's reset_prefix_cache: only when no block is in
  // use (false otherwise, nothing changed), so no running sequence loses what it matched.
  bool reset_prefix_cache();

  // Cache hits are counted by the caller once matched blocks are actually used: a match
  // may be handed back (admission rolled back, last block recomputed) and retried.
  void record_hits(int num_blocks) { hits_ += num_blocks; }
  int64_t hits() const { return hits_; }  // blocks served from the cache so far

  // Debug views for tests and invariant checks.
  int ref_count(int block) const { return ref_[block]; }
  uint64_t published_hash(int block) const { return hash_of_[block]; }  // 0 = not in the prefix cache

 private:
  int num_blocks_;
  int block_size_;
  bool caching_;
  std::vector<int> ref_;
  std::vector<uint64_t> hash_of_;        // 0 = unpublished
  std::unordered_map<uint64_t, int> cached_;  // hash -> block
  std::list<int> free_list_;             // unreferenced: front = evict first
  std::vector<std::list<int>::iterator> free_pos_;
  std::vector<bool> in_free_;
  int64_t hits_ = 0;
};

}  // namespace quiver
