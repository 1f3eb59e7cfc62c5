// ChatTemplate: renders a Hugging Face chat template (the Jinja subset real templates
// use) exactly as transformers' apply_chat_template does.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace quiver {

class ChatTemplate {
 public:
  // Parses the template source; a construct outside the supported subset is an error
  // naming it and its line.
  static Result<ChatTemplate> parse(const std::string& source);

  // messages: [{"role": ..., "content": ...}, ...]. `variables` holds the rest of the
  // context: bos_token, eos_token, and anything else the template reads (tools, ...).
  // raise_exception(...) in the template becomes an error Status with its message.
  Result<std::string> render(const nlohmann::json& messages, bool add_generation_prompt,
                             const nlohmann::json& variables) const;

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

 private:
  struct Program;  // the parsed template (defined with the interpreter)
  explicit ChatTemplate(std::unique_ptr<Program> program);
  std::unique_ptr<Program> program_;
};

}  // namespace quiver
