// TokenVocab: the bytes each token id of a model's vocabulary stands for, and the ids in
// byte order with each one's common prefix with the one before — so a mask walks every
// shared prefix through the automaton once (token_mask.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace quiver {
class Tokenizer;
}

namespace quiver::structured {

class TokenVocab {
 public:
  // `vocab_size`: rows of the model's logits, which may differ from the tokenizer's size.
  // Special tokens and ids the tokenizer lacks get no bytes and are never allowed by a
  // mask, except the EOS ids, which masks allow in accepting states.
  static TokenVocab from_tokenizer(const Tokenizer& tok, int64_t vocab_size, std::vector<int64_t> eos_ids);
  // For tests: explicit bytes per id.
  static TokenVocab from_bytes(std::vector<std::string> bytes, std::vector<int64_t> eos_ids);

  int64_t size() const { return static_cast<int64_t>(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  bool is_eos(int32_t id) const;
  const std::vector<int64_t>& eos_ids() const { return eos_; }
  const std::vector<int32_t>& sorted_ids() const { return sorted_; }  // ids with bytes, by bytes
  const std::vector<uint32_t>& lcp() const { return lcp_; }           // per sorted_ entry
  size_t max_token_bytes() const { return max_bytes_; }

 private:
  void index();

  std::vector<std::string> bytes_;
  std::vector<int64_t> eos_;
  std::vector<int32_t> sorted_;
  std::vector<uint32_t> lcp_;
  size_t max_bytes_ = 0;
};

}  // namespace quiver::structured
