// EngineLoraSlots: the scheduler's view of device LoRA slots, bridging the host
// AdapterRegistry (weights, loaded on demand) and the device LoraSlotPools, one per
// tensor-parallel rank (one without tensor parallelism). Every pool sees the same acquires
// and releases in the same order, so an adapter lands in the same slot on every rank, each
// rank holding its slice of it (parallel/tensor_shard.h).
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "lora/adapter_registry.h"
#include "lora/slot_pool.h"
#include "parallel/rank_threads.h"
#include "sched/scheduler.h"

namespace quiver {

class EngineLoraSlots : public LoraSlotProvider {
 public:
  // pools: rank r's at r; empty when LoRA is not enabled. threads: the ranks' (a slot is
  // written by its rank's thread).
  EngineLoraSlots(AdapterRegistry* registry, std::vector<LoraSlotPool*> pools, const ModelConfig& config,
                  RankThreads* threads)
      : registry_(registry), pools_(std::move(pools)), config_(config), threads_(threads) {}
  bool can_acquire(uint64_t uid) const override { return !pools_.empty() && pools_[0]->can_acquire(uid); }
  Result<int> acquire(uint64_t uid) override;
  // Remembers the host weights a request holds for `uid` (weakly: the request owns them).
  void hold(uint64_t uid, const std::shared_ptr<const LoraAdapter>& adapter) { held_[uid] = adapter; }
  void release(int slot) override {
    for (LoraSlotPool* pool : pools_) pool->release(slot);
  }

 private:
  // LoraSlotPool::acquire on every rank, with its slice of `adapter` (null: resident).
  Result<int> acquire_everywhere(uint64_t uid, const LoraAdapter* adapter);

  AdapterRegistry* registry_;
  std::vector<LoraSlotPool*> pools_;
  ModelConfig config_;
  RankThreads* threads_;
  LoraAdapter empty_;
  std::map<uint64_t, std::weak_ptr<const LoraAdapter>> held_;
};

}  // namespace quiver
