// ChatTemplate: parses a Hugging Face chat template with the Jinja interpreter in
// jinja_*.cc and renders it with the context transformers' apply_chat_template builds:
// messages, add_generation_prompt, tools and documents (none unless given), and the
// caller's variables (bos_token, eos_token, date_string, enable_thinking, ...).
#include "tokenizer/chat_template.h"

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_eval.h"

namespace quiver {

struct ChatTemplate::Program {
  jinja::Body body;
};

ChatTemplate::ChatTemplate(std::unique_ptr<Program> program) : program_(std::move(program)) {}
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

Result<ChatTemplate> ChatTemplate::parse(const std::string& source) {
  try {
    auto program = std::make_unique<Program>();
    program->body = jinja::parse(jinja::lex(source));
    return ChatTemplate(std::move(program));
  } catch (const jinja::JinjaError& e) {
    return Status::error(std::string("chat template: ") + e.what());
  } catch (const std::exception& e) {  // the library's own (allocation); the bounds above come first
    return Status::error(std::string("chat template: ") + e.what());
  }
}

namespace {

template <typename Json>
Result<std::string> render_with(const jinja::Body& body, const Json& messages, bool add_generation_prompt,
                                const Json& variables) {
  if (!messages.is_array()) return Status::error("chat template: messages must be a JSON array");
  if (!variables.is_null() && !variables.is_object())
    return Status::error("chat template: variables must be a JSON object");
  auto globals = std::make_shared<jinja::Frame>();
  jinja::install_globals(*globals);
  globals->vars["tools"] = jinja::Value::none();
  globals->vars["documents"] = jinja::Value::none();
  if (variables.is_object()) {
    for (auto it = variables.begin(); it != variables.end(); ++it)
      globals->vars[it.key()] = jinja::Value::from_json(it.value());
  }
  globals->vars["messages"] = jinja::Value::from_json(messages);
  globals->vars["add_generation_prompt"] = jinja::Value::boolean(add_generation_prompt);
  try {
    jinja::Interpreter interp(globals);
    return interp.render(body);
  } catch (const jinja::JinjaError& e) {
    if (e.from_raise_exception) return Status::error(e.what());
    return Status::error(std::string("chat template: ") + e.what());
  } catch (const std::exception& e) {
    return Status::error(std::string("chat template: ") + e.what());
  }
}

}  // namespace

Result<std::string> ChatTemplate::render(const nlohmann::json& messages, bool add_generation_prompt,
                                         const nlohmann::json& variables) const {
  return render_with(program_->body, messages, add_generation_prompt, variables);
}

Result<std::string> ChatTemplate::render_ordered(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                                 const nlohmann::ordered_json& variables) const {
  return render_with(program_->body, messages, add_generation_prompt, variables);
}

}  // namespace quiver
