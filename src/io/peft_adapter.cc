// PEFT LoRA adapter loading. adapter_config.json is interpreted the way PEFT's LoraModel
// does (target_modules as list / regex / "all-linear", rank_pattern, alpha_pattern,
// layers_to_transform + layers_pattern, exclude_modules), every feature quiver cannot run
// is refused by name, and the tensors are checked against both the config and the base
// model before they are converted to float32 with the scale folded into B.
#include "io/peft_adapter.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "io/adapter_files.h"
#include "io/adapter_vocab.h"
#include "io/json_util.h"
#include "io/peft_config.h"

namespace quiver {

const char* lora_target_name(LoraTarget t) {
  static constexpr const char* kNames[kNumLoraTargets] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                          "gate_proj", "up_proj", "down_proj"};
  return kNames[static_cast<int>(t)];
}

int64_t lora_target_in(const ModelConfig& c, LoraTarget t) {
  switch (t) {
    case LoraTarget::kO: return c.q_size();
    case LoraTarget::kDown: return c.intermediate_size;
    default: return c.hidden_size;
  }
}

int64_t lora_target_out(const ModelConfig& c, LoraTarget t) {
  switch (t) {
    case LoraTarget::kQ: return c.q_size();
    case LoraTarget::kK:
    case LoraTarget::kV: return c.kv_size();
    case LoraTarget::kO:
    case LoraTarget::kDown: return c.hidden_size;
    case LoraTarget::kGate:
    case LoraTarget::kUp: return c.intermediate_size;
  }
  return 0;
}

size_t LoraAdapter::host_bytes() const {
  size_t n = 0;
  for (const auto& layer : layers)
    for (const auto& m : layer)
      if (m) n += (m->a.size() + m->b.size()) * sizeof(float);
  for (const auto* m : {&embed_lora, &lm_head_lora})
    if (*m) n += ((*m)->a.size() + (*m)->b.size()) * sizeof(float);
  return n + vocab.host_bytes();
}

