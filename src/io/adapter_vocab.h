// Vocabulary rows an adapter brings. vLLM's layout: added_tokens.json
// ({"[user]": 32000, ...}) with new_embeddings.safetensors, whose `input_embeddings` rows are
// the new tokens' embed_tokens rows and `output_embeddings` rows their lm_head rows, row i
// for id vocab_size + i. PEFT's: modules_to_save and trainable_token_indices (PeftVocab).
// Read and validated here; the engine does not apply them yet, so load_peft_adapter refuses
// an adapter that has them (see refusal_for).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/model_config.h"
#include "io/tensor_info.h"

namespace quiver {

struct AddedVocab {
  std::vector<std::string> tokens;  // by id: tokens[i] has id first_id + i
  int64_t first_id = 0;             // == the base model's vocab_size
  std::vector<float> input_rows;    // [tokens.size(), hidden]; empty when the file has none
  std::vector<float> output_rows;   // [tokens.size(), hidden]; empty when the file has none
};

// Reads DIR/added_tokens.json and DIR/new_embeddings.safetensors. Gives nullopt when the
// folder adds no token beyond `base`'s vocabulary (no files, or added_tokens.json naming only
// ids the base already has, as tokenizer.save_pretrained writes). Errors name the file and
// say what is inconsistent: ids that are not vocab_size, vocab_size + 1, ... in order, rows
// that do not match the tokens or the hidden size, unknown tensors, one file without the other.
Result<std::optional<AddedVocab>> load_added_vocab(const std::string& dir, const ModelConfig& base);

// The "not supported yet" error for an adapter that adds `v`'s tokens, naming them.
Status refusal_for(const AddedVocab& v);

// PEFT's two ways of training vocabulary rows, from adapter_config.json and the adapter's
// tensors: modules_to_save with embed_tokens / lm_head (whole replacement matrices, possibly
// over a resized vocabulary) and trainable_token_indices (trainable_tokens_delta rows).
struct PeftVocab {
  int64_t replaced_vocab = 0;           // rows of the modules_to_save matrices; 0: none
  std::vector<std::string> replaced;    // "embed_tokens", "lm_head"
  std::vector<int64_t> embed_ids;       // trainable_token_indices for embed_tokens
  std::vector<float> embed_rows;        // [embed_ids.size(), hidden]
  std::vector<int64_t> lm_head_ids;     // for an untied lm_head
  std::vector<float> lm_head_rows;      // [lm_head_ids.size(), hidden]
};

// Gives nullopt when the config uses neither feature (or modules_to_save names modules other
// than embed_tokens / lm_head, which load_peft_adapter refuses on its own). Otherwise checks
// the tensors against the config and `base` (names, dtypes, [rows, hidden_size], ids unique
// and inside the vocabulary) and returns what they hold. `tensors` maps the adapter file's
// names to their views; `config` is adapter_config.json.
Result<std::optional<PeftVocab>> load_peft_vocab(const nlohmann::ordered_json& config,
                                                  const std::map<std::string, TensorInfo>& tensors,
                                                  const ModelConfig& base);

// The "not supported yet" error for an adapter with `v`'s rows, saying what they cost.
Status refusal_for(const PeftVocab& v, const ModelConfig& base);

}  // namespace quiver
