#include "server/reasoning.h"

#include <algorithm>

namespace quiver {

namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

// The length of the longest tail of `s` that is a proper prefix of `tag`.
size_t partial_tag(std::string_view s, std::string_view tag) {
  for (size_t k = std::min(s.size(), tag.size() - 1); k > 0; --k)
    if (s.substr(s.size() - k) == tag.substr(0, k)) return k;
  return 0;
}

}  // namespace

ApiResult<ReasoningParser> parse_reasoning_parser(const std::string& name) {
  if (name == "deepseek_r1") return ReasoningParser::kDeepSeekR1;
  return ApiError::bad_request("--reasoning-parser " + name + ": not supported (supported: deepseek_r1)");
}

ReasoningSplit split_reasoning(std::string_view text, ReasoningParser parser) {
  if (parser == ReasoningParser::kNone) return {"", std::string(text)};
  if (text.substr(0, kOpen.size()) == kOpen) text.remove_prefix(kOpen.size());
  const size_t close = text.find(kClose);
  if (close == std::string_view::npos) return {std::string(text), ""};
  return {std::string(text.substr(0, close)), std::string(text.substr(close + kClose.size()))};
}

ReasoningSplit ReasoningStream::feed(std::string_view piece, bool last) {
  ReasoningSplit out;
  held_ += piece;
  if (parser_ == ReasoningParser::kNone || !in_reasoning_) {
    out.content = std::move(held_);
    held_.clear();
    return out;
  }
  if (at_start_) {
    if (!last && held_.size() < kOpen.size() && kOpen.substr(0, held_.size()) == held_) return out;
    if (std::string_view(held_).substr(0, kOpen.size()) == kOpen) held_.erase(0, kOpen.size());
    at_start_ = false;
  }
  const size_t close = held_.find(kClose);
  if (close != std::string::npos) {
    out.reasoning = held_.substr(0, close);
    out.content = held_.substr(close + kClose.size());
    held_.clear();
    in_reasoning_ = false;
    return out;
  }
  const size_t keep = last ? 0 : partial_tag(held_, kClose);
  out.reasoning = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

}  // namespace quiver
