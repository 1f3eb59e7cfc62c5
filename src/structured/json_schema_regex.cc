#include "structured/json_schema_regex.h"

#include <set>

#include "structured/regex_parser.h"

namespace quiver::structured {

namespace {

using Json = nlohmann::ordered_json;

const std::string kWs = "[ \\t\\n]{0," + std::to_string(kMaxWhitespace) + "}";
// One character inside a JSON string: anything but a quote, a backslash or a control
// character, or an escape.
const std::string kStringChar = R"((?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}))";
const std::string kString = "\"" + kStringChar + "*\"";
const std::string kInteger = "-?(?:0|[1-9][0-9]*)";
const std::string kNumber = kInteger + "(?:\\.[0-9]+)?(?:[eE][+-]?[0-9]{1,2})?";

std::string group(const std::string& r) { return "(?:" + r + ")"; }

std::string any_value(int depth);

std::string any_object(int depth) {
  const std::string pair = kString + kWs + ":" + kWs + any_value(depth - 1);
  return "\\{" + kWs + "(?:" + pair + "(?:" + kWs + "," + kWs + pair + ")*)?" + kWs + "\\}";
}

std::string any_array(int depth) {
  const std::string v = any_value(depth - 1);
  return "\\[" + kWs + "(?:" + v + "(?:" + kWs + "," + kWs + v + ")*)?" + kWs + "\\]";
}

std::string any_value(int depth) {
  std::string r = kString + "|" + kNumber + "|true|false|null";
  if (depth > 0) {
    r += "|";
    r += any_object(depth);
    r += "|";
    r += any_array(depth);
  }
  return group(r);
}

std::string literal(const Json& v) { return regex_escape(v.dump()); }

class Converter {
 public:
  explicit Converter(const Json& root) : root_(root) {}

  Result<std::string> convert(const Json& s, const std::string& path, int depth) {
    if (depth > 32) return Status::error(path + ": the schema nests (or refers to itself) too deeply");
    if (s.is_boolean()) {
      if (s.get<bool>()) return any_value(kAnyJsonDepth);
      return Status::error(path + ": the schema `false` allows nothing");
    }
    if (!s.is_object()) return Status::error(path + ": a schema must be an object");
    static const std::set<std::string> kKnown = {"type", "properties", "required", "additionalProperties", "items",
                                                 "minItems", "maxItems", "minLength", "maxLength", "enum", "const",
                                                 "anyOf", "$ref", "$defs", "definitions", "title", "description",
                                                 "default", "examples", "$schema", "$id"};
    for (auto it = s.begin(); it != s.end(); ++it)
      if (!kKnown.count(it.key()))
        return Status::error(path + ": JSON schema keyword '" + it.key() + "' is not supported");
    if (s.contains("$ref")) return ref(s, path, depth);
    if (s.contains("const")) return literal(s["const"]);
    if (s.contains("enum")) {
      const Json& e = s["enum"];
      if (!e.is_array() || e.empty()) return Status::error(path + ".enum: must be a non-empty array");
      std::string r;
      for (const Json& v : e) {
        if (!r.empty()) r += "|";
        r += literal(v);
      }
      return group(r);
    }
    if (s.contains("anyOf")) {
      const Json& a = s["anyOf"];
      if (!a.is_array() || a.empty()) return Status::error(path + ".anyOf: must be a non-empty array");
      std::string r;
      for (size_t i = 0; i < a.size(); ++i) {
        auto sub = convert(a[i], path + ".anyOf[" + std::to_string(i) + "]", depth + 1);
        if (!sub.is_ok()) return sub;
        r += (i ? "|" : "") + sub.value();
      }
      return group(r);
    }
    if (!s.contains("type")) return any_value(kAnyJsonDepth);
    const Json& t = s["type"];
    if (t.is_array()) {
      if (t.empty()) return Status::error(path + ".type: must not be empty");
      std::string r;
      for (const Json& one : t) {
        if (!one.is_string()) return Status::error(path + ".type: entries must be strings");
        auto sub = typed(s, one.get<std::string>(), path, depth);
        if (!sub.is_ok()) return sub;
        if (!r.empty()) r += "|";
        r += sub.value();
      }
      return group(r);
    }
    if (!t.is_string()) return Status::error(path + ".type: must be a string or an array of strings");
    return typed(s, t.get<std::string>(), path, depth);
  }

 private:
  Result<std::string> ref(const Json& s, const std::string& path, int depth) {
    const Json& r = s["$ref"];
    if (!r.is_string()) return Status::error(path + ".$ref: must be a string");
    const std::string target = r.get<std::string>();
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string p = prefix;
      if (target.rfind(p, 0) != 0) continue;
      const std::string section = p.substr(2, p.size() - 3);
      const std::string name = target.substr(p.size());
      if (root_.contains(section) && root_[section].is_object() && root_[section].contains(name))
        return convert(root_[section][name], target, depth + 1);
    }
    return Status::error(path + ".$ref: '" + target + "' is not a #/$defs/ or #/definitions/ entry of this schema");
  }

