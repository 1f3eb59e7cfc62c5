// Python str operations on UTF-8 text for the Jinja interpreter: Python strings are
// sequences of code points, so length, indexing, slicing and strip() work on code
// points here, not bytes.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace quiver::jinja {

// Invalid UTF-8 bytes decode to U+DC80+byte (Python's surrogateescape) and encode back
// to the same byte, so no input is ever lost.
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
void utf8_append(std::string& out, char32_t c);
size_t utf8_length(std::string_view s);

bool py_isspace(char32_t c);
// str.strip / lstrip / rstrip; `chars` nullopt means whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split(sep=None, maxsplit=-1).
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, long maxsplit);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_capitalize(std::string_view s);  // str.capitalize
std::string py_title(std::string_view s);       // str.title
std::string jinja_title(std::string_view s);    // the `title` filter (splits on -, space, brackets)
std::string py_replace(std::string_view s, std::string_view old, std::string_view replacement, long count);
std::string py_str_repr(std::string_view s);  // repr(str), with Python's choice of quotes

}  // namespace quiver::jinja
