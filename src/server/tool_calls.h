// Tool calling as vLLM serves it (--enable-auto-tool-choice --tool-call-parser NAME):
// which tool_choice a chat request may use, the structured-output constraint that
// enforces "required" and a named function, and the parsers that turn the model's text
// into OpenAI tool_calls:
//   llama3_json: optional <|python_tag|>, then {"name": ..., "parameters"|"arguments": {...}},
//                several separated by ';'
//   hermes:      <tool_call>{"name": ..., "arguments": {...}}</tool_call>, any number, after
//                optional content
//   mistral:     [TOOL_CALLS] then a JSON list of {"name": ..., "arguments": {...}}, after
//                optional content (Mistral-7B-Instruct-v0.3's format; the token must exist)
//   pythonic:    the whole answer a Python list of calls with keyword arguments,
//                [f(a=1, b='x'), g()] (Llama 3.2's and Llama 4's format; pythonic_calls.h)
// Pure functions; errors are 400s naming the field.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/openai_protocol.h"
#include "structured/structured_spec.h"

namespace quiver {

enum class ToolCallParser { kNone, kLlama3Json, kHermes, kMistral, kPythonic };

// "llama3_json" / "hermes" / "mistral" / "pythonic"; an error lists the supported names.
ApiResult<ToolCallParser> parse_tool_call_parser(const std::string& name);

struct ToolOptions {
  bool enable_auto_tool_choice = false;
  ToolCallParser parser = ToolCallParser::kNone;
};

struct ToolPlan {
  enum class Mode { kNone, kAuto, kRequired, kNamed };
  Mode mode = Mode::kNone;
  std::string function;            // kNamed
  ToolCallParser parser = ToolCallParser::kNone;
  StructuredOutputSpec constraint;  // kRequired / kNamed: what the output must be
  bool parallel = true;             // false (parallel_tool_calls): only the first call is returned
  bool active() const { return mode != Mode::kNone; }
};

// From the request's tools and tool_choice (either may be null). tool_choice absent means
// "auto" when tools are given and auto tool choice is enabled, "none" otherwise.
// `tools` in the request's key order: a constraint generates the parameters in it.
ApiResult<ToolPlan> plan_tools(const nlohmann::ordered_json& tools, const nlohmann::json& tool_choice,
                               const ToolOptions& options);

struct ParsedTools {
  std::string content;          // text that is not a tool call (may be empty)
  nlohmann::json tool_calls = nlohmann::json::array();  // OpenAI's shape, ids from new_id
};

// The text that begins a tool call in a parser's output ("" for llama3_json and pythonic,
// whose calls are the whole answer).
std::string tool_call_marker(ToolCallParser parser);
// For the parsers whose calls are the whole answer, what its beginning says: llama3_json's
// answer is a call when its first non-blank text is `{` or <|python_tag|>, pythonic's when
// it begins with `[` (vLLM's streaming rules); the others' answers begin as content.
enum class CallStart { kUndecided, kCall, kContent };
CallStart answer_start(ToolCallParser parser, std::string_view text);
// A call id of `unique` (hex digits) for this parser: Mistral's templates refuse any id
// but 9 alphanumerics (as vLLM makes them for its mistral parser), the others get
// OpenAI's "chatcmpl-tool-" form.
std::string tool_call_id(ToolCallParser parser, const std::string& unique);

// The model's text as content and tool calls. Text the parser does not recognise stays
// content (auto), as vLLM leaves it.
ParsedTools parse_tool_output(const std::string& text, const ToolPlan& plan, const std::function<std::string()>& new_id);

}  // namespace quiver
