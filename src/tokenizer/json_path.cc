// Typed, path-naming accessors for tokenizer JSON files.
#include "tokenizer/json_path.h"

namespace quiver::json_path {

Result<std::string> type_of(const json& j, const std::string& path) {
  if (!j.is_object()) return error(path, "expected an object");
  auto it = j.find("type");
  if (it == j.end() || !it->is_string()) return error(child(path, "type"), "missing or not a string");
  return it->get<std::string>();
}

Result<bool> get_bool(const json& j, const std::string& key, const std::string& path, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return error(child(path, key), "expected a boolean");
  return it->get<bool>();
}

Result<std::string> get_string(const json& j, const std::string& key, const std::string& path,
                               const std::string& fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_string()) return error(child(path, key), "expected a string");
  return it->get<std::string>();
}

Result<int64_t> get_int(const json& j, const std::string& key, const std::string& path, int64_t fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) return error(child(path, key), "expected an integer");
  return it->get<int64_t>();
}

Result<std::string> require_string(const json& j, const std::string& key, const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return error(child(path, key), "missing or not a string");
  return it->get<std::string>();
}

Result<const json*> require(const json& j, const std::string& key, const std::string& path) {
  auto it = j.find(key);
  if (it == j.end()) return error(child(path, key), "missing");
  return &*it;
}

}  // namespace quiver::json_path
