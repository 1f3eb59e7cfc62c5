// link: qv_io
// config.json parsing for Llama / Mistral / Qwen2 in both the classic (transformers 4) and
// transformers-5 forms, the refusals that keep us from silently computing something else
// than HF, and the RoPE frequency tables checked against independently computed numbers.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>
#include <string>
#include <vector>

#include "io/model_config.h"

namespace quiver {
namespace {

using Json = nlohmann::json;

#define EXPECT_HAS(haystack, needle) EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

// Shaped like meta-llama/Llama-3.1-8B's config.json (transformers 4.43).
const char* kLlama31 = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})";

// The same model as transformers 5 writes it: `dtype`, and theta inside `rope_parameters`.
const char* kLlama31V5 = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 128000,
  "dtype": "bfloat16", "eos_token_id": [128001, 128008, 128009], "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": false,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_parameters": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                      "original_max_position_embeddings": 8192, "rope_theta": 500000.0, "rope_type": "llama3"},
  "tie_word_embeddings": false, "transformers_version": "5.0.0", "vocab_size": 128256})";

// Shaped like mistralai/Mistral-7B-v0.3.
const char* kMistral = R"({
  "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
  "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 32768,
  "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": null, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "vocab_size": 32768})";

const char* kMistralV5 = R"({
  "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "head_dim": null,
  "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 32768,
  "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
  "sliding_window": null, "tie_word_embeddings": false, "dtype": "bfloat16", "vocab_size": 32768})";

// Shaped like Qwen/Qwen2.5-0.5B-Instruct.
const char* kQwen2 = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
  "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 21,
  "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000.0, "sliding_window": 32768,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_cache": true, "use_sliding_window": false,
  "vocab_size": 151936})";

const char* kQwen2V5 = R"({
  "architectures": ["Qwen2ForCausalLM"], "bos_token_id": 151643, "dtype": "float32", "eos_token_id": 151645,
  "hidden_act": "silu", "hidden_size": 896, "intermediate_size": 4864,
  "layer_types": ["full_attention", "full_attention"], "max_position_embeddings": 32768,
  "max_window_layers": 21, "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 2,
  "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
  "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}, "sliding_window": null,
  "tie_word_embeddings": true, "use_sliding_window": false, "vocab_size": 151936})";

// Parses `base` with `edit` applied to it (fields set; a null value set explicitly).
Result<ModelConfig> parse_edited(const char* base, const Json& edit, const std::string& gen = "") {
  Json j = Json::parse(base);
  for (auto it = edit.begin(); it != edit.end(); ++it) j[it.key()] = it.value();
  return parse_model_config(j.dump(), gen);
}
Result<ModelConfig> parse_without(const char* base, const std::string& key) {
  Json j = Json::parse(base);
  j.erase(key);
  return parse_model_config(j.dump(), "");
}

void expect_llama31(const ModelConfig& c) {
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 14336);
  EXPECT_EQ(c.num_layers, 32);
  EXPECT_EQ(c.num_heads, 32);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.q_size(), 4096);
  EXPECT_EQ(c.kv_size(), 1024);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.max_model_len(), 131072);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope.type, RopeConfig::Type::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 8192);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.dtype, DType::kBF16);
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(c.sliding_window, 0);
}

// ---- the three architectures, both config generations ------------------------------------

TEST(ModelConfig, LlamaClassicWithLlama3Rope) {
  auto c = parse_model_config(kLlama31, "");
  ASSERT_TRUE(c.is_ok()) << c.message();
  expect_llama31(*c);
}

TEST(ModelConfig, LlamaTransformers5) {
  auto c = parse_model_config(kLlama31V5, "");
  ASSERT_TRUE(c.is_ok()) << c.message();
  expect_llama31(*c);
}

