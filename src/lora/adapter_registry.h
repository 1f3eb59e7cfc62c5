// AdapterRegistry: the host-side level of the adapter cache (vLLM's max_cpu_loras).
// Names map to paths; loaded adapters are kept in an LRU of at most max_cpu_loras
// entries and re-read from disk when needed again. Every (re)registration gets a fresh
// uid, so a name reloaded with different weights is a different adapter everywhere
// (device slots, prefix-cache keys). The adapter's tokenizer (tokenizer/adapter_tokenizer.h)
// is read once at registration and kept with the name, not with the weights: evicting the
// weights from the LRU keeps it, re-registering the name reads it again.
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
#include "tokenizer/tokenizer.h"

namespace quiver {

struct AdapterInfo {
  std::string name;
  std::string path;
  uint64_t uid = 0;
  int max_rank = 0;
  int64_t vocab_size = 0;  // the base vocabulary + the tokens the adapter adds
  // What its requests' text goes through: its own, or the base model's (null: none, token
  // ids only). Immutable and shared, so any thread may use it while it holds this.
  std::shared_ptr<const Tokenizer> tokenizer;
  // Folders the adapter's files must really lie in on every load from disk; empty = any.
  std::vector<std::string> allowlist;
};

class AdapterRegistry {
 public:
  // vocab / slot_dtype: what the device slots hold (lora/slot_pool.h); an adapter whose
  // vocabulary rows do not fit is refused at add, not at its first request.
  // base_tokenizer: the base model's (null: none), for adapters without one of their own.
  // base_rows: the base's embed_tokens / lm_head, so that whole matrices an adapter saves take
  // slot rows only where they differ (load_peft_adapter); null: every row.
  AdapterRegistry(ModelConfig base, int max_lora_rank, int max_cpu_loras, VocabLimits vocab = {},
                  DType slot_dtype = DType::kF32, std::shared_ptr<const Tokenizer> base_tokenizer = nullptr,
                  std::shared_ptr<const BaseVocab> base_rows = nullptr);

  // Validates the adapter fully (loads it and its tokenizer) before it becomes visible.
  // Errors: name taken, anything load_peft_adapter or load_adapter_tokenizer refuses.
  // `allowlist` is checked again on every reload. add = load + register_loaded.
  Result<AdapterInfo> add(const std::string& name, const std::string& path,
                          const std::vector<std::string>& allowlist = {});

  // An adapter read and validated but not registered: for callers with checks of their own
  // to pass before the name becomes visible (a request naming a new adapter by path).
  struct Loaded {
    AdapterInfo info;  // uid 0 until registered
    std::shared_ptr<const LoraAdapter> weights;
  };
  Result<Loaded> load(const std::string& name, const std::string& path,
                      const std::vector<std::string>& allowlist = {}) const;
  // Registers what load() gave under a fresh uid. Error: the name was taken meanwhile.
  Result<AdapterInfo> register_loaded(Loaded loaded);
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
  std::shared_ptr<const Tokenizer> base_tokenizer_;
  std::shared_ptr<const BaseVocab> base_rows_;
  mutable std::mutex mu_;
  uint64_t next_uid_ = 1;
  int64_t loads_ = 0;
  std::vector<AdapterInfo> registered_;
  std::list<std::pair<uint64_t, std::shared_ptr<const LoraAdapter>>> lru_;  // front = most recent
};

}  // namespace quiver
