// EngineLoraSlots: the scheduler's view of device LoRA slots, bridging the host
// AdapterRegistry (weights, loaded on demand) and the device LoraSlotPool.
#pragma once

#include <map>
#include <memory>

#include "lora/adapter_registry.h"
#include "lora/slot_pool.h"
#include "sched/scheduler.h"

namespace quiver {

class EngineLoraSlots : public LoraSlotProvider {
 public:
  EngineLoraSlots(AdapterRegistry* registry, LoraSlotPool* pool) : registry_(registry), pool_(pool) {}

  bool can_acquire(uint64_t uid) const override { return pool_ != nullptr && pool_->can_acquire(uid); }
  Result<int> acquire(uint64_t uid) override {
    if (pool_ == nullptr) return Status::error("LoRA is not enabled (start with --enable-lora)");
    int slot = pool_->slot_of(uid);
    if (slot >= 0) return pool_->acquire(uid, empty_);  // resident: no weights needed
    // Requests hold their adapter's host weights, so an adapter removed from the registry
    // while requests for it still wait can still be loaded for them.
    auto held = held_.find(uid);
    if (held != held_.end()) {
      if (auto adapter = held->second.lock()) return pool_->acquire(uid, *adapter);
      held_.erase(held);
    }
    auto adapter = registry_->get(uid);
    if (!adapter.is_ok()) return adapter.status();
    return pool_->acquire(uid, *adapter.value());
  }
  // Remembers the host weights a request holds for `uid` (weakly: the request owns them).
  void hold(uint64_t uid, const std::shared_ptr<const LoraAdapter>& adapter) { held_[uid] = adapter; }
  void release(int slot) override { pool_->release(slot); }

 private:
  AdapterRegistry* registry_;
  LoraSlotPool* pool_;
  LoraAdapter empty_;
  std::map<uint64_t, std::weak_ptr<const LoraAdapter>> held_;
};

}  // namespace quiver
