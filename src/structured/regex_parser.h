// RegexParser: the regular-expression subset that structured outputs accept, parsed to a
// small syntax tree over Unicode code points. The subset: literals, `.`, classes `[...]`
// and `[^...]` with ranges, escapes (\d \w \s \D \W \S \n \t \r \f \v \xHH \uHHHH and
// escaped metacharacters), groups `(...)` and `(?:...)`, alternation `|`, and the
// quantifiers `?` `*` `+` `{m}` `{m,}` `{m,n}`. The whole output must match (as Python's
// re.fullmatch), so `^` at the start and `$` at the end are accepted and change nothing.
// Backreferences, lookaround, lazy quantifiers and flags are refused by name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace quiver::structured {

// Inclusive code-point ranges, sorted and disjoint.
using CodeRanges = std::vector<std::pair<char32_t, char32_t>>;

struct RegexNode {
  enum class Kind { kEmpty, kClass, kConcat, kAlt, kRepeat };
  Kind kind = Kind::kEmpty;
  CodeRanges ranges;                               // kClass
  std::vector<std::unique_ptr<RegexNode>> kids;    // kConcat, kAlt: any number; kRepeat: one
  int min = 0, max = 0;                            // kRepeat; max -1 = unbounded
};

// Largest repetition count in {m,n}; bigger counts blow up the automaton anyway.
inline constexpr int kMaxRepeat = 1000;

Result<std::unique_ptr<RegexNode>> parse_regex(std::string_view pattern);

// `text` with every regex metacharacter escaped, so it matches itself literally.
std::string regex_escape(std::string_view text);

// Sorts and merges overlapping or adjacent ranges.
CodeRanges normalize_ranges(CodeRanges r);
// All Unicode scalar values (surrogates excluded) not in `r` (normalized).
CodeRanges complement_ranges(const CodeRanges& r);

}  // namespace quiver::structured