namespace {

using OJson = peft::OJson;
using peft::LoraSpec;
using peft::RankScale;

std::string target_parent(LoraTarget t) { return t <= LoraTarget::kO ? "self_attn" : "mlp"; }

// The module's name inside the HF model, which is what PEFT matches patterns against.
std::string module_name(int64_t layer, LoraTarget t) {
  return "model.layers." + std::to_string(layer) + "." + target_parent(t) + "." + lora_target_name(t);
}

// A tensor name "base_model.model.<module>.lora_<A|B>[.default].weight", resolved to its module;
// for embed_tokens "base_model.model.model.embed_tokens.lora_embedding_<A|B>[.default]".
struct TensorKey {
  int64_t layer = 0;
  LoraTarget target = LoraTarget::kQ;
  int vocab_module = -1;  // 0: embed_tokens, 1: lm_head (layer and target unused)
  bool is_a = true;
};

constexpr int kEmbed = 0, kLmHead = 1;
const char* const kVocabModuleNames[2] = {peft::kEmbedModule, peft::kLmHeadModule};

std::vector<std::string> split_dots(const std::string& s) {
  std::vector<std::string> parts(1);
  for (char ch : s) {
    if (ch == '.') parts.emplace_back();
    else parts.back().push_back(ch);
  }
  return parts;
}

bool all_of_chars(const std::string& s, const char* allowed) {
  return !s.empty() && s.find_first_not_of(allowed) == std::string::npos;
}

// Matched by splitting, not by a regex: names come from the file and may be any length.
Result<TensorKey> parse_tensor_name(const std::string& tname, int64_t num_layers) {
  const std::vector<std::string> p = split_dots(tname);
  const bool shaped = (p.size() == 9 || (p.size() == 10 && p[8] == "default")) && p[0] == "base_model" &&
                      p[1] == "model" && p[2] == "model" && p[3] == "layers" && all_of_chars(p[4], "0123456789") &&
                      (p[5] == "self_attn" || p[5] == "mlp") && all_of_chars(p[6], "abcdefghijklmnopqrstuvwxyz_") &&
                      (p[7] == "lora_A" || p[7] == "lora_B") && p.back() == "weight";
  if (shaped) {
    std::optional<LoraTarget> t = peft::target_from_name(p[6]);
    if (!t)
      return Status::error("tensor " + tname + " is for unknown module '" + p[6] + "' (supported: " +
                           peft::supported_targets() + ")");
    if (target_parent(*t) != p[5]) return Status::error("tensor " + tname + " has " + p[6] + " under " + p[5]);
    TensorKey k;
    QV_ASSIGN_OR_RETURN(k.layer, peft::parse_index(p[4], "tensor " + tname));
    k.target = *t;
    k.is_a = p[7] == "lora_A";
    if (k.layer >= num_layers)
      return Status::error("tensor " + tname + " is for layer " + p[4] + " but the base model has " +
                           std::to_string(num_layers) + " layers (adapter made for another model?)");
    return k;
  }
  // PEFT drops the adapter's name from saved keys; older files may keep ".default".
  const size_t n = p.size() - (p.back() == "default" ? 1 : 0);
  if (n == 5 && p[0] == "base_model" && p[1] == "model" && p[2] == "model" && p[3] == "embed_tokens" &&
      (p[4] == "lora_embedding_A" || p[4] == "lora_embedding_B"))
    return TensorKey{.vocab_module = kEmbed, .is_a = p[4] == "lora_embedding_A"};
  const size_t m = p.size() - (p.size() == 6 && p[4] == "default" ? 1 : 0);
  if (m == 5 && p[0] == "base_model" && p[1] == "model" && p[2] == "lm_head" && (p[3] == "lora_A" || p[3] == "lora_B") &&
      p.back() == "weight")
    return TensorKey{.vocab_module = kLmHead, .is_a = p[3] == "lora_A"};
  return Status::error("unexpected tensor " + tname + " (expected base_model.model.model.layers.N.<self_attn|mlp>.<proj>.lora_A.weight / lora_B.weight, or the embed_tokens / lm_head LoRA)");
}

// expected = {d0, d1}; rank_dim says which of them is the LoRA rank (A: 0, B: 1).
Status check_shape(const std::string& tname, const TensorInfo& info, std::vector<int64_t> expected, int rank_dim,
                   const RankScale& rs) {
  if (!info.dtype_known || (info.dtype != DType::kF32 && info.dtype != DType::kF16 && info.dtype != DType::kBF16))
    return Status::error("tensor " + tname + " has dtype " + info.file_dtype +
                         "; only F32, F16 and BF16 are supported");
  if (info.shape == expected) return Status::ok();
  bool model_dims_fit = info.shape.size() == 2 && info.shape[1 - rank_dim] == expected[1 - rank_dim];
  if (!model_dims_fit)
    return Status::error("tensor " + tname + " has shape " + shape_text(info.shape) + ", expected " +
                         shape_text(expected) + " for this base model (adapter made for another model?)");
  return Status::error("tensor " + tname + " has shape " + shape_text(info.shape) + ", expected " + shape_text(expected) +
                       ": adapter_config.json gives this module rank " + std::to_string(rs.rank) + " (" +
                       rs.rank_from + ")");
}

// A NaN or Inf weight (or one the scale pushes past float) would silently poison every
// token of every request using the adapter, so it is refused here, by tensor name.
Result<std::vector<float>> to_f32(const std::string& tname, const TensorInfo& info, double scale) {
  size_t n = 1;
  for (int64_t d : info.shape) n *= static_cast<size_t>(d);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    const float v = load_as_f32(info.data, info.dtype, i);
    out[i] = scale == 1.0 ? v : static_cast<float>(static_cast<double>(v) * scale);
    if (!std::isfinite(out[i]))
      return Status::error("tensor " + tname + " holds a non-finite value at element " + std::to_string(i) +
                           (std::isfinite(v) ? " once scaled by lora_alpha / r" : ""));
  }
  return out;
}

struct Pair {
  const TensorInfo* a = nullptr;
  const TensorInfo* b = nullptr;
  std::string a_name, b_name;
};

// The LoRA of embed_tokens (vocab_module 0) or lm_head (1) from its tensors, over `rows` ids:
//   embed_tokens: lora_embedding_A [r, rows] is kept transposed, [rows, r] (a token's r values
//                 together: the embedding gathers them), lora_embedding_B [hidden, r] scaled;
//   lm_head:      lora_A [r, hidden], lora_B [rows, r] scaled.
// `rows` is the base vocabulary or the adapter's (base + its new tokens), whichever the
// tensors have; other counts are refused.
Result<LoraModule> vocab_lora(int vocab_module, const Pair& p, const RankScale& rs, bool rslora, const ModelConfig& base,
                              int64_t adapter_vocab) {
  const bool embed = vocab_module == kEmbed;
  const TensorInfo& rows_of = embed ? *p.a : *p.b;  // the tensor with the vocabulary dimension
  const std::string& rows_name = embed ? p.a_name : p.b_name;
  const int64_t rows = rows_of.shape.size() == 2 ? rows_of.shape[embed ? 1 : 0] : -1;
  if (rows != base.vocab_size && rows != adapter_vocab)
    return Status::error("tensor " + rows_name + " has shape " + shape_text(rows_of.shape) + ": its vocabulary dimension " +
                         "must be the base's " + std::to_string(base.vocab_size) +
                         (adapter_vocab != base.vocab_size ? " or the adapter's " + std::to_string(adapter_vocab) : "") +
                         " (adapter made for another model?)");
  const int64_t h = base.hidden_size;
  if (embed) {
    QV_RETURN_IF_ERROR(check_shape(p.a_name, *p.a, {rs.rank, rows}, 0, rs));
    QV_RETURN_IF_ERROR(check_shape(p.b_name, *p.b, {h, rs.rank}, 1, rs));
  } else {
    QV_RETURN_IF_ERROR(check_shape(p.a_name, *p.a, {rs.rank, h}, 0, rs));
    QV_RETURN_IF_ERROR(check_shape(p.b_name, *p.b, {rows, rs.rank}, 1, rs));
  }
  LoraModule m;
  m.rank = rs.rank;
  QV_ASSIGN_OR_RETURN(m.a, to_f32(p.a_name, *p.a, 1.0));
  QV_ASSIGN_OR_RETURN(m.b, to_f32(p.b_name, *p.b, rs.scale(rslora)));
  if (embed) {
    std::vector<float> t(m.a.size());
    for (int64_t r = 0; r < rs.rank; ++r)
      for (int64_t id = 0; id < rows; ++id) t[static_cast<size_t>(id * rs.rank + r)] = m.a[static_cast<size_t>(r * rows + id)];
    m.a = std::move(t);
  }
  return m;
}

