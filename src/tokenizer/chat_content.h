// Chat messages as OpenAI sends them, made into what chat templates take: content as one
// string (text parts joined), and an assistant's tool calls with their arguments as objects.
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

// vLLM's rule before rendering a chat: in an assistant message's tool_calls, each
// function's arguments (OpenAI sends a JSON string) become the value the string holds, and
// {} when absent, null or empty, since templates write them with tojson or walk their
// items; an empty tool_calls list is dropped. An entry that is not a function call or
// arguments that are not JSON are an error naming the message.
Status tool_call_arguments_as_objects(nlohmann::ordered_json* messages);

// transformers' continue_final_message: `rendered` (the chat rendered without a generation
// prompt) cut right after the final message's text, so that generation continues that
// message instead of opening a new turn. The text is found as its last occurrence with
// outer whitespace stripped (a template may trim it); an error when the template dropped it,
// or when the final message (of `messages`, contents already strings) has no text.
Result<std::string> cut_after_final_message(const std::string& rendered, const nlohmann::ordered_json& messages);

}  // namespace quiver
