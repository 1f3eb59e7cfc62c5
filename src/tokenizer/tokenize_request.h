// One request line of `quiver tokenize` (and anything else that exposes the tokenizer as
// JSON): {"text", "add_special_tokens"} -> {"ids"}; {"ids", "skip_special_tokens"} ->
// {"text"}; {"messages", "add_generation_prompt", "chat_template_kwargs"} -> {"text", "ids"}.
#pragma once

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace quiver {

// The response object for `request`, or an error for a malformed request or a failure.
// An "id" in the request is echoed in the response.
Result<nlohmann::json> run_tokenize_request(const Tokenizer& tokenizer, const nlohmann::ordered_json& request);

}  // namespace quiver