TEST(ModelConfig, MistralClassicAndTransformers5) {
  for (const char* text : {kMistral, kMistralV5}) {
    auto c = parse_model_config(text, "");
    ASSERT_TRUE(c.is_ok()) << c.message();
    EXPECT_EQ(c->architecture, "MistralForCausalLM");
    EXPECT_EQ(c->vocab_size, 32768);
    EXPECT_EQ(c->head_dim, 128);
    EXPECT_EQ(c->num_kv_heads, 8);
    EXPECT_EQ(c->rope.type, RopeConfig::Type::kDefault);
    EXPECT_DOUBLE_EQ(c->rope.theta, 1e6);
    EXPECT_FALSE(c->attention_bias);
    EXPECT_EQ(c->sliding_window, 0);
    EXPECT_EQ(c->dtype, DType::kBF16);
    EXPECT_EQ(c->bos_token_id, 1);
    EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{2});
  }
}

TEST(ModelConfig, Qwen2ClassicAndTransformers5) {
  auto c = parse_model_config(kQwen2, "");
  ASSERT_TRUE(c.is_ok()) << c.message();
  EXPECT_EQ(c->architecture, "Qwen2ForCausalLM");
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_TRUE(c->attention_bias);  // Qwen2 always has q/k/v biases
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_EQ(c->sliding_window, 0);  // use_sliding_window false: the 32768 is ignored
  EXPECT_EQ(c->dtype, DType::kBF16);

  auto v5 = parse_model_config(kQwen2V5, "");
  ASSERT_TRUE(v5.is_ok()) << v5.message();
  EXPECT_EQ(v5->num_layers, 2);
  EXPECT_TRUE(v5->attention_bias);
  EXPECT_EQ(v5->dtype, DType::kF32);
  EXPECT_DOUBLE_EQ(v5->rope.theta, 1e6);
}

TEST(ModelConfig, ModelTypeUsedWhenArchitecturesMissing) {
  Json j = Json::parse(kMistral);
  j.erase("architectures");
  auto c = parse_model_config(j.dump(), "");
  ASSERT_TRUE(c.is_ok()) << c.message();
  EXPECT_EQ(c->architecture, "MistralForCausalLM");
  j["model_type"] = "gpt2";
  EXPECT_HAS(parse_model_config(j.dump(), "").message(), "unsupported model_type \"gpt2\"");
}

TEST(ModelConfig, DefaultsWhenOptionalFieldsAbsent) {
  auto c = parse_model_config(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 256, "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4})",
                              "");
  ASSERT_TRUE(c.is_ok()) << c.message();
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->max_position_embeddings, 2048);
  EXPECT_DOUBLE_EQ(c->rope.theta, 10000.0);
  EXPECT_EQ(c->rope.type, RopeConfig::Type::kDefault);
  EXPECT_EQ(c->dtype, DType::kF32);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->bos_token_id, -1);
  EXPECT_TRUE(c->eos_token_ids.empty());
}

TEST(ModelConfig, HeadDimExplicitOrNull) {
  // Mistral-Nemo style: head_dim 128 with hidden 5120 / 32 heads (= 160 by division).
  auto c = parse_edited(kMistral, {{"hidden_size", 5120}, {"head_dim", 128}});
  ASSERT_TRUE(c.is_ok()) << c.message();
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->q_size(), 4096);
  auto d = parse_edited(kMistral, {{"hidden_size", 5120}, {"head_dim", nullptr}});
  ASSERT_TRUE(d.is_ok()) << d.message();
  EXPECT_EQ(d->head_dim, 160);
  EXPECT_HAS(parse_edited(kMistral, {{"head_dim", 0}}).message(), "field 'head_dim' must be positive");
  EXPECT_HAS(parse_edited(kMistral, {{"hidden_size", 4100}}).message(), "not divisible by num_attention_heads");
}

