// RequestOutput: what step() reports for a request (vLLM's shape): cumulative text and
// tokens per completion, logprobs, and whether the request finished.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampler.h"

namespace quiver {

struct CompletionOutput {
  int index = 0;
  std::string text;                    // cumulative
  std::vector<int32_t> token_ids;      // cumulative
  std::vector<TokenLogprobs> logprobs; // per generated token, when requested
  std::string finish_reason;           // "", "stop", "length", "abort"
  std::optional<std::string> stop_reason;  // the stop string / token that ended it
  size_t num_new_tokens = 0;           // tokens added since the previous output
  std::string delta_text;              // text added since the previous output
  bool finished() const { return !finish_reason.empty(); }
};

struct RequestOutput {
  std::string request_id;
  std::string prompt;
  std::vector<int32_t> prompt_token_ids;
  // Per prompt position: nullopt for position 0, then the actual token's logprob + top-K.
  std::vector<std::optional<TokenLogprobs>> prompt_logprobs;
  std::vector<CompletionOutput> outputs;
  std::string lora_name;
  bool finished = false;
  // Set when the request failed inside the engine (e.g. it can never fit); outputs may be empty.
  std::string error;
  // Timings in seconds since the request arrived.
  double first_token_s = -1, finished_s = -1;
  // Prompt tokens the prefix cache held when the request was first scheduled (vLLM's
  // num_cached_tokens); 0 before that.
  int num_cached_tokens = 0;
};

}  // namespace quiver
