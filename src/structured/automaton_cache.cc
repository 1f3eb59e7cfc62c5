#include "structured/automaton_cache.h"

#include "structured/grammar_cache.h"

namespace quiver::structured {

Result<std::shared_ptr<const Dfa>> AutomatonCache::get(const StructuredOutputSpec& spec) const {
  const std::string key = spec.cache_key();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      order_.splice(order_.begin(), order_, it->second.order);
      return it->second.compiled;
    }
  }
  // Two threads missing on the same new spec both compile it; the first insert is kept.
  auto dfa = compile_spec(spec);
  Result<std::shared_ptr<const Dfa>> compiled =
      dfa.is_ok() ? Result<std::shared_ptr<const Dfa>>(std::make_shared<const Dfa>(std::move(dfa).value()))
                  : Result<std::shared_ptr<const Dfa>>(dfa.status());
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it != entries_.end()) return it->second.compiled;
  order_.push_front(key);
  entries_.emplace(key, Entry{compiled, order_.begin()});
  if (entries_.size() > capacity_) {
    entries_.erase(order_.back());
    order_.pop_back();
  }
  return compiled;
}

size_t AutomatonCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace quiver::structured
