#include "io/generation_defaults.h"

#include <filesystem>

#include "io/json_util.h"

namespace quiver {

namespace {

Status read_number(const Json& j, const char* key, std::optional<double>* out) {
  if (!json_has(j, key)) return Status::ok();
  QV_ASSIGN_OR_RETURN(*out, json_as_number(j[key], key));
  return Status::ok();
}

Status read_int(const Json& j, const char* key, std::optional<int64_t>* out) {
  if (!json_has(j, key)) return Status::ok();
  QV_ASSIGN_OR_RETURN(*out, json_as_int(j[key], key));
  return Status::ok();
}

}  // namespace

std::string GenerationDefaults::describe() const {
  std::string s;
  auto add = [&](const char* name, const std::string& v) { s += (s.empty() ? "" : ", ") + std::string(name) + "=" + v; };
  auto num = [](double v) {
    std::string t = std::to_string(v);
    t.erase(t.find_last_not_of('0') + 1);
    if (!t.empty() && t.back() == '.') t.pop_back();
    return t;
  };
  if (temperature) add("temperature", num(*temperature));
  if (top_p) add("top_p", num(*top_p));
  if (top_k) add("top_k", std::to_string(*top_k));
  if (min_p) add("min_p", num(*min_p));
  if (repetition_penalty) add("repetition_penalty", num(*repetition_penalty));
  if (max_new_tokens) add("max_tokens", std::to_string(*max_new_tokens));
  return s.empty() ? "none" : s;
}

Result<GenerationDefaults> parse_generation_defaults(const std::string& text, const std::string& what) {
  QV_ASSIGN_OR_RETURN(Json j, parse_json_object(text, what));
  GenerationDefaults d;
  Status s = read_number(j, "temperature", &d.temperature);
  if (s.is_ok()) s = read_number(j, "top_p", &d.top_p);
  if (s.is_ok()) s = read_number(j, "min_p", &d.min_p);
  if (s.is_ok()) s = read_number(j, "repetition_penalty", &d.repetition_penalty);
  if (s.is_ok()) s = read_int(j, "top_k", &d.top_k);
  if (s.is_ok()) s = read_int(j, "max_new_tokens", &d.max_new_tokens);
  if (s.is_ok() && d.max_new_tokens && *d.max_new_tokens < 1)
    s = Status::error("max_new_tokens must be at least 1, got " + std::to_string(*d.max_new_tokens));
  if (!s.is_ok()) return s.with_context(what);
  return d;
}

namespace {

Result<GenerationDefaults> load_file(const std::string& setting, const std::string& model_dir) {
  namespace fs = std::filesystem;
  if (setting == "vllm") return GenerationDefaults{};
  const bool automatic = setting == "auto";
  const fs::path path = fs::path(automatic ? model_dir : setting) / "generation_config.json";
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    if (automatic) return GenerationDefaults{};
    return Status::error("--generation-config " + setting + ": no generation_config.json in that folder");
  }
  QV_ASSIGN_OR_RETURN(std::string text, read_text_file(path.string()));
  return parse_generation_defaults(text, path.string());
}

template <class T>
void over(std::optional<T>* base, const std::optional<T>& value) {
  if (value) *base = value;
}

}  // namespace

Result<GenerationDefaults> load_generation_defaults(const std::string& setting, const std::string& model_dir,
                                                    const std::string& override_json) {
  QV_ASSIGN_OR_RETURN(GenerationDefaults d, load_file(setting, model_dir));
  if (override_json.empty()) return d;
  QV_ASSIGN_OR_RETURN(GenerationDefaults o, parse_generation_defaults(override_json, "--override-generation-config"));
  over(&d.temperature, o.temperature);
  over(&d.top_p, o.top_p);
  over(&d.top_k, o.top_k);
  over(&d.min_p, o.min_p);
  over(&d.repetition_penalty, o.repetition_penalty);
  over(&d.max_new_tokens, o.max_new_tokens);
  return d;
}

}  // namespace quiver
