// ModelConfig: a Hugging Face config.json (+ generation_config.json) parsed once into types.
// Supports LlamaForCausalLM, MistralForCausalLM and Qwen2ForCausalLM; anything else is
// refused at load with a message naming the field and what is supported.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace quiver {

struct RopeConfig {
  enum class Type { kDefault, kLinear, kLlama3 };
  Type type = Type::kDefault;
  double theta = 10000.0;
  double factor = 1.0;                 // linear, llama3
  double low_freq_factor = 1.0;        // llama3
  double high_freq_factor = 4.0;       // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
};

struct ModelConfig {
  std::string architecture;  // e.g. "LlamaForCausalLM"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;  // explicit `head_dim` or hidden_size / num_heads
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v bias (always true for Qwen2)
  DType dtype = DType::kF32;    // `dtype` / `torch_dtype`: what the weights are stored in
  int64_t bos_token_id = -1;    // -1: none
  std::vector<int64_t> eos_token_ids;  // config.json and generation_config.json, merged

  int64_t q_size() const { return num_heads * head_dim; }
  int64_t kv_size() const { return num_kv_heads * head_dim; }
};

// Parses config.json text (and, when non-empty, generation_config.json text).
Result<ModelConfig> parse_model_config(const std::string& config_json, const std::string& generation_config_json);

// Reads DIR/config.json and, if present, DIR/generation_config.json.
Result<ModelConfig> load_model_config(const std::string& model_dir);

}  // namespace quiver
