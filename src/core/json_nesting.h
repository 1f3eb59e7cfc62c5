// Bracket depth of JSON text, strings skipped: a cheap pre-pass before parsing, so no
// recursive reader (component parsers, dump, template rendering) ever meets an
// adversarially deep document. Header-only: the fuzz builds compile single files.
#pragma once

#include <cstddef>
#include <string_view>

namespace quiver {

// The deepest JSON a request may carry: its body, and a JSON string inside it that is parsed
// too (a tool call's arguments). Checked before parsing, it keeps recursion bounded.
inline constexpr int kMaxRequestJsonDepth = 64;

inline bool json_nesting_within(std::string_view s, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

}  // namespace quiver
