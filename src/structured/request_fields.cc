#include "structured/request_fields.h"

#include <array>

namespace quiver::structured {

namespace {

using Json = nlohmann::ordered_json;
using Kind = StructuredOutputSpec::Kind;

constexpr std::array<const char*, 8> kFields = {"structured_outputs", "guided_json", "guided_regex", "guided_choice",
                                                "guided_grammar", "guided_whitespace_pattern",
                                                "guided_decoding_backend", "response_format"};

// A schema given as an object or as its JSON text.
Result<std::string> schema_text(const Json& v, const std::string& field) {
  if (v.is_object() || v.is_boolean()) return v.dump();
  if (v.is_string()) {
    auto parsed = Json::parse(v.get<std::string>(), nullptr, false);
    if (parsed.is_discarded() || !(parsed.is_object() || parsed.is_boolean()))
      return Status::error(field + " must be a JSON schema (an object, or its JSON text)");
    return parsed.dump();
  }
  return Status::error(field + " must be a JSON schema (an object, or its JSON text)");
}

Result<std::vector<std::string>> choices(const Json& v, const std::string& field) {
  if (!v.is_array() || v.empty()) return Status::error(field + " must be a non-empty list of strings");
  std::vector<std::string> out;
  for (const Json& c : v) {
    if (!c.is_string()) return Status::error(field + " must be a non-empty list of strings");
    out.push_back(c.get<std::string>());
  }
  return out;
}

Status regex_of(const Json& v, const std::string& field, StructuredOutputSpec* spec) {
  if (!v.is_string()) return Status::error(field + " must be a string");
  spec->kind = Kind::kRegex;
  spec->regex = v.get<std::string>();
  return Status::ok();
}

// One constraint from `key` = `v`; `field` names it in messages.
Status one(const std::string& key, const Json& v, const std::string& field, StructuredOutputSpec* spec) {
  if (key == "json") {
    auto s = schema_text(v, field);
    if (!s.is_ok()) return s.status();
    spec->kind = Kind::kJson;
    spec->json_schema = s.value();
    return Status::ok();
  }
  if (key == "regex") return regex_of(v, field, spec);
  if (key == "choice") {
    auto c = choices(v, field);
    if (!c.is_ok()) return c.status();
    spec->kind = Kind::kChoice;
    spec->choice = std::move(c).value();
    return Status::ok();
  }
  if (key == "json_object") {
    if (!v.is_boolean()) return Status::error(field + " must be a boolean");
    if (v.get<bool>()) spec->kind = Kind::kJsonObject;
    return Status::ok();
  }
  return Status::error(field + " is not supported (supported: json, regex, choice, json_object)");
}

Status structured_outputs(const Json& v, StructuredOutputSpec* spec) {
  if (!v.is_object()) return Status::error("structured_outputs must be an object");
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it.value().is_null()) continue;
    const std::string& key = it.key();
    const std::string field = "structured_outputs." + key;
    // Options, not constraints. quiver has one backend, so it never falls back; the two
    // disable_* options change the grammar, and their default (false) is what it does.
    if (key == "disable_fallback" || key == "disable_any_whitespace" || key == "disable_additional_properties") {
      if (!it.value().is_boolean()) return Status::error(field + " must be a boolean");
      if (key != "disable_fallback" && it.value().get<bool>())
        return Status::error(field + "=true is not supported (only false)");
      continue;
    }
    if (key == "whitespace_pattern")
      return Status::error(field + " is not supported (JSON whitespace is fixed: up to 4 of space, tab, newline)");
    if (spec->active()) return Status::error("structured_outputs: give only one of json, regex, choice, json_object");
    QV_RETURN_IF_ERROR(one(key, it.value(), field, spec));
  }
  return Status::ok();
}

Status response_format(const Json& v, StructuredOutputSpec* spec) {
  const char* shape = "response_format must be {\"type\": \"text\" | \"json_object\" | \"json_schema\", ...}";
  if (!v.is_object() || !v.contains("type") || !v["type"].is_string()) return Status::error(shape);
  const std::string type = v["type"].get<std::string>();
  for (auto it = v.begin(); it != v.end(); ++it)
    if (it.key() != "type" && !(type == "json_schema" && it.key() == "json_schema"))
      return Status::error("response_format." + it.key() + " is not supported with type '" + type + "'");
  if (type == "text") return Status::ok();
  if (type == "json_object") {
    spec->kind = Kind::kJsonObject;
    return Status::ok();
  }
  if (type != "json_schema") return Status::error("response_format type '" + type + "' is not supported (text, json_object, json_schema)");
  if (!v.contains("json_schema") || !v["json_schema"].is_object())
    return Status::error("response_format.json_schema must be an object with a schema");
  const Json& js = v["json_schema"];
  for (auto it = js.begin(); it != js.end(); ++it) {
    const std::string& k = it.key();
    if (k != "name" && k != "description" && k != "schema" && k != "strict")
      return Status::error("response_format.json_schema." + k + " is not supported");
  }
  if (!js.contains("schema")) return Status::error("response_format.json_schema.schema is required");
  return one("json", js["schema"], "response_format.json_schema.schema", spec);
}

}  // namespace

bool is_structured_field(const std::string& key) {
  for (const char* f : kFields)
    if (key == f) return true;
  return false;
}

bool has_structured_fields(const nlohmann::json& body) {
  for (const char* f : kFields)
    if (body.contains(f) && !body[f].is_null()) return true;
  return false;
}

Result<StructuredOutputSpec> read_structured_fields(const nlohmann::ordered_json& body, std::string* field) {
  StructuredOutputSpec spec;
  std::string first;  // the field that set the constraint
  for (const char* f : kFields) {
    auto it = body.find(f);
    if (it == body.end() || it->is_null()) continue;
    const std::string key = f;
    *field = key;
    if (key == "guided_grammar") return Status::error("guided_grammar is not supported (context-free grammars are not implemented)");
    if (key == "guided_whitespace_pattern")
      return Status::error("guided_whitespace_pattern is not supported (JSON whitespace is fixed: up to 4 of space, tab, newline)");
    if (key == "guided_decoding_backend")
      return Status::error("guided_decoding_backend is not supported (quiver has a single structured-output backend)");
    StructuredOutputSpec next;
    Status s = key == "structured_outputs" ? structured_outputs(*it, &next)
               : key == "response_format"  ? response_format(*it, &next)
               : key == "guided_json"      ? one("json", *it, key, &next)
               : key == "guided_regex"     ? one("regex", *it, key, &next)
                                           : one("choice", *it, key, &next);
    if (!s.is_ok()) return s;
    if (!next.active()) continue;
    if (spec.active()) return Status::error("only one structured output constraint per request: " + first + " and " + key + " both give one");
    spec = std::move(next);
    first = key;
  }
  field->clear();
  return spec;
}

}  // namespace quiver::structured
