// config.json (+ generation_config.json) -> ModelConfig, and the RoPE frequency tables
// derived from it. Parsing is strict: anything quiver would compute differently from
// Hugging Face (an unknown architecture, a RoPE variant, an active sliding window, an
// activation other than SiLU) is refused with the field name, never silently ignored.
#include "io/model_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numbers>

#include "core/check.h"
#include "io/json_util.h"

namespace quiver {

namespace {

enum class Arch { kLlama, kMistral, kQwen2 };

struct ArchInfo {
  Arch arch;
  const char* architecture;       // `architectures[0]`
  const char* model_type;         // fallback when `architectures` is missing
  int64_t default_max_positions;  // HF config class defaults
};

constexpr ArchInfo kArchs[] = {
    {Arch::kLlama, "LlamaForCausalLM", "llama", 2048},
    {Arch::kMistral, "MistralForCausalLM", "mistral", 4096 * 32},
    {Arch::kQwen2, "Qwen2ForCausalLM", "qwen2", 32768},
};

// HF's MistralConfig and Qwen2Config both default `sliding_window` to 4096 when the key is
// absent (an explicit null means "no window").
constexpr int64_t kHfDefaultSlidingWindow = 4096;

std::string field(const std::string& name) { return "field '" + name + "'"; }

Result<const ArchInfo*> parse_arch(const Json& j) {
  if (json_has(j, "architectures")) {
    const Json& a = j.at("architectures");
    if (!a.is_array() || a.empty() || !a[0].is_string())
      return Status::error(field("architectures") + " must be a non-empty list of strings, got " + json_describe(a));
    std::string name = a[0].get<std::string>();
    for (const ArchInfo& info : kArchs)
      if (name == info.architecture) return &info;
    return Status::error("unsupported architecture \"" + name +
                         "\" (field 'architectures'); supported: LlamaForCausalLM, MistralForCausalLM, "
                         "Qwen2ForCausalLM");
  }
  if (json_has(j, "model_type")) {
    QV_ASSIGN_OR_RETURN(std::string type, json_string(j, "model_type"));
    for (const ArchInfo& info : kArchs)
      if (type == info.model_type) return &info;
    return Status::error("unsupported model_type \"" + type +
                         "\" (field 'model_type'); supported: llama, mistral, qwen2");
  }
  return Status::error(
      "missing field 'architectures' (and no 'model_type'); supported: LlamaForCausalLM, "
      "MistralForCausalLM, Qwen2ForCausalLM");
}

// Sizes past this are not a model (the largest real vocabularies and contexts are well
// below it), and products of two of them stay far inside 64 bits.
constexpr int64_t kMaxSize = int64_t{1} << 24;

Result<int64_t> positive_int(const Json& j, const std::string& key) {
  QV_ASSIGN_OR_RETURN(int64_t v, json_int(j, key));
  if (v <= 0) return Status::error(field(key) + " must be positive, got " + std::to_string(v));
  if (v > kMaxSize) return Status::error(field(key) + " is " + std::to_string(v) + ", above the limit " + std::to_string(kMaxSize));
  return v;
}

Result<double> positive_number(const Json& j, const std::string& key) {
  QV_ASSIGN_OR_RETURN(double v, json_number(j, key));
  if (!(v > 0) || !std::isfinite(v))
    return Status::error(field(key) + " must be a positive number, got " + j.at(key).dump());
  return v;
}

// RoPE comes either as transformers-5 `rope_parameters` (theta inside) or as the classic
// top-level `rope_theta` plus an optional `rope_scaling` object (`rope_type`, or the legacy
// `type`).
Status parse_rope(const Json& j, RopeConfig& rope) {
  QV_ASSIGN_OR_RETURN(double top_theta, json_number_or(j, "rope_theta", 10000.0));
  rope.theta = top_theta;
  const Json* params = nullptr;
  std::string where;
  if (json_has(j, "rope_parameters")) {
    params = &j.at("rope_parameters");
    where = "rope_parameters";
  } else if (json_has(j, "rope_scaling")) {
    params = &j.at("rope_scaling");
    where = "rope_scaling";
  }
  if (params) {
    if (!params->is_object())
      return Status::error(field(where) + " must be an object or null, got " + json_describe(*params));
    Status s = [&]() -> Status {
      QV_ASSIGN_OR_RETURN(rope.theta, json_number_or(*params, "rope_theta", top_theta));
      std::string type_key = json_has(*params, "rope_type") ? "rope_type" : "type";
      if (!json_has(*params, type_key)) {
        // Without a type only a plain theta is meaningful; a factor, or per-layer-type
        // sub-objects ({"full_attention": {...}}), would otherwise be silently dropped.
        if (params->contains("factor")) return Status::error("has a 'factor' but no 'rope_type'");
        for (const Json& v : *params)
          if (v.is_object()) return Status::error("per-layer-type RoPE parameters are not supported");
      }
      QV_ASSIGN_OR_RETURN(std::string type, json_string_or(*params, type_key, "default"));
      if (type == "default") {
        rope.type = RopeConfig::Type::kDefault;
      } else if (type == "linear") {
        rope.type = RopeConfig::Type::kLinear;
        QV_ASSIGN_OR_RETURN(rope.factor, positive_number(*params, "factor"));
      } else if (type == "llama3") {
        rope.type = RopeConfig::Type::kLlama3;
        QV_ASSIGN_OR_RETURN(rope.factor, positive_number(*params, "factor"));
        QV_ASSIGN_OR_RETURN(rope.low_freq_factor, positive_number(*params, "low_freq_factor"));
        QV_ASSIGN_OR_RETURN(rope.high_freq_factor, positive_number(*params, "high_freq_factor"));
        QV_ASSIGN_OR_RETURN(rope.original_max_position_embeddings,
                            positive_int(*params, "original_max_position_embeddings"));
        if (rope.high_freq_factor <= rope.low_freq_factor)
          return Status::error("high_freq_factor must be above low_freq_factor");
      } else {
        return Status::error(field(type_key) + " is \"" + type +
                             "\", which quiver does not implement; supported: default, linear, llama3");
      }
      return Status::ok();
    }();
    QV_RETURN_IF_ERROR(s.with_context(where));
  }
  if (!(rope.theta > 0) || !std::isfinite(rope.theta))
    return Status::error(field("rope_theta") + " must be a positive number, got " + std::to_string(rope.theta));
  return Status::ok();
}

// The sliding window in effect, or 0. Refuses a window that could take effect.
Result<int64_t> parse_sliding_window(const Json& j, Arch arch, const ModelConfig& c) {
  if (arch == Arch::kLlama) return int64_t{0};
  bool uses_window = true;
  std::string why = "field 'sliding_window'";
  if (arch == Arch::kQwen2) {
    // HF Qwen2: the window exists only with use_sliding_window, and then only for layers
    // marked "sliding_attention" (explicit layer_types, else layers >= max_window_layers).
    QV_ASSIGN_OR_RETURN(uses_window, json_bool_or(j, "use_sliding_window", false));
    if (!uses_window) return int64_t{0};
    why = "field 'sliding_window' (with use_sliding_window true)";
    if (json_has(j, "layer_types")) {
      const Json& lt = j.at("layer_types");
      if (!lt.is_array()) return Status::error(field("layer_types") + " must be a list, got " + json_describe(lt));
      uses_window = false;
      for (const Json& t : lt)
        uses_window = uses_window || (t.is_string() && t.get<std::string>() == "sliding_attention");
    } else {
      QV_ASSIGN_OR_RETURN(int64_t max_window_layers, json_int_or(j, "max_window_layers", 28));
      uses_window = max_window_layers < c.num_layers;
    }
    if (!uses_window) return int64_t{0};
  }
  int64_t window = 0;
  if (!j.contains("sliding_window")) {
    window = kHfDefaultSlidingWindow;
    why += " (absent, so HF's default 4096)";
  } else if (!j.at("sliding_window").is_null()) {
    QV_ASSIGN_OR_RETURN(window, json_int(j, "sliding_window"));
    if (window <= 0)
      return Status::error(field("sliding_window") + " must be positive or null, got " + std::to_string(window));
  }
  if (window > 0 && window < c.max_position_embeddings)
    return Status::error(why + " is " + std::to_string(window) + ", below max_position_embeddings " +
                         std::to_string(c.max_position_embeddings) +
                         ": sliding-window attention is not implemented; accepted: null or a window >= "
                         "max_position_embeddings");
  return window;
}

// A pre-quantized checkpoint: FP8 layouts are read (Fp8Config); any other method is refused
// naming it (HF's quant_method) and what is served instead. Weights quiver cannot read
// would otherwise load as garbage or fail on a missing tensor name far from the cause.
Status refuse_quantized(const std::string& method, const std::string& why) {
  std::string kind;
  if (method == "gptq" || method == "awq" || method == "marlin" || method == "exl2") kind = "int4/int8 weight-only";
  else if (method == "bitsandbytes") kind = "bitsandbytes 4/8-bit";
  else if (method == "compressed-tensors") kind = "compressed-tensors";
  return Status::error(field("quantization_config") + " names quant_method '" + method + "'" +
                       (kind.empty() ? "" : " (" + kind + ")") + why +
                       ": quiver loads float32, float16 and bfloat16 checkpoints, FP8 ones (compressed-tensors "
                       "float-quantized per tensor, channel or block; quant_method fp8 with weight_block_size), and "
                       "quantizes a float one at load with --quantization int8 (cpu and ref backends)");
}

Status parse_block(const Json& b, Fp8Config& f) {
  if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
      b[0].get<int64_t>() <= 0 || b[1].get<int64_t>() <= 0)
    return Status::error(field("quantization_config") + ": the FP8 block size must be two positive integers, got " +
                         b.dump());
  f.block_n = b[0].get<int64_t>();
  f.block_k = b[1].get<int64_t>();
  f.scale = Fp8Config::Scale::kBlock;
  return Status::ok();
}

Status parse_quantization(const Json& q, ModelConfig& c) {
  std::string method = "(no quant_method)";
  if (q.is_object() && q.contains("quant_method") && q.at("quant_method").is_string())
    method = q.at("quant_method").get<std::string>();
  Fp8Config f;
  f.method = method;
  if (method == "fp8") {  // transformers' fine-grained FP8: 128 x 128 blocks by default
    f.scale_suffix = "weight_scale_inv";
    QV_RETURN_IF_ERROR(parse_block(q.contains("weight_block_size") && !q.at("weight_block_size").is_null()
                                       ? q.at("weight_block_size") : Json::array({128, 128}), f));
    c.fp8 = f;
    return Status::ok();
  }
  if (method != "compressed-tensors") return refuse_quantized(method, "");
  const std::string format = q.value("format", "");
  if (format != "float-quantized")
    return refuse_quantized(method, " with format '" + format + "' (only float-quantized is read)");
  if (!q.contains("config_groups") || !q.at("config_groups").is_object() || q.at("config_groups").empty())
    return refuse_quantized(method, " without config_groups");
  f.scale_suffix = "weight_scale";
  for (const auto& [name, group] : q.at("config_groups").items()) {
    const Json w = group.is_object() && group.contains("weights") ? group.at("weights") : Json();
    if (!w.is_object() || w.value("num_bits", 0) != 8 || w.value("type", "") != "float")
      return refuse_quantized(method, " whose group '" + name + "' has weights other than 8-bit float");
    const std::string strategy = w.value("strategy", "");
    Fp8Config g = f;
    if (strategy == "tensor") {
      g.scale = Fp8Config::Scale::kTensor;
    } else if (strategy == "channel") {
      g.scale = Fp8Config::Scale::kChannel;
    } else if (strategy == "block") {
      QV_RETURN_IF_ERROR(parse_block(w.contains("block_structure") ? w.at("block_structure") : Json(), g));
    } else {
      return refuse_quantized(method, " whose group '" + name + "' has weight strategy '" + strategy +
                                          "' (read: tensor, channel, block)");
    }
    if (f.scale != Fp8Config::Scale::kNone && (g.scale != f.scale || g.block_n != f.block_n || g.block_k != f.block_k))
      return refuse_quantized(method, " with groups of different weight strategies");
    f = g;
  }
  c.fp8 = f;
  return Status::ok();
}

Status parse_config(const Json& j, ModelConfig& c) {
  QV_ASSIGN_OR_RETURN(const ArchInfo* arch, parse_arch(j));
  c.architecture = arch->architecture;
  if (json_has(j, "quantization_config")) QV_RETURN_IF_ERROR(parse_quantization(j.at("quantization_config"), c));

  QV_ASSIGN_OR_RETURN(c.vocab_size, positive_int(j, "vocab_size"));
  QV_ASSIGN_OR_RETURN(c.hidden_size, positive_int(j, "hidden_size"));
  QV_ASSIGN_OR_RETURN(c.intermediate_size, positive_int(j, "intermediate_size"));
  QV_ASSIGN_OR_RETURN(c.num_layers, positive_int(j, "num_hidden_layers"));
  QV_ASSIGN_OR_RETURN(c.num_heads, positive_int(j, "num_attention_heads"));
  if (json_has(j, "num_key_value_heads")) {
    QV_ASSIGN_OR_RETURN(c.num_kv_heads, positive_int(j, "num_key_value_heads"));
  } else {
    c.num_kv_heads = c.num_heads;  // HF: missing or null means plain multi-head attention
  }
  if (c.num_heads % c.num_kv_heads != 0)
    return Status::error("num_attention_heads (" + std::to_string(c.num_heads) +
                         ") must be a multiple of num_key_value_heads (" + std::to_string(c.num_kv_heads) + ")");
  if (json_has(j, "head_dim")) {
    QV_ASSIGN_OR_RETURN(c.head_dim, positive_int(j, "head_dim"));
  } else {
    if (c.hidden_size % c.num_heads != 0)
      return Status::error("hidden_size (" + std::to_string(c.hidden_size) +
                           ") is not divisible by num_attention_heads (" + std::to_string(c.num_heads) +
                           ") and no 'head_dim' is given");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.head_dim % 2 != 0) return Status::error("head_dim " + std::to_string(c.head_dim) + " must be even for RoPE");

  QV_ASSIGN_OR_RETURN(c.max_position_embeddings,
                      json_int_or(j, "max_position_embeddings", arch->default_max_positions));
  if (c.max_position_embeddings <= 0 || c.max_position_embeddings > kMaxSize)
    return Status::error(field("max_position_embeddings") + " must be in [1, " + std::to_string(kMaxSize) + "], got " +
                         std::to_string(c.max_position_embeddings));
  QV_ASSIGN_OR_RETURN(c.rms_norm_eps, json_number_or(j, "rms_norm_eps", 1e-6));
  // Real models use 1e-5 or 1e-6; an epsilon near 1 or above swamps the activations.
  if (!(c.rms_norm_eps > 0 && c.rms_norm_eps <= 0.1))
    return Status::error(field("rms_norm_eps") + " must be in (0, 0.1], got " + std::to_string(c.rms_norm_eps));

  QV_ASSIGN_OR_RETURN(std::string act, json_string_or(j, "hidden_act", "silu"));
  if (act != "silu") return Status::error(field("hidden_act") + " is \"" + act + "\"; only \"silu\" is supported");
  QV_ASSIGN_OR_RETURN(c.tie_word_embeddings, json_bool_or(j, "tie_word_embeddings", false));
  // q/k/v biases: Llama reads `attention_bias`; Qwen2's attention always has them and
  // Mistral's never does, whatever the field says.
  if (arch->arch == Arch::kLlama) {
    QV_ASSIGN_OR_RETURN(c.attention_bias, json_bool_or(j, "attention_bias", false));
    QV_ASSIGN_OR_RETURN(bool mlp_bias, json_bool_or(j, "mlp_bias", false));
    if (mlp_bias) return Status::error(field("mlp_bias") + " is true: MLP biases are not supported");
  } else {
    c.attention_bias = arch->arch == Arch::kQwen2;
  }
  QV_ASSIGN_OR_RETURN(double partial_rotary, json_number_or(j, "partial_rotary_factor", 1.0));
  if (partial_rotary != 1.0)
    return Status::error(field("partial_rotary_factor") + " must be 1 (partial RoPE is not supported)");

  // transformers 5 writes `dtype`, earlier versions `torch_dtype`.
  std::string dtype_key = json_has(j, "dtype") ? "dtype" : "torch_dtype";
  QV_ASSIGN_OR_RETURN(std::string dtype, json_string_or(j, dtype_key, "float32"));
  const std::optional<DType> named = float_dtype_named(dtype);
  if (!named) return Status::error(field(dtype_key) + " is \"" + dtype + "\"; supported: float32, float16, bfloat16");
  c.dtype = *named;

  QV_RETURN_IF_ERROR(parse_rope(j, c.rope));
  QV_ASSIGN_OR_RETURN(c.sliding_window, parse_sliding_window(j, arch->arch, c));

  QV_ASSIGN_OR_RETURN(std::vector<int64_t> bos, json_int_or_int_list(j, "bos_token_id"));
  c.bos_token_id = bos.empty() ? -1 : bos[0];
  QV_ASSIGN_OR_RETURN(c.eos_token_ids, json_int_or_int_list(j, "eos_token_id"));
  return Status::ok();
}

// generation_config.json may name more end-of-sequence ids (chat models often list the
// end-of-turn token there): they join config.json's, config.json's first, no repeats.
Status merge_generation_config(const Json& g, ModelConfig& c) {
  QV_ASSIGN_OR_RETURN(std::vector<int64_t> eos, json_int_or_int_list(g, "eos_token_id"));
  for (int64_t id : eos)
    if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end())
      c.eos_token_ids.push_back(id);
  if (c.bos_token_id < 0) {
    QV_ASSIGN_OR_RETURN(std::vector<int64_t> bos, json_int_or_int_list(g, "bos_token_id"));
    if (!bos.empty()) c.bos_token_id = bos[0];
  }
  return Status::ok();
}