TEST(ModelConfig, DtypeFieldsAndTheirValues) {
  EXPECT_EQ(parse_edited(kMistral, {{"torch_dtype", "float16"}})->dtype, DType::kF16);
  EXPECT_EQ(parse_edited(kMistral, {{"torch_dtype", "float32"}})->dtype, DType::kF32);
  EXPECT_EQ(parse_without(kMistral, "torch_dtype")->dtype, DType::kF32);
  // transformers 5's `dtype` wins over a stale torch_dtype.
  EXPECT_EQ(parse_edited(kMistral, {{"dtype", "float16"}})->dtype, DType::kF16);
  auto bad = parse_edited(kMistral, {{"torch_dtype", "int8"}});
  EXPECT_HAS(bad.message(), "field 'torch_dtype' is \"int8\"; supported: float32, float16, bfloat16");
}

// ---- refusals ------------------------------------------------------------------------------

TEST(ModelConfig, MissingRequiredFieldIsNamed) {
  for (const char* key :
       {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"}) {
    auto c = parse_without(kLlama31, key);
    ASSERT_FALSE(c.is_ok()) << key;
    EXPECT_HAS(c.message(), std::string("config.json: missing required field '") + key + "'");
    EXPECT_HAS(parse_edited(kLlama31, {{key, nullptr}}).message(), std::string("missing required field '") + key);
  }
}

TEST(ModelConfig, IntegersGivenAsFloatsOrStringsAreRefused) {
  EXPECT_HAS(parse_edited(kLlama31, {{"vocab_size", 128256.0}}).message(),
             "field 'vocab_size' must be an integer, got 128256.0 (a float)");
  EXPECT_HAS(parse_edited(kLlama31, {{"num_hidden_layers", "32"}}).message(),
             "field 'num_hidden_layers' must be an integer, got \"32\" (a string)");
  EXPECT_HAS(parse_edited(kLlama31, {{"num_key_value_heads", 8.5}}).message(), "field 'num_key_value_heads'");
  EXPECT_HAS(parse_edited(kLlama31, {{"eos_token_id", {1, 2.0}}}).message(), "field 'eos_token_id'");
  EXPECT_HAS(parse_edited(kLlama31, {{"tie_word_embeddings", "true"}}).message(), "field 'tie_word_embeddings'");
  EXPECT_HAS(parse_edited(kLlama31, {{"rms_norm_eps", "1e-5"}}).message(), "field 'rms_norm_eps'");
}

TEST(ModelConfig, NonPositiveSizesAndHeadDivisibility) {
  EXPECT_HAS(parse_edited(kLlama31, {{"hidden_size", 0}}).message(), "field 'hidden_size' must be positive, got 0");
  EXPECT_HAS(parse_edited(kLlama31, {{"intermediate_size", -1}}).message(),
             "field 'intermediate_size' must be positive");
  EXPECT_HAS(parse_edited(kLlama31, {{"num_key_value_heads", 0}}).message(),
             "field 'num_key_value_heads' must be positive");
  EXPECT_HAS(parse_edited(kLlama31, {{"num_key_value_heads", 5}}).message(),
             "num_attention_heads (32) must be a multiple of num_key_value_heads (5)");
  EXPECT_HAS(parse_edited(kLlama31, {{"max_position_embeddings", 0}}).message(), "max_position_embeddings");
}

TEST(ModelConfig, UnknownArchitectureListsSupported) {
  auto c = parse_edited(kLlama31, {{"architectures", {"GPT2LMHeadModel"}}});
  ASSERT_FALSE(c.is_ok());
  EXPECT_HAS(c.message(), "unsupported architecture \"GPT2LMHeadModel\"");
  EXPECT_HAS(c.message(), "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM");
}

TEST(ModelConfig, UnsupportedActivationAndBiases) {
  EXPECT_HAS(parse_edited(kLlama31, {{"hidden_act", "gelu"}}).message(), "field 'hidden_act' is \"gelu\"");
  EXPECT_HAS(parse_edited(kLlama31, {{"mlp_bias", true}}).message(), "field 'mlp_bias'");
  EXPECT_TRUE(parse_edited(kLlama31, {{"attention_bias", true}})->attention_bias);
}

// A pre-quantized checkpoint other than FP8 is refused with its method named and what is
// served instead (bitsandbytes' config, as transformers writes it, included).
TEST(ModelConfig, QuantizedCheckpointsNameTheirMethod) {
  const std::pair<const char*, const char*> methods[] = {{"gptq", "int4/int8 weight-only"},
                                                         {"awq", "int4/int8 weight-only"},
                                                         {"bitsandbytes", "bitsandbytes 4/8-bit"},
                                                         {"compressed-tensors", "with format '' (only float-quantized"},
                                                         {"hqq", "quant_method 'hqq'"}};
  for (auto [method, kind] : methods) {
    nlohmann::json q = {{"quant_method", method}, {"bits", 4}};
    if (std::string(method) == "bitsandbytes") q = {{"quant_method", method}, {"load_in_4bit", true}};
    const std::string m = parse_edited(kLlama31, {{"quantization_config", q}}).message();
    EXPECT_HAS(m, "quantization_config");
    EXPECT_HAS(m, std::string("quant_method '").append(method));
    EXPECT_HAS(m, kind);
    EXPECT_HAS(m, "--quantization int8");
  }
  EXPECT_HAS(parse_edited(kLlama31, {{"quantization_config", {{"bits", 4}}}}).message(), "(no quant_method)");
  // compressed-tensors' int4 (pack-quantized) and int weights are not FP8.
  Json int4 = {{"quant_method", "compressed-tensors"}, {"format", "pack-quantized"}};
  EXPECT_HAS(parse_edited(kLlama31, {{"quantization_config", int4}}).message(), "format 'pack-quantized'");
  Json w8a8 = {{"quant_method", "compressed-tensors"}, {"format", "float-quantized"},
               {"config_groups", {{"group_0", {{"weights", {{"num_bits", 8}, {"type", "int"}, {"strategy", "channel"}}}}}}}};
  EXPECT_HAS(parse_edited(kLlama31, {{"quantization_config", w8a8}}).message(), "other than 8-bit float");
}

// The FP8 layouts as published: compressed-tensors float-quantized per tensor / channel /
// block (llm-compressor), and transformers' fine-grained FP8 (128 x 128 blocks by default).
TEST(ModelConfig, Fp8CheckpointLayouts) {
  auto ct = [](Json weights) {
    return Json{{"quant_method", "compressed-tensors"},
                {"format", "float-quantized"},
                {"ignore", {"lm_head"}},
                {"config_groups",
                 {{"group_0",
                   {{"targets", {"Linear"}},
                    {"weights", weights},
                    {"input_activations", {{"num_bits", 8}, {"type", "float"}, {"strategy", "token"}, {"dynamic", true}}}}}}}};
  };
  auto tensor = parse_edited(kLlama31, {{"quantization_config", ct({{"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"}})}});
  ASSERT_TRUE(tensor.is_ok()) << tensor.message();
  EXPECT_EQ(tensor->fp8.scale, Fp8Config::Scale::kTensor);
  EXPECT_EQ(tensor->fp8.scale_suffix, "weight_scale");
  auto channel = parse_edited(kLlama31, {{"quantization_config", ct({{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}})}});
  ASSERT_TRUE(channel.is_ok()) << channel.message();
  EXPECT_EQ(channel->fp8.scale, Fp8Config::Scale::kChannel);
  auto block = parse_edited(kLlama31, {{"quantization_config", ct({{"num_bits", 8}, {"type", "float"}, {"strategy", "block"},
                                                                    {"block_structure", {128, 64}}})}});
  ASSERT_TRUE(block.is_ok()) << block.message();
  EXPECT_EQ(block->fp8.scale, Fp8Config::Scale::kBlock);
  EXPECT_EQ(block->fp8.block_n, 128);
  EXPECT_EQ(block->fp8.block_k, 64);
  auto fine = parse_edited(kLlama31, {{"quantization_config", {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}}}});
  ASSERT_TRUE(fine.is_ok()) << fine.message();
  EXPECT_EQ(fine->fp8.scale, Fp8Config::Scale::kBlock);
  EXPECT_EQ(fine->fp8.block_n, 128);
  EXPECT_EQ(fine->fp8.scale_suffix, "weight_scale_inv");
  EXPECT_HAS(parse_edited(kLlama31, {{"quantization_config", {{"quant_method", "fp8"}, {"weight_block_size", {0, 128}}}}})
                 .message(),
             "two positive integers");
  EXPECT_HAS(parse_edited(kLlama31, {{"quantization_config", ct({{"num_bits", 8}, {"type", "float"}, {"strategy", "group"}})}})
                 .message(),
             "weight strategy 'group'");
  EXPECT_EQ(parse_edited(kLlama31, {})->fp8.scale, Fp8Config::Scale::kNone);
}

