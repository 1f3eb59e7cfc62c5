// Helpers shared by the LoRA unit tests: a tiny base-model config, a safetensors writer,
// PEFT-style adapter folders written from code, and in-memory adapters with known weights.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/model_config.h"
#include "io/peft_adapter.h"

namespace quiver::lora_test {

// q_size (12) != hidden (8) != kv_size (6) != intermediate (10), so any in/out mix-up shows.
inline ModelConfig tiny_config(int64_t num_layers = 2) {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.vocab_size = 32;
  c.hidden_size = 8;
  c.intermediate_size = 10;
  c.num_layers = num_layers;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 3;
  return c;
}

// Deterministic values that are exact in bf16 and f16 (multiples of 1/64 in (-1, 1)).
inline float test_value(uint32_t seed, uint64_t i) {
  uint64_t h = (static_cast<uint64_t>(seed) * 0x9E3779B97F4A7C15ull) ^ (i * 0xBF58476D1CE4E5B9ull + 0x94D049BB133111EBull);
  h ^= h >> 31;
  h *= 0xD6E8FEB86659FD93ull;
  h ^= h >> 32;
  return static_cast<float>(static_cast<int>(h % 127) - 63) / 64.f;
}

struct HostTensor {
  std::string dtype = "F32";  // F32, F16, BF16
  std::vector<int64_t> shape;
  std::vector<float> values;
};

inline void write_safetensors(const std::string& path, const std::map<std::string, HostTensor>& tensors) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const auto& [name, t] : tensors) {
    size_t begin = data.size();
    for (float v : t.values) {
      if (t.dtype == "F32") {
        data.append(reinterpret_cast<const char*>(&v), 4);
      } else {
        uint16_t h = t.dtype == "BF16" ? f32_to_bf16(v) : f32_to_f16(v);
        data.append(reinterpret_cast<const char*>(&h), 2);
      }
    }
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h += ' ';
  uint64_t n = h.size();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

// A fresh empty directory under the test temp dir.
inline std::string make_temp_dir(const std::string& tag) {
  std::string tmpl = std::filesystem::temp_directory_path().string() + "/quiver_" + tag + "_XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  char* d = mkdtemp(buf.data());
  return d ? std::string(d) : std::string();
}

inline std::string module_key(int64_t layer, LoraTarget t) {
  const char* parent = t <= LoraTarget::kO ? "self_attn" : "mlp";
  return "model.layers." + std::to_string(layer) + "." + parent + "." + lora_target_name(t);
}

inline std::string tensor_name(int64_t layer, LoraTarget t, bool is_a) {
  return "base_model.model." + module_key(layer, t) + (is_a ? ".lora_A.weight" : ".lora_B.weight");
}

// Unscaled A [r, in] and B [out, r] values for one module, as PEFT would store them.
inline HostTensor module_a(const ModelConfig& c, int64_t layer, LoraTarget t, int rank, uint32_t seed) {
  HostTensor h;
  h.shape = {rank, lora_target_in(c, t)};
  for (int64_t i = 0; i < h.shape[0] * h.shape[1]; ++i)
    h.values.push_back(test_value(seed, static_cast<uint64_t>((layer * 7 + static_cast<int>(t)) * 100000 + i)));
  return h;
}
inline HostTensor module_b(const ModelConfig& c, int64_t layer, LoraTarget t, int rank, uint32_t seed) {
  HostTensor h;
  h.shape = {lora_target_out(c, t), rank};
  for (int64_t i = 0; i < h.shape[0] * h.shape[1]; ++i)
    h.values.push_back(test_value(seed + 7777, static_cast<uint64_t>((layer * 7 + static_cast<int>(t)) * 100000 + i)));
  return h;
}

// Tensors for `targets` in `layers` (all layers when empty), every module of rank `rank`.
inline std::map<std::string, HostTensor> adapter_tensors(const ModelConfig& c, std::vector<LoraTarget> targets,
                                                         int rank, uint32_t seed, std::vector<int64_t> layers = {}) {
  if (layers.empty())
    for (int64_t l = 0; l < c.num_layers; ++l) layers.push_back(l);
  std::map<std::string, HostTensor> out;
  for (int64_t l : layers)
    for (LoraTarget t : targets) {
      out[tensor_name(l, t, true)] = module_a(c, l, t, rank, seed);
      out[tensor_name(l, t, false)] = module_b(c, l, t, rank, seed);
    }
  return out;
}

inline void write_adapter(const std::string& dir, const nlohmann::ordered_json& config,
                          const std::map<std::string, HostTensor>& tensors) {
  std::ofstream(dir + "/adapter_config.json") << config.dump(2);
  write_safetensors(dir + "/adapter_model.safetensors", tensors);
}

inline nlohmann::ordered_json lora_config(int r, double alpha, nlohmann::ordered_json target_modules) {
  nlohmann::ordered_json c;
  c["peft_type"] = "LORA";
  c["task_type"] = "CAUSAL_LM";
  c["r"] = r;
  c["lora_alpha"] = alpha;
  c["lora_dropout"] = 0.0;
  c["bias"] = "none";
  c["fan_in_fan_out"] = false;
  c["use_rslora"] = false;
  c["use_dora"] = false;
  c["modules_to_save"] = nullptr;
  c["target_modules"] = std::move(target_modules);
  c["rank_pattern"] = nlohmann::ordered_json::object();
  c["alpha_pattern"] = nlohmann::ordered_json::object();
  c["layers_to_transform"] = nullptr;
  c["layers_pattern"] = nullptr;
  return c;
}

// An in-memory adapter: ranks[t] > 0 gives target t that rank in every layer (B already scaled).
inline LoraAdapter make_adapter(const ModelConfig& c, const std::array<int, kNumLoraTargets>& ranks, uint32_t seed,
                                const std::string& name = "mem") {
  LoraAdapter a;
  a.name = name;
  a.layers.resize(static_cast<size_t>(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (int t = 0; t < kNumLoraTargets; ++t) {
      if (ranks[t] <= 0) continue;
      const auto target = static_cast<LoraTarget>(t);
      LoraModule m;
      m.rank = ranks[t];
      m.a = module_a(c, l, target, m.rank, seed).values;
      m.b = module_b(c, l, target, m.rank, seed).values;
      a.max_rank = std::max(a.max_rank, m.rank);
      a.layers[l][t] = std::move(m);
    }
  return a;
}

}  // namespace quiver::lora_test
