// ServerOptions: how `quiver serve` listens and what it allows, parsed once from the
// command line (the engine's own settings stay in EngineArgs).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/sampling_params.h"
#include "server/cors.h"
#include "tokenizer/chat_template.h"
#include "server/reasoning.h"
#include "server/tool_calls.h"

namespace quiver {

struct ServerOptions {
  std::string host = "127.0.0.1";   // loopback unless asked otherwise
  int port = 8000;
  // --served-model-name: the base model's names in the API, the first in responses (empty =
  // the --model argument, as vLLM names it); requests may use any.
  std::vector<std::string> served_model_names;
  std::string api_key;              // empty = no authentication
  bool allow_runtime_lora_updating = false;
  std::vector<std::string> lora_path_allowlist;  // folders adapters may be loaded from at run time
  size_t max_body_bytes = 32u << 20;  // larger request bodies get 413, however they are sent
  bool show_model_paths = false;      // /v1/models gives folders as `root` (else the names)
  int http_threads = 128;             // each streaming client holds one for its whole response
  int http_max_connections = 1024;    // open at once; past it the slowest waiting one is closed
  double http_header_timeout_s = 10;  // a request head must be whole this long after its first byte
  int max_pending_requests = 1024;    // engine requests queued or running; more gets 503
  double shutdown_timeout_s = 30;     // on SIGTERM: how long in-flight requests may finish before abort
  ToolOptions tools;                  // --enable-auto-tool-choice, --tool-call-parser
  ReasoningParser reasoning_parser = ReasoningParser::kNone;  // --reasoning-parser
  CorsOptions cors;                   // browser clients from other origins (off by default)
  std::shared_ptr<const ChatTemplate> chat_template;  // --chat-template; null = the tokenizer's
  bool trust_request_chat_template = false;  // a request may bring its own chat template
  SamplingParams sampling_defaults;   // for fields a request leaves out (--generation-config)
  int max_tokens_cap = 0;             // its max_new_tokens: every request's max_tokens at most (0: none)
  bool enable_force_include_usage = false;  // streams end with a usage chunk, stream_options or not
  bool enable_prompt_tokens_details = false;  // usage.prompt_tokens_details.cached_tokens
  bool return_tokens_as_token_ids = false;  // logprob tokens as "token_id:N" for every request
  std::string response_role = "assistant";  // --response-role: the role of chat answers
  bool enable_request_id_headers = false;   // every response carries X-Request-Id (the request's, or new)
  bool disable_log_requests = false;  // no line per finished request
  bool disable_log_stats = false;     // no periodic stats line
  double log_stats_interval_s = 10;   // seconds between stats lines (vLLM's VLLM_LOG_STATS_INTERVAL)
};

// Every numeric option within its bounds; the error names the flag.
Status validate(const ServerOptions& o);

}  // namespace quiver
