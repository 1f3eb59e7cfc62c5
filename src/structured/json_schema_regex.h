// JSON Schema -> regex (regex_parser.h's subset), so a schema compiles to the same byte
// automaton as any other constraint. Supported: type (a name or a list of them), object
// properties/required/additionalProperties (false, or absent: only the listed properties,
// in the order the schema lists them), array items/minItems/maxItems, string
// minLength/maxLength, enum, const, anyOf, and $ref into #/$defs or #/definitions
// (non-recursive). An empty schema, or an object without properties, takes any JSON value
// nested at most kAnyJsonDepth deep. Descriptive keywords (title, description, default,
// examples, $schema, $id) are ignored; any other keyword is refused by name, since
// dropping it would let through output the schema forbids.
//
// Whitespace between JSON tokens is bounded (at most kMaxWhitespace of space, tab,
// newline), so a model cannot spend its whole budget on blanks; strings allow any
// character JSON allows.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace quiver::structured {

inline constexpr int kMaxWhitespace = 4;
inline constexpr int kAnyJsonDepth = 3;

// Ordered, so properties keep the order the schema text gives them.
Result<std::string> json_schema_to_regex(const nlohmann::ordered_json& schema);
// Any JSON object (response_format json_object), nested at most kAnyJsonDepth deep.
std::string any_json_object_regex();

}  // namespace quiver::structured
