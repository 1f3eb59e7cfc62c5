// Grammar: one compiled constraint — its byte automaton over one model's vocabulary — and
// the token masks of the states generation has visited. A mask is derived the first time
// a state needs one (each token's bytes walked through the automaton, shared prefixes
// once) and kept for every later request with the same constraint.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "structured/dfa.h"
#include "structured/token_vocab.h"

namespace quiver::structured {

struct TokenMask {
  std::vector<uint64_t> bits;  // [ceil(vocab / 64)]: bit id set = id allowed
  int64_t num_allowed = 0;     // EOS included
  bool eos_only = false;       // accepting with no way on: only EOS is allowed

  bool allows(int32_t id) const { return (bits[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1; }
};

class Grammar {
 public:
  // The automaton is shared: the server's AutomatonCache may hold it too.
  Grammar(std::shared_ptr<const Dfa> dfa, std::shared_ptr<const TokenVocab> vocab)
      : dfa_(std::move(dfa)), vocab_(std::move(vocab)) {}

  int32_t start() const { return dfa_->start(); }
  const Dfa& dfa() const { return *dfa_; }
  const TokenVocab& vocab() const { return *vocab_; }
  // The mask of `state` (computed on first use). The reference stays valid while the
  // Grammar lives.
  const TokenMask& mask(int32_t state);
  // The state after `token`; EOS leaves the state as it is. kDead for a token the state's
  // mask refuses.
  int32_t advance(int32_t state, int32_t token) const;
  size_t num_cached_masks() const { return masks_.size(); }

 private:
  TokenMask compute(int32_t state) const;

  std::shared_ptr<const Dfa> dfa_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::unordered_map<int32_t, std::unique_ptr<TokenMask>> masks_;
};

}  // namespace quiver::structured
