// GrammarCache: compiles StructuredOutputSpecs for one model's vocabulary and keeps the
// most recent ones, so requests with the same schema share one automaton and its masks.
// A spec that arrives compiled (StructuredOutputSpec::compiled) is not compiled again.
// Owned by the engine; not thread-safe (the engine's step loop is its only user).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "structured/grammar.h"
#include "structured/lru_map.h"
#include "structured/structured_spec.h"

namespace quiver::structured {

// Bound on automaton states per constraint: masks and transitions cost about 1 KiB each.
inline constexpr int kMaxDfaStates = 20000;

// The regex a spec compiles through (JSON schemas, choices and json_object become
// regexes first). Errors name the problem in the spec.
Result<std::string> spec_to_regex(const StructuredOutputSpec& spec);
// The spec's automaton (spec_to_regex, parse_regex, Dfa::compile at kMaxDfaStates), or the
// error naming what is refused.
Result<Dfa> compile_spec(const StructuredOutputSpec& spec);

class GrammarCache {
 public:
  GrammarCache(std::shared_ptr<const TokenVocab> vocab, size_t capacity = 64)
      : vocab_(std::move(vocab)), entries_(capacity) {}
  Result<std::shared_ptr<Grammar>> get(const StructuredOutputSpec& spec);
  size_t size() const { return entries_.size(); }

 private:
  std::shared_ptr<const TokenVocab> vocab_;
  LruMap<std::shared_ptr<Grammar>> entries_;
};

}  // namespace quiver::structured