  Result<int> count(const Json& s, const char* key, int fallback, const std::string& path) {
    if (!s.contains(key)) return fallback;
    const Json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxRepeat)
      return Status::error(path + "." + key + ": must be an integer in [0, " + std::to_string(kMaxRepeat) + "]");
    return static_cast<int>(v.get<int64_t>());
  }

  static std::string repeat(int lo, int hi) {
    std::string r = "{";
    r += std::to_string(lo);
    r += ",";
    if (hi >= 0) r += std::to_string(hi);
    return r + "}";
  }

  Result<std::string> typed(const Json& s, const std::string& type, const std::string& path, int depth) {
    if (type == "string") {
      auto lo = count(s, "minLength", 0, path);
      if (!lo.is_ok()) return lo.status();
      auto hi = count(s, "maxLength", -1, path);
      if (!hi.is_ok()) return hi.status();
      if (lo.value() == 0 && hi.value() < 0) return kString;
      if (hi.value() >= 0 && hi.value() < lo.value()) return Status::error(path + ": maxLength is below minLength");
      return "\"" + kStringChar + repeat(lo.value(), hi.value()) + "\"";
    }
    if (type == "integer") return kInteger;
    if (type == "number") return kNumber;
    if (type == "boolean") return std::string("(?:true|false)");
    if (type == "null") return std::string("null");
    if (type == "array") return array(s, path, depth);
    if (type == "object") return object(s, path, depth);
    return Status::error(path + ".type: unknown type '" + type + "'");
  }

  Result<std::string> array(const Json& s, const std::string& path, int depth) {
    std::string item = any_value(kAnyJsonDepth - 1);
    if (s.contains("items")) {
      auto r = convert(s["items"], path + ".items", depth + 1);
      if (!r.is_ok()) return r;
      item = group(r.value());
    }
    auto lo = count(s, "minItems", 0, path);
    if (!lo.is_ok()) return lo.status();
    auto hi = count(s, "maxItems", -1, path);
    if (!hi.is_ok()) return hi.status();
    const int a = lo.value(), b = hi.value();
    if (b >= 0 && b < a) return Status::error(path + ": maxItems is below minItems");
    const std::string open = "\\[" + kWs, close = kWs + "\\]";
    if (b == 0) return open + close;
    const std::string more = "(?:" + kWs + "," + kWs + item + ")" + repeat(a > 0 ? a - 1 : 0, b < 0 ? -1 : b - 1);
    const std::string body = item + more;
    return open + (a == 0 ? "(?:" + body + ")?" : body) + close;
  }

  Result<std::string> object(const Json& s, const std::string& path, int depth) {
    if (s.contains("additionalProperties")) {
      const Json& ap = s["additionalProperties"];
      const bool closed = ap.is_boolean() && !ap.get<bool>();
      if (!closed && s.contains("properties"))
        return Status::error(path + ".additionalProperties: only false is supported alongside properties");
    }
    if (!s.contains("properties")) return any_object(kAnyJsonDepth);
    const Json& props = s["properties"];
    if (!props.is_object()) return Status::error(path + ".properties: must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return Status::error(path + ".required: must be an array of names");
      for (const Json& r : s["required"]) {
        if (!r.is_string() || !props.contains(r.get<std::string>()))
          return Status::error(path + ".required: '" + r.dump() + "' is not one of the properties");
        required.insert(r.get<std::string>());
      }
    }
    // pairs[i] is "key": value for the i-th property, in the schema's order.
    std::vector<std::string> pairs;
    std::vector<bool> needed;
    for (auto it = props.begin(); it != props.end(); ++it) {
      auto v = convert(it.value(), path + ".properties." + it.key(), depth + 1);
      if (!v.is_ok()) return v;
      pairs.push_back(literal(Json(it.key())) + kWs + ":" + kWs + group(v.value()));
      needed.push_back(required.count(it.key()) > 0);
    }
    // after(i): properties i.. when one came before (each with a leading comma);
    // first(i): the same when none came before.
    const std::string comma = kWs + "," + kWs;
    const size_t n = pairs.size();
    std::vector<std::string> after(n + 1), first(n + 1);
    for (size_t i = n; i-- > 0;) {
      const std::string with = comma + pairs[i];
      after[i] = needed[i] ? with + after[i + 1] : "(?:" + with + ")?" + after[i + 1];
      first[i] = needed[i] ? pairs[i] + after[i + 1]
                           : "(?:" + pairs[i] + after[i + 1] + (first[i + 1].empty() ? ")?" : "|" + first[i + 1] + ")");
    }
    return "\\{" + kWs + first[0] + kWs + "\\}";
  }

  const Json& root_;
};

}  // namespace

Result<std::string> json_schema_to_regex(const nlohmann::ordered_json& schema) { return Converter(schema).convert(schema, "schema", 0); }

std::string any_json_object_regex() { return any_object(kAnyJsonDepth); }

}  // namespace quiver::structured
