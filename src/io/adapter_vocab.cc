// vLLM's extra-vocabulary adapter files. The ids must continue the base vocabulary without
// gaps because vLLM (and the per-slot extra rows this feeds) index the rows by id - vocab_size.
#include "io/adapter_vocab.h"

#include <algorithm>
#include <cmath>
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
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = load_as_f32(t.data, t.dtype, i);
    if (!std::isfinite(out[i]))
      return Status::error("tensor " + name + " holds a non-finite value at row " + std::to_string(i / hidden));
  }
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
  // A whole matrix `tname` for module `last` ("embed_tokens" / "lm_head"), named in messages
  // by `field`; the same row count for both modules.
  const auto whole = [&](const std::string& tname, const std::string& last,
                         const char* field) -> Result<std::vector<float>> {
    QV_ASSIGN_OR_RETURN(const TensorInfo* t, tensor(tname, field));
    QV_RETURN_IF_ERROR(check_float(*t, tname).with_context(field));
    if (t->shape.size() != 2 || t->shape[1] != base.hidden_size || t->shape[0] < base.vocab_size ||
        (v.replaced_vocab && t->shape[0] != v.replaced_vocab))
      return Status::error(std::string(field) + ": tensor " + tname + " must be [vocab, " +
                           std::to_string(base.hidden_size) + "] with vocab >= the base's " +
                           std::to_string(base.vocab_size) + " (and the same for embed_tokens and lm_head)");
    if (t->shape[0] - base.vocab_size > kMaxAddedTokens)
      return Status::error(std::string(field) + ": tensor " + tname + " has " + std::to_string(t->shape[0]) +
                           " rows, more than " + std::to_string(kMaxAddedTokens) + " past the base vocabulary");
    v.replaced_vocab = t->shape[0];
    v.replaced.push_back(last);
    v.tensors.push_back(tname);
    // Whole matrices: what they cost is stated where the slot takes them (slot_pool.h).
    return rows(*t, tname, static_cast<size_t>(t->shape[0]), base.hidden_size, field);
  };
  const auto mts = config.find("modules_to_save");
  if (mts != config.end() && mts->is_array() && !mts->empty()) {
    for (const auto& m : *mts) {
      const std::string name = m.is_string() ? m.get<std::string>() : std::string();
      const std::string last = name.substr(name.rfind('.') == std::string::npos ? 0 : name.rfind('.') + 1);
      if (last != "embed_tokens" && last != "lm_head") return std::optional<PeftVocab>();
      const std::string tname = module_path(last) + ".weight";
      QV_ASSIGN_OR_RETURN(std::vector<float> full, whole(tname, last, "modules_to_save"));
      // save_pretrained over a resized vocabulary (save_embedding_layers="auto") also stores
      // the module's state: the same trained copy as ".modules_to_save.weight" and the
      // resized base as ".original_module.weight", which the adapter's forward never reads.
      const std::string copy = module_path(last) + ".modules_to_save.weight";
      if (auto c = tensors.find(copy); c != tensors.end()) {
        QV_ASSIGN_OR_RETURN(std::vector<float> twin, rows(c->second, copy, static_cast<size_t>(v.replaced_vocab),
                                                          base.hidden_size, "modules_to_save"));
        if (twin != full)
          return Status::error("modules_to_save: tensors " + tname + " and " + copy +
                               " both hold the trained module but differ");
        v.tensors.push_back(copy);
      }
      const std::string original = module_path(last) + ".original_module.weight";
      if (auto o = tensors.find(original); o != tensors.end()) {
        QV_RETURN_IF_ERROR(check_float(o->second, original).with_context("modules_to_save"));
        v.tensors.push_back(original);
      }
      (last == "lm_head" ? v.lm_head_full : v.embed_full) = std::move(full);
    }
  }
  // PEFT saves the layer under a LoRA on embed_tokens / lm_head whole (save_embedding_layers)
  // and loads it over the base's: a whole matrix as modules_to_save's is.
  for (const char* last : {"embed_tokens", "lm_head"}) {
    const std::string tname = module_path(last) + ".base_layer.weight";
    if (!tensors.count(tname)) continue;
    if (std::find(v.replaced.begin(), v.replaced.end(), last) != v.replaced.end())
      return Status::error("tensor " + tname + " saves the base of " + last + ", which modules_to_save replaces");
    QV_ASSIGN_OR_RETURN(std::vector<float> full, whole(tname, last, "saved embedding layer"));
    (std::string(last) == "lm_head" ? v.lm_head_full : v.embed_full) = std::move(full);
    v.base_layers.push_back(last);
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
      v.tensors.push_back(tname);
      (lm_head ? v.lm_head_rows : v.embed_rows) = std::move(r);
    }
  }
  if (v.replaced.empty() && v.embed_ids.empty() && v.lm_head_ids.empty()) return std::optional<PeftVocab>();
  return std::optional<PeftVocab>(std::move(v));
}

