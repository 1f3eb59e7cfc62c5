// vLLM's extra-vocabulary adapter files. The ids must continue the base vocabulary without
// gaps because vLLM (and the per-slot extra rows this feeds) index the rows by id - vocab_size.
#include "io/adapter_vocab.h"

#include <map>
#include <memory>

#include "io/json_util.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"

namespace quiver {

namespace {

// vLLM's lora_extra_vocab_size went up to 512; a real adapter adds a handful. The bound
// keeps a hostile added_tokens.json from sizing anything.
constexpr int64_t kMaxAddedTokens = 1 << 16;

// id -> token for every id at or above vocab_size, checked to be vocab_size, vocab_size+1, ...
Result<std::vector<std::string>> new_tokens(const Json& j, int64_t vocab_size) {
  std::map<int64_t, std::string> by_id;
  for (auto it = j.begin(); it != j.end(); ++it) {
    QV_ASSIGN_OR_RETURN(int64_t id, json_as_int(it.value(), it.key()));
    if (id < 0) return Status::error("token '" + it.key() + "' has negative id " + std::to_string(id));
    if (id < vocab_size) continue;  // already in the base vocabulary
    if (id - vocab_size >= kMaxAddedTokens)
      return Status::error("token '" + it.key() + "' has id " + std::to_string(id) + ", more than " +
                           std::to_string(kMaxAddedTokens) + " past the base vocabulary (" +
                           std::to_string(vocab_size) + ")");
    auto [at, fresh] = by_id.emplace(id, it.key());
    if (!fresh) return Status::error("tokens '" + at->second + "' and '" + it.key() + "' both have id " + std::to_string(id));
  }
  std::vector<std::string> out;
  for (const auto& [id, tok] : by_id) {
    const int64_t want = vocab_size + static_cast<int64_t>(out.size());
    if (id != want)
      return Status::error("token '" + tok + "' has id " + std::to_string(id) + " but the next new id is " +
                           std::to_string(want) + " (new tokens must continue the base vocabulary of " +
                           std::to_string(vocab_size) + " without gaps)");
    out.push_back(tok);
  }
  return out;
}

Status check_float(const TensorInfo& t, const std::string& name) {
  if (!t.dtype_known || (t.dtype != DType::kF32 && t.dtype != DType::kF16 && t.dtype != DType::kBF16))
    return Status::error("tensor " + name + " has dtype " + t.file_dtype + "; only F32, F16 and BF16 are supported");
  return Status::ok();
}

// `what` says what the rows are for, e.g. "one row per new token of added_tokens.json".
Result<std::vector<float>> rows(const TensorInfo& t, const std::string& name, size_t num_tokens, int64_t hidden,
                                const std::string& what = "one row per new token of added_tokens.json") {
  QV_RETURN_IF_ERROR(check_float(t, name));
  if (t.shape.size() != 2 || t.shape[0] != static_cast<int64_t>(num_tokens) || t.shape[1] != hidden)
    return Status::error("tensor " + name + " must be [" + std::to_string(num_tokens) + ", " + std::to_string(hidden) +
                         "] (" + what + ", hidden size " + std::to_string(hidden) + ")");
  std::vector<float> out(num_tokens * static_cast<size_t>(hidden));
  for (size_t i = 0; i < out.size(); ++i) out[i] = load_as_f32(t.data, t.dtype, i);
  return out;
}

// PEFT's saved names: the model's own, minus PEFT's "modules_to_save.default." part.
std::string module_path(const std::string& module) {
  return module == "lm_head" ? "base_model.model.lm_head" : "base_model.model.model.embed_tokens";
}

// trainable_token_indices: a list (for embed_tokens) or {"embed_tokens": [...], "lm_head": [...]}.
Result<std::vector<int64_t>> token_ids(const nlohmann::ordered_json& v, const std::string& field, int64_t vocab) {
  if (!v.is_array()) return Status::error(field + " must be a list of token ids");
  if (v.size() > static_cast<size_t>(kMaxAddedTokens))
    return Status::error(field + " has " + std::to_string(v.size()) + " ids, more than " + std::to_string(kMaxAddedTokens));
  std::vector<int64_t> ids;
  std::map<int64_t, bool> seen;
  for (const auto& e : v) {
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() >= vocab)
      return Status::error(field + ": " + e.dump() + " is not a token id below the vocabulary size " + std::to_string(vocab));
    if (!seen.emplace(e.get<int64_t>(), true).second) return Status::error(field + ": id " + e.dump() + " appears twice");
    ids.push_back(e.get<int64_t>());
  }
  return ids;
}

}  // namespace

