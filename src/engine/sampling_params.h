// SamplingParams: per-request decoding settings, vLLM's names and defaults.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "structured/structured_spec.h"

namespace quiver {

struct SamplingParams {
  static constexpr int kMaxN = 1024;  // choices per request
  int n = 1;
  float temperature = 1.0f;  // 0 = greedy
  float top_p = 1.0f;
  int top_k = 0;             // 0 or -1 = off
  float min_p = 0.0f;
  std::optional<uint64_t> seed;  // per-request: same seed, same output, alone or batched
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  // Added to the logits of these token ids before penalties and sampling (OpenAI's and
  // vLLM's logit_bias; -100 bans a token, +100 all but forces it). Reported logprobs stay
  // those of the raw distribution.
  std::vector<std::pair<int32_t, float>> logit_bias;
  int max_tokens = 16;
  int min_tokens = 0;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool include_stop_str_in_output = false;
  bool ignore_eos = false;
  int logprobs = -1;         // top-K per generated token (plus the chosen one); -1 = none
  int prompt_logprobs = -1;  // top-K per prompt position (plus the actual one); -1 = none
  bool skip_special_tokens = true;
  // false (with skip_special_tokens false): adjacent added tokens in the output are joined
  // without the spaces a decoder may put between them (vLLM's fast-tokenizer rule).
  bool spaces_between_special_tokens = true;
  // vLLM's allowed_token_ids: the token is sampled among these only (empty: any). Like
  // logit_bias, it shapes the sampling, not the reported logprobs.
  std::vector<int32_t> allowed_token_ids;
  // vLLM's bad_words: none of these words is generated. Each is tokenized as written and with
  // one leading space; the last token of either is banned wherever the output so far ends
  // with the ones before it (a one-token word is banned everywhere).
  std::vector<std::string> bad_words;
  // vLLM's truncate_prompt_tokens: only the last k prompt tokens are kept; -1 = the model's
  // max_model_len; absent: no truncation.
  std::optional<int> truncate_prompt_tokens;
  // vLLM's structured_outputs (guided_json / guided_regex / guided_choice / response_format):
  // the output must match it. Such rows are always sampled on the host, under a token mask.
  StructuredOutputSpec structured_outputs;

  // Range checks with messages naming the field (400-style errors).
  Status validate(int64_t vocab_size) const;
  // Drops the prompt's leading tokens past truncate_prompt_tokens (left truncation).
  void truncate_prompt(std::vector<int32_t>& ids, int max_model_len) const;
};

}  // namespace quiver
