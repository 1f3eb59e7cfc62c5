#include "structured/automaton_cache.h"

#include "structured/grammar_cache.h"

namespace quiver::structured {

AutomatonCache::Compiled AutomatonCache::get(const StructuredOutputSpec& spec) const {
  const std::string key = spec.cache_key();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (const Compiled* hit = entries_.find(key)) return *hit;
  }
  // Two threads missing on the same new spec both compile it; the first insert is kept.
  auto dfa = compile_spec(spec);
  Compiled compiled = dfa.is_ok() ? Compiled(std::make_shared<const Dfa>(std::move(dfa).value()))
                                  : Compiled(dfa.status());
  std::lock_guard<std::mutex> lock(mu_);
  if (const Compiled* hit = entries_.find(key)) return *hit;
  entries_.insert(key, compiled);
  return compiled;
}

size_t AutomatonCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace quiver::structured
