#include "tokenizer/chat_content.h"

#include "core/json_nesting.h"
#include "io/json_util.h"

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

// Arguments are parsed under the request body's own depth bound: the template walks them
// recursively.
Status tool_call_arguments_as_objects(nlohmann::ordered_json* messages) {
  using ojson = nlohmann::ordered_json;
  if (!messages->is_array()) return Status::ok();
  for (size_t i = 0; i < messages->size(); ++i) {
    ojson& m = (*messages)[i];
    if (!m.is_object() || string_field_or(m, "role", "") != "assistant") continue;
    auto calls = m.find("tool_calls");
    if (calls == m.end() || !calls->is_array()) continue;
    if (calls->empty()) {  // the template's plain-assistant path, as vLLM takes it
      m.erase(calls);
      continue;
    }
    const std::string where = "messages[" + std::to_string(i) + "].tool_calls";
    for (ojson& call : *calls) {
      if (!call.is_object()) return Status::error(where + ": each entry must be an object");
      auto f = call.find("function");
      if (string_field_or(call, "type", call.contains("type") ? "" : "function") != "function" || f == call.end() ||
          !f->is_object())
        return Status::error(where + ": only function calls ({\"type\": \"function\", \"function\": {...}}) "
                                     "are supported");
      auto args = f->find("arguments");
      if (args == f->end() || args->is_null() || (args->is_string() && args->get_ref<const std::string&>().empty())) {
        (*f)["arguments"] = ojson::object();
      } else if (args->is_string()) {
        const std::string& text = args->get_ref<const std::string&>();
        if (!json_nesting_within(text, kMaxRequestJsonDepth))
          return Status::error(where + ": function.arguments nested deeper than " +
                               std::to_string(kMaxRequestJsonDepth) + " levels");
        // Parsed in order: the template prints the arguments as the client wrote them.
        auto value = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
        if (value.is_discarded()) return Status::error(where + ": function.arguments is not valid JSON");
        *args = std::move(value);
      }
    }
  }
  return Status::ok();
}

Result<std::string> cut_after_final_message(const std::string& rendered, const nlohmann::ordered_json& messages) {
  const nlohmann::ordered_json* content = nullptr;
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
