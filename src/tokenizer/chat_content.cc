#include "tokenizer/chat_content.h"

namespace quiver {

Result<std::string> join_text_parts(const nlohmann::json& parts) {
  std::string text;
  bool first = true;
  for (const auto& part : parts) {
    if (!part.is_object()) return Status::error("message content parts must be objects");
    auto type = part.find("type");
    auto t = part.find("text");
    if (type == part.end() || *type != "text" || t == part.end() || !t->is_string())
      return Status::error("only text content parts ({\"type\": \"text\", \"text\": ...}) are supported");
    if (!first) text += "\n";
    text += t->get<std::string>();
    first = false;
  }
  return text;
}

Result<std::string> cut_after_final_message(const std::string& rendered, const nlohmann::json& messages) {
  const nlohmann::json* content = nullptr;
  if (messages.is_array() && !messages.empty() && messages.back().is_object()) {
    auto c = messages.back().find("content");
    if (c != messages.back().end() && c->is_string()) content = &*c;
  }
  if (content == nullptr) return Status::error("continue_final_message: the final message has no text to continue");
  const std::string text = content->get<std::string>();
  constexpr const char* kSpace = " \t\n\r\f\v";
  const size_t first = text.find_first_not_of(kSpace);
  const std::string lstripped = first == std::string::npos ? "" : text.substr(first);
  const std::string stripped = lstripped.substr(0, lstripped.find_last_not_of(kSpace) + 1);
  const size_t at = rendered.rfind(stripped);
  if (at == std::string::npos)
    return Status::error("continue_final_message: the final message does not appear in the chat the template "
                         "rendered (the template drops part of it)");
  // A template that keeps the message as written (no leading whitespace) is cut after its
  // trailing whitespace, else after the stripped text: transformers' rule.
  const bool kept = lstripped.size() == text.size() && rendered.compare(at, text.size(), text) == 0;
  return rendered.substr(0, at + (kept ? lstripped.size() : stripped.size()));
}

}  // namespace quiver
