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

// transformers' continue_final_message: `rendered` (the chat rendered without a generation
// prompt) cut right after the final message's text, so that generation continues that
// message instead of opening a new turn. The text is found as its last occurrence with
// outer whitespace stripped (a template may trim it); an error when the template dropped it,
// or when the final message (of `messages`, contents already strings) has no text.
Result<std::string> cut_after_final_message(const std::string& rendered, const nlohmann::json& messages);

}  // namespace quiver
