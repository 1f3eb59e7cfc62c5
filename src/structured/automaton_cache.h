// AutomatonCache: constraints compiled to automata (compile_spec), by spec, for callers on
// several threads. The server's HTTP threads compile here and hand the automaton to the
// engine with the request (StructuredOutputSpec::compiled), so that a constraint near the
// construction's work bound (0.1-0.4 s to build or refuse) costs an HTTP thread, never the
// engine thread that every running request waits on. Refusals are kept too: a client that
// repeats a refused constraint gets the same 400 without another construction.
#pragma once

#include <cstddef>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/status.h"
#include "structured/dfa.h"
#include "structured/structured_spec.h"

namespace quiver::structured {

class AutomatonCache {
 public:
  explicit AutomatonCache(size_t capacity = 64) : capacity_(capacity) {}

  // The spec's automaton, or the error naming what compile_spec refused. Thread-safe; the
  // construction runs outside the lock, so one slow constraint holds no other caller.
  Result<std::shared_ptr<const Dfa>> get(const StructuredOutputSpec& spec) const;
  size_t size() const;

 private:
  struct Entry {
    Result<std::shared_ptr<const Dfa>> compiled;
    std::list<std::string>::iterator order;
  };

  const size_t capacity_;
  mutable std::mutex mu_;
  mutable std::list<std::string> order_;  // most recently used first
  mutable std::map<std::string, Entry> entries_;
};

}  // namespace quiver::structured
