// PEFT LoRA adapter loading. adapter_config.json is interpreted the way PEFT's LoraModel
// does (target_modules as list / regex / "all-linear", rank_pattern, alpha_pattern,
// layers_to_transform + layers_pattern, exclude_modules), every feature quiver cannot run
// is refused by name, and the tensors are checked against both the config and the base
// model before they are converted to float32 with the scale folded into B.
#include "io/peft_adapter.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "io/adapter_files.h"
#include "io/adapter_vocab.h"
#include "io/bounded_regex.h"
#include "io/json_util.h"

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
  return n + vocab.host_bytes();
}

namespace {

// Key order matters (rank_pattern / alpha_pattern: first matching key wins, as in Python).
using OJson = nlohmann::ordered_json;

std::string target_parent(LoraTarget t) { return t <= LoraTarget::kO ? "self_attn" : "mlp"; }

// The module's name inside the HF model, which is what PEFT matches patterns against.
std::string module_name(int64_t layer, LoraTarget t) {
  return "model.layers." + std::to_string(layer) + "." + target_parent(t) + "." + lora_target_name(t);
}

std::optional<LoraTarget> target_from_name(const std::string& s) {
  for (int i = 0; i < kNumLoraTargets; ++i)
    if (s == lora_target_name(static_cast<LoraTarget>(i))) return static_cast<LoraTarget>(i);
  return std::nullopt;
}

std::string supported_targets() {
  std::string s;
  for (int i = 0; i < kNumLoraTargets; ++i) s += (i ? ", " : "") + std::string(lora_target_name(static_cast<LoraTarget>(i)));
  return s;
}

bool is_embedding_name(const std::string& s) {
  return s.find("embed_tokens") != std::string::npos || s.find("lm_head") != std::string::npos;
}

// |lora_alpha| past this only ever multiplies B into overflow; PEFT configs use at most a
// few thousand.
constexpr double kMaxAbsAlpha = 1e6;

Status check_alpha(double alpha, const std::string& field) {
  if (!std::isfinite(alpha) || std::fabs(alpha) > kMaxAbsAlpha)
    return Status::error(field + "=" + std::to_string(alpha) + " is out of range (|lora_alpha| <= 1e6)");
  return Status::ok();
}

// A rank from the config; ranks are ints everywhere after this.
Result<int> rank_value(const OJson& v, const std::string& field) {
  if (!v.is_number_integer()) return Status::error(field + " must be an integer, not " + v.dump());
  if (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int>::max())
                             : (v.get<int64_t>() <= 0 || v.get<int64_t>() > std::numeric_limits<int>::max()))
    return Status::error(field + "=" + v.dump() + " must be a positive rank");
  return static_cast<int>(v.get<int64_t>());
}

// A decimal layer index taken from a tensor or module name; no wrap-around.
Result<int64_t> parse_index(const std::string& digits, const std::string& where) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc() || end != digits.data() + digits.size() || digits.empty())
    return Status::error(where + ": layer index " + digits.substr(0, 24) + " is out of range");
  return v;
}

// adapter_config.json, reduced to what decides which modules get which rank and scale.
struct LoraSpec {
  enum class Mode { kList, kRegex, kAllLinear };
  int r = 8;
  double alpha = 8;
  bool rslora = false;
  Mode mode = Mode::kList;
  std::vector<std::string> targets;  // kList
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
};

bool is_null_or_empty(const OJson& j) {
  return j.is_null() || ((j.is_array() || j.is_object() || j.is_string()) && j.empty());
}

// An optional scalar field: absent or null gives `fallback`; a value of another type is an
// error naming the field (PEFT writes every field, often as null).
template <typename T>
Result<T> field_or(const OJson& c, const char* key, T fallback) {
  if (!c.contains(key) || c[key].is_null()) return fallback;
  const OJson& v = c[key];
  bool ok;
  const char* want;
  if constexpr (std::is_same_v<T, bool>) {
    ok = v.is_boolean(), want = "true or false";
  } else if constexpr (std::is_integral_v<T>) {
    ok = v.is_number_integer(), want = "an integer";
    // get<int>() would wrap 4294967312 to 16: range-check in 64 bits first.
    if (ok && (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<T>::max())
                                      : v.get<int64_t>() < std::numeric_limits<T>::min() ||
                                            v.get<int64_t>() > std::numeric_limits<T>::max()))
      return Status::error(std::string(key) + "=" + v.dump() + " is out of range");
  } else if constexpr (std::is_floating_point_v<T>) {
    ok = v.is_number(), want = "a number";
  } else {
    ok = v.is_string(), want = "a string";
  }
  if (!ok) return Status::error(std::string(key) + " must be " + want + ", not " + v.dump());
  return v.get<T>();
}