Result<std::optional<PeftVocab>> load_peft_vocab(const nlohmann::ordered_json& config,
                                                  const std::map<std::string, TensorInfo>& tensors,
                                                  const ModelConfig& base) {
  PeftVocab v;
  const auto tensor = [&](const std::string& name, const char* field) -> Result<const TensorInfo*> {
    auto it = tensors.find(name);
    if (it == tensors.end()) return Status::error(std::string(field) + " needs tensor " + name + ", which is missing");
    return &it->second;
  };
  const auto mts = config.find("modules_to_save");
  if (mts != config.end() && mts->is_array() && !mts->empty()) {
    for (const auto& m : *mts) {
      const std::string name = m.is_string() ? m.get<std::string>() : std::string();
      const std::string last = name.substr(name.rfind('.') == std::string::npos ? 0 : name.rfind('.') + 1);
      if (last != "embed_tokens" && last != "lm_head") return std::optional<PeftVocab>();
      const std::string tname = module_path(last) + ".weight";
      QV_ASSIGN_OR_RETURN(const TensorInfo* t, tensor(tname, "modules_to_save"));
      QV_RETURN_IF_ERROR(check_float(*t, tname).with_context("modules_to_save"));
      if (t->shape.size() != 2 || t->shape[1] != base.hidden_size || t->shape[0] < base.vocab_size ||
          (v.replaced_vocab && t->shape[0] != v.replaced_vocab))
        return Status::error("modules_to_save: tensor " + tname + " must be [vocab, " + std::to_string(base.hidden_size) +
                             "] with vocab >= the base's " + std::to_string(base.vocab_size) +
                             " (and the same for embed_tokens and lm_head)");
      v.replaced_vocab = t->shape[0];
      v.replaced.push_back(last);
    }
  }
  const auto tti = config.find("trainable_token_indices");
  if (tti != config.end() && !tti->is_null() && !(tti->is_array() && tti->empty())) {
    std::vector<std::pair<std::string, nlohmann::ordered_json>> lists;
    if (tti->is_object()) {
      for (const auto& [k, ids] : tti->items()) lists.emplace_back(k, ids);
    } else {
      lists.emplace_back("embed_tokens", *tti);
    }
    for (const auto& [module, ids_json] : lists) {
      if (module != "embed_tokens" && module != "lm_head")
        return Status::error("trainable_token_indices names module '" + module + "' (only embed_tokens and lm_head)");
      const bool lm_head = module == "lm_head";
      QV_ASSIGN_OR_RETURN(std::vector<int64_t> ids,
                          token_ids(ids_json, "trainable_token_indices['" + module + "']", base.vocab_size));
      // A tied lm_head shares embed_tokens' delta; PEFT stores it once.
      if (lm_head && base.tie_word_embeddings) continue;
      const std::string tname = module_path(module) + ".token_adapter.trainable_tokens_delta";
      QV_ASSIGN_OR_RETURN(const TensorInfo* t, tensor(tname, "trainable_token_indices"));
      QV_ASSIGN_OR_RETURN(std::vector<float> r, rows(*t, tname, ids.size(), base.hidden_size,
                                                     "one row per id of trainable_token_indices"));
      (lm_head ? v.lm_head_ids : v.embed_ids) = std::move(ids);
      (lm_head ? v.lm_head_rows : v.embed_rows) = std::move(r);
    }
  }
  if (v.replaced.empty() && v.embed_ids.empty() && v.lm_head_ids.empty()) return std::optional<PeftVocab>();
  return std::optional<PeftVocab>(std::move(v));
}

