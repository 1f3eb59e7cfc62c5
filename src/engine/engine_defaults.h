// Engine defaults that depend on the device and on how the engine is used, as vLLM sets
// them: today the per-step token budget when EngineArgs::max_num_batched_tokens is 0.
#pragma once

#include <cstdint>
#include <string>

#include "engine/engine_args.h"

namespace quiver {

// Tokens per step:
// - host backends (no device memory reported): 2,048;
// - GPUs with at least 70 GiB, A100s excepted: 16,384 offline, 8,192 serving;
// - other GPUs: 8,192 offline, 2,048 serving.
// These are vLLM's defaults for the same cases. Large steps keep the prefill GEMMs busy
// (256 requests of 256 + 128 tokens over 64 adapters on an H200, Llama-2-7B shape: 5,409
// output tok/s at 2,048, 5,650 at 16,384); a server keeps them smaller, because a long
// prefill chunk delays the next token of every running request. vLLM leaves A100s at the
// smaller values: it measured the larger ones lowering throughput there.
int default_max_num_batched_tokens(const std::string& device_name, int64_t device_memory_bytes, EngineUsage usage);

}  // namespace quiver
