#include "server/request_head.h"

#include <cctype>

namespace quiver {

namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

bool icontains(std::string_view hay, std::string_view needle) {
  for (size_t i = 0; i + needle.size() <= hay.size(); ++i)
    if (iequals(hay.substr(i, needle.size()), needle)) return true;
  return false;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// Decimal digits only, at most 19 of them (no wrap past int64).
std::optional<uint64_t> parse_length(std::string_view v) {
  if (v.empty() || v.size() > 19) return std::nullopt;
  uint64_t n = 0;
  for (char c : v) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  return n;
}

}  // namespace

std::optional<RequestHead> scan_request_head(std::string_view buf) {
  const size_t end = buf.find("\r\n\r\n");
  if (end == std::string_view::npos) return std::nullopt;
  RequestHead head;
  head.head_bytes = end + 4;
  std::string_view rest = buf.substr(0, end + 2);
  rest.remove_prefix(std::min(rest.size(), rest.find("\r\n") + 2));  // the request line
  int lengths = 0;
  while (!rest.empty()) {
    const size_t eol = rest.find("\r\n");
    const std::string_view line = rest.substr(0, eol);
    rest.remove_prefix(eol + 2);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, colon);
    const std::string_view value = trim(line.substr(colon + 1));
    if (iequals(name, "Content-Length")) {
      ++lengths;
      head.content_length = parse_length(value);
    } else if (iequals(name, "Expect")) {
      head.expect_continue = head.expect_continue || iequals(value, "100-continue");
    } else if (iequals(name, "Transfer-Encoding")) {
      head.chunked = head.chunked || icontains(value, "chunked");
    }
  }
  if (lengths != 1) head.content_length.reset();
  return head;
}

size_t bytes_to_gather(const RequestHead& head, size_t max_body) {
  if (head.chunked || head.expect_continue || !head.content_length || *head.content_length > max_body)
    return head.head_bytes;
  return head.head_bytes + static_cast<size_t>(*head.content_length);
}

}  // namespace quiver
