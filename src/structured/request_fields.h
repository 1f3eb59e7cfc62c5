// The request fields that ask for structured outputs, with vLLM's names and meanings:
//   structured_outputs: {"json": schema, "regex": str, "choice": [str], "json_object": true}
//   guided_json, guided_regex, guided_choice (the older names)
//   response_format: {"type": "text" | "json_object" | "json_schema",
//                     "json_schema": {"name", "description", "schema", "strict"}}
// At most one constraint per request. Grammars (guided_grammar, structured_outputs.grammar),
// structural tags, whitespace patterns and backend choices are refused by name.
// Shared by the server and `quiver generate` request lines.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "structured/structured_spec.h"

namespace quiver::structured {

// Whether `body` has any of the fields above (cheap: decides whether to read them at all).
bool has_structured_fields(const nlohmann::json& body);
bool is_structured_field(const std::string& key);

// The spec the fields ask for (kind kNone when none does). On error, `*field` is the
// top-level field at fault. `body` is ordered so schemas keep their properties' order.
Result<StructuredOutputSpec> read_structured_fields(const nlohmann::ordered_json& body, std::string* field);

}  // namespace quiver::structured