// Fields naming PEFT features whose forward quiver does not implement.
// vocab_read: modules_to_save (embed_tokens / lm_head) and trainable_token_indices were
// read by load_peft_vocab, which the engine applies.
Status refuse_unsupported(const OJson& c, bool vocab_read) {
  QV_ASSIGN_OR_RETURN(std::string bias, field_or<std::string>(c, "bias", "none"));
  if (bias != "none")
    return Status::error("bias=\"" + bias + "\" is not supported (LoRA bias terms change the base layers); only \"none\"");
  QV_ASSIGN_OR_RETURN(bool dora, field_or(c, "use_dora", false));
  if (dora) return Status::error("use_dora=true (DoRA) is not supported");
  if (!vocab_read && c.contains("modules_to_save") && !is_null_or_empty(c["modules_to_save"]))
    return Status::error("modules_to_save " + c["modules_to_save"].dump() +
                         " is not supported (the adapter replaces whole base modules)");
  for (const char* field : {"lora_bias", "use_qalora"}) {
    QV_ASSIGN_OR_RETURN(bool on, field_or(c, field, false));
    if (on) return Status::error(std::string(field) + "=true is not supported");
  }
  for (const char* field : {"layer_replication", "target_parameters", "trainable_token_indices",
                            "alora_invocation_tokens"}) {
    if (vocab_read && std::string(field) == "trainable_token_indices") continue;
    if (c.contains(field) && !is_null_or_empty(c[field]))
      return Status::error(std::string(field) + " is not supported");
  }
  return Status::ok();
}

Status check_list_entry(const std::string& entry, const std::string& field) {
  std::string last = entry.substr(entry.rfind('.') == std::string::npos ? 0 : entry.rfind('.') + 1);
  if (target_from_name(last)) return Status::ok();
  if (is_embedding_name(last))
    return Status::error(field + " contains '" + entry +
                         "': LoRA on embed_tokens / lm_head is not supported (supported: " + supported_targets() + ")");
  return Status::error(field + " contains unknown module '" + entry + "' (supported: " + supported_targets() + ")");
}

Result<std::vector<std::pair<std::string, BoundedRegex>>> pattern_keys(const OJson& obj, const std::string& field) {
  std::vector<std::pair<std::string, BoundedRegex>> keys;
  // PEFT's get_pattern_key: key K matches module M when re.match(r"(.*\.)?(K)$", M).
  for (const auto& [k, v] : obj.items()) {
    QV_ASSIGN_OR_RETURN(BoundedRegex re, BoundedRegex::compile("(.*\\.)?(" + k + ")", field + "['" + k + "']"));
    keys.emplace_back(k, std::move(re));
  }
  return keys;
}

