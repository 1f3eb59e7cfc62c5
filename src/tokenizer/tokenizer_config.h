// TokenizerConfig: what tokenizer_config.json (and chat_template.jinja / chat_template.json)
// contribute to a tokenizer, and the bounded JSON reader every tokenizer file goes through.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace quiver {

struct TokenizerConfig {
  std::string bos_token, eos_token;  // "" when unset
  std::optional<bool> add_bos_token, add_eos_token;
  std::optional<std::string> chat_template;
};

// Reads a JSON file after checking its nesting depth (json_path::kMaxNesting), so a hostile
// file cannot exhaust the stack of the recursive parsers. Errors name the path.
Result<nlohmann::json> read_json_file(const std::filesystem::path& path);

// bos_token / eos_token style fields: a string, an AddedToken object {"content": ...}, or
// null / absent ("").
Result<std::string> special_token_string(const nlohmann::json& config, const std::string& key);

// DIR/tokenizer_config.json when present; the chat template from DIR/chat_template.jinja wins
// over DIR/chat_template.json, which wins over the config's "chat_template" (transformers'
// order). A folder with none of these gives an empty config.
Result<TokenizerConfig> read_tokenizer_config(const std::filesystem::path& dir);

}  // namespace quiver
