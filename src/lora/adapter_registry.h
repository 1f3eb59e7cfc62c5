// AdapterRegistry: the host-side level of the adapter cache (vLLM's max_cpu_loras).
// Names map to paths; loaded adapters are kept in an LRU of at most max_cpu_loras
// entries and re-read from disk when needed again. Every (re)registration gets a fresh
// uid, so a name reloaded with different weights is a different adapter everywhere
// (device slots, prefix-cache keys).
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/model_config.h"
#include "io/peft_adapter.h"
#include "lora/slot_pool.h"

namespace quiver {

struct AdapterInfo {
  std::string name;
  std::string path;
  uint64_t uid = 0;
  int max_rank = 0;
  int64_t vocab_size = 0;  // the base vocabulary + the tokens the adapter adds
  // Folders the adapter's files must really lie in on every load from disk; empty = any.
  std::vector<std::string> allowlist;
};

class AdapterRegistry {
 public:
  // vocab / slot_dtype: what the device slots hold (lora/slot_pool.h); an adapter whose
  // vocabulary rows do not fit is refused at add, not at its first request. base_rows: the
  // base's embed_tokens / lm_head, so that whole matrices an adapter saves take slot rows only
  // where they differ (load_peft_adapter); null: every row.
  AdapterRegistry(ModelConfig base, int max_lora_rank, int max_cpu_loras, VocabLimits vocab = {},
                  DType slot_dtype = DType::kF32, std::shared_ptr<const BaseVocab> base_rows = nullptr);

  // Validates the adapter fully (loads it) before it becomes visible. Errors: name taken,
  // anything load_peft_adapter refuses. `allowlist` is checked again on every reload.
  Result<AdapterInfo> add(const std::string& name, const std::string& path,
                          const std::vector<std::string>& allowlist = {});
  // Forgets the name. Requests already holding the adapter keep their shared_ptr.
  Status remove(const std::string& name);
  Result<AdapterInfo> find(const std::string& name) const;  // error: unknown adapter, listing known names
  std::vector<AdapterInfo> list() const;                    // in registration order

  // The host weights of a registered adapter, from the LRU or re-read from disk.
  Result<std::shared_ptr<const LoraAdapter>> get(uint64_t uid);

  int max_lora_rank() const { return max_lora_rank_; }
  int num_cached() const;  // adapters currently held in host memory by the LRU
  int64_t loads() const;   // adapters read from disk so far (add + reloads after eviction)

 private:
  ModelConfig base_;
  int max_lora_rank_;
  int max_cpu_loras_;
  VocabLimits vocab_;
  DType slot_dtype_;
  std::shared_ptr<const BaseVocab> base_rows_;
  mutable std::mutex mu_;
  uint64_t next_uid_ = 1;
  int64_t loads_ = 0;
  std::vector<AdapterInfo> registered_;
  std::list<std::pair<uint64_t, std::shared_ptr<const LoraAdapter>>> lru_;  // front = most recent
};

}  // namespace quiver
