// HfTokenizer: assembling the components from tokenizer.json, and the encode/decode
// pipelines. Unsupported parts of a file are errors naming their JSON path.
#include "tokenizer/hf_tokenizer.h"

#include "tokenizer/json_path.h"
#include "tokenizer/utf8.h"

namespace quiver {

using nlohmann::json;
namespace jp = json_path;

Result<std::unique_ptr<HfTokenizer>> HfTokenizer::create(const json& j, const TokenizerConfig& config) {
  if (!j.is_object()) return Status::error("expected a JSON object at the top level");
  auto t = std::unique_ptr<HfTokenizer>(new HfTokenizer());

  QV_ASSIGN_OR_RETURN(const json* model, jp::require(j, "model", ""));
  // Older files omit "type" in the model; a BPE model is recognized by its merges.
  std::string type = model->is_object() ? model->value("type", model->contains("merges") ? "BPE" : "") : "";
  if (type != "BPE") {
    return jp::error("model.type", "unsupported model type '" + type + "' (only BPE is supported)");
  }
  QV_ASSIGN_OR_RETURN(t->model_, BpeModel::parse(*model, "model"));

  if (auto it = j.find("normalizer"); it != j.end() && !it->is_null()) {
    QV_ASSIGN_OR_RETURN(t->normalizer_, parse_normalizer(*it, "normalizer"));
  }
  if (auto it = j.find("pre_tokenizer"); it != j.end() && !it->is_null()) {
    QV_ASSIGN_OR_RETURN(t->pre_tokenizer_, parse_pre_tokenizer(*it, "pre_tokenizer"));
  }
  if (auto it = j.find("post_processor"); it != j.end()) {
    QV_ASSIGN_OR_RETURN(t->post_processor_, PostProcessor::parse(*it, "post_processor"));
  }
  if (auto it = j.find("decoder"); it != j.end() && !it->is_null()) {
    QV_ASSIGN_OR_RETURN(t->decoder_, parse_decoder(*it, "decoder"));
  }
  for (const char* unsupported : {"truncation", "padding"}) {
    if (auto it = j.find(unsupported); it != j.end() && !it->is_null()) {
      return jp::error(unsupported, "is not supported (must be null)");
    }
  }

  std::vector<AddedToken> added;
  if (auto it = j.find("added_tokens"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) return jp::error("added_tokens", "expected an array");
    for (size_t i = 0; i < it->size(); ++i) {
      QV_ASSIGN_OR_RETURN(AddedToken token, parse_added_token((*it)[i], jp::index("added_tokens", i)));
      added.push_back(std::move(token));
    }
  }
  QV_RETURN_IF_ERROR(t->finish(std::move(added), config));
  return t;
}

Result<std::unique_ptr<HfTokenizer>> HfTokenizer::with_added_tokens(std::vector<AddedToken> tokens,
                                                                    const TokenizerConfig& config) const {
  auto t = std::unique_ptr<HfTokenizer>(new HfTokenizer());
  t->normalizer_ = normalizer_;
  t->pre_tokenizer_ = pre_tokenizer_;
  t->model_ = model_;
  t->post_processor_ = post_processor_;
  t->decoder_ = decoder_;
  std::vector<AddedToken> added = added_->tokens();
  const size_t num_own = added.size();
  for (AddedToken& token : tokens) {
    const std::string id = std::to_string(token.id);
    if (token.id < 0 || token.id > json_path::kMaxTokenId)
      return Status::error("added token '" + token.content + "': id " + id + " is out of range");
    if (auto have = id_to_token(token.id))
      return Status::error("added token '" + token.content + "': id " + id + " is already '" + *have + "'");
    if (auto have = token_to_id(token.content))
      return Status::error("added token '" + token.content + "' (id " + id + ") is already in the vocabulary as id " +
                           std::to_string(*have));
    for (size_t i = num_own; i < added.size(); ++i)
      if (added[i].id == token.id || added[i].content == token.content)
        return Status::error("added tokens '" + added[i].content + "' and '" + token.content + "' clash (ids " +
                             std::to_string(added[i].id) + " and " + id + ")");
    added.push_back(std::move(token));
  }
  QV_RETURN_IF_ERROR(t->finish(std::move(added), config));
  return t;
}

Status HfTokenizer::finish(std::vector<AddedToken> added, const TokenizerConfig& config) {
  vocab_size_ = model_->max_id() + 1;
  for (const AddedToken& a : added) vocab_size_ = std::max<int64_t>(vocab_size_, a.id + 1);
  added_index_.assign(vocab_size_, -1);
  added_by_content_.clear();
  for (size_t i = 0; i < added.size(); ++i) {
    added_index_[added[i].id] = static_cast<int32_t>(i);
    added_by_content_[added[i].content] = added[i].id;
  }
  added_ = std::make_unique<AddedVocabulary>(std::move(added), normalizer_.get());
  return apply_config(config);
}

Status HfTokenizer::apply_config(const TokenizerConfig& config) {
  config_ = config;
  bos_token_ = config.bos_token;
  eos_token_ = config.eos_token;
  if (!bos_token_.empty()) {
    bos_id_ = token_to_id(bos_token_);
    if (!bos_id_) return Status::error("tokenizer_config.json: bos_token '" + bos_token_ + "' is not in the vocabulary");
  }
  if (!eos_token_.empty()) {
    eos_id_ = token_to_id(eos_token_);
    if (!eos_id_) return Status::error("tokenizer_config.json: eos_token '" + eos_token_ + "' is not in the vocabulary");
  }
  // transformers rebuilds a BOS/EOS template from add_bos_token / add_eos_token; a key that
  // is absent keeps what the file's template does.
  if ((config.add_bos_token || config.add_eos_token) && (!post_processor_ || post_processor_->is_template())) {
    std::vector<int32_t> probe;
    if (post_processor_) post_processor_->process(probe, true);
    bool had_bos = bos_id_ && !probe.empty() && probe.front() == *bos_id_;
    bool had_eos = eos_id_ && !probe.empty() && probe.back() == *eos_id_;
    bool add_bos = config.add_bos_token.value_or(had_bos) && bos_id_;
    bool add_eos = config.add_eos_token.value_or(had_eos) && eos_id_;
    post_processor_ = PostProcessor::bos_eos(add_bos ? bos_id_ : std::nullopt, add_eos ? eos_id_ : std::nullopt);
  }
  if (config.chat_template) {
    auto parsed = ChatTemplate::parse(*config.chat_template);
    if (parsed) {
      chat_template_.emplace(std::move(parsed.value()));
    } else {
      chat_template_status_ = parsed.status().with_context("chat template");
    }
  }
  return Status::ok();
}

const AddedToken* HfTokenizer::added_token(int32_t id) const {
  if (id < 0 || id >= vocab_size_ || added_index_[id] < 0) return nullptr;
  return &added_->tokens()[added_index_[id]];
}

bool HfTokenizer::is_special(int32_t id) const {
  const AddedToken* t = added_token(id);
  return t != nullptr && t->special;
}

std::optional<int32_t> HfTokenizer::token_to_id(std::string_view token) const {
  if (auto it = added_by_content_.find(token); it != added_by_content_.end()) return it->second;
  return model_->token_to_id(token);
}

std::optional<std::string> HfTokenizer::id_to_token(int32_t id) const {
  if (const AddedToken* t = added_token(id)) return t->content;
  if (const std::string* s = model_->id_to_token(id)) return *s;
  return std::nullopt;
}

Result<std::vector<int32_t>> HfTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  if (size_t bad = utf8::find_invalid(text); bad != std::string_view::npos) {
    return Status::error("input is not valid UTF-8 (byte offset " + std::to_string(bad) + ")");
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<PreToken> words;
  for (TextPiece& piece : added_->split(text)) {
    if (piece.id >= 0) {
      ids.push_back(piece.id);
      continue;
    }
    words.clear();
    words.push_back({std::move(piece.text), piece.at_start});
    if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(words);
    for (const PreToken& w : words) model_->tokenize(w.text, ids);
  }
  if (post_processor_) post_processor_->process(ids, add_special_tokens);
  return ids;
}

Result<std::string> HfTokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (const AddedToken* t = added_token(id)) {
      if (!(skip_special_tokens && t->special)) tokens.push_back(t->content);
      continue;
    }
    const std::string* s = model_->id_to_token(id);
    if (s == nullptr) {
      return Status::error("token id " + std::to_string(id) + " is not in the vocabulary (size " +
                           std::to_string(vocab_size_) + ")");
    }
    tokens.push_back(*s);
  }
  if (!decoder_) {
    // Without a decoder HF joins the tokens with spaces.
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) out.push_back(' ');
      out += tokens[i];
    }
    return out;
  }
  decoder_->decode_chain(tokens);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace quiver