TEST(ModelConfig, UnsupportedRopeTypesAreRefused) {
  for (const char* type : {"dynamic", "yarn", "longrope"}) {
    auto classic = parse_edited(kLlama31, {{"rope_scaling", {{"rope_type", type}, {"factor", 4.0}}}});
    ASSERT_FALSE(classic.is_ok());
    EXPECT_HAS(classic.message(), "rope_scaling: field 'rope_type' is \"" + std::string(type) + "\"");
    EXPECT_HAS(classic.message(), "supported: default, linear, llama3");
    auto legacy = parse_edited(kLlama31, {{"rope_scaling", {{"type", type}, {"factor", 4.0}}}});
    EXPECT_HAS(legacy.message(), "rope_scaling: field 'type' is \"" + std::string(type) + "\"");
    auto v5 =
        parse_edited(kLlama31V5, {{"rope_parameters", {{"rope_type", type}, {"rope_theta", 1e4}, {"factor", 4.0}}}});
    EXPECT_HAS(v5.message(), "rope_parameters: field 'rope_type' is \"" + std::string(type) + "\"");
  }
}

TEST(ModelConfig, LinearRopeAndIncompleteLlama3) {
  auto lin = parse_edited(kLlama31, {{"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}}});
  ASSERT_TRUE(lin.is_ok()) << lin.message();
  EXPECT_EQ(lin->rope.type, RopeConfig::Type::kLinear);
  EXPECT_DOUBLE_EQ(lin->rope.factor, 2.0);
  auto c = parse_edited(kLlama31, {{"rope_scaling",
                                    {{"rope_type", "llama3"},
                                     {"factor", 8.0},
                                     {"high_freq_factor", 4.0},
                                     {"original_max_position_embeddings", 8192}}}});
  EXPECT_HAS(c.message(), "rope_scaling: missing required field 'low_freq_factor'");
  auto nofactor = parse_edited(kLlama31, {{"rope_scaling", {{"rope_type", "linear"}}}});
  EXPECT_HAS(nofactor.message(), "missing required field 'factor'");
  EXPECT_HAS(parse_edited(kLlama31, {{"rope_scaling", "llama3"}}).message(), "field 'rope_scaling' must be an object");
  EXPECT_HAS(parse_edited(kLlama31V5, {{"rope_parameters", {{"factor", 2.0}}}}).message(), "no 'rope_type'");
  EXPECT_HAS(parse_edited(kLlama31V5, {{"rope_parameters", {{"full_attention", {{"rope_type", "default"}}}}}}).message(),
             "per-layer-type");
}

TEST(ModelConfig, SlidingWindow) {
  // Mistral-7B-v0.1: a 4096 window with 32768 positions would change results: refused.
  auto v01 = parse_edited(kMistral, {{"sliding_window", 4096}});
  ASSERT_FALSE(v01.is_ok());
  EXPECT_HAS(v01.message(), "'sliding_window'");
  EXPECT_HAS(v01.message(), "is 4096, below max_position_embeddings 32768");
  // Absent means HF's default 4096, not "none".
  EXPECT_HAS(parse_without(kMistral, "sliding_window").message(), "HF's default 4096");
  // A window that never applies is accepted and bounds max_model_len.
  auto wide = parse_edited(kMistral, {{"sliding_window", 32768}});
  ASSERT_TRUE(wide.is_ok()) << wide.message();
  EXPECT_EQ(wide->sliding_window, 32768);
  EXPECT_EQ(wide->max_model_len(), 32768);
  // Qwen2: only with use_sliding_window, and only if some layer is a sliding one.
  auto q = parse_edited(kQwen2, {{"use_sliding_window", true}, {"sliding_window", 4096}});
  ASSERT_FALSE(q.is_ok());
  EXPECT_HAS(q.message(), "'sliding_window' (with use_sliding_window true) is 4096");
  auto q_no_layers =
      parse_edited(kQwen2, {{"use_sliding_window", true}, {"sliding_window", 4096}, {"max_window_layers", 24}});
  EXPECT_TRUE(q_no_layers.is_ok()) << q_no_layers.message();
  auto q_types = parse_edited(kQwen2V5, {{"use_sliding_window", true},
                                         {"sliding_window", 4096},
                                         {"layer_types", {"full_attention", "sliding_attention"}}});
  EXPECT_FALSE(q_types.is_ok());
  auto q_wide = parse_edited(kQwen2, {{"use_sliding_window", true}, {"sliding_window", 32768}});
  ASSERT_TRUE(q_wide.is_ok()) << q_wide.message();
  EXPECT_EQ(q_wide->sliding_window, 32768);
}

// ---- token ids and generation_config.json -----------------------------------------------

TEST(ModelConfig, EosListMergedWithGenerationConfig) {
  auto c = parse_edited(kLlama31, {{"eos_token_id", {128001, 128009}}},
                        R"({"bos_token_id": 128000, "eos_token_id": [128009, 128008, 128001], "do_sample": true})");
  ASSERT_TRUE(c.is_ok()) << c.message();
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{128001, 128009, 128008}));

  auto qwen = parse_model_config(kQwen2, R"({"eos_token_id": [151645, 151643]})");
  ASSERT_TRUE(qwen.is_ok()) << qwen.message();
  EXPECT_EQ(qwen->eos_token_ids, (std::vector<int64_t>{151645, 151643}));

  auto int_gen = parse_edited(kLlama31, {{"eos_token_id", nullptr}, {"bos_token_id", nullptr}},
                              R"({"eos_token_id": 7, "bos_token_id": 5})");
  ASSERT_TRUE(int_gen.is_ok()) << int_gen.message();
  EXPECT_EQ(int_gen->eos_token_ids, std::vector<int64_t>{7});
  EXPECT_EQ(int_gen->bos_token_id, 5);

  auto bad = parse_model_config(kQwen2, R"({"eos_token_id": "eos"})");
  EXPECT_HAS(bad.message(),
             "generation_config.json: field 'eos_token_id' must be an integer, a list of integers or null");
  EXPECT_HAS(parse_model_config(kQwen2, "[1]").message(), "generation_config.json");
  EXPECT_HAS(parse_edited(kLlama31, {{"eos_token_id", -1}}).message(), "negative token id");
}

TEST(ModelConfig, ConfigTextErrors) {
  EXPECT_HAS(parse_model_config("{not json", "").message(), "config.json: not valid JSON");
  EXPECT_HAS(parse_model_config("[]", "").message(), "expected a JSON object");
  // A number literal past double's range: nlohmann throws out_of_range, not parse_error.
  const std::string huge = parse_model_config("{\"rope_theta\": 1e999}", "").message();
  EXPECT_HAS(huge, "config.json: not valid JSON (a number out of range)");
  EXPECT_EQ(huge.find("1e999"), std::string::npos) << "the file's bytes stay out of the message";
  EXPECT_HAS(parse_model_config(kQwen2, "{\"temperature\": -1e400}").message(), "generation_config.json");
}

TEST(ModelConfig, LoadFromFolder) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "quiver_cfg_XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  std::filesystem::path dir = tmpl;
  auto missing = load_model_config(dir.string());
  EXPECT_HAS(missing.message(), (dir / "config.json").string());
  std::ofstream(dir / "config.json") << kMistral;
  auto c = load_model_config(dir.string());
  ASSERT_TRUE(c.is_ok()) << c.message();
  EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{2});
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": [2, 32000]})";
  c = load_model_config(dir.string());
  ASSERT_TRUE(c.is_ok()) << c.message();
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{2, 32000}));
  std::ofstream(dir / "config.json") << R"({"architectures": ["MistralForCausalLM"]})";
  EXPECT_HAS(load_model_config(dir.string()).message(), (dir / "config.json").string() + ": missing required field");
  std::filesystem::remove_all(dir);
}

