// EngineRank: what one tensor-parallel rank of an engine owns (the whole model's, on rank 0
// alone, without tensor parallelism): its device, its shard of the weights, of the LoRA slot
// stacks and of the KV cache, and the runner that executes every step on them. The
// scheduler, the adapter registry and sampling exist once, in the engine.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "engine/model_runner.h"
#include "kv/kv_cache.h"
#include "lora/slot_pool.h"
#include "model/llama.h"
#include "backend/communicator.h"

namespace quiver {

// Members in the order they are built; destroyed in reverse, the runner first.
struct EngineRank {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Communicator> comm;  // null without tensor parallelism
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<LoraSlotPool> slots;
  std::unique_ptr<KvCache> kv;
  std::unique_ptr<ModelRunner> runner;
};

}  // namespace quiver
