// PEFT LoRA adapters (adapter_config.json + adapter_model.safetensors or .bin), validated against
// the base model and converted to float32 with the scale folded into B.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/adapter_vocab.h"
#include "io/model_config.h"

namespace quiver {

// The projections a LoRA adapter may target, in the order the model applies them.
enum class LoraTarget : int { kQ = 0, kK, kV, kO, kGate, kUp, kDown };
constexpr int kNumLoraTargets = 7;
const char* lora_target_name(LoraTarget t);  // "q_proj", ..., "down_proj"
// in/out features of a target for this base model.
int64_t lora_target_in(const ModelConfig& c, LoraTarget t);
int64_t lora_target_out(const ModelConfig& c, LoraTarget t);

struct LoraModule {
  int rank = 0;
  std::vector<float> a;  // [rank, in]
  std::vector<float> b;  // [out, rank], already multiplied by the scale (alpha/r or alpha/sqrt(r))
};

struct LoraAdapter {
  std::string name;
  std::string path;
  int max_rank = 0;  // largest rank over its modules
  // layers[l][target]: empty when the adapter does not touch that module.
  std::vector<std::array<std::optional<LoraModule>, kNumLoraTargets>> layers;
  AdapterVocab vocab;  // rows it changes or adds in embed_tokens / lm_head; empty for most
  // LoRA on embed_tokens and lm_head (PEFT's lora_embedding_A/B and lm_head's lora_A/B),
  // over the base vocabulary or the adapter's (base + vocab.new_tokens):
  //   embed_lora.a [rows, rank] (lora_embedding_A transposed), embed_lora.b [hidden, rank]
  //   lm_head_lora.a [rank, hidden], lm_head_lora.b [rows, rank]
  // with the scale folded into b, as for the projections.
  std::optional<LoraModule> embed_lora, lm_head_lora;
  size_t host_bytes() const;
};

// Loads DIR/adapter_config.json and DIR/adapter_model.safetensors (else adapter_model.bin,
// see io/adapter_weights.h). Refuses, with a message naming the cause: non-LORA peft_type,
// use_dora, modules_to_save of modules other than embed_tokens / lm_head, bias != "none",
// unknown target names, vocabulary rows that do not fit the base
// or each other (io/adapter_vocab.h: resolve_adapter_vocab), a rank
// above max_lora_rank, tensors whose shapes do not fit `base`, missing tensors, NaN/Inf
// weights, patterns that backtrack past BoundedRegex's limits. With a non-empty `allowlist`
// the folder and its files must really lie inside it (io/adapter_files.h).
// `base_rows`: the base's embed_tokens / lm_head, so that of a whole matrix the adapter saves
// only the rows it changes are kept (resolve_adapter_vocab); null keeps every row.
Result<LoraAdapter> load_peft_adapter(const std::string& dir, const std::string& name, const ModelConfig& base,
                                      int max_lora_rank, const std::vector<std::string>& allowlist = {},
                                      const BaseVocab* base_rows = nullptr);

}  // namespace quiver
