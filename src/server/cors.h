// Cross-origin (CORS) answers for browser clients, with vLLM's options (--allowed-origins,
// --allowed-methods, --allowed-headers, --allow-credentials) and the semantics of the
// middleware vLLM uses: a simple request from an allowed origin gets Allow-Origin (and
// Vary: Origin when the origin is echoed); a preflight (OPTIONS with Origin and
// Access-Control-Request-Method) is answered here, 200 or 400 naming what is disallowed.
// Unlike vLLM, no origin is allowed by default: the server listens on this machine, and
// "*" would let any web page the user visits call it.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace quiver {

struct CorsOptions {
  std::vector<std::string> allowed_origins;           // "*" = any; empty = CORS off
  std::vector<std::string> allowed_methods{"*"};
  std::vector<std::string> allowed_headers{"*"};
  bool allow_credentials = false;
};

using HeaderList = std::vector<std::pair<std::string, std::string>>;

// Parses vLLM's JSON-list form of the list flags, e.g. '["https://a.example", "http://b"]'.
Result<std::vector<std::string>> parse_cors_list(const std::string& text, const std::string& flag);

// Headers to add to the response of a non-preflight request carrying `origin` (empty: not
// a cross-origin request, nothing to add).
HeaderList cors_response_headers(const CorsOptions& o, std::string_view origin);

struct PreflightAnswer {
  int status = 200;
  std::string body;  // "OK" or "Disallowed CORS origin, method" ...
  HeaderList headers;
};
// The answer to OPTIONS with Origin: `origin` and Access-Control-Request-Method: `method`,
// Access-Control-Request-Headers: `request_headers` (comma-separated, may be empty).
PreflightAnswer cors_preflight(const CorsOptions& o, std::string_view origin, std::string_view method,
                               std::string_view request_headers);

}  // namespace quiver
