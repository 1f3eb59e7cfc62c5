// Tokenizer: a Hugging Face tokenizer.json (BPE, byte-level and SentencePiece-style)
// plus tokenizer_config.json, producing exactly the ids HF tokenizers produces.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizer/chat_template.h"

namespace quiver {

class Tokenizer {
 public:
  // Reads DIR/tokenizer.json and, if present, DIR/tokenizer_config.json.
  static Result<std::unique_ptr<Tokenizer>> load(const std::string& model_dir);
  virtual ~Tokenizer() = default;

  // Invalid UTF-8 in `text` is an error.
  virtual Result<std::vector<int32_t>> encode(std::string_view text, bool add_special_tokens) const = 0;
  // An id outside the vocabulary is an error.
  virtual Result<std::string> decode(std::span<const int32_t> ids, bool skip_special_tokens) const = 0;

  virtual int64_t vocab_size() const = 0;  // including added tokens
  virtual bool is_special(int32_t id) const = 0;
  virtual std::optional<int32_t> bos_id() const = 0;
  virtual std::optional<int32_t> eos_id() const = 0;
  virtual std::string bos_token() const = 0;  // "" when none
  virtual std::string eos_token() const = 0;

  // The chat template from tokenizer_config.json (or chat_template.jinja), if any.
  virtual const ChatTemplate* chat_template() const = 0;
  // Renders messages with the chat template and the tokenizer's special tokens. Objects
  // keep their key order, as Python dicts do for transformers: `tojson` prints tools and
  // tool-call arguments in it (a nlohmann::json argument has its keys sorted already).
  Result<std::string> apply_chat_template(const nlohmann::ordered_json& messages, bool add_generation_prompt) const;
  // Same, with more template variables (tools, enable_thinking, ...); bos_token and
  // eos_token are set unless `extra_variables` sets them.
  // `chat_template`, when given, replaces the tokenizer's own (vLLM's --chat-template).
  Result<std::string> apply_chat_template(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                          const nlohmann::ordered_json& extra_variables,
                                          const ChatTemplate* chat_template = nullptr) const;

  // Vocabulary lookups (added tokens included); nullopt when absent.
  virtual std::optional<int32_t> token_to_id(std::string_view token) const { return std::nullopt; }
  virtual std::optional<std::string> id_to_token(int32_t id) const { return std::nullopt; }
  // Whether `id` is an added token (special or not, tokenizer.json's "added_tokens").
  virtual bool is_added(int32_t id) const { return false; }

 protected:
  // Why chat_template() is null although the files name a template (e.g. it failed to
  // parse); ok when there simply is none.
  virtual Status chat_template_status() const { return Status::ok(); }
};

// Streaming decode for one sequence: feed ids one at a time; each call returns the text
// that became final (only complete UTF-8, never more than the full decode would show).
// The concatenation of all returned pieces equals decode(all ids), except under
// spaces_between_special_tokens false (with skip_special_tokens false), vLLM's rule: an
// added token right after another generated added token is its own text, without any
// space the decoder would put before it.
class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer* tokenizer, std::vector<int32_t> prompt_ids, bool skip_special_tokens,
                         bool spaces_between_special_tokens = true);
  Result<std::string> push(int32_t id);
  // Text not yet returned because it may still change (e.g. an incomplete UTF-8 tail).
  Result<std::string> flush();

 private:
  const Tokenizer* tokenizer_;
  std::vector<int32_t> ids_;
  bool skip_special_;
  bool joined_added_;         // spaces_between_special_tokens false and special tokens kept
  bool last_added_ = false;   // the last generated token was an added token
  size_t prefix_offset_ = 0;  // window start for context
  size_t read_offset_ = 0;    // ids already turned into returned text
};

}  // namespace quiver