Result<LoraSpec> parse_spec(const OJson& c, bool vocab_read) {
  LoraSpec s;
  if (!c.is_object()) return Status::error("top level is not a JSON object");
  if (!c.contains("peft_type")) return Status::error("peft_type is missing (expected \"LORA\")");
  QV_ASSIGN_OR_RETURN(std::string type, field_or<std::string>(c, "peft_type", ""));
  if (type != "LORA") return Status::error("peft_type is \"" + type + "\"; only \"LORA\" adapters are supported");
  QV_RETURN_IF_ERROR(refuse_unsupported(c, vocab_read));

  // PEFT's defaults: r=8, lora_alpha=8.
  QV_ASSIGN_OR_RETURN(s.r, field_or(c, "r", 8));
  if (s.r <= 0) return Status::error("r=" + std::to_string(s.r) + " must be positive");
  QV_ASSIGN_OR_RETURN(s.alpha, field_or(c, "lora_alpha", 8.0));
  QV_RETURN_IF_ERROR(check_alpha(s.alpha, "lora_alpha"));
  QV_ASSIGN_OR_RETURN(s.rslora, field_or(c, "use_rslora", false));
  // fan_in_fan_out only applies to GPT-2 style Conv1D; PEFT resets it to false (with a
  // warning) for nn.Linear, which every target here is, so the stored A/B are normal.

  const OJson tm = c.contains("target_modules") ? c["target_modules"] : OJson();
  if (tm.is_null()) {
    // PEFT's default for llama / mistral / qwen2 when target_modules is left out.
    s.targets = {"q_proj", "v_proj"};
  } else if (tm.is_string()) {
    std::string t = tm.get<std::string>();
    std::string lower = t;
    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (lower == "all-linear") {
      s.mode = LoraSpec::Mode::kAllLinear;
    } else {
      s.mode = LoraSpec::Mode::kRegex;
      QV_ASSIGN_OR_RETURN(BoundedRegex re, BoundedRegex::compile(t, "target_modules"));
      s.target_regex = std::move(re);
      for (const char* emb : {"model.embed_tokens", "lm_head"}) {
        QV_ASSIGN_OR_RETURN(bool hit, s.target_regex->full_match(emb));
        if (hit)
          return Status::error("target_modules regex '" + t + "' matches " + emb +
                               ": LoRA on embed_tokens / lm_head is not supported");
      }
    }
  } else {
    for (const auto& e : tm) {
      s.targets.push_back(e.get<std::string>());
      QV_RETURN_IF_ERROR(check_list_entry(s.targets.back(), "target_modules"));
    }
  }

  if (c.contains("rank_pattern") && c["rank_pattern"].is_object()) {
    QV_ASSIGN_OR_RETURN(s.rank_keys, pattern_keys(c["rank_pattern"], "rank_pattern"));
    for (const auto& [k, v] : c["rank_pattern"].items()) {
      QV_ASSIGN_OR_RETURN(int rank, rank_value(v, "rank_pattern['" + k + "']"));
      s.rank_values.push_back(rank);
    }
  }
  if (c.contains("alpha_pattern") && c["alpha_pattern"].is_object()) {
    QV_ASSIGN_OR_RETURN(s.alpha_keys, pattern_keys(c["alpha_pattern"], "alpha_pattern"));
    for (const auto& [k, v] : c["alpha_pattern"].items()) {
      s.alpha_values.push_back(v.get<double>());
      QV_RETURN_IF_ERROR(check_alpha(s.alpha_values.back(), "alpha_pattern['" + k + "']"));
    }
  }

  const OJson lt = c.contains("layers_to_transform") ? c["layers_to_transform"] : OJson();
  if (lt.is_number_integer()) {
    s.use_layer_indexes = true;
    s.layers.insert(lt.get<int64_t>());
  } else if (lt.is_array() && !lt.empty()) {
    s.use_layer_indexes = true;
    for (const auto& l : lt) s.layers.insert(l.get<int64_t>());
  }
  const OJson lp = c.contains("layers_pattern") ? c["layers_pattern"] : OJson();
  std::vector<std::string> patterns;
  if (lp.is_string() && !lp.get<std::string>().empty()) patterns.push_back(lp.get<std::string>());
  if (lp.is_array())
    for (const auto& p : lp) patterns.push_back(p.get<std::string>());

  // LoraConfig.__post_init__ rejects these combinations, so PEFT itself cannot load them.
  if (tm.is_string()) {
    for (const char* field : {"layers_to_transform", "layers_pattern"})
      if (c.contains(field) && !c[field].is_null())
        return Status::error(std::string(field) + " cannot be used when target_modules is a string (" + tm.dump() +
                             "); PEFT refuses this config too");
  }
  if (!patterns.empty() && !s.use_layer_indexes)
    return Status::error("layers_pattern is set but layers_to_transform is not; PEFT refuses this config too");
  // PEFT takes the first numbered segment after the pattern (lazy prefix) as the layer index.
  if (patterns.empty()) patterns.push_back("[^.]*");
  for (const auto& p : patterns) {
    QV_ASSIGN_OR_RETURN(BoundedRegex re, BoundedRegex::compile(".*?\\." + p + "\\.(\\d+)\\.", "layers_pattern"));
    s.layers_patterns.push_back(std::move(re));
  }

  const OJson ex = c.contains("exclude_modules") ? c["exclude_modules"] : OJson();
  if (ex.is_string() && !ex.get<std::string>().empty()) {
    QV_ASSIGN_OR_RETURN(BoundedRegex re, BoundedRegex::compile(ex.get<std::string>(), "exclude_modules"));
    s.exclude_regex = std::move(re);
  } else if (ex.is_array()) {
    for (const auto& e : ex) s.exclude_list.push_back(e.get<std::string>());
  }
  return s;
}

