// Strict JSON field access for the files quiver reads (config.json, safetensors headers,
// index files, adapter_config.json): every accessor says which field was wrong and what
// it held, so a bad file gives an error a user can act on. Integers are never coerced from
// floats, strings or bools ("32000.0" and "32000" are errors, not 32000).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace quiver {

using Json = nlohmann::json;

// The whole file as bytes; the error names the path and the OS reason.
Result<std::string> read_text_file(const std::string& path);

// Why a text is not valid JSON, without quoting the input: "syntax error at byte N", or "a
// number out of range" (nlohmann's out_of_range 406, thrown for a literal such as 1e999).
// Callers catch Json::exception, the base of both: catching parse_error alone let a number
// literal's overflow escape as an uncaught exception.
std::string json_error_text(const Json::exception& e);

// Parses `text`, which must hold a JSON object. `what` (e.g. a file name) prefixes errors.
Result<Json> parse_json_object(const std::string& text, const std::string& what);

// A short description of a value for messages: `32000.0 (a float)`, `"bf16" (a string)`.
std::string json_describe(const Json& v);

// True when `obj` (an object) has `key` with a non-null value. JSON null means "not given"
// everywhere in HF configs (e.g. "head_dim": null), so every *_or accessor treats it so.
bool json_has(const Json& obj, std::string_view key);

// Converts a value already taken out of an object; `field` names it in messages.
Result<int64_t> json_as_int(const Json& v, std::string_view field);
Result<double> json_as_number(const Json& v, std::string_view field);  // int or float

// Required fields: a missing or null field is an error "missing required field 'key'".
Result<int64_t> json_int(const Json& obj, std::string_view key);
Result<double> json_number(const Json& obj, std::string_view key);
Result<std::string> json_string(const Json& obj, std::string_view key);

// Optional fields: missing or null gives `fallback`; a present value of the wrong type is
// an error naming the field.
Result<int64_t> json_int_or(const Json& obj, std::string_view key, int64_t fallback);
Result<double> json_number_or(const Json& obj, std::string_view key, double fallback);
Result<bool> json_bool_or(const Json& obj, std::string_view key, bool fallback);
Result<std::string> json_string_or(const Json& obj, std::string_view key, const std::string& fallback);
// The string at `key` of an object (json or ordered_json), or `fallback` when it is absent
// or not a string: for request fields compared against names, where basic_json::value()
// would throw on a number and turn a bad request into a server error.
template <class AnyJson>
std::string string_field_or(const AnyJson& obj, const char* key, const std::string& fallback) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->template get<std::string>() : fallback;
}

// An int, a list of ints, or null/missing (empty result): the shape of HF token-id fields
// such as eos_token_id. Negative ids are errors.
Result<std::vector<int64_t>> json_int_or_int_list(const Json& obj, std::string_view key);

// OpenAI's logit_bias object {"token id": bias, ...} as (id, bias) pairs. Keys must be
// non-negative decimal integers, values numbers; the vocabulary and [-100, 100] range
// checks are SamplingParams::validate's.
Result<std::vector<std::pair<int32_t, float>>> json_logit_bias(const Json& v);

}  // namespace quiver
