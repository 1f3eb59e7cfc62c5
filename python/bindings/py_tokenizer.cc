#include "py_tokenizer.h"

#include <pybind11/pybind11.h>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_content.h"
#include "tokenizer/chat_template.h"

namespace py = pybind11;

namespace quiver::python {

std::vector<int32_t> PyTokenizer::encode(const std::string& text, bool add_special_tokens) const {
  auto ids = tokenizer_->encode(text, add_special_tokens);
  if (!ids.is_ok()) throw py::value_error(ids.message());
  return std::move(ids).value();
}

std::string PyTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  auto text = tokenizer_->decode(ids, skip_special_tokens);
  if (!text.is_ok()) throw py::value_error(text.message());
  return std::move(text).value();
}

std::string PyTokenizer::apply_chat_template(const std::string& messages_json, bool add_generation_prompt,
                                             const std::string& template_source,
                                             const std::string& variables_json,
                                             bool continue_final_message, bool tool_arguments_as_objects) const {
  // Parsed in order: Python dicts keep insertion order, and `tojson` prints it.
  auto messages = nlohmann::ordered_json::parse(messages_json, nullptr, /*allow_exceptions=*/false);
  if (messages.is_discarded() || !messages.is_array()) throw py::value_error("messages must be a list of dicts");
  for (auto& m : messages) {  // OpenAI's text parts as the server takes them
    auto content = m.find("content");
    if (content == m.end() || !content->is_array()) continue;
    auto text = join_text_parts(nlohmann::json(*content));
    if (!text.is_ok()) throw py::value_error("apply_chat_template: " + text.message());
    *content = std::move(text).value();
  }
  if (tool_arguments_as_objects) {
    if (Status s = tool_call_arguments_as_objects(&messages); !s.is_ok()) throw py::value_error(s.message());
  }
  const auto variables = nlohmann::ordered_json::parse(variables_json, nullptr, /*allow_exceptions=*/false);
  if (variables.is_discarded() || !variables.is_object()) throw py::value_error("template variables must be a dict");
  // The same path as the server's /v1/chat/completions, which passes tools and
  // chat_template_kwargs as these variables.
  Result<std::string> text = Status::error("no template");
  if (template_source.empty()) {
    text = tokenizer_->apply_chat_template(messages, add_generation_prompt, variables);
  } else {
    auto parsed = ChatTemplate::parse(template_source);
    if (!parsed.is_ok()) throw py::value_error("chat_template: " + parsed.message());
    text = tokenizer_->apply_chat_template(messages, add_generation_prompt, variables, &parsed.value());
  }
  if (!text.is_ok()) throw py::value_error(text.message());
  if (continue_final_message) text = cut_after_final_message(text.value(), messages);
  if (!text.is_ok()) throw py::value_error(text.message());
  return std::move(text).value();
}

}  // namespace quiver::python
