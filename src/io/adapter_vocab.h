// Vocabulary rows an adapter brings. vLLM's layout: added_tokens.json
// ({"[user]": 32000, ...}) with new_embeddings.safetensors, whose `input_embeddings` rows are
// the new tokens' embed_tokens rows and `output_embeddings` rows their lm_head rows, row i
// for id vocab_size + i. PEFT's: modules_to_save and trainable_token_indices (PeftVocab).
// Read and validated here, then resolved into one AdapterVocab: the rows the engine puts in
// the adapter's slot (lora/slot_pool.h) in place of the base model's.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
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
// `rows_elsewhere`: new ids whose rows the PEFT weights already hold (modules_to_save over a
// resized vocabulary); added_tokens.json then only names them (tokenizer.save_pretrained
// writes it so), and the result has no rows.
Result<std::optional<AddedVocab>> load_added_vocab(const std::string& dir, const ModelConfig& base,
                                                   int64_t rows_elsewhere = 0);

// PEFT's ways of changing vocabulary rows, from adapter_config.json and the adapter's
// tensors: modules_to_save with embed_tokens / lm_head (whole replacement matrices, possibly
// over a resized vocabulary), the base layer PEFT saves beside a LoRA on embed_tokens /
// lm_head (`<module>.base_layer.weight`, save_embedding_layers: whole matrices it loads over
// the base's, resized or not) and trainable_token_indices (trainable_tokens_delta rows).
struct PeftVocab {
  int64_t replaced_vocab = 0;           // rows of the whole matrices; 0: none
  std::vector<std::string> replaced;    // "embed_tokens", "lm_head"
  std::vector<std::string> base_layers; // those of `replaced` saved as base layers of a LoRA
  std::vector<float> embed_full;        // [replaced_vocab, hidden] when embed_tokens is replaced
  std::vector<float> lm_head_full;      // [replaced_vocab, hidden] when lm_head is replaced
  std::vector<int64_t> embed_ids;       // trainable_token_indices for embed_tokens
  std::vector<float> embed_rows;        // [embed_ids.size(), hidden]
  std::vector<int64_t> lm_head_ids;     // for an untied lm_head
  std::vector<float> lm_head_rows;      // [lm_head_ids.size(), hidden]
  std::vector<std::string> tensors;     // the adapter file's tensors these came from
};

// Gives nullopt when the config uses neither feature (or modules_to_save names modules other
// than embed_tokens / lm_head, which load_peft_adapter refuses on its own). Otherwise checks
// the tensors against the config and `base` (names, dtypes, [rows, hidden_size], ids unique
// and inside the vocabulary) and returns what they hold. `tensors` maps the adapter file's
// names to their views; `config` is adapter_config.json.
Result<std::optional<PeftVocab>> load_peft_vocab(const nlohmann::ordered_json& config,
                                                  const std::map<std::string, TensorInfo>& tensors,
                                                  const ModelConfig& base);

// What an adapter does to the vocabulary, in the one form the engine applies whatever the
// layout: for the adapter's requests, token id t reads input_rows[i] where input_ids[i] == t
// instead of embed_tokens row t, and the logit of output_ids[i] is output_rows[i] . h instead
// of lm_head row . h. Ids from vocab_size up to vocab_size + new_tokens exist only for these
// requests (every one has an input and an output row); other requests never see them.
struct AdapterVocab {
  int64_t new_tokens = 0;
  std::vector<std::string> new_token_names;  // by id from vocab_size, when the folder names them
  std::vector<int32_t> input_ids;            // ascending
  std::vector<float> input_rows;             // [input_ids.size(), hidden]
  std::vector<int32_t> output_ids;           // ascending
  std::vector<float> output_rows;            // [output_ids.size(), hidden]
  std::string layout;                        // for messages: "added_tokens.json", "modules_to_save", ...

  bool empty() const { return new_tokens == 0 && input_ids.empty() && output_ids.empty(); }
  // Slot rows the adapter needs in each of embed_tokens and lm_head.
  int64_t rows() const {
    return static_cast<int64_t>(input_ids.size() > output_ids.size() ? input_ids.size() : output_ids.size());
  }
  size_t host_bytes() const { return (input_rows.size() + output_rows.size()) * sizeof(float); }
};

// One AdapterVocab from what the folder holds (either may be absent). PEFT's semantics:
// modules_to_save rows replace every row of the matrix they save; trainable_tokens_delta
// rows replace the rows of their ids (values, not differences), on lm_head too when the base
// ties it to embed_tokens. vLLM's: new rows for the new ids; on a tied base a file without
// output_embeddings uses the input rows for lm_head. Refused, naming what is missing: new
// ids without an input row (a generated token could not be fed back) or without an output
// row (its logit would be undefined), and both PEFT layouts at once.
// base_rows, when given, are the base model's own matrices: rows of a whole matrix equal to
// the base's are left out (PEFT saves the whole base layer beside a LoRA on it, changed or
// not), so only the rows an adapter really changes take slot rows. Without them every row of
// a whole matrix is kept.
struct BaseVocab;
Result<AdapterVocab> resolve_adapter_vocab(std::optional<AddedVocab> added, std::optional<PeftVocab> peft,
                                           const ModelConfig& base, const BaseVocab* base_rows = nullptr);

// The base model's embed_tokens and lm_head as host views (F32, F16 or BF16), for
// resolve_adapter_vocab's comparison; `keep` holds what the views point into.
struct BaseVocab {
  Tensor embed;    // [vocab_size, hidden]
  Tensor lm_head;  // [vocab_size, hidden]; the embed view on a tied base
  std::shared_ptr<const void> keep;
};

}  // namespace quiver
