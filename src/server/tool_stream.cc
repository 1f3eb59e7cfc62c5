#include "server/tool_stream.h"

#include <algorithm>

namespace quiver {

namespace {

// The length of the longest tail of `s` after `from` that is a proper prefix of `tag`.
size_t partial_marker(const std::string& s, size_t from, const std::string& tag) {
  for (size_t k = std::min(s.size() - from, tag.size() - 1); k > 0; --k)
    if (s.compare(s.size() - k, k, tag, 0, k) == 0) return k;
  return 0;
}

}  // namespace

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
  size_t end = text_.size();
  const std::string marker = tool_call_marker(plan_->parser);
  if (!marker.empty()) {
    const size_t at = text_.find(marker, sent_);
    if (at != std::string::npos) {
      calls_ = true;
      end = at;
    } else {
      end -= partial_marker(text_, sent_, marker);
    }
  }
  std::string out = text_.substr(sent_, end - sent_);
  sent_ = end;
  return out;
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
