// EngineLoraSlots: the scheduler's view of device LoRA slots, bridging the host
// AdapterRegistry (weights, loaded on demand) and the device LoraSlotPool.
#pragma once

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
    auto adapter = registry_->get(uid);
    if (!adapter.is_ok()) return adapter.status();
    return pool_->acquire(uid, *adapter.value());
  }
  void release(int slot) override { pool_->release(slot); }

 private:
  AdapterRegistry* registry_;
  LoraSlotPool* pool_;
  LoraAdapter empty_;
};

}  // namespace quiver