Result<LoraAdapter> load_impl(const std::string& dir, const std::string& name, const ModelConfig& base,
                              int max_lora_rank, const std::vector<std::string>& allowlist, const BaseVocab* base_rows) {
  QV_ASSIGN_OR_RETURN(AdapterFiles files, open_adapter_files(dir, allowlist));
  const AdapterWeights& file = files.weights;
  OJson config;
  try {
    config = OJson::parse(files.config_text);
  } catch (const nlohmann::json::exception& e) {
    return Status::error("adapter_config.json is not valid JSON: " + json_error_text(e));
  }
  QV_ASSIGN_OR_RETURN(std::optional<PeftVocab> peft_vocab, load_peft_vocab(config, file.tensors(), base));
  const std::vector<std::string> vocab_tensors = peft_vocab ? peft_vocab->tensors : std::vector<std::string>();
  const std::vector<std::string> base_layers = peft_vocab ? peft_vocab->base_layers : std::vector<std::string>();
  const bool peft_rows = peft_vocab && peft_vocab->base_layers.size() < vocab_tensors.size();
  const int64_t resized = peft_vocab ? std::max<int64_t>(0, peft_vocab->replaced_vocab - base.vocab_size) : 0;
  QV_ASSIGN_OR_RETURN(std::optional<AddedVocab> added, load_added_vocab(dir, base, resized));
  QV_ASSIGN_OR_RETURN(AdapterVocab vocab,
                      resolve_adapter_vocab(std::move(added), std::move(peft_vocab), base, base_rows));
  Result<LoraSpec> parsed = Status::error("unparsed");
  try {
    parsed = peft::parse_spec(config, peft_rows);
  } catch (const nlohmann::json::exception& e) {
    return Status::error("adapter_config.json: " + std::string(e.what()));
  }
  if (!parsed) return parsed.status().with_context("adapter_config.json");
  const LoraSpec& spec = parsed.value();

  // Refuse before reading weights: the slot stacks are sized by --max-lora-rank.
  auto too_big = [&](int rank, const std::string& from) {
    return Status::error("rank " + std::to_string(rank) + " (" + from + ") is above --max-lora-rank " +
                         std::to_string(max_lora_rank) + "; restart with --max-lora-rank " + std::to_string(rank) +
                         " or more");
  };
  if (spec.r > max_lora_rank) return too_big(spec.r, "r");
  for (size_t i = 0; i < spec.rank_values.size(); ++i)
    if (spec.rank_values[i] > max_lora_rank)
      return too_big(spec.rank_values[i], "rank_pattern['" + spec.rank_keys[i].first + "']");

  const int64_t num_layers = base.num_layers;
  std::vector<std::array<Pair, kNumLoraTargets>> found(static_cast<size_t>(num_layers));
  Pair vocab_found[2];
  for (const auto& [tname, info] : file.tensors()) {
    if (std::find(vocab_tensors.begin(), vocab_tensors.end(), tname) != vocab_tensors.end()) continue;
    QV_ASSIGN_OR_RETURN(TensorKey k, parse_tensor_name(tname, num_layers));
    Pair& p = k.vocab_module >= 0 ? vocab_found[k.vocab_module] : found[k.layer][static_cast<int>(k.target)];
    const TensorInfo*& slot = k.is_a ? p.a : p.b;
    std::string& slot_name = k.is_a ? p.a_name : p.b_name;
    if (slot) return Status::error("tensors " + slot_name + " and " + tname + " are the same weight");
    slot = &info;
    slot_name = tname;
  }

  LoraAdapter adapter;
  adapter.name = name;
  adapter.path = dir;
  adapter.layers.resize(static_cast<size_t>(num_layers));
  int num_modules = 0;
  for (int64_t l = 0; l < num_layers; ++l) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      const auto target = static_cast<LoraTarget>(t);
      const std::string key = module_name(l, target);
      const Pair& p = found[l][t];
      QV_ASSIGN_OR_RETURN(bool targeted, peft::is_targeted(spec, key));
      if (!targeted) {
        if (p.a || p.b)
          return Status::error("tensor " + (p.a ? p.a_name : p.b_name) + " is for " + key +
                               ", which adapter_config.json does not target");
        continue;
      }
      for (const char* ab : {"A", "B"})
        if (!(ab[0] == 'A' ? p.a : p.b))
          return Status::error("missing tensor base_model.model." + key + ".lora_" + ab +
                               ".weight (adapter_config.json targets " + key + ")");
      QV_ASSIGN_OR_RETURN(const RankScale rs, peft::rank_and_alpha(spec, key));
      const int64_t in = lora_target_in(base, target), out = lora_target_out(base, target);
      QV_RETURN_IF_ERROR(check_shape(p.a_name, *p.a, {rs.rank, in}, 0, rs));
      QV_RETURN_IF_ERROR(check_shape(p.b_name, *p.b, {out, rs.rank}, 1, rs));
      LoraModule m;
      m.rank = rs.rank;
      QV_ASSIGN_OR_RETURN(m.a, to_f32(p.a_name, *p.a, 1.0));                   // [rank, in]
      QV_ASSIGN_OR_RETURN(m.b, to_f32(p.b_name, *p.b, rs.scale(spec.rslora)));  // [out, rank]
      adapter.max_rank = std::max(adapter.max_rank, m.rank);
      adapter.layers[l][t] = std::move(m);
      ++num_modules;
    }
  }
  const int64_t adapter_vocab = base.vocab_size + vocab.new_tokens;
  for (int vm : {kEmbed, kLmHead}) {
    const std::string key = kVocabModuleNames[vm];
    const std::string last = vm == kEmbed ? "embed_tokens" : "lm_head";
    const Pair& p = vocab_found[vm];
    QV_ASSIGN_OR_RETURN(bool targeted, peft::is_targeted(spec, key));
    if (vm == kLmHead && spec.ensure_weight_tying && base.tie_word_embeddings) targeted = targeted || adapter.embed_lora;
    const bool base_saved = std::find(base_layers.begin(), base_layers.end(), last) != base_layers.end();
    if (!targeted) {
      if (p.a || p.b || base_saved)
        return Status::error("tensor " + (p.a ? p.a_name : p.b ? p.b_name : "base_model.model." + key + ".base_layer.weight") +
                             " is for " + key + ", which adapter_config.json does not target");
      continue;
    }
    const std::string prefix = "base_model.model." + key + (vm == kEmbed ? ".lora_embedding_" : ".lora_");
    for (const char* ab : {"A", "B"})
      if (!(ab[0] == 'A' ? p.a : p.b))
        return Status::error("missing tensor " + prefix + ab + (vm == kEmbed ? "" : ".weight") +
                             " (adapter_config.json targets " + key + ")");
    QV_ASSIGN_OR_RETURN(const RankScale rs, peft::rank_and_alpha(spec, key));
    QV_ASSIGN_OR_RETURN(LoraModule m, vocab_lora(vm, p, rs, spec.rslora, base, adapter_vocab));
    adapter.max_rank = std::max(adapter.max_rank, m.rank);
    (vm == kEmbed ? adapter.embed_lora : adapter.lm_head_lora) = std::move(m);
    ++num_modules;
  }
  adapter.vocab = std::move(vocab);
  if (num_modules == 0 && adapter.vocab.empty())
    return Status::error("adapter_config.json targets no module of this base model (target_modules " +
                         (config.contains("target_modules") ? config["target_modules"].dump() : std::string("null")) + ")");
  return adapter;
}

}  // namespace

Result<LoraAdapter> load_peft_adapter(const std::string& dir, const std::string& name, const ModelConfig& base,
                                      int max_lora_rank, const std::vector<std::string>& allowlist,
                                      const BaseVocab* base_rows) {
  Result<LoraAdapter> r = Status::error("not loaded");
  try {
    r = load_impl(dir, name, base, max_lora_rank, allowlist, base_rows);
  } catch (const std::exception& e) {
    // A file is outside input: whatever a bad one trips (a JSON type error, an allocation
    // sized from it) is this load's error, never the caller's crash.
    r = Status::error(std::string("cannot be loaded: ") + e.what());
  }
  if (!r) return r.status().with_context("LoRA adapter '" + name + "' (" + dir + ")");
  return r;
}

}  // namespace quiver
