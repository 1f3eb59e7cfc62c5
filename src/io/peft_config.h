// adapter_config.json read the way PEFT's LoraModel reads it: which modules an adapter
// targets (target_modules as a list, a regex or "all-linear"; layers_to_transform +
// layers_pattern; exclude_modules) and with which rank and scale (r, lora_alpha,
// use_rslora, rank_pattern, alpha_pattern). Features quiver cannot run are refused by name.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "io/bounded_regex.h"
#include "io/peft_adapter.h"

namespace quiver::peft {

// Key order matters (rank_pattern / alpha_pattern: first matching key wins, as in Python).
using OJson = nlohmann::ordered_json;

// The modules an adapter may target besides the seven projections: the input embedding
// (LoRA as lora_embedding_A / lora_embedding_B) and the output projection.
inline constexpr const char* kEmbedModule = "model.embed_tokens";
inline constexpr const char* kLmHeadModule = "lm_head";

struct LoraSpec {
  enum class Mode { kList, kRegex, kAllLinear };
  int r = 8;
  double alpha = 8;
  bool rslora = false;
  Mode mode = Mode::kList;
  std::vector<std::string> targets;          // kList
  std::optional<BoundedRegex> target_regex;  // kRegex
  std::vector<std::pair<std::string, BoundedRegex>> rank_keys;
  std::vector<int> rank_values;
  std::vector<std::pair<std::string, BoundedRegex>> alpha_keys;
  std::vector<double> alpha_values;
  bool use_layer_indexes = false;
  std::set<int64_t> layers;  // layers_to_transform
  std::vector<BoundedRegex> layers_patterns;
  std::optional<BoundedRegex> exclude_regex;
  std::vector<std::string> exclude_list;
  // PEFT's ensure_weight_tying: on a base whose lm_head is embed_tokens, a LoRA on
  // embed_tokens is lm_head's too (PEFT then drops lm_head from target_modules but saves its
  // lora_A / lora_B, the embedding's B and A transposed).
  bool ensure_weight_tying = false;
};

// vocab_read: modules_to_save (embed_tokens / lm_head) and trainable_token_indices were read
// by load_peft_vocab (io/adapter_vocab.h), which the engine applies.
Result<LoraSpec> parse_spec(const OJson& config, bool vocab_read);

// PEFT's check_target_module_exists for one module name (module_name's form, or kEmbedModule
// / kLmHeadModule). "all-linear" never takes the embedding or lm_head, as in PEFT.
Result<bool> is_targeted(const LoraSpec& s, const std::string& module);

struct RankScale {
  int rank;
  double alpha;
  std::string rank_from;  // for messages: "r" or "rank_pattern['k']"
  // lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora.
  double scale(bool rslora) const;
};
Result<RankScale> rank_and_alpha(const LoraSpec& s, const std::string& module);

std::optional<LoraTarget> target_from_name(const std::string& s);
std::string supported_targets();  // "q_proj, ..., down_proj, embed_tokens, lm_head"
// A decimal layer index taken from a tensor or module name; no wrap-around.
Result<int64_t> parse_index(const std::string& digits, const std::string& where);

}  // namespace quiver::peft
