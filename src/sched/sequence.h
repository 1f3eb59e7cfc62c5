// Sequence: one request's tokens and scheduling state, owned by the engine and shared
// with the scheduler by pointer. (n > 1 requests become n sequences.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace quiver {

enum class SeqStatus { kWaiting, kRunning, kFinished };

struct Sequence {
  int64_t seq_id = 0;          // unique, increasing with arrival (FCFS order)
  std::vector<int32_t> tokens; // prompt followed by generated tokens
  int num_prompt_tokens = 0;
  int num_computed_tokens = 0; // tokens whose K/V are in the cache (prefix hits count)
  int max_tokens = 16;         // generation budget, for admission checks

  uint64_t lora_uid = 0;       // 0 = base model; else AdapterRegistry uid
  int lora_slot = -1;          // device slot while running with an adapter
  bool needs_prompt_logits = false;  // prompt_logprobs: logits of every prompt row wanted
  int priority = 0;            // under the priority policy: lower values are served first
  uint64_t cache_salt = 0;     // root of its prefix-cache hash chain (BlockPool::salt_root; 0: none)

  SeqStatus status = SeqStatus::kWaiting;
  std::vector<int32_t> block_table;  // physical KV block ids
  std::vector<uint64_t> block_hashes;  // prefix-cache hash chain of the full blocks so far
  int num_cached_prompt_tokens = 0;  // prefix-cache hit length at last admission
  int first_cached_tokens = -1;      // the same at the first admission (-1: not yet admitted)
  int num_preemptions = 0;

  int num_tokens() const { return static_cast<int>(tokens.size()); }
  int num_generated() const { return num_tokens() - num_prompt_tokens; }
  bool in_prefill() const { return num_computed_tokens < num_prompt_tokens; }
};

}  // namespace quiver
