// Tokens an adapter folder adds to the base vocabulary in vLLM's layout: added_tokens.json
// ({"[user]": 32000, ...}) with new_embeddings.safetensors, whose `input_embeddings` rows are
// the new tokens' embed_tokens rows and `output_embeddings` rows their lm_head rows, row i
// for id vocab_size + i. Read and validated here; the engine does not apply them yet, so
// load_peft_adapter refuses an adapter that has them (see refusal_for).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/model_config.h"

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

}  // namespace quiver
