// PCRE2 wrapper. A pattern is compiled once (and JIT-compiled if the library supports it);
// the loop in find_all follows PCRE2's documented recipe for global matching.
#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/check.h"
#include "tokenizer/utf8.h"

namespace quiver {

struct Regex::Impl {
  pcre2_code* code = nullptr;
  std::string literal;  // set for literal patterns: matched with find() instead of PCRE2
  bool is_literal = false;
  ~Impl() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

Regex::~Regex() = default;

Result<Regex> Regex::compile(const std::string& pattern) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buffer[256];
    pcre2_get_error_message(error_code, buffer, sizeof(buffer));
    return Status::error("invalid regex '" + pattern + "' at offset " + std::to_string(error_offset) +
                         ": " + reinterpret_cast<const char*>(buffer));
  }
  // JIT is an optimization only; if it is unavailable the interpreter gives the same matches.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  auto impl = std::make_shared<Impl>();
  impl->code = code;
  return Regex(std::move(impl));
}

Regex Regex::literal(std::string_view text) {
  auto impl = std::make_shared<Impl>();
  impl->literal = std::string(text);
  impl->is_literal = true;
  return Regex(std::move(impl));
}

void Regex::find_all(std::string_view text, std::vector<Match>& out) const {
  out.clear();
  const Impl& r = *impl_;
  if (r.is_literal) {
    if (r.literal.empty()) return;
    for (size_t pos = text.find(r.literal); pos != std::string_view::npos;
         pos = text.find(r.literal, pos + r.literal.size())) {
      out.push_back({pos, pos + r.literal.size()});
    }
    return;
  }
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(r.code, nullptr);
  check(md != nullptr, "pcre2_match_data_create_from_pattern failed");
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  uint32_t options = 0;
  while (start <= text.size()) {
    // The subject was validated once by the caller; skip PCRE2's per-call UTF check.
    int rc = pcre2_match(r.code, subject, text.size(), start, options | PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
      // The JIT's fixed stack can run out on huge inputs; the interpreter uses the heap.
      rc = pcre2_match(r.code, subject, text.size(), start, options | PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                       nullptr);
    }
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) break;  // match limit hit: the rest stays one gap
    if (rc == PCRE2_ERROR_NOMATCH) {
      if (options == 0) break;
      // No non-empty match at `start` after an empty one: step one character on.
      if (start >= text.size()) break;
      start += utf8::char_length(static_cast<unsigned char>(text[start]));
      options = 0;
      continue;
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    out.push_back({ov[0], ov[1]});
    start = ov[1];
    options = ov[0] == ov[1] ? (PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED) : 0;
  }
  pcre2_match_data_free(md);
}

std::string Regex::replace_all(std::string_view text, std::string_view replacement) const {
  std::vector<Match> matches;
  find_all(text, matches);
  std::string out;
  out.reserve(text.size());
  size_t prev = 0;
  for (const Match& m : matches) {
    out.append(text.substr(prev, m.start - prev));
    out.append(replacement);
    prev = m.end;
  }
  out.append(text.substr(prev));
  return out;
}

}  // namespace quiver

namespace quiver {

Result<Regex> parse_pattern(const nlohmann::json& j, const std::string& path) {
  if (j.is_object() && j.size() == 1) {
    if (auto it = j.find("String"); it != j.end() && it->is_string()) {
      return Regex::literal(it->get<std::string>());
    }
    if (auto it = j.find("Regex"); it != j.end() && it->is_string()) {
      auto re = Regex::compile(it->get<std::string>());
      if (!re) return re.status().with_context(path + ".Regex");
      return re;
    }
  }
  return Status::error(path + ": expected {\"String\": ...} or {\"Regex\": ...}");
}

}  // namespace quiver
