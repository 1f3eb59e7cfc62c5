// A request's token constraints besides its grammar: vLLM's allowed_token_ids and bad_words,
// as a set of token bits and the token sequences to keep out of the output. The engine
// combines them with the grammar's mask into the one mask a row is sampled under
// (llm_engine_masks.cc), on the device as on the host.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "engine/sampling_params.h"

namespace quiver {

class Tokenizer;

struct TokenConstraints {
  std::vector<uint64_t> allowed;                // bit id set = id allowed; empty: any token
  std::vector<std::vector<int32_t>> bad_words;  // each bad word's token ids (none empty)

  bool active() const { return !allowed.empty() || !bad_words.empty(); }
  // Clears, in `bits`, the last token of every bad word whose other tokens end `output`.
  void ban_bad_words(std::span<const int32_t> output, std::span<uint64_t> bits) const;
};

// The constraints of `params` over logits rows `width` wide. Bad words are tokenized by the
// request's tokenizer as vLLM does: each as written (leading spaces dropped) and again after
// one space, the second kept only when its first token differs and its length does not.
Result<TokenConstraints> make_token_constraints(const SamplingParams& params, const Tokenizer* tokenizer,
                                                int64_t width);

}  // namespace quiver
