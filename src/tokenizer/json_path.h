// Small helpers for reading tokenizer.json / tokenizer_config.json fields with errors that
// name the file and JSON path of the offending field (e.g. "pre_tokenizer.pretokenizers[1]").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace quiver::json_path {

using nlohmann::json;

inline std::string child(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}
inline std::string index(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

// Token ids index dense tables (id -> token), so an id is bounded before anything is
// sized by it; real vocabularies stay below a million.
constexpr int64_t kMaxTokenId = (int64_t{1} << 22) - 1;

// tokenizer.json components nest (Sequence of Sequence ...) and are parsed recursively,
// so a file is checked against this depth (core/json_nesting.h) before it is parsed.
constexpr int kMaxNesting = 256;

inline Status error(const std::string& path, const std::string& message) {
  return Status::error(path + ": " + message);
}

// The "type" string of a component object.
Result<std::string> type_of(const json& j, const std::string& path);

// Optional typed fields: absent or null gives `fallback`; a wrong type is an error.
Result<bool> get_bool(const json& j, const std::string& key, const std::string& path, bool fallback);
Result<std::string> get_string(const json& j, const std::string& key, const std::string& path,
                               const std::string& fallback);
Result<int64_t> get_int(const json& j, const std::string& key, const std::string& path, int64_t fallback);
// Required fields.
Result<std::string> require_string(const json& j, const std::string& key, const std::string& path);
Result<const json*> require(const json& j, const std::string& key, const std::string& path);

}  // namespace quiver::json_path