// ---- RoPE tables ---------------------------------------------------------------------------

ModelConfig rope_config(int64_t head_dim, double theta) {
  ModelConfig c;
  c.head_dim = head_dim;
  c.rope.theta = theta;
  return c;
}

TEST(RopeTables, DefaultMatchesHandComputedValues) {
  // head_dim 8, theta 10^4: f_i = 10^(-4 * 2i / 8) = 1, 0.1, 0.01, 0.001.
  ModelConfig c = rope_config(8, 10000.0);
  std::vector<double> inv = rope_inv_freq(c);
  ASSERT_EQ(inv.size(), 4u);
  const double want[] = {1.0, 0.1, 0.01, 0.001};
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(inv[i], want[i], want[i] * 1e-6) << i;
    EXPECT_EQ(inv[i], static_cast<double>(static_cast<float>(inv[i]))) << "not a float32 value";
  }
  std::vector<float> table(3 * 8, -7.f);
  rope_cos_sin_table(c, 3, table.data());
  for (int i = 0; i < 4; ++i) {  // position 0: angle 0
    EXPECT_EQ(table[i], 1.f);
    EXPECT_EQ(table[4 + i], 0.f);
  }
  const float* p1 = &table[8];
  EXPECT_NEAR(p1[0], 0.5403023058681398, 1e-7);    // cos(1)
  EXPECT_NEAR(p1[4], 0.8414709848078965, 1e-7);    // sin(1)
  EXPECT_NEAR(p1[2], 0.9999500004166653, 1e-7);    // cos(0.01)
  EXPECT_NEAR(p1[6], 0.009999833334166664, 1e-8);  // sin(0.01)
  const float* p2 = &table[16];
  EXPECT_NEAR(p2[0], -0.4161468365471424, 1e-7);    // cos(2)
  EXPECT_NEAR(p2[1], 0.9800665778412416, 1e-7);     // cos(0.2)
  EXPECT_NEAR(p2[5], 0.19866933079506122, 1e-7);    // sin(0.2)
  EXPECT_NEAR(p2[7], 0.0019999986666669333, 1e-9);  // sin(0.002)
}

