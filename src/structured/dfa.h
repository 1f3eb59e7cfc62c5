// Dfa: a byte-level deterministic automaton for a parsed regex (regex_parser.h), built by
// Thompson's construction over UTF-8 byte ranges and the subset construction. The whole
// input must match; a state from which no accepting state is reachable is dropped, so every
// live state can still complete — which is what lets a token mask promise that whatever it
// allows can be finished.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "structured/regex_parser.h"

namespace quiver::structured {

inline constexpr int32_t kDead = -1;
// Steps of the subset construction allowed per state of the bound (dfa.cc says why).
inline constexpr int64_t kWorkPerState = 400;

class Dfa {
 public:
  int32_t start() const { return 0; }
  int num_states() const { return static_cast<int>(accepting_.size()); }
  int32_t step(int32_t state, uint8_t byte) const { return next_[static_cast<size_t>(state) * 256 + byte]; }
  bool accepting(int32_t state) const { return accepting_[static_cast<size_t>(state)] != 0; }
  // Whether any byte leads on from `state` (an accepting state without one must end).
  bool has_exit(int32_t state) const { return has_exit_[static_cast<size_t>(state)] != 0; }
  // Runs `bytes` from `state`; kDead as soon as a byte is refused.
  int32_t walk(int32_t state, std::string_view bytes) const;
  bool matches(std::string_view text) const;

  // max_states bounds the subset construction (and the NFA, at 64x), and with it the
  // construction's work (kWorkPerState a state), so a pathological pattern fails with an
  // error rather than exhausting memory or holding the engine's thread.
  static Result<Dfa> compile(const RegexNode& root, int max_states);

 private:
  std::vector<int32_t> next_;  // [num_states, 256]: next state or kDead
  std::vector<uint8_t> accepting_, has_exit_;
};

}  // namespace quiver::structured
