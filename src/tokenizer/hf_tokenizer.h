// HfTokenizer: the Tokenizer built from tokenizer.json (+ tokenizer_config.json). Encoding
// runs HF's pipeline: added tokens -> normalizer -> pre-tokenizer -> BPE -> post-processor.
// The pipeline's parts are immutable and shared, so a tokenizer extended with an adapter's
// added tokens (with_added_tokens) costs its added tokens, not a second copy of the model.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoders.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizers.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_config.h"

namespace quiver {

class HfTokenizer final : public Tokenizer {
 public:
  // `tokenizer_json` is the parsed tokenizer.json.
  static Result<std::unique_ptr<HfTokenizer>> create(const nlohmann::json& tokenizer_json,
                                                     const TokenizerConfig& config);
  // This tokenizer with `tokens` added after its own added tokens (HF's add_tokens), read
  // with `config` instead of its own. Each token's id must be unused here and its content
  // new (error otherwise).
  Result<std::unique_ptr<HfTokenizer>> with_added_tokens(std::vector<AddedToken> tokens,
                                                         const TokenizerConfig& config) const;
  const TokenizerConfig& config() const { return config_; }

  Result<std::vector<int32_t>> encode(std::string_view text, bool add_special_tokens) const override;
  Result<std::string> decode(std::span<const int32_t> ids, bool skip_special_tokens) const override;

  int64_t vocab_size() const override { return vocab_size_; }
  bool is_special(int32_t id) const override;
  std::optional<int32_t> bos_id() const override { return bos_id_; }
  std::optional<int32_t> eos_id() const override { return eos_id_; }
  std::string bos_token() const override { return bos_token_; }
  std::string eos_token() const override { return eos_token_; }
  const ChatTemplate* chat_template() const override { return chat_template_ ? &*chat_template_ : nullptr; }
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::optional<std::string> id_to_token(int32_t id) const override;
  bool is_added(int32_t id) const override { return added_token(id) != nullptr; }

 protected:
  Status chat_template_status() const override { return chat_template_status_; }

 private:
  HfTokenizer() = default;
  // Indexes `added` (ids checked by the callers) and applies `config`.
  Status finish(std::vector<AddedToken> added, const TokenizerConfig& config);
  Status apply_config(const TokenizerConfig& config);
  const AddedToken* added_token(int32_t id) const;

  std::shared_ptr<const Normalizer> normalizer_;
  std::shared_ptr<const PreTokenizer> pre_tokenizer_;
  std::shared_ptr<const BpeModel> model_;
  std::unique_ptr<AddedVocabulary> added_;
  std::shared_ptr<const PostProcessor> post_processor_;
  std::shared_ptr<const Decoder> decoder_;
  TokenizerConfig config_;
  std::vector<int32_t> added_index_;  // id -> index into added_->tokens(), or -1
  TokenMap added_by_content_;
  int64_t vocab_size_ = 0;

  std::string bos_token_, eos_token_;
  std::optional<int32_t> bos_id_, eos_id_;
  std::optional<ChatTemplate> chat_template_;
  Status chat_template_status_;
};

}  // namespace quiver
