#include "kv/block_pool.h"

#include <algorithm>

#include <xxhash.h>

#include "core/check.h"

namespace quiver {

BlockPool::BlockPool(int num_blocks, int block_size, bool enable_prefix_caching)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      caching_(enable_prefix_caching),
      ref_(num_blocks, 0),
      hash_of_(num_blocks, 0),
      free_pos_(num_blocks),
      in_free_(num_blocks, true) {
  for (int b = 0; b < num_blocks; ++b) free_pos_[b] = free_list_.insert(free_list_.end(), b);
}

int BlockPool::num_free() const { return static_cast<int>(free_list_.size()); }

std::optional<int> BlockPool::allocate() {
  if (free_list_.empty()) return std::nullopt;
  // Never-published blocks sit at the front (see free()), so cached blocks are evicted last.
  int b = free_list_.front();
  free_list_.pop_front();
  in_free_[b] = false;
  if (hash_of_[b] != 0) {
    auto it = cached_.find(hash_of_[b]);
    if (it != cached_.end() && it->second == b) cached_.erase(it);
    hash_of_[b] = 0;
  }
  ref_[b] = 1;
  return b;
}

void BlockPool::free(int b) {
  check(b >= 0 && b < num_blocks_ && ref_[b] > 0, "freeing a block that is not in use");
  if (--ref_[b] > 0) return;
  in_free_[b] = true;
  // Unpublished blocks go first in line for reuse; published ones at the back (LRU).
  free_pos_[b] = hash_of_[b] == 0 ? free_list_.insert(free_list_.begin(), b) : free_list_.insert(free_list_.end(), b);
}

uint64_t BlockPool::hash_block(uint64_t parent_hash, std::span<const int32_t> tokens, uint64_t lora_uid) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, &parent_hash, sizeof(parent_hash));
  XXH3_64bits_update(st, &lora_uid, sizeof(lora_uid));
  XXH3_64bits_update(st, tokens.data(), tokens.size_bytes());
  uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h == 0 ? 1 : h;  // 0 means "unpublished"
}

uint64_t BlockPool::salt_root(std::string_view salt) {
  const uint64_t h = XXH3_64bits(salt.data(), salt.size());
  return h == 0 ? 1 : h;
}

bool BlockPool::reset_prefix_cache() {
  if (num_used() > 0) return false;
  cached_.clear();
  std::fill(hash_of_.begin(), hash_of_.end(), 0);
  return true;
}

std::vector<int> BlockPool::match_prefix(std::span<const int32_t> tokens, uint64_t lora_uid, uint64_t root) {
  std::vector<int> out;
  if (!caching_) return out;
  uint64_t h = root;
  for (size_t start = 0; start + block_size_ <= tokens.size(); start += block_size_) {
    h = hash_block(h, tokens.subspan(start, block_size_), lora_uid);
    auto it = cached_.find(h);
    if (it == cached_.end()) break;
    int b = it->second;
    if (in_free_[b]) {
      free_list_.erase(free_pos_[b]);
      in_free_[b] = false;
    }
    ++ref_[b];
    out.push_back(b);
  }
  return out;
}

void BlockPool::publish(int b, uint64_t hash) {
  if (!caching_ || hash_of_[b] != 0) return;
  if (cached_.count(hash)) return;  // an identical block is already cached; keep that one
  hash_of_[b] = hash;
  cached_[hash] = b;
}

}  // namespace quiver
