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

// An FP8 checkpoint's weights (config.json's quantization_config): projection weights in
// e4m3 with float32 scales per tensor, per output channel, or per block of block_n rows x
// block_k columns, as llm-compressor's compressed-tensors ("float-quantized") and
// transformers' fine-grained FP8 (quant_method "fp8") publish them. A projection whose file
// tensor is not F8_E4M3 (the config's ignore list) loads as a float weight.
struct Fp8Config {
  enum class Scale : uint8_t { kNone, kTensor, kChannel, kBlock };
  Scale scale = Scale::kNone;
  int64_t block_n = 0, block_k = 0;  // kBlock
  std::string scale_suffix;          // "weight_scale" or, for quant_method "fp8", "weight_scale_inv"
  std::string method;                // quant_method, for messages
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
  // Sliding-window attention is not implemented, so a window is only accepted when it can
  // never take effect (>= max_position_embeddings); 0: no window.
  int64_t sliding_window = 0;
  Fp8Config fp8;  // scale kNone: not an FP8 checkpoint

  int64_t q_size() const { return num_heads * head_dim; }
  int64_t kv_size() const { return num_kv_heads * head_dim; }
  // Longest sequence the config allows: max_position_embeddings, clamped to the sliding
  // window when there is one, so that the window never applies.
  int64_t max_model_len() const {
    return sliding_window > 0 && sliding_window < max_position_embeddings ? sliding_window : max_position_embeddings;
  }
};

// Parses config.json text (and, when non-empty, generation_config.json text).
Result<ModelConfig> parse_model_config(const std::string& config_json, const std::string& generation_config_json);

// Reads DIR/config.json and, if present, DIR/generation_config.json.
Result<ModelConfig> load_model_config(const std::string& model_dir);

// RoPE inverse frequencies f_i, i < head_dim / 2, computed the way Hugging Face does for
// config.rope.type (default: 1 / theta^(2i/d); linear: divided by factor; llama3: the
// wavelength-based smoothing of Llama 3.1). The arithmetic is float32, as HF's is, so the
// values are float32 numbers held in doubles.
std::vector<double> rope_inv_freq(const ModelConfig& config);

// Fills out: [max_positions, head_dim]; row p holds cos(p * f_i) for i < head_dim/2 in its
// first half and sin(p * f_i) in its second half. The angle p * f_i is rounded to float32
// (HF multiplies in float32); cos/sin of that angle are evaluated in double and rounded.
void rope_cos_sin_table(const ModelConfig& config, int64_t max_positions, float* out);

}  // namespace quiver
