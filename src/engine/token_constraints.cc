#include "engine/token_constraints.h"

#include <algorithm>
#include <string>

#include "tokenizer/tokenizer.h"

namespace quiver {

void TokenConstraints::ban_bad_words(std::span<const int32_t> output, std::span<uint64_t> bits) const {
  for (const std::vector<int32_t>& word : bad_words) {
    const size_t prefix = word.size() - 1;
    if (prefix > output.size()) continue;
    if (!std::equal(word.begin(), word.end() - 1, output.end() - static_cast<std::ptrdiff_t>(prefix))) continue;
    const auto last = static_cast<size_t>(word.back());
    if (last / 64 < bits.size()) bits[last / 64] &= ~(uint64_t{1} << (last % 64));
  }
}

Result<TokenConstraints> make_token_constraints(const SamplingParams& params, const Tokenizer* tokenizer,
                                                int64_t width) {
  TokenConstraints c;
  if (!params.allowed_token_ids.empty()) {
    c.allowed.assign(static_cast<size_t>((width + 63) / 64), 0);
    for (int32_t id : params.allowed_token_ids)
      if (id >= 0 && id < width) c.allowed[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64);
  }
  if (params.bad_words.empty()) return c;
  if (tokenizer == nullptr) return Status::error("bad_words need the model's tokenizer (tokenizer.json)");
  auto encode = [&](const std::string& word, const std::string& text) -> Result<std::vector<int32_t>> {
    auto ids = tokenizer->encode(text, /*add_special_tokens=*/false);
    if (!ids.is_ok()) return ids.status().with_context("bad_words '" + word + "'");
    for (int32_t id : ids.value())
      if (id < 0 || id >= width)
        return Status::error("bad_words '" + word + "' has token id " + std::to_string(id) + ", outside the logits");
    return ids;
  };
  for (const std::string& word : params.bad_words) {
    const std::string bare = word.substr(word.find_first_not_of(" \t\n\r\f\v"));
    QV_ASSIGN_OR_RETURN(std::vector<int32_t> plain, encode(word, bare));
    QV_ASSIGN_OR_RETURN(std::vector<int32_t> spaced, encode(word, " " + bare));
    // The spaced form counts as the same word inside a text when the tokenizer merges the
    // space into its first token; one that splits the space off is not that word.
    const bool spaced_too = !spaced.empty() && (plain.empty() || (spaced.front() != plain.front() &&
                                                                  spaced.size() == plain.size()));
    if (!plain.empty()) c.bad_words.push_back(std::move(plain));
    if (spaced_too) c.bad_words.push_back(std::move(spaced));
  }
  return c;
}

}  // namespace quiver