Result<ModelConfig> parse_named(const std::string& config_json, const std::string& config_name,
                                const std::string& generation_json, const std::string& generation_name) {
  QV_ASSIGN_OR_RETURN(Json j, parse_json_object(config_json, config_name));
  ModelConfig c;
  QV_RETURN_IF_ERROR(parse_config(j, c).with_context(config_name));
  if (!generation_json.empty()) {
    QV_ASSIGN_OR_RETURN(Json g, parse_json_object(generation_json, generation_name));
    QV_RETURN_IF_ERROR(merge_generation_config(g, c).with_context(generation_name));
  }
  return c;
}

}  // namespace

Result<ModelConfig> parse_model_config(const std::string& config_json, const std::string& generation_config_json) {
  return parse_named(config_json, "config.json", generation_config_json, "generation_config.json");
}

Result<ModelConfig> load_model_config(const std::string& model_dir) {
  namespace fs = std::filesystem;
  const std::string config_path = (fs::path(model_dir) / "config.json").string();
  const std::string gen_path = (fs::path(model_dir) / "generation_config.json").string();
  QV_ASSIGN_OR_RETURN(std::string config_text, read_text_file(config_path));
  std::string gen_text;
  std::error_code ec;
  if (fs::exists(gen_path, ec)) {
    QV_ASSIGN_OR_RETURN(gen_text, read_text_file(gen_path));
    if (gen_text.empty()) return Status::error(gen_path + ": file is empty");
  }
  return parse_named(config_text, config_path, gen_text, gen_path);
}

