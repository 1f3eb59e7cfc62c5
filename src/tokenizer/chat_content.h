// Chat message content as OpenAI sends it: a string, or a list of parts. Templates take one
// string, so text parts are joined into it.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace quiver {

// A message's content given as OpenAI's list of parts ([{"type": "text", "text": ...}, ...])
// as the one string chat templates take: the texts joined by newlines, as vLLM joins them.
// Any other part is an error naming the rule. The server's request parser and the Python
// package's apply_chat_template both go through it.
Result<std::string> join_text_parts(const nlohmann::json& parts);

}  // namespace quiver
