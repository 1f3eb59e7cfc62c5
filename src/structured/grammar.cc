#include "structured/grammar.h"

namespace quiver::structured {

const TokenMask& Grammar::mask(int32_t state) {
  auto it = masks_.find(state);
  if (it != masks_.end()) return *it->second;
  auto m = std::make_unique<TokenMask>(compute(state));
  return *masks_.emplace(state, std::move(m)).first->second;
}

int32_t Grammar::advance(int32_t state, int32_t token) const {
  if (state == kDead || token < 0 || token >= vocab_->size()) return kDead;
  if (vocab_->is_eos(token)) return dfa_->accepting(state) ? state : kDead;
  const std::string& b = vocab_->bytes(token);
  if (b.empty()) return kDead;
  return dfa_->walk(state, b);
}

TokenMask Grammar::compute(int32_t state) const {
  const TokenVocab& v = *vocab_;
  const Dfa& dfa = *dfa_;
  TokenMask m;
  m.bits.assign(static_cast<size_t>((v.size() + 63) / 64), 0);
  // walked[k]: the state after the first k bytes of the previous token (kDead once it
  // died); a token sharing k bytes with the previous one starts from walked[k].
  std::vector<int32_t> walked(v.max_token_bytes() + 1, kDead);
  walked[0] = state;
  size_t have = 0;
  const auto& ids = v.sorted_ids();
  const auto& lcp = v.lcp();
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string& b = v.bytes(ids[i]);
    size_t k = std::min<size_t>(lcp[i], have);
    int32_t cur = walked[k];
    while (k < b.size() && cur != kDead) {
      cur = dfa.step(cur, static_cast<uint8_t>(b[k]));
      walked[++k] = cur;
    }
    have = k;
    if (cur != kDead && k == b.size()) {
      m.bits[static_cast<size_t>(ids[i]) >> 6] |= uint64_t{1} << (ids[i] & 63);
      ++m.num_allowed;
    }
  }
  if (dfa.accepting(state)) {
    m.eos_only = m.num_allowed == 0;
    for (int64_t e : v.eos_ids())
      if (e >= 0 && e < v.size() && !m.allows(static_cast<int32_t>(e))) {
        m.bits[static_cast<size_t>(e) >> 6] |= uint64_t{1} << (e & 63);
        ++m.num_allowed;
      }
  }
  return m;
}

}  // namespace quiver::structured
