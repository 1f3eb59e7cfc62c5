// Streaming a chat choice under a tool plan, as vLLM's streaming tool parsers do: text goes
// out as content while it comes, until the parser sees a tool call begin (hermes'
// <tool_call>, Mistral's [TOOL_CALLS], or an answer begun as a call: llama3_json's `{` or
// <|python_tag|>, pythonic's `[`); from there the text is held, parsed whole when the choice ends, and its
// calls go in the finishing delta. A choice that never calls a tool streams like one
// without tools, instead of arriving in one piece at the end.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "server/tool_calls.h"
#include "tokenizer/stop_checker.h"

namespace quiver {

class ToolStream {
 public:
  explicit ToolStream(const ToolPlan* plan);
  // Adds a piece of the choice's content; returns what of it can be sent now (a tail that
  // may begin a call marker is held until the next piece decides it).
  std::string feed(const std::string& piece);
  // The finishing piece: the content not sent yet, and the tool calls of the whole text
  // (parse_tool_output), so that the streamed content plus these equal the whole answer.
  ParsedTools finish(const std::string& last_piece, const std::function<std::string()>& new_id);

 private:
  static std::vector<std::string> call_markers(ToolCallParser parser);

  const ToolPlan* plan_;
  // The parser's call marker as a stop string: a tail that may begin it is held back, and
  // nothing from it on is sent (none for the parsers whose calls are the whole answer).
  StopChecker marker_;
  std::string text_;      // the choice's content so far
  size_t fed_ = 0;        // bytes of text_ given to marker_
  size_t sent_ = 0;       // bytes of text_ sent as content
  bool calls_ = false;    // a call began: nothing more goes out before the end
  bool content_ = false;  // the answer began as text (answer_start), so only a marker ends it
};

}  // namespace quiver