TEST(RopeTables, AngleIsFloat32ProductAsInHF) {
  ModelConfig c = rope_config(128, 500000.0);
  std::vector<double> inv = rope_inv_freq(c);
  const int64_t positions = 5000;
  std::vector<float> table(positions * 128);
  rope_cos_sin_table(c, positions, table.data());
  for (int64_t p : {1, 77, 4095, 4999}) {
    for (int i : {0, 1, 31, 63}) {
      float angle = static_cast<float>(p) * static_cast<float>(inv[i]);
      EXPECT_EQ(table[p * 128 + i], static_cast<float>(std::cos(static_cast<double>(angle))));
      EXPECT_EQ(table[p * 128 + 64 + i], static_cast<float>(std::sin(static_cast<double>(angle))));
    }
  }
}

TEST(RopeTables, LinearDividesByFactor) {
  ModelConfig c = rope_config(16, 10000.0);
  std::vector<double> plain = rope_inv_freq(c);
  c.rope.type = RopeConfig::Type::kLinear;
  c.rope.factor = 4.0;
  std::vector<double> lin = rope_inv_freq(c);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(lin[i], plain[i] / 4.0) << i;  // exact: power of two
}

TEST(RopeTables, Llama3MatchesFormula) {
  // Llama 3.1: factor 8, low 1, high 4, original context 8192, theta 500000, head_dim 64.
  ModelConfig c = rope_config(64, 500000.0);
  std::vector<double> plain = rope_inv_freq(c);
  c.rope.type = RopeConfig::Type::kLlama3;
  c.rope.factor = 8.0;
  c.rope.low_freq_factor = 1.0;
  c.rope.high_freq_factor = 4.0;
  c.rope.original_max_position_embeddings = 8192;
  std::vector<double> inv = rope_inv_freq(c);
  ASSERT_EQ(inv.size(), 32u);
  int high = 0, low = 0, mid = 0;
  for (int i = 0; i < 32; ++i) {
    // Independent double-precision evaluation of the published formula.
    double f = 1.0 / std::pow(500000.0, 2.0 * i / 64.0);
    double wavelen = 2 * std::numbers::pi / f;
    double want;
    if (wavelen < 8192.0 / 4.0) {
      want = f;
      ++high;
      EXPECT_EQ(inv[i], plain[i]) << "high-frequency index " << i << " must be unchanged";
    } else if (wavelen > 8192.0 / 1.0) {
      want = f / 8.0;
      ++low;
    } else {
      double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      want = (1 - smooth) * f / 8.0 + smooth * f;
      ++mid;
      EXPECT_LT(inv[i], plain[i]) << i;
      EXPECT_GT(inv[i], plain[i] / 8.0) << i;
    }
    EXPECT_NEAR(inv[i], want, want * 2e-6) << "index " << i;
  }
  // 2*pi*500000^(i/32) crosses 2048 between i=14 and 15 and 8192 between i=17 and 18.
  EXPECT_EQ(high, 15);
  EXPECT_EQ(mid, 3);
  EXPECT_EQ(low, 14);
  const double low_20 = 1.0 / std::pow(500000.0, 40.0 / 64.0) / 8.0;
  EXPECT_NEAR(inv[20], low_20, low_20 * 1e-6);
  EXPECT_EQ(inv[0], 1.0);
}

