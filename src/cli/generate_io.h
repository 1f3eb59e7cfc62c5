// JSONL request/response lines of `quiver generate` (the contract in DESIGN.md §3).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "engine/llm_engine.h"

namespace quiver {

struct GenerateRequest {
  std::string id;
  PromptInput prompt;
  SamplingParams params;
  std::optional<std::string> lora;
  int priority = 0;  // under --scheduling-policy priority
  std::optional<BeamSearchParams> beam;  // use_beam_search: n beams (the server's fields)
};

// Parses one input line; errors name the field. `line_no` names requests without an id.
// A key that is not a request field, or a vLLM SamplingParams field quiver does not
// implement, is an error naming it.
Result<GenerateRequest> parse_generate_request(const std::string& line, int line_no);
// The id a line's results and errors carry: its own "id" when it has a readable one, else
// "line-N".
std::string generate_request_id(const std::string& line, int line_no);

// One output line for a finished request.
nlohmann::json generate_output_json(const RequestOutput& out);
// One output line for a request that failed.
nlohmann::json generate_error_json(const std::string& id, const std::string& message);

// Logprob entries as {"<token id>": logprob, ...}: top-K plus the chosen token.
nlohmann::json logprob_map_json(const TokenLogprobs& lp);

}  // namespace quiver