// HF builds inv_freq as a float32 tensor: `1.0 / (base ** (arange(0, d, 2).float() / d))`,
// then applies the rope type's adjustment with float32 tensor ops, and forms the angles as
// a float32 outer product `inv_freq @ positions`. We repeat each of those float32 steps
// (with the same operation order; `scalar / tensor` is `tensor.reciprocal() * scalar` in
// torch) so that our angles are the float32 numbers HF feeds to cos/sin. torch's own pow
// may differ from powf by an ulp on some inputs; that is the only known source of mismatch.
std::vector<double> rope_inv_freq(const ModelConfig& config) {
  const int64_t d = config.head_dim;
  check(d > 0 && d % 2 == 0, "rope_inv_freq: head_dim must be positive and even");
  const RopeConfig& r = config.rope;
  const float base = static_cast<float>(r.theta);
  std::vector<double> out(static_cast<size_t>(d / 2));
  for (int64_t i = 0; i < d / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(d);
    float inv = 1.0f / std::pow(base, exponent);
    if (r.type == RopeConfig::Type::kLinear) inv = inv / static_cast<float>(r.factor);
    if (r.type == RopeConfig::Type::kLlama3) {
      // transformers' _compute_llama3_parameters: wavelengths shorter than
      // orig/high_freq_factor keep their frequency, longer than orig/low_freq_factor are
      // divided by factor, and those in between are blended by a smooth factor.
      const float factor = static_cast<float>(r.factor);
      const float low = static_cast<float>(r.low_freq_factor);
      const double orig = static_cast<double>(r.original_max_position_embeddings);
      const float low_freq_wavelen = static_cast<float>(orig / r.low_freq_factor);
      const float high_freq_wavelen = static_cast<float>(orig / r.high_freq_factor);
      const float wavelen = (1.0f / inv) * static_cast<float>(2 * std::numbers::pi);
      if (wavelen > low_freq_wavelen) {
        inv = inv / factor;
      } else if (!(wavelen < high_freq_wavelen)) {
        const float smooth = ((1.0f / wavelen) * static_cast<float>(orig) - low) /
                             static_cast<float>(r.high_freq_factor - r.low_freq_factor);
        inv = (1.0f - smooth) * inv / factor + smooth * inv;
      }
    }
    out[static_cast<size_t>(i)] = inv;
  }
  return out;
}

void rope_cos_sin_table(const ModelConfig& config, int64_t max_positions, float* out) {
  check(max_positions >= 0 && (max_positions == 0 || out != nullptr), "rope_cos_sin_table: bad output");
  const std::vector<double> inv = rope_inv_freq(config);
  const int64_t half = config.head_dim / 2;
  for (int64_t p = 0; p < max_positions; ++p) {
    float* row = out + p * config.head_dim;  // [head_dim]: cos half, then sin half
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(p) * static_cast<float>(inv[static_cast<size_t>(i)]);
      row[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      row[half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
}

}  // namespace quiver