TEST(RopeTables, Llama3FromParsedConfig) {
  auto c = parse_model_config(kLlama31, "");
  ASSERT_TRUE(c.is_ok()) << c.message();
  std::vector<double> inv = rope_inv_freq(*c);
  ASSERT_EQ(inv.size(), 64u);
  EXPECT_EQ(inv[0], 1.0);
  const double low_63 = 1.0 / std::pow(500000.0, 126.0 / 128.0) / 8.0;
  EXPECT_NEAR(inv[63], low_63, low_63 * 1e-6);
}

TEST(ModelConfig, SizesAreBoundedNotWrapped) {
  // 4294967808 = 2^32 + 512 once passed as 512; 2147483647 and 3e9 aborted the engine.
  for (int64_t n : {int64_t{4294967808}, int64_t{2147483647}, int64_t{3000000000}}) {
    auto r = parse_edited(kLlama31, Json{{"max_position_embeddings", n}});
    ASSERT_FALSE(r.is_ok()) << n;
    EXPECT_NE(r.message().find("max_position_embeddings"), std::string::npos) << r.message();
  }
  auto r = parse_edited(kLlama31, Json{{"vocab_size", int64_t{1} << 40}});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("vocab_size"), std::string::npos) << r.message();
}

TEST(ModelConfig, AbsurdRmsNormEpsIsRefused) {
  for (double eps : {1e300, 1.0, -1e-6}) {
    auto r = parse_edited(kLlama31, Json{{"rms_norm_eps", eps}});
    ASSERT_FALSE(r.is_ok()) << eps;
    EXPECT_NE(r.message().find("rms_norm_eps"), std::string::npos) << r.message();
  }
  EXPECT_TRUE(parse_edited(kLlama31, Json{{"rms_norm_eps", 1e-5}}).is_ok());
}

}  // namespace
}  // namespace quiver
