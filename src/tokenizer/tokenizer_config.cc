// Reading tokenizer_config.json and the chat template files into a TokenizerConfig.
#include "tokenizer/tokenizer_config.h"

#include "core/json_nesting.h"
#include "io/json_util.h"
#include "tokenizer/json_path.h"

namespace quiver {

using nlohmann::json;
namespace jp = json_path;
namespace fs = std::filesystem;

Result<json> read_json_file(const fs::path& path) {
  QV_ASSIGN_OR_RETURN(std::string text, read_text_file(path.string()));
  if (!json_nesting_within(text, jp::kMaxNesting))
    return Status::error(path.string() + ": nested more than " + std::to_string(jp::kMaxNesting) + " levels deep");
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::error(path.string() + ": not valid JSON");
  return j;
}

Result<std::string> special_token_string(const json& config, const std::string& key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) return jp::require_string(*it, "content", key);
  return jp::error(key, "expected a string or an object with \"content\"");
}

namespace {

Result<std::optional<bool>> optional_bool(const json& config, const std::string& key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::optional<bool>();
  if (!it->is_boolean()) return jp::error(key, "expected a boolean");
  return std::optional<bool>(it->get<bool>());
}

// "chat_template": a string, or a list of {"name", "template"} of which "default" is used.
Result<std::optional<std::string>> chat_template_source(const json& config) {
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (it->is_array()) {
    std::string names;
    for (size_t i = 0; i < it->size(); ++i) {
      const json& entry = (*it)[i];
      std::string path = jp::index("chat_template", i);
      QV_ASSIGN_OR_RETURN(std::string name, jp::require_string(entry, "name", path));
      QV_ASSIGN_OR_RETURN(std::string source, jp::require_string(entry, "template", path));
      if (name == "default") return std::optional<std::string>(source);
      names += (names.empty() ? "" : ", ") + name;
    }
    return jp::error("chat_template", "no template named 'default' (have: " + names + ")");
  }
  return jp::error("chat_template", "expected a string or a list of {name, template}");
}

}  // namespace

Result<TokenizerConfig> read_tokenizer_config(const fs::path& dir) {
  TokenizerConfig config;
  fs::path config_path = dir / "tokenizer_config.json";
  if (fs::exists(config_path)) {
    QV_ASSIGN_OR_RETURN(json j, read_json_file(config_path));
    auto in_file = [&](Status s) { return s.with_context(config_path.string()); };
    if (!j.is_object()) return in_file(Status::error("expected a JSON object"));
    auto bos = special_token_string(j, "bos_token");
    auto eos = special_token_string(j, "eos_token");
    auto add_bos = optional_bool(j, "add_bos_token");
    auto add_eos = optional_bool(j, "add_eos_token");
    auto chat = chat_template_source(j);
    for (const Status& s : {bos.status(), eos.status(), add_bos.status(), add_eos.status(), chat.status()}) {
      if (!s.is_ok()) return in_file(s);
    }
    config.bos_token = bos.value();
    config.eos_token = eos.value();
    config.add_bos_token = add_bos.value();
    config.add_eos_token = add_eos.value();
    config.chat_template = chat.value();
  }
  if (fs::path jinja = dir / "chat_template.jinja"; fs::exists(jinja)) {
    QV_ASSIGN_OR_RETURN(std::string source, read_text_file(jinja.string()));
    config.chat_template = std::move(source);
  } else if (fs::path chat_json = dir / "chat_template.json"; fs::exists(chat_json)) {
    QV_ASSIGN_OR_RETURN(json j, read_json_file(chat_json));
    auto source = chat_template_source(j);
    if (!source) return source.status().with_context(chat_json.string());
    if (source.value()) config.chat_template = source.value();
  }
  return config;
}

}  // namespace quiver
