// Sampler: picks the next token from one row of logits (host float32) and reports
// logprobs. Logprobs are those of the model's raw distribution (log_softmax of the
// logits before penalties, temperature and truncation), as vLLM reports by default.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "engine/sampling_params.h"

namespace quiver {

struct TokenLogprobs {
  int32_t token = 0;       // the chosen (or actual) token
  float logprob = 0.0f;    // its logprob
  int rank = 0;            // 1 = most likely
  std::vector<std::pair<int32_t, float>> top;  // top-K, most likely first
};

// Per-sequence random state: seeded from the request's seed (or from the engine's
// generator when absent), so a seeded request samples the same alone or batched.
using SeqRng = std::mt19937_64;

// log_softmax(logits) top-K entries plus the given token.
TokenLogprobs logprobs_for(std::span<const float> logits, int32_t token, int top_k);

// Chooses a token. `allowed` (a bitset over the vocabulary, empty = all) is a structured
// output's token mask: refused tokens get -inf logits before logit_bias, penalties and
// truncation; the caller guarantees it allows some token that block_eos leaves. `output_tokens`/`prompt_tokens` feed the penalties. Greedy
// (temperature 0) returns the lowest-index argmax of the penalised logits.
int32_t sample_token(std::span<const float> logits, const SamplingParams& params,
                     std::span<const int32_t> prompt_tokens, std::span<const int32_t> output_tokens,
                     bool block_eos, std::span<const int64_t> eos_ids, SeqRng& rng,
                     std::span<const uint64_t> allowed = {});

}  // namespace quiver
