// Strict JSON field access; see json_util.h.
#include "io/json_util.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

namespace quiver {

namespace {

std::string quoted(std::string_view key) {
  std::string s;
  s.reserve(key.size() + 2);
  s.append(1, '\'').append(key).append(1, '\'');
  return s;
}

Status wrong_type(std::string_view field, const char* wanted, const Json& v) {
  return Status::error("field " + quoted(field) + " must be " + wanted + ", got " + json_describe(v));
}

}  // namespace

Result<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::error("cannot open " + path + ": " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::error("cannot read " + path);
  return ss.str();
}

std::string json_error_text(const Json::exception& e) {
  // nlohmann's what() quotes the file's own bytes ("last read: '<bytes>'", "number overflow
  // parsing '<bytes>'"), which must not reach a client (the file may be a link to something
  // it should not see).
  if (const auto* p = dynamic_cast<const Json::parse_error*>(&e)) return "syntax error at byte " + std::to_string(p->byte);
  if (e.id == 406) return "a number out of range";
  return "error " + std::to_string(e.id);
}

Result<Json> parse_json_object(const std::string& text, const std::string& what) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {
    return Status::error(what + ": not valid JSON (" + json_error_text(e) + ")");
  }
  if (!j.is_object()) return Status::error(what + ": expected a JSON object at the top level, got " + json_describe(j));
  return j;
}

std::string json_describe(const Json& v) {
  std::string text = v.dump();
  if (text.size() > 48) text = text.substr(0, 45) + "...";
  const char* kind = "a value";
  switch (v.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      kind = "a bool";
      break;
    case Json::value_t::string:
      kind = "a string";
      break;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      kind = "an integer";
      break;
    case Json::value_t::number_float:
      kind = "a float";
      break;
    case Json::value_t::array:
      kind = "a list";
      break;
    case Json::value_t::object:
      kind = "an object";
      break;
    default:
      break;
  }
  return text + " (" + kind + ")";
}

bool json_has(const Json& obj, std::string_view key) {
  auto it = obj.find(key);
  return it != obj.end() && !it->is_null();
}

Result<int64_t> json_as_int(const Json& v, std::string_view field) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return Status::error("field " + quoted(field) + " is out of range: " + v.dump());
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  return wrong_type(field, "an integer", v);
}

Result<double> json_as_number(const Json& v, std::string_view field) {
  if (!v.is_number()) return wrong_type(field, "a number", v);
  return v.get<double>();
}

Result<int64_t> json_int(const Json& obj, std::string_view key) {
  if (!json_has(obj, key)) return Status::error("missing required field " + quoted(key));
  return json_as_int(obj.at(std::string(key)), key);
}

Result<double> json_number(const Json& obj, std::string_view key) {
  if (!json_has(obj, key)) return Status::error("missing required field " + quoted(key));
  return json_as_number(obj.at(std::string(key)), key);
}

Result<std::string> json_string(const Json& obj, std::string_view key) {
  if (!json_has(obj, key)) return Status::error("missing required field " + quoted(key));
  const Json& v = obj.at(std::string(key));
  if (!v.is_string()) return wrong_type(key, "a string", v);
  return v.get<std::string>();
}

Result<int64_t> json_int_or(const Json& obj, std::string_view key, int64_t fallback) {
  if (!json_has(obj, key)) return fallback;
  return json_as_int(obj.at(std::string(key)), key);
}

Result<double> json_number_or(const Json& obj, std::string_view key, double fallback) {
  if (!json_has(obj, key)) return fallback;
  return json_as_number(obj.at(std::string(key)), key);
}

Result<bool> json_bool_or(const Json& obj, std::string_view key, bool fallback) {
  if (!json_has(obj, key)) return fallback;
  const Json& v = obj.at(std::string(key));
  if (!v.is_boolean()) return wrong_type(key, "true or false", v);
  return v.get<bool>();
}

Result<std::string> json_string_or(const Json& obj, std::string_view key, const std::string& fallback) {
  if (!json_has(obj, key)) return fallback;
  return json_string(obj, key);
}

Result<std::vector<int64_t>> json_int_or_int_list(const Json& obj, std::string_view key) {
  std::vector<int64_t> ids;
  if (!json_has(obj, key)) return ids;
  const Json& v = obj.at(std::string(key));
  auto add = [&](const Json& e) -> Status {
    Result<int64_t> id = json_as_int(e, key);
    if (!id) return wrong_type(key, "an integer, a list of integers or null", v);
    if (*id < 0) return Status::error("field " + quoted(key) + " holds a negative token id: " + v.dump());
    ids.push_back(*id);
    return Status::ok();
  };
  if (v.is_array()) {
    for (const Json& e : v) QV_RETURN_IF_ERROR(add(e));
  } else {
    QV_RETURN_IF_ERROR(add(v));
  }
  return ids;
}

Result<std::vector<std::pair<int32_t, float>>> json_logit_bias(const Json& v) {
  if (!v.is_object()) return Status::error("logit_bias must be an object {\"token id\": bias}, got " + json_describe(v));
  std::vector<std::pair<int32_t, float>> out;
  for (const auto& [key, value] : v.items()) {
    int64_t id = 0;
    bool ok = !key.empty() && key.size() <= 10;
    for (char c : key) ok = ok && c >= '0' && c <= '9';
    if (ok) id = std::stoll(key);
    if (!ok || id > std::numeric_limits<int32_t>::max()) return Status::error("logit_bias key '" + key + "' is not a token id");
    if (!value.is_number()) return Status::error("logit_bias['" + key + "'] must be a number, got " + json_describe(value));
    out.emplace_back(static_cast<int32_t>(id), value.get<float>());
  }
  return out;
}

}  // namespace quiver
