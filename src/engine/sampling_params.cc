#include "engine/sampling_params.h"

#include <cmath>

namespace quiver {

Status SamplingParams::validate(int64_t vocab_size) const {
  auto bad = [](const std::string& m) { return Status::error(m); };
  if (n < 1) return bad("n must be at least 1, got " + std::to_string(n));
  // Each choice is a sequence with its own state; a huge n is memory, not a request.
  if (n > kMaxN) return bad("n must be at most " + std::to_string(kMaxN) + ", got " + std::to_string(n));
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) return bad("temperature must be >= 0");
  if (!(top_p > 0.0f && top_p <= 1.0f)) return bad("top_p must be in (0, 1], got " + std::to_string(top_p));
  if (top_k < -1) return bad("top_k must be -1 (off), 0 (off) or positive, got " + std::to_string(top_k));
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return bad("min_p must be in [0, 1]");
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) return bad("presence_penalty must be in [-2, 2]");
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) return bad("frequency_penalty must be in [-2, 2]");
  if (!(repetition_penalty > 0.0f && std::isfinite(repetition_penalty))) return bad("repetition_penalty must be > 0");
  if (max_tokens < 1) return bad("max_tokens must be at least 1, got " + std::to_string(max_tokens));
  if (min_tokens < 0 || min_tokens > max_tokens) return bad("min_tokens must be in [0, max_tokens]");
  if (logprobs > 20) return bad("logprobs must be at most 20, got " + std::to_string(logprobs));
  if (prompt_logprobs > 20) return bad("prompt_logprobs must be at most 20");
  for (int32_t id : stop_token_ids)
    if (id < 0 || id >= vocab_size) return bad("stop_token_ids contains " + std::to_string(id) + ", outside the vocabulary");
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= vocab_size) return bad("logit_bias has token id " + std::to_string(id) + ", outside the vocabulary");
    if (!(bias >= -100.0f && bias <= 100.0f)) return bad("logit_bias values must be in [-100, 100]");
  }
  for (const auto& s : stop)
    if (s.empty()) return bad("stop strings must not be empty");
  for (int32_t id : allowed_token_ids)
    if (id < 0 || id >= vocab_size)
      return bad("allowed_token_ids contains " + std::to_string(id) + ", outside the vocabulary");
  for (const auto& w : bad_words)
    if (w.find_first_not_of(" \t\n\r\f\v") == std::string::npos)
      return bad("bad_words entries must contain a character other than whitespace");
  if (truncate_prompt_tokens.has_value() && *truncate_prompt_tokens < 1 && *truncate_prompt_tokens != -1)
    return bad("truncate_prompt_tokens must be an integer >= 1 or -1, got " + std::to_string(*truncate_prompt_tokens));
  return Status::ok();
}

void SamplingParams::truncate_prompt(std::vector<int32_t>& ids, int max_model_len) const {
  if (!truncate_prompt_tokens.has_value()) return;
  const size_t keep = static_cast<size_t>(*truncate_prompt_tokens == -1 ? max_model_len : *truncate_prompt_tokens);
  if (ids.size() > keep) ids.erase(ids.begin(), ids.end() - static_cast<std::ptrdiff_t>(keep));
}

}  // namespace quiver
