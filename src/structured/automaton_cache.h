// AutomatonCache: constraints compiled to automata (compile_spec), by spec, for callers on
// several threads. The server's HTTP threads compile here and hand the automaton to the
// engine with the request (StructuredOutputSpec::compiled), so that a constraint near the
// construction's work bound (0.1-0.4 s to build or refuse) costs an HTTP thread, never the
// engine thread that every running request waits on. Refusals are kept too: a client that
// repeats a refused constraint gets the same 400 without another construction.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>

#include "core/status.h"
#include "structured/dfa.h"
#include "structured/lru_map.h"
#include "structured/structured_spec.h"

namespace quiver::structured {

class AutomatonCache {
 public:
  using Compiled = Result<std::shared_ptr<const Dfa>>;

  explicit AutomatonCache(size_t capacity = 64) : entries_(capacity) {}

  // The spec's automaton, or the error naming what compile_spec refused. Thread-safe; the
  // construction runs outside the lock, so one slow constraint holds no other caller.
  Compiled get(const StructuredOutputSpec& spec) const;
  size_t size() const;

 private:
  mutable std::mutex mu_;
  mutable LruMap<Compiled> entries_;
};

}  // namespace quiver::structured
