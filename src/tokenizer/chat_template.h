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
  // Like transformers, `tools` and `documents` are defined (as none) even when absent.
  Result<std::string> render(const nlohmann::json& messages, bool add_generation_prompt,
                             const nlohmann::json& variables) const;
  // The same with object key order preserved: nlohmann::json sorts keys, but Python
  // dicts keep insertion order and `tojson` prints them in it, so renders that dump
  // tools or tool-call arguments need this overload to match byte for byte.
  Result<std::string> render_ordered(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                     const nlohmann::ordered_json& variables) const;

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

 private:
  struct Program;  // the parsed template (defined with the interpreter)
  explicit ChatTemplate(std::unique_ptr<Program> program);
  std::unique_ptr<Program> program_;
};

}  // namespace quiver
