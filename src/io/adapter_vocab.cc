// vLLM's extra-vocabulary adapter files. The ids must continue the base vocabulary without
// gaps because vLLM (and the per-slot extra rows this feeds) index the rows by id - vocab_size.
#include "io/adapter_vocab.h"

#include <sys/stat.h>

#include <map>
#include <memory>

#include "io/json_util.h"
#include "io/safetensors.h"

namespace quiver {

namespace {

// vLLM's lora_extra_vocab_size went up to 512; a real adapter adds a handful. The bound
// keeps a hostile added_tokens.json from sizing anything.
constexpr int64_t kMaxAddedTokens = 1 << 16;

bool is_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

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

Result<std::vector<float>> rows(const TensorInfo& t, const std::string& name, size_t num_tokens, int64_t hidden) {
  if (!t.dtype_known || (t.dtype != DType::kF32 && t.dtype != DType::kF16 && t.dtype != DType::kBF16))
    return Status::error("tensor " + name + " has dtype " + t.file_dtype + "; only F32, F16 and BF16 are supported");
  if (t.shape.size() != 2 || t.shape[0] != static_cast<int64_t>(num_tokens) || t.shape[1] != hidden)
    return Status::error("tensor " + name + " must be [" + std::to_string(num_tokens) + ", " + std::to_string(hidden) +
                         "] (one row per new token of added_tokens.json, hidden size " + std::to_string(hidden) +
                         ")");
  std::vector<float> out(num_tokens * static_cast<size_t>(hidden));
  for (size_t i = 0; i < out.size(); ++i) out[i] = load_as_f32(t.data, t.dtype, i);
  return out;
}

}  // namespace

Result<std::optional<AddedVocab>> load_added_vocab(const std::string& dir, const ModelConfig& base) {
  const std::string tokens_path = dir + "/added_tokens.json", rows_path = dir + "/new_embeddings.safetensors";
  const bool has_tokens = is_file(tokens_path), has_rows = is_file(rows_path);
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
