// OpenAI's Responses API (POST /v1/responses) on the chat pipeline, as vLLM serves it: a
// request becomes the chat request it means (input items as messages, instructions as the
// first system message, function tools, text.format as response_format), and the chat
// choice becomes the response's output items (reasoning, the message, function calls).
// Responses are not stored (vLLM's default: "store" is accepted and the answer says
// false), so previous_response_id and background mode are refused by name.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/openai_protocol.h"
#include "server/openai_response.h"

namespace quiver {

struct ResponsesRequest {
  ChatRequest chat;  // what generates the answer
  nlohmann::ordered_json echo;  // its fields the response object repeats (instructions, tools, text, ...)
};

// `defaults` as for chat requests (--generation-config). Errors name the Responses field.
ApiResult<ResponsesRequest> parse_responses_request(std::string_view body, const SamplingParams& defaults = {});

// A whole choice's output items: a reasoning item when there is reasoning, the assistant
// message when there is text (or nothing else), a function_call item per tool call.
// `new_id(prefix)` names items ("rs_", "msg_", "fc_").
nlohmann::json response_output_items(const ChoicePiece& choice, const std::function<std::string(const char*)>& new_id);

// The response object: "completed", or "incomplete" with the reason when the choice
// stopped at max_output_tokens; "in_progress" (no usage) before it ends.
nlohmann::json response_object(const ResponsesRequest& request, const ResponseMeta& meta, const std::string& status,
                               nlohmann::json output, const Usage* usage);
// The status a finished choice gives its response.
std::string response_status(const ChoicePiece& choice);

nlohmann::json responses_usage_json(const Usage& usage);

}  // namespace quiver