Result<bool> layer_selected(const LoraSpec& s, const std::string& key) {
  for (const auto& re : s.layers_patterns) {
    QV_ASSIGN_OR_RETURN(std::optional<std::string> digits, re.prefix_match(key, 1));
    if (!digits) continue;
    QV_ASSIGN_OR_RETURN(int64_t layer, parse_index(*digits, key));
    return s.layers.count(layer) > 0;
  }
  return false;
}

// PEFT's check_target_module_exists for one module name.
Result<bool> is_targeted(const LoraSpec& s, const std::string& key) {
  if (s.exclude_regex) {
    QV_ASSIGN_OR_RETURN(bool excluded, s.exclude_regex->full_match(key));
    if (excluded) return false;
  }
  for (const auto& e : s.exclude_list)
    if (key == e || key.ends_with("." + e)) return false;
  switch (s.mode) {
    case LoraSpec::Mode::kRegex: return s.target_regex->full_match(key);  // no layer filter, as PEFT
    case LoraSpec::Mode::kAllLinear: return true;  // every projection, never lm_head
    case LoraSpec::Mode::kList: break;
  }
  bool found = false;
  for (const auto& t : s.targets) {
    if (key == t) return true;  // named exactly: PEFT skips the layer filter
    found = found || key.ends_with("." + t);
  }
  if (found && s.use_layer_indexes) return layer_selected(s, key);
  return found;
}

struct RankScale {
  int rank;
  double alpha;
  std::string rank_from;  // for messages: "r" or "rank_pattern['k']"
};

Result<RankScale> rank_and_alpha(const LoraSpec& s, const std::string& key) {
  RankScale rs{s.r, s.alpha, "r"};
  for (size_t i = 0; i < s.rank_keys.size(); ++i) {
    QV_ASSIGN_OR_RETURN(bool hit, s.rank_keys[i].second.full_match(key));
    if (hit) {
      rs.rank = s.rank_values[i];
      rs.rank_from = "rank_pattern['" + s.rank_keys[i].first + "']";
      break;
    }
  }
  for (size_t i = 0; i < s.alpha_keys.size(); ++i) {
    QV_ASSIGN_OR_RETURN(bool hit, s.alpha_keys[i].second.full_match(key));
    if (hit) {
      rs.alpha = s.alpha_values[i];
      break;
    }
  }
  return rs;
}

