// ServerOptions: how `quiver serve` listens and what it allows, parsed once from the
// command line (the engine's own settings stay in EngineArgs).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "server/cors.h"
#include "server/tool_calls.h"

namespace quiver {

struct ServerOptions {
  std::string host = "127.0.0.1";   // loopback unless asked otherwise
  int port = 8000;
  std::string served_model_name;    // empty = the --model argument, as vLLM names it
  std::string api_key;              // empty = no authentication
  bool allow_runtime_lora_updating = false;
  std::vector<std::string> lora_path_allowlist;  // folders adapters may be loaded from at run time
  size_t max_body_bytes = 32u << 20;  // larger request bodies get 413
  int http_threads = 128;             // each streaming client holds one for its whole response
  int max_pending_requests = 1024;    // engine requests queued or running; more gets 503
  double shutdown_timeout_s = 30;     // on SIGTERM: how long in-flight requests may finish before abort
  ToolOptions tools;                  // --enable-auto-tool-choice, --tool-call-parser
  CorsOptions cors;                   // browser clients from other origins (off by default)
};

}  // namespace quiver
