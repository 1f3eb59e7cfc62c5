// BoundedRegex: a PCRE2 pattern from a file (adapter_config.json's target_modules,
// exclude_modules, rank_pattern / alpha_pattern keys, layers_pattern) matched with a cap
// on backtracking work and depth, so a pathological pattern such as "^(([a-z._0-9])+)+X$"
// costs a bounded amount of time and ends in an error instead of stalling the engine.
// Python's `re` (what PEFT uses) and PCRE2 agree on the syntax these fields use.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace quiver {

class BoundedRegex {
 public:
  // Backtracking steps and nesting depth a single match may use. PEFT's module names are
  // short, so any real pattern needs a few hundred steps; the cap only stops runaways.
  static constexpr uint32_t kMatchLimit = 200000;
  static constexpr uint32_t kDepthLimit = 2000;

  // `field` names the pattern's origin in error messages.
  static Result<BoundedRegex> compile(const std::string& pattern, const std::string& field);

  // re.fullmatch(pattern, subject).
  Result<bool> full_match(std::string_view subject) const;
  // re.match(pattern, subject): anchored at the start, any end. Returns capture group
  // `group` of a match (empty string for an unset group), nullopt when there is none.
  Result<std::optional<std::string>> prefix_match(std::string_view subject, int group) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Impl;
  BoundedRegex(std::shared_ptr<const Impl> impl, std::string pattern, std::string field)
      : impl_(std::move(impl)), pattern_(std::move(pattern)), field_(std::move(field)) {}
  // Runs one match; nullopt = no match, an error past the limits.
  Result<std::optional<std::string>> run(std::string_view subject, uint32_t options, int group) const;

  std::shared_ptr<const Impl> impl_;
  std::string pattern_;
  std::string field_;
};

}  // namespace quiver