Result<std::optional<AddedVocab>> load_added_vocab(const std::string& dir, const ModelConfig& base,
                                                   int64_t rows_elsewhere) {
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
  const int64_t n = static_cast<int64_t>(v.tokens.size());
  if (rows_elsewhere > 0) {
    if (has_rows)
      return Status::error("new_embeddings.safetensors is present but modules_to_save already holds the rows of the " +
                           std::to_string(rows_elsewhere) + " new tokens");
    if (n > rows_elsewhere)
      return Status::error("added_tokens.json names ids up to " + std::to_string(v.first_id + n - 1) +
                           " but modules_to_save's matrices end at id " + std::to_string(v.first_id + rows_elsewhere - 1));
    return std::optional<AddedVocab>(std::move(v));
  }
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

namespace {

void append_rows(AdapterVocab* v, bool input, int64_t id, const float* row, int64_t hidden) {
  (input ? v->input_ids : v->output_ids).push_back(static_cast<int32_t>(id));
  auto& rows = input ? v->input_rows : v->output_rows;
  rows.insert(rows.end(), row, row + hidden);
}

// Whether row `id` of the base matrix m holds exactly `row` (compared as float32, the type
// adapter rows are read into: a bf16 base saved by PEFT in bf16 or float32 compares equal).
bool equals_row(const Tensor& m, int64_t id, const float* row, int64_t hidden) {
  check(m.ndim == 2 && m.dim(1) == hidden && id < m.dim(0), "equals_row: base matrix of another shape");
  for (int64_t k = 0; k < hidden; ++k)
    if (load_as_f32(m.data, m.dtype, id * hidden + k) != row[k]) return false;
  return true;
}

// Sorts (id, row) pairs by id: the slot's lookups assume ascending ids.
void sort_rows(std::vector<int32_t>* ids, std::vector<float>* rows, int64_t hidden) {
  std::vector<size_t> order(ids->size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return (*ids)[a] < (*ids)[b]; });
  std::vector<int32_t> sid;
  std::vector<float> srows;
  for (size_t i : order) {
    sid.push_back((*ids)[i]);
    srows.insert(srows.end(), rows->begin() + static_cast<ptrdiff_t>(i * hidden),
                 rows->begin() + static_cast<ptrdiff_t>((i + 1) * hidden));
  }
  *ids = std::move(sid);
  *rows = std::move(srows);
}

}  // namespace

Result<AdapterVocab> resolve_adapter_vocab(std::optional<AddedVocab> added, std::optional<PeftVocab> peft,
                                           const ModelConfig& base, const BaseVocab* base_rows) {
  AdapterVocab v;
  const int64_t h = base.hidden_size, vocab = base.vocab_size;
  if (peft) {
    PeftVocab& p = *peft;
    if (!p.replaced.empty() && (!p.embed_ids.empty() || !p.lm_head_ids.empty()))
      return Status::error("modules_to_save and trainable_token_indices both change vocabulary rows; an adapter may "
                           "use one of them");
    if (!p.replaced.empty()) {
      v.layout = p.base_layers.size() == p.replaced.size() ? "saved embedding layers" : "modules_to_save";
      v.new_tokens = p.replaced_vocab - vocab;
      if (v.new_tokens > 0 && (p.embed_full.empty() || p.lm_head_full.empty()))
        return Status::error("modules_to_save resizes the vocabulary to " + std::to_string(p.replaced_vocab) +
                             " but saves only " + (p.embed_full.empty() ? "lm_head" : "embed_tokens") +
                             ": the new tokens' " + (p.embed_full.empty() ? "embed_tokens" : "lm_head") +
                             " rows are not in the adapter (save both modules)");
      for (bool input : {true, false}) {
        const std::vector<float>& full = input ? p.embed_full : p.lm_head_full;
        if (full.empty()) continue;
        const Tensor* same_as = base_rows == nullptr ? nullptr : input ? &base_rows->embed : &base_rows->lm_head;
        for (int64_t id = 0; id < p.replaced_vocab; ++id) {
          const float* row = full.data() + id * h;
          if (id < vocab && same_as != nullptr && equals_row(*same_as, id, row, h)) continue;
          append_rows(&v, input, id, row, h);
        }
      }
    } else {
      v.layout = "trainable_token_indices";
      for (size_t i = 0; i < p.embed_ids.size(); ++i) append_rows(&v, true, p.embed_ids[i], p.embed_rows.data() + i * h, h);
      // A tied lm_head shares embed_tokens' rows (PEFT's tied token adapter).
      const bool tied = base.tie_word_embeddings;
      const std::vector<int64_t>& out_ids = tied ? p.embed_ids : p.lm_head_ids;
      const std::vector<float>& out_rows = tied ? p.embed_rows : p.lm_head_rows;
      for (size_t i = 0; i < out_ids.size(); ++i) append_rows(&v, false, out_ids[i], out_rows.data() + i * h, h);
    }
  }
  if (added) {
    AddedVocab& a = *added;
    const int64_t n = static_cast<int64_t>(a.tokens.size());
    if (a.input_rows.empty() && a.output_rows.empty()) {
      // Names only: the PEFT rows above cover these ids (load_added_vocab checked).
      v.new_token_names = a.tokens;
    } else {
      if (peft) return Status::error("new_embeddings.safetensors adds rows beside PEFT's vocabulary rows; an adapter "
                                     "may use one of the two layouts");
      v.layout = "added_tokens.json";
      v.new_tokens = n;
      v.new_token_names = a.tokens;
      if (a.input_rows.empty())
        return Status::error("new_embeddings.safetensors has no input_embeddings: the " + std::to_string(n) +
                             " new tokens have no embed_tokens rows (a generated one could not be fed back)");
      if (a.output_rows.empty() && !base.tie_word_embeddings)
        return Status::error("new_embeddings.safetensors has no output_embeddings and the base model's lm_head is "
                             "not tied to embed_tokens: the new tokens' logits are undefined");
      const std::vector<float>& out = a.output_rows.empty() ? a.input_rows : a.output_rows;
      for (int64_t i = 0; i < n; ++i) {
        append_rows(&v, true, vocab + i, a.input_rows.data() + i * h, h);
        append_rows(&v, false, vocab + i, out.data() + i * h, h);
      }
    }
  }
  sort_rows(&v.input_ids, &v.input_rows, h);
  sort_rows(&v.output_ids, &v.output_rows, h);
  return v;
}

}  // namespace quiver
