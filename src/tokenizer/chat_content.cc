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

}  // namespace quiver
