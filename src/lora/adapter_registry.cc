// AdapterRegistry: names -> paths -> host LRU of loaded adapters. Disk reads happen with
// the mutex released, so one slow adapter load never stalls lookups from other threads.
#include "lora/adapter_registry.h"

#include <algorithm>

#include "core/check.h"
#include "tokenizer/adapter_tokenizer.h"

namespace quiver {

AdapterRegistry::AdapterRegistry(ModelConfig base, int max_lora_rank, int max_cpu_loras, VocabLimits vocab,
                                 DType slot_dtype, std::shared_ptr<const Tokenizer> base_tokenizer,
                                 std::shared_ptr<const BaseVocab> base_rows)
    : base_(std::move(base)),
      max_lora_rank_(max_lora_rank),
      max_cpu_loras_(max_cpu_loras),
      vocab_(vocab),
      slot_dtype_(slot_dtype),
      base_tokenizer_(std::move(base_tokenizer)),
      base_rows_(std::move(base_rows)) {
  check(max_lora_rank >= 1, "AdapterRegistry: max_lora_rank must be at least 1");
  check(max_cpu_loras >= 1, "AdapterRegistry: max_cpu_loras must be at least 1");
}

namespace {

std::string known_names(const std::vector<AdapterInfo>& registered) {
  if (registered.empty()) return "no adapters are registered";
  std::string s = "known adapters: ";
  for (size_t i = 0; i < registered.size(); ++i) s += (i ? ", " : "") + registered[i].name;
  return s;
}

}  // namespace

Result<AdapterInfo> AdapterRegistry::add(const std::string& name, const std::string& path,
                                         const std::vector<std::string>& allowlist) {
  QV_ASSIGN_OR_RETURN(Loaded loaded, load(name, path, allowlist));
  return register_loaded(std::move(loaded));
}

Result<AdapterRegistry::Loaded> AdapterRegistry::load(const std::string& name, const std::string& path,
                                                      const std::vector<std::string>& allowlist) const {
  if (name.empty()) return Status::error("LoRA adapter name must not be empty");
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& r : registered_)
      if (r.name == name) return Status::error("LoRA adapter name '" + name + "' is already registered (" + r.path + ")");
  }
  Result<LoraAdapter> read = load_peft_adapter(path, name, base_, max_lora_rank_, allowlist, base_rows_.get());
  if (!read) return read.status();
  QV_RETURN_IF_ERROR(vocab_.check(read.value(), base_, slot_dtype_));
  auto adapter = std::make_shared<const LoraAdapter>(std::move(read).value());
  const int64_t vocab_size = base_.vocab_size + adapter->vocab.new_tokens;
  auto tokenizer = load_adapter_tokenizer(
      {path, allowlist, base_tokenizer_, base_.vocab_size, vocab_size, adapter->vocab.new_token_names});
  if (!tokenizer) return tokenizer.status().with_context("LoRA adapter '" + name + "' (" + path + ")");
  AdapterInfo info{name, path, 0, adapter->max_rank, vocab_size, std::move(tokenizer).value(), allowlist};
  return Loaded{std::move(info), std::move(adapter)};
}

Result<AdapterInfo> AdapterRegistry::register_loaded(Loaded loaded) {
  check(loaded.weights != nullptr && loaded.info.uid == 0, "AdapterRegistry::register_loaded: not from load()");
  std::lock_guard<std::mutex> lock(mu_);
  AdapterInfo& info = loaded.info;
  for (const auto& r : registered_)  // another thread may have won the race for the name
    if (r.name == info.name)
      return Status::error("LoRA adapter name '" + info.name + "' is already registered (" + r.path + ")");
  info.uid = next_uid_++;
  registered_.push_back(info);
  ++loads_;
  lru_.emplace_front(info.uid, std::move(loaded.weights));
  while (static_cast<int>(lru_.size()) > max_cpu_loras_) lru_.pop_back();
  return info;
}

Status AdapterRegistry::remove(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(registered_.begin(), registered_.end(), [&](const AdapterInfo& r) { return r.name == name; });
  if (it == registered_.end())
    return Status::error("unknown LoRA adapter '" + name + "'; " + known_names(registered_));
  const uint64_t uid = it->uid;
  registered_.erase(it);
  lru_.remove_if([&](const auto& e) { return e.first == uid; });
  return Status::ok();
}

Result<AdapterInfo> AdapterRegistry::find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& r : registered_)
    if (r.name == name) return r;
  return Status::error("unknown LoRA adapter '" + name + "'; " + known_names(registered_));
}

std::vector<AdapterInfo> AdapterRegistry::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  return registered_;
}

Result<std::shared_ptr<const LoraAdapter>> AdapterRegistry::get(uint64_t uid) {
  AdapterInfo info;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
      if (it->first == uid) {
        lru_.splice(lru_.begin(), lru_, it);
        return lru_.front().second;
      }
    }
    auto r = std::find_if(registered_.begin(), registered_.end(), [&](const AdapterInfo& a) { return a.uid == uid; });
    if (r == registered_.end()) return Status::error("LoRA adapter uid " + std::to_string(uid) + " is not registered");
    info = *r;
  }

  // Evicted from host memory: read it again (unlocked; the files may be large).
  Result<LoraAdapter> loaded = load_peft_adapter(info.path, info.name, base_, max_lora_rank_, info.allowlist, base_rows_.get());
  if (!loaded) return loaded.status().with_context("reloading evicted adapter");
  // Requests were checked against the vocabulary it had when added.
  if (base_.vocab_size + loaded.value().vocab.new_tokens != info.vocab_size)
    return Status::error("LoRA adapter '" + info.name + "' (" + info.path +
                         "): its vocabulary changed on disk since it was added (re-add it)");
  auto adapter = std::make_shared<const LoraAdapter>(std::move(loaded).value());

  std::lock_guard<std::mutex> lock(mu_);
  ++loads_;
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    if (it->first == uid) {  // another thread reloaded it meanwhile: keep one copy
      lru_.splice(lru_.begin(), lru_, it);
      return lru_.front().second;
    }
  }
  // Removed while we were reading: hand it to the caller but do not cache it.
  bool still_registered =
      std::any_of(registered_.begin(), registered_.end(), [&](const AdapterInfo& a) { return a.uid == uid; });
  if (!still_registered) return std::shared_ptr<const LoraAdapter>(adapter);
  lru_.emplace_front(uid, adapter);
  while (static_cast<int>(lru_.size()) > max_cpu_loras_) lru_.pop_back();
  return std::shared_ptr<const LoraAdapter>(adapter);
}

int AdapterRegistry::num_cached() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(lru_.size());
}

int64_t AdapterRegistry::loads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return loads_;
}

}  // namespace quiver
