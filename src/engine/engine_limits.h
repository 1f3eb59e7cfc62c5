// Upper bounds on the flags that size memory or threads, checked before anything is
// allocated: a value too large for this machine is a clear error giving the memory it
// would need, not an OOM kill or "host allocation failed" minutes later.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "engine/engine_args.h"
#include "io/model_config.h"

namespace quiver {

// What the flags are checked against: the memory the engine's buffers live in (device
// memory for cuda, physical RAM for host backends) and the KV bytes per block.
struct EngineLimitsInput {
  int64_t memory_bytes = 0;     // 0 = unknown: only the fixed bounds apply
  int64_t kv_bytes_per_block = 0;
  int max_model_len = 0;        // as resolved (the flag or max_position_embeddings)
};

// The memory the LoRA slot stacks, an explicit --num-kv-blocks, the RoPE tables and the
// per-step buffers would take, against the machine's (the fixed bounds are validate's,
// engine_args.h). No check without memory_bytes.
Status check_engine_limits(const EngineArgs& args, const ModelConfig& config, const EngineLimitsInput& in);

// Physical RAM of this machine in bytes (0 if unknown).
int64_t host_memory_bytes();
// RAM that can be allocated without swapping now (MemAvailable; 0 if unknown).
int64_t host_memory_available();

}  // namespace quiver
