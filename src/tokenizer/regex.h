// A compiled PCRE2 pattern (UTF + Unicode properties, JIT when available) used by the
// Split pre-tokenizer, the Replace normalizer/decoder and the ByteLevel GPT-2 pattern.
// Matching is const and thread-safe: each call gets its own match data.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace quiver {

class Regex {
 public:
  struct Match {
    size_t start, end;  // byte offsets
  };

  // `pattern` is a regular expression (Oniguruma/Rust syntax as used in tokenizer.json).
  static Result<Regex> compile(const std::string& pattern);
  static Regex literal(std::string_view text);  // matches `text` exactly

  // All successive non-overlapping matches, left to right. After an empty match the
  // search resumes one character later, like Rust's and Oniguruma's find_iter.
  void find_all(std::string_view text, std::vector<Match>& out) const;
  // Replaces every match with `replacement` (taken literally).
  std::string replace_all(std::string_view text, std::string_view replacement) const;

  Regex(Regex&&) noexcept = default;
  Regex& operator=(Regex&&) noexcept = default;
  ~Regex();

 private:
  struct Impl;
  explicit Regex(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace quiver

#include <nlohmann/json.hpp>

namespace quiver {

// A tokenizer.json pattern: {"String": "literal"} or {"Regex": "pattern"}.
Result<Regex> parse_pattern(const nlohmann::json& j, const std::string& path);

}  // namespace quiver
