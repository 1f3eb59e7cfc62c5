// How many KV blocks the engine allocates, from what the rest of the engine left free.
//
// GPU (vLLM's --gpu-memory-utilization): the engine may hold `utilization` x the device's
// memory. Weights, LoRA slot stacks, the runner's buffers and the scratch that the largest
// step grows (measured after a profile run of that step) are in use when the plan is made;
// the memory every process holds then, plus a reserve for the decode graphs captured after
// the cache exists, comes off the budget. The rest is the KV cache.
// Host (cpu, ref): half of the RAM available once the weights are loaded (less the weights'
// own bytes when they are mapped from their files: the page cache counts them as available).
// Either way the cache never exceeds max_num_seqs full contexts, all that can be scheduled
// at once, and an explicit --num-kv-blocks or --kv-cache-memory replaces the default.
// A plan that cannot hold one sequence of max_model_len is refused, with its numbers.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace quiver {

struct KvPlanInput {
  bool device = false;                 // true: GPU memory (utilization); false: host RAM
  int64_t total = 0;                   // the device's memory, or the host's physical RAM
  int64_t free = 0;                    // free now (GPU, every process), or MemAvailable (host)
  double gpu_memory_utilization = 0.9;
  int64_t reserve = 0;                 // GPU: what the decode graphs will take
  int64_t mapped_weights = 0;          // host: weight bytes read in place from their files
  int64_t kv_cache_memory = 0;         // --kv-cache-memory in bytes; 0: not given
  int num_kv_blocks = 0;               // --num-kv-blocks; 0: not given
  int64_t bytes_per_block = 0;         // K and V of every layer for block_size tokens
  int block_size = 16;
  int max_model_len = 1;
  int max_num_seqs = 1;
};

struct KvPlan {
  int num_blocks = 0;
  int64_t budget = 0;   // the bytes the default divided (0 with explicit flags)
  std::string source;   // how the size was chosen, for the start-up report
};

Result<KvPlan> plan_kv_cache(const KvPlanInput& in);

// What the engine holds in memory after start-up, for the report and for callers.
struct MemoryReport {
  int64_t weights = 0;
  int64_t lora_slots = 0;
  int64_t activations = 0;  // step buffers and scratch, at their largest step's size
  int64_t graphs = 0;       // decode graphs, measured after capture (GPU)
  int64_t kv_cache = 0;
  int64_t kv_tokens = 0;
  int max_model_len = 0;
  std::string kv_source;    // KvPlan::source
  // How many sequences of max_model_len tokens the KV cache holds at once.
  double max_concurrency() const { return max_model_len > 0 ? double(kv_tokens) / max_model_len : 0; }
};

// "memory: weights 12.55 GiB, LoRA slots 0.27 GiB, ..., KV cache 110.31 GiB (source); KV cache:
// 225920 tokens, maximum concurrency 55.16x at 4,096 tokens per request".
std::string describe(const MemoryReport& r);

// "12.55 GiB" (digits after the point: 2, or as given).
std::string format_gib(double bytes, int digits = 2);

}  // namespace quiver