Status refusal_for(const PeftVocab& v, const ModelConfig& base) {
  std::string what;
  for (const auto& m : v.replaced) {
    const double mib = static_cast<double>(v.replaced_vocab * base.hidden_size) * 4.0 / (1 << 20);
    what += (what.empty() ? "" : "; ") + std::string("modules_to_save replaces ") + m + " ([" +
            std::to_string(v.replaced_vocab) + ", " + std::to_string(base.hidden_size) + "], " +
            std::to_string(static_cast<int64_t>(mib + 0.5)) + " MiB as float32)";
  }
  if (!v.embed_ids.empty())
    what += (what.empty() ? "" : "; ") + std::string("trainable_token_indices trains ") +
            std::to_string(v.embed_ids.size()) + " embed_tokens rows";
  if (!v.lm_head_ids.empty())
    what += (what.empty() ? "" : "; ") + std::to_string(v.lm_head_ids.size()) + " lm_head rows";
  return Status::error(what + ": adapters that change vocabulary rows are not supported yet");
}

Result<std::optional<AddedVocab>> load_added_vocab(const std::string& dir, const ModelConfig& base) {
  const std::string tokens_path = dir + "/added_tokens.json", rows_path = dir + "/new_embeddings.safetensors";
  const bool has_tokens = is_regular_file(tokens_path), has_rows = is_regular_file(rows_path);
  if (has_rows && !has_tokens)
    return Status::error("new_embeddings.safetensors is present but added_tokens.json, which gives its rows' ids, "
                         "is not");
  if (!has_tokens) return std::optional<AddedVocab>();

  QV_ASSIGN_OR_RETURN(std::string text, read_text_file(tokens_path));
  QV_ASSIGN_OR_RETURN(Json j, parse_json_object(text, "added_tokens.json"));
  Result<std::vector<std::string>> toks = new_tokens(j, base.vocab_size);
  if (!toks) return toks.status().with_context("added_tokens.json");
  if (toks->empty()) return std::optional<AddedVocab>();
  AddedVocab v;
  v.tokens = std::move(toks.value());
  v.first_id = base.vocab_size;
  if (!has_rows)
    return Status::error("added_tokens.json adds " + std::to_string(v.tokens.size()) + " tokens from id " +
                         std::to_string(v.first_id) + " but there is no new_embeddings.safetensors with their rows");

  QV_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::open(rows_path));
  for (const auto& [name, t] : file->tensors()) {
    std::vector<float>* dst = name == "input_embeddings" ? &v.input_rows : name == "output_embeddings" ? &v.output_rows : nullptr;
    if (!dst)
      return Status::error("new_embeddings.safetensors: unexpected tensor " + name +
                           " (expected input_embeddings and/or output_embeddings)");
    Result<std::vector<float>> r = rows(t, name, v.tokens.size(), base.hidden_size);
    if (!r) return r.status().with_context("new_embeddings.safetensors");
    *dst = std::move(r.value());
  }
  if (v.input_rows.empty() && v.output_rows.empty())
    return Status::error("new_embeddings.safetensors has neither input_embeddings nor output_embeddings");
  return std::optional<AddedVocab>(std::move(v));
}

Status refusal_for(const AddedVocab& v) {
  std::string names;
  for (size_t i = 0; i < v.tokens.size() && i < 8; ++i) names += (i ? ", " : "") + v.tokens[i];
  if (v.tokens.size() > 8) names += ", ...";
  const int64_t last = v.first_id + static_cast<int64_t>(v.tokens.size()) - 1;
  return Status::error("the adapter adds " + std::to_string(v.tokens.size()) + " tokens (" + names + "; ids " +
                       std::to_string(v.first_id) + "-" + std::to_string(last) +
                       ") through added_tokens.json + new_embeddings.safetensors: adapters with added tokens are not "
                       "supported yet");
}

}  // namespace quiver
