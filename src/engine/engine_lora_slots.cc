#include "engine/engine_lora_slots.h"

#include "parallel/tensor_shard.h"

namespace quiver {

Result<int> EngineLoraSlots::acquire(uint64_t uid) {
  if (pools_.empty()) return Status::error("LoRA is not enabled (start with --enable-lora)");
  if (pools_[0]->slot_of(uid) >= 0) return acquire_everywhere(uid, nullptr);  // resident: no weights needed
  // Requests hold their adapter's host weights, so an adapter removed from the registry
  // while requests for it still wait can still be loaded for them.
  auto held = held_.find(uid);
  if (held != held_.end()) {
    if (auto adapter = held->second.lock()) return acquire_everywhere(uid, adapter.get());
    held_.erase(held);
  }
  auto adapter = registry_->get(uid);
  if (!adapter.is_ok()) return adapter.status();
  return acquire_everywhere(uid, adapter.value().get());
}

Result<int> EngineLoraSlots::acquire_everywhere(uint64_t uid, const LoraAdapter* adapter) {
  const int world = static_cast<int>(pools_.size());
  if (world == 1) return pools_[0]->acquire(uid, adapter ? *adapter : empty_);
  std::vector<Result<int>> got(pools_.size(), Status::error("not run"));
  threads_->run([&](int r) {
    if (adapter == nullptr) {
      got[static_cast<size_t>(r)] = pools_[static_cast<size_t>(r)]->acquire(uid, empty_);
      return;
    }
    const LoraAdapter part = shard_lora_adapter(*adapter, config_, {r, world});
    got[static_cast<size_t>(r)] = pools_[static_cast<size_t>(r)]->acquire(uid, part);
  });
  for (const auto& g : got) {
    if (!g.is_ok()) return g.status();
    check(g.value() == got[0].value(), "LoRA slots: the ranks' pools chose different slots");
  }
  return got[0];
}

}  // namespace quiver
