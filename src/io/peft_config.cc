// adapter_config.json read the way PEFT's LoraModel reads it (peft_config.h).
#include "io/peft_config.h"

#include <charconv>
#include <cmath>
#include <limits>

namespace quiver::peft {

std::optional<LoraTarget> target_from_name(const std::string& s) {
  for (int i = 0; i < kNumLoraTargets; ++i)
    if (s == lora_target_name(static_cast<LoraTarget>(i))) return static_cast<LoraTarget>(i);
  return std::nullopt;
}

std::string supported_targets() {
  std::string s;
  for (int i = 0; i < kNumLoraTargets; ++i) s += std::string(lora_target_name(static_cast<LoraTarget>(i))) + ", ";
  return s + "embed_tokens, lm_head";
}

namespace {

bool is_vocab_module(const std::string& last) { return last == "embed_tokens" || last == "lm_head"; }

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

}  // namespace

Result<int64_t> parse_index(const std::string& digits, const std::string& where) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc() || end != digits.data() + digits.size() || digits.empty())
    return Status::error(where + ": layer index " + digits.substr(0, 24) + " is out of range");
  return v;
}

namespace {

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
  if (target_from_name(last) || is_vocab_module(last)) return Status::ok();
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

}  // namespace

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
  QV_ASSIGN_OR_RETURN(s.ensure_weight_tying, field_or(c, "ensure_weight_tying", false));
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

namespace {

Result<bool> layer_selected(const LoraSpec& s, const std::string& key) {
  for (const auto& re : s.layers_patterns) {
    QV_ASSIGN_OR_RETURN(std::optional<std::string> digits, re.prefix_match(key, 1));
    if (!digits) continue;
    QV_ASSIGN_OR_RETURN(int64_t layer, parse_index(*digits, key));
    return s.layers.count(layer) > 0;
  }
  return false;
}

}  // namespace

Result<bool> is_targeted(const LoraSpec& s, const std::string& key) {
  if (s.exclude_regex) {
    QV_ASSIGN_OR_RETURN(bool excluded, s.exclude_regex->full_match(key));
    if (excluded) return false;
  }
  for (const auto& e : s.exclude_list)
    if (key == e || key.ends_with("." + e)) return false;
  switch (s.mode) {
    case LoraSpec::Mode::kRegex: return s.target_regex->full_match(key);  // no layer filter, as PEFT
    case LoraSpec::Mode::kAllLinear:  // every projection, never the embedding or lm_head
      return key != kEmbedModule && key != kLmHeadModule;
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

double RankScale::scale(bool rslora) const {
  return rslora ? alpha / std::sqrt(static_cast<double>(rank)) : alpha / rank;
}

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

}  // namespace quiver::peft
