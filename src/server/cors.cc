#include "server/cors.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

namespace quiver {

namespace {

bool has_star(const std::vector<std::string>& v) { return std::find(v.begin(), v.end(), "*") != v.end(); }

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

bool origin_allowed(const CorsOptions& o, std::string_view origin) {
  return has_star(o.allowed_origins) ||
         std::find(o.allowed_origins.begin(), o.allowed_origins.end(), origin) != o.allowed_origins.end();
}

// Allow-Origin (and Vary, Credentials) for an allowed origin: "*" only when any origin is
// allowed and no credentials are involved; otherwise the origin itself is echoed.
HeaderList origin_headers(const CorsOptions& o, std::string_view origin) {
  HeaderList h;
  if (has_star(o.allowed_origins) && !o.allow_credentials) {
    h.emplace_back("Access-Control-Allow-Origin", "*");
  } else {
    h.emplace_back("Access-Control-Allow-Origin", std::string(origin));
    h.emplace_back("Vary", "Origin");
  }
  if (o.allow_credentials) h.emplace_back("Access-Control-Allow-Credentials", "true");
  return h;
}

}  // namespace

Result<std::vector<std::string>> parse_cors_list(const std::string& text, const std::string& flag) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_array())
    return Status::error(flag + " must be a JSON list of strings, e.g. '[\"https://app.example\"]', got '" + text + "'");
  std::vector<std::string> out;
  for (const auto& v : j) {
    if (!v.is_string()) return Status::error(flag + " must be a JSON list of strings, got '" + text + "'");
    out.push_back(v.get<std::string>());
  }
  return out;
}

HeaderList cors_response_headers(const CorsOptions& o, std::string_view origin) {
  if (origin.empty() || o.allowed_origins.empty() || !origin_allowed(o, origin)) return {};
  return origin_headers(o, origin);
}

PreflightAnswer cors_preflight(const CorsOptions& o, std::string_view origin, std::string_view method,
                               std::string_view request_headers) {
  PreflightAnswer a;
  std::vector<std::string> failures;
  if (o.allowed_origins.empty() || !origin_allowed(o, origin)) failures.push_back("origin");
  const bool any_method = has_star(o.allowed_methods);
  if (!any_method && std::find(o.allowed_methods.begin(), o.allowed_methods.end(), method) == o.allowed_methods.end())
    failures.push_back("method");
  std::vector<std::string> requested;
  for (size_t at = 0; at <= request_headers.size();) {
    const size_t comma = std::min(request_headers.find(',', at), request_headers.size());
    const std::string h = lower(trim(request_headers.substr(at, comma - at)));
    if (!h.empty()) requested.push_back(h);
    at = comma + 1;
  }
  const bool any_header = has_star(o.allowed_headers);
  if (!any_header) {
    std::vector<std::string> allowed;
    for (const auto& h : o.allowed_headers) allowed.push_back(lower(h));
    for (const char* simple : {"accept", "accept-language", "content-language", "content-type"}) allowed.push_back(simple);
    for (const auto& h : requested)
      if (std::find(allowed.begin(), allowed.end(), h) == allowed.end()) {
        failures.push_back("headers");
        break;
      }
  }
  if (!failures.empty()) {
    a.status = 400;
    a.body = "Disallowed CORS";
    for (size_t i = 0; i < failures.size(); ++i) a.body += (i ? ", " : " ") + failures[i];
    return a;
  }
  a.body = "OK";
  a.headers = origin_headers(o, origin);
  std::string methods;
  const std::vector<std::string> all = {"DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"};
  for (const auto& m : any_method ? all : o.allowed_methods) methods += (methods.empty() ? "" : ", ") + m;
  a.headers.emplace_back("Access-Control-Allow-Methods", methods);
  a.headers.emplace_back("Access-Control-Max-Age", "600");
  if (any_header) {
    if (!request_headers.empty()) a.headers.emplace_back("Access-Control-Allow-Headers", std::string(request_headers));
  } else {
    std::string hs;
    for (const auto& h : o.allowed_headers) hs += (hs.empty() ? "" : ", ") + h;
    a.headers.emplace_back("Access-Control-Allow-Headers", hs);
  }
  return a;
}

}  // namespace quiver
