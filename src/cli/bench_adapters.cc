// `quiver bench` synthetic inputs: random PEFT LoRA adapters written to disk the way PEFT
// saves them (so they go through the real loading path), and random token-id prompts.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/bench.h"
#include "core/splitmix.h"
#include "io/peft_adapter.h"
#include "io/safetensors_writer.h"

namespace quiver::bench {

namespace {

// Uniform in [-scale, scale).
std::vector<float> uniform(size_t n, float scale, uint64_t& state) {
  std::vector<float> v(n);
  for (float& x : v) x = scale * (static_cast<float>(splitmix64(state) >> 40) / static_cast<float>(1 << 23) - 1.0f);
  return v;
}

Result<std::vector<LoraTarget>> parse_targets(const std::string& spec) {
  std::vector<LoraTarget> all;
  for (int t = 0; t < kNumLoraTargets; ++t) all.push_back(static_cast<LoraTarget>(t));
  if (spec == "all" || spec == "all-linear") return all;
  std::vector<LoraTarget> out;
  std::stringstream ss(spec);
  std::string name;
  while (std::getline(ss, name, ',')) {
    bool found = false;
    for (LoraTarget t : all)
      if (name == lora_target_name(t)) {
        out.push_back(t);
        found = true;
      }
    if (!found)
      return Status::error("--lora-targets: unknown projection '" + name +
                           "' (use all, or a comma list of q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj)");
  }
  if (out.empty()) return Status::error("--lora-targets names no projection");
  return out;
}

Result<DType> parse_lora_dtype(const std::string& s) {
  if (auto t = float_dtype_named(s)) return *t;
  return Status::error("--lora-file-dtype must be bfloat16, float16 or float32, not '" + s + "'");
}

// "added=N" -> N.
Result<int64_t> added_tokens_of(const std::string& spec) {
  const std::string n = spec.substr(6);
  if (n.empty() || n.size() > 5 || n.find_first_not_of("0123456789") != std::string::npos || std::stoll(n) < 1)
    return Status::error("--lora-vocab added=N needs N between 1 and 65536, not '" + n + "'");
  const int64_t v = std::stoll(n);
  if (v > 65536) return Status::error("--lora-vocab added=N needs N between 1 and 65536");
  return v;
}

// The vocabulary files of one adapter (BenchOptions::lora_vocab) into `path`, appending the
// adapter-file tensors to `tensors` and the targets to config["target_modules"].
Status write_vocab(const ModelConfig& base, const BenchOptions& o, DType dtype, const std::filesystem::path& path,
                   nlohmann::json* config, std::vector<SafetensorsEntry>* tensors, uint64_t& state) {
  const int64_t h = base.hidden_size, v = base.vocab_size, r = o.lora_rank;
  const float row_scale = 1.0f / std::sqrt(static_cast<float>(h));  // the dummy weights' scale
  if (o.lora_vocab == "lm_head") {
    (*config)["modules_to_save"] = {"lm_head"};
    tensors->push_back(make_safetensors_entry("base_model.model.lm_head.weight", dtype, {v, h},
                                              uniform(static_cast<size_t>(v * h), row_scale, state)));
  } else if (o.lora_vocab == "lora") {
    (*config)["target_modules"].push_back("embed_tokens");
    (*config)["target_modules"].push_back("lm_head");
    const std::string emb = "base_model.model.model.embed_tokens.", head = "base_model.model.lm_head.";
    const float rs = 1.0f / std::sqrt(static_cast<float>(r));
    tensors->push_back(make_safetensors_entry(emb + "lora_embedding_A", dtype, {r, v}, uniform(size_t(r * v), 1.f, state)));
    tensors->push_back(make_safetensors_entry(emb + "lora_embedding_B", dtype, {h, r}, uniform(size_t(h * r), rs, state)));
    tensors->push_back(make_safetensors_entry(head + "lora_A.weight", dtype, {r, h}, uniform(size_t(r * h), row_scale, state)));
    tensors->push_back(make_safetensors_entry(head + "lora_B.weight", dtype, {v, r}, uniform(size_t(v * r), rs, state)));
  } else if (o.lora_vocab.starts_with("added=")) {
    QV_ASSIGN_OR_RETURN(const int64_t n, added_tokens_of(o.lora_vocab));
    nlohmann::json names = nlohmann::json::object();
    for (int64_t i = 0; i < n; ++i) names["<bench_" + std::to_string(i) + ">"] = v + i;
    std::ofstream(path / "added_tokens.json") << names.dump() << "\n";
    QV_RETURN_IF_ERROR(write_safetensors(
        (path / "new_embeddings.safetensors").string(),
        {make_safetensors_entry("input_embeddings", dtype, {n, h}, uniform(size_t(n * h), row_scale, state)),
         make_safetensors_entry("output_embeddings", dtype, {n, h}, uniform(size_t(n * h), row_scale, state))},
        {{"format", "pt"}}));
  }
  return Status::ok();
}

}  // namespace

Result<int64_t> vocab_rows_of(const std::string& spec, const ModelConfig& base) {
  if (spec == "none" || spec == "lora") return int64_t{0};
  if (spec == "lm_head") return base.vocab_size;
  if (spec.starts_with("added=")) return added_tokens_of(spec);
  return Status::error("--lora-vocab must be none, added=N, lm_head or lora, not '" + spec + "'");
}

// Scales: A ~ U(±1/sqrt(in)), B ~ U(±1/sqrt(r)) and lora_alpha = r (scale 1) make B·A·x
// about half the size of W·x for the dummy base weights (W ~ U(±1/sqrt(in))), so an
// adapter visibly changes the outputs instead of adding noise below bf16 resolution.
// (PEFT initialises B to zero; a trained adapter is what this stands in for.)
Result<std::vector<std::pair<std::string, std::string>>> synthesize_adapters(const ModelConfig& base,
                                                                            const BenchOptions& o,
                                                                            const std::string& dir) {
  namespace fs = std::filesystem;
  QV_ASSIGN_OR_RETURN(std::vector<LoraTarget> targets, parse_targets(o.lora_targets));
  QV_ASSIGN_OR_RETURN(DType dtype, parse_lora_dtype(o.lora_dtype));
  if (o.lora_rank < 1) return Status::error("--lora-rank must be at least 1");
  std::vector<std::pair<std::string, std::string>> out;
  for (int i = 0; i < o.num_adapters; ++i) {
    const std::string name = "bench-" + std::to_string(i);
    const fs::path path = fs::path(dir) / name;
    std::error_code ec;
    fs::create_directories(path, ec);
    if (ec) return Status::error("cannot create " + path.string() + ": " + ec.message());

    nlohmann::json config = {{"peft_type", "LORA"},          {"task_type", "CAUSAL_LM"},
                             {"r", o.lora_rank},             {"lora_alpha", o.lora_rank},
                             {"lora_dropout", 0.0},          {"bias", "none"},
                             {"use_rslora", false},          {"use_dora", false},
                             {"base_model_name_or_path", ""}, {"target_modules", nlohmann::json::array()}};
    for (LoraTarget t : targets) config["target_modules"].push_back(lora_target_name(t));
    uint64_t state = o.engine.args.seed * 1000003ull + 77 + static_cast<uint64_t>(i);
    std::vector<SafetensorsEntry> tensors;
    QV_RETURN_IF_ERROR(write_vocab(base, o, dtype, path, &config, &tensors, state));
    std::ofstream cfg(path / "adapter_config.json");
    cfg << config.dump(2) << "\n";
    cfg.close();
    if (!cfg) return Status::error("cannot write " + (path / "adapter_config.json").string());

    for (int64_t l = 0; l < base.num_layers; ++l) {
      for (LoraTarget t : targets) {
        const int64_t in = lora_target_in(base, t), out_f = lora_target_out(base, t);
        const std::string parent = t <= LoraTarget::kO ? "self_attn" : "mlp";
        const std::string key =
            "base_model.model.model.layers." + std::to_string(l) + "." + parent + "." + lora_target_name(t);
        const auto a = uniform(static_cast<size_t>(o.lora_rank * in), 1.0f / std::sqrt(static_cast<float>(in)), state);
        const auto b =
            uniform(static_cast<size_t>(out_f * o.lora_rank), 1.0f / std::sqrt(static_cast<float>(o.lora_rank)), state);
        tensors.push_back(make_safetensors_entry(key + ".lora_A.weight", dtype, {o.lora_rank, in}, a));
        tensors.push_back(make_safetensors_entry(key + ".lora_B.weight", dtype, {out_f, o.lora_rank}, b));
      }
    }
    QV_RETURN_IF_ERROR(
        write_safetensors((path / "adapter_model.safetensors").string(), tensors, {{"format", "pt"}}));
    out.emplace_back(name, path.string());
  }
  return out;
}

std::vector<BenchRequest> make_requests(int n, int input_len, const std::vector<std::string>& adapters,
                                        double lora_fraction, int64_t vocab_size, uint64_t seed,
                                        const std::string& id_prefix) {
  std::vector<BenchRequest> out;
  uint64_t state = seed * 0x2545f4914f6cdd1dull + 12345;
  int with_adapter = 0;
  for (int i = 0; i < n; ++i) {
    BenchRequest r;
    r.id = id_prefix + std::to_string(i);
    r.prompt.resize(static_cast<size_t>(input_len));
    for (int32_t& t : r.prompt) t = static_cast<int32_t>(splitmix64(state) % static_cast<uint64_t>(vocab_size));
    // Request i carries an adapter when floor((i+1)·f) steps past floor(i·f): an even
    // spread of round(n·f) adapter requests among the base ones.
    const bool lora = !adapters.empty() && std::floor((i + 1) * lora_fraction) > std::floor(i * lora_fraction);
    if (lora) r.adapter = adapters[static_cast<size_t>(with_adapter++) % adapters.size()];
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace quiver::bench
