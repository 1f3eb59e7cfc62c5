// PCRE2 behind BoundedRegex. The limits are set on a fresh match context for each match. No JIT: the
// subjects are short module names, and anchoring at match time would bypass it anyway.
#include "io/bounded_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/check.h"

namespace quiver {

struct BoundedRegex::Impl {
  pcre2_code* code = nullptr;
  ~Impl() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

Result<BoundedRegex> BoundedRegex::compile(const std::string& pattern, const std::string& field) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF,
                                   &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buffer[256];
    pcre2_get_error_message(error_code, buffer, sizeof(buffer));
    return Status::error(field + ": invalid regular expression '" + pattern + "' at offset " +
                         std::to_string(error_offset) + ": " + reinterpret_cast<const char*>(buffer));
  }
  auto impl = std::make_shared<Impl>();
  impl->code = code;
  return BoundedRegex(std::move(impl), pattern, field);
}

Result<std::optional<std::string>> BoundedRegex::run(std::string_view subject, uint32_t options, int group) const {
  pcre2_match_context* ctx = pcre2_match_context_create(nullptr);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  check(ctx != nullptr && md != nullptr, "PCRE2 match context allocation failed");
  pcre2_set_match_limit(ctx, kMatchLimit);
  pcre2_set_depth_limit(ctx, kDepthLimit);
  auto s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  const int rc = pcre2_match(impl_->code, s, subject.size(), 0, options, md, ctx);
  Result<std::optional<std::string>> out = std::optional<std::string>();
  if (rc >= 0) {
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const uint32_t pairs = pcre2_get_ovector_count(md);
    std::string captured;
    if (group >= 0 && static_cast<uint32_t>(group) < pairs && ov[2 * group] != PCRE2_UNSET)
      captured = std::string(subject.substr(ov[2 * group], ov[2 * group + 1] - ov[2 * group]));
    out = std::optional<std::string>(std::move(captured));
  } else if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21) {
    out = Status::error(field_ + ": a module or tensor name is not valid UTF-8");
  } else if (rc != PCRE2_ERROR_NOMATCH) {
    PCRE2_UCHAR buffer[256];
    pcre2_get_error_message(rc, buffer, sizeof(buffer));
    out = Status::error(field_ + ": regular expression '" + pattern_ + "' gave up on '" + std::string(subject) +
                        "' (" + reinterpret_cast<const char*>(buffer) +
                        "); it backtracks too much, simplify it or list the modules");
  }
  pcre2_match_data_free(md);
  pcre2_match_context_free(ctx);
  return out;
}

Result<bool> BoundedRegex::full_match(std::string_view subject) const {
  QV_ASSIGN_OR_RETURN(std::optional<std::string> m, run(subject, PCRE2_ANCHORED | PCRE2_ENDANCHORED, 0));
  return m.has_value();
}

Result<std::optional<std::string>> BoundedRegex::prefix_match(std::string_view subject, int group) const {
  return run(subject, PCRE2_ANCHORED, group);
}

}  // namespace quiver