// A tensor name "base_model.model.<module>.lora_<A|B>[.default].weight", resolved to its module.
struct TensorKey {
  int64_t layer = 0;
  LoraTarget target = LoraTarget::kQ;
  bool is_a = true;
};

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
    std::optional<LoraTarget> t = target_from_name(p[6]);
    if (!t) return Status::error("tensor " + tname + " is for unknown module '" + p[6] + "' (supported: " + supported_targets() + ")");
    if (target_parent(*t) != p[5]) return Status::error("tensor " + tname + " has " + p[6] + " under " + p[5]);
    TensorKey k;
    QV_ASSIGN_OR_RETURN(k.layer, parse_index(p[4], "tensor " + tname));
    k.target = *t;
    k.is_a = p[7] == "lora_A";
    if (k.layer >= num_layers)
      return Status::error("tensor " + tname + " is for layer " + p[4] + " but the base model has " +
                           std::to_string(num_layers) + " layers (adapter made for another model?)");
    return k;
  }
  if (is_embedding_name(tname))
    return Status::error("tensor " + tname + ": LoRA on embed_tokens / lm_head is not supported");
  return Status::error("unexpected tensor " + tname + " (expected base_model.model.model.layers.N.<self_attn|mlp>.<proj>.lora_A.weight / lora_B.weight)");
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
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
    return Status::error("tensor " + tname + " has shape " + shape_str(info.shape) + ", expected " +
                         shape_str(expected) + " for this base model (adapter made for another model?)");
  return Status::error("tensor " + tname + " has shape " + shape_str(info.shape) + ", expected " + shape_str(expected) +
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

Result<LoraAdapter> load_impl(const std::string& dir, const std::string& name, const ModelConfig& base,
                              int max_lora_rank, const std::vector<std::string>& allowlist) {
  QV_ASSIGN_OR_RETURN(AdapterFiles files, open_adapter_files(dir, allowlist));
  const AdapterWeights& file = files.weights;
  OJson config;
  try {
    config = OJson::parse(files.config_text);
  } catch (const nlohmann::json::parse_error& e) {
    return Status::error("adapter_config.json is not valid JSON: " + json_parse_error_text(e));
  }
  QV_ASSIGN_OR_RETURN(std::optional<PeftVocab> peft_vocab, load_peft_vocab(config, file.tensors(), base));
  const std::vector<std::string> vocab_tensors = peft_vocab ? peft_vocab->tensors : std::vector<std::string>();
  const int64_t resized = peft_vocab ? std::max<int64_t>(0, peft_vocab->replaced_vocab - base.vocab_size) : 0;
  QV_ASSIGN_OR_RETURN(std::optional<AddedVocab> added, load_added_vocab(dir, base, resized));
  QV_ASSIGN_OR_RETURN(AdapterVocab vocab, resolve_adapter_vocab(std::move(added), std::move(peft_vocab), base));
  Result<LoraSpec> parsed = Status::error("unparsed");
  try {
    parsed = parse_spec(config, !vocab_tensors.empty());
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

  struct Pair {
    const TensorInfo* a = nullptr;
    const TensorInfo* b = nullptr;
    std::string a_name, b_name;
  };
  const int64_t num_layers = base.num_layers;
  std::vector<std::array<Pair, kNumLoraTargets>> found(static_cast<size_t>(num_layers));
  for (const auto& [tname, info] : file.tensors()) {
    if (std::find(vocab_tensors.begin(), vocab_tensors.end(), tname) != vocab_tensors.end()) continue;
    QV_ASSIGN_OR_RETURN(TensorKey k, parse_tensor_name(tname, num_layers));
    Pair& p = found[k.layer][static_cast<int>(k.target)];
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
      QV_ASSIGN_OR_RETURN(bool targeted, is_targeted(spec, key));
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
      QV_ASSIGN_OR_RETURN(const RankScale rs, rank_and_alpha(spec, key));
      const int64_t in = lora_target_in(base, target), out = lora_target_out(base, target);
      QV_RETURN_IF_ERROR(check_shape(p.a_name, *p.a, {rs.rank, in}, 0, rs));
      QV_RETURN_IF_ERROR(check_shape(p.b_name, *p.b, {out, rs.rank}, 1, rs));
      const double scale = spec.rslora ? rs.alpha / std::sqrt(static_cast<double>(rs.rank)) : rs.alpha / rs.rank;
      LoraModule m;
      m.rank = rs.rank;
      QV_ASSIGN_OR_RETURN(m.a, to_f32(p.a_name, *p.a, 1.0));    // [rank, in]
      QV_ASSIGN_OR_RETURN(m.b, to_f32(p.b_name, *p.b, scale));  // [out, rank]
      adapter.max_rank = std::max(adapter.max_rank, m.rank);
      adapter.layers[l][t] = std::move(m);
      ++num_modules;
    }
  }
  adapter.vocab = std::move(vocab);
  if (num_modules == 0 && adapter.vocab.empty())
    return Status::error("adapter_config.json targets no module of this base model (target_modules " +
                         (config.contains("target_modules") ? config["target_modules"].dump() : std::string("null")) + ")");
  return adapter;
}

}  // namespace

Result<LoraAdapter> load_peft_adapter(const std::string& dir, const std::string& name, const ModelConfig& base,
                                      int max_lora_rank, const std::vector<std::string>& allowlist) {
  Result<LoraAdapter> r = Status::error("not loaded");
  try {
    r = load_impl(dir, name, base, max_lora_rank, allowlist);
  } catch (const std::exception& e) {
    // A file is outside input: whatever a bad one trips (a JSON type error, an allocation
    // sized from it) is this load's error, never the caller's crash.
    r = Status::error(std::string("cannot be loaded: ") + e.what());
  }
  if (!r) return r.status().with_context("LoRA adapter '" + name + "' (" + dir + ")");
  return r;
}

}  // namespace quiver
