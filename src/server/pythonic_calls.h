// Tool calls written as a Python list of calls, as Llama 3.2 and Llama 4 write them
// (vLLM's `pythonic` parser): [get_weather(city='Oslo', days=[1, 2]), get_time()].
// Arguments are keywords whose values are Python literals: strings, numbers, True, False,
// None, lists and dicts of them.
#pragma once

#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

namespace quiver {

// The calls of `text` when the whole text (outer blanks aside) is such a list: each
// {"name": ..., "arguments": {keyword: value, ...}} with the values as JSON, in the order
// written. nullopt for anything else (plain text, a positional argument, an expression
// that is not a literal), which the parser then leaves as content.
std::optional<nlohmann::ordered_json> parse_pythonic_calls(std::string_view text);

}  // namespace quiver
