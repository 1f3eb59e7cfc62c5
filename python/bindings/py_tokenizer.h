// PyTokenizer: one tokenizer — the base model's or an adapter's — for Python: encode,
// decode, apply_chat_template. Tokenizers are immutable, so a handle needs no engine lock,
// and it holds its tokenizer: it keeps working after its adapter is removed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace quiver::python {

class PyTokenizer {
 public:
  explicit PyTokenizer(std::shared_ptr<const Tokenizer> tokenizer) : tokenizer_(std::move(tokenizer)) {}

  // Errors raise ValueError with the tokenizer's message.
  std::vector<int32_t> encode(const std::string& text, bool add_special_tokens) const;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const;
  // messages_json: the conversation as JSON text (Python's json.dumps keeps key order).
  // template_source: "" = the tokenizer's own chat template. variables_json: a JSON object
  // of more template variables (tools, documents, enable_thinking, ...).
  // continue_final_message: cut after the final message's text (transformers' option).
  // tool_arguments_as_objects: vLLM's chat rule (tool_call_arguments_as_objects), which
  // LLM.chat follows as the server does; transformers' apply_chat_template does not.
  std::string apply_chat_template(const std::string& messages_json, bool add_generation_prompt,
                                  const std::string& template_source, const std::string& variables_json,
                                  bool continue_final_message, bool tool_arguments_as_objects) const;
  int64_t vocab_size() const { return tokenizer_->vocab_size(); }  // added tokens included
  // Equal for handles of the same tokenizer, so Python can cache per tokenizer.
  uintptr_t identity() const { return reinterpret_cast<uintptr_t>(tokenizer_.get()); }

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;
};

}  // namespace quiver::python
