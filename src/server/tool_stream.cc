#include "server/tool_stream.h"

namespace quiver {

ToolStream::ToolStream(const ToolPlan* plan) : plan_(plan), marker_(call_markers(plan->parser), false) {}

std::vector<std::string> ToolStream::call_markers(ToolCallParser parser) {
  std::string marker = tool_call_marker(parser);
  if (marker.empty()) return {};
  return {std::move(marker)};
}

std::string ToolStream::feed(const std::string& piece) {
  text_ += piece;
  if (calls_) return "";
  // required and a named function: the output is the calls' JSON, never content.
  if (plan_->mode != ToolPlan::Mode::kAuto) {
    calls_ = true;
    return "";
  }
  if (!content_) {
    switch (answer_start(plan_->parser, text_)) {
      case CallStart::kCall:
        calls_ = true;
        return "";
      case CallStart::kUndecided:
        return "";
      case CallStart::kContent:
        content_ = true;
    }
  }
  StopChecker::Result r = marker_.push(text_.substr(fed_));
  fed_ = text_.size();
  if (r.stopped) calls_ = true;
  sent_ += r.emit.size();
  return std::move(r.emit);
}

ParsedTools ToolStream::finish(const std::string& last_piece, const std::function<std::string()>& new_id) {
  std::string content = feed(last_piece);  // its text before any call
  ParsedTools parsed = parse_tool_output(text_, *plan_, new_id);
  // With calls, their content is the text before the first call, which is out now; without,
  // the rest of the text is content too, as a whole response carries all of it.
  if (parsed.tool_calls.empty()) content += text_.substr(sent_);
  parsed.content = std::move(content);
  return parsed;
}

}  // namespace quiver
