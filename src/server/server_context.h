// ServerContext: what every route handler reads — options, the engine loop, the base
// model's identity — plus response ids. Owned by HttpServer, shared by its handlers.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "server/engine_loop.h"
#include "server/server_options.h"
#include "structured/automaton_cache.h"

namespace quiver {

struct ServerContext {
  ServerOptions options;
  EngineLoop* loop = nullptr;
  std::string model_name;  // the base model's id in the API
  std::string model_path;  // its folder (the "root" in /v1/models)
  int64_t started_unix = 0;

  // Structured-output constraints, compiled on the HTTP threads (generation_prepare.h).
  structured::AutomatonCache automata;

  std::atomic<int> open_streams{0};  // SSE responses not yet fully written

  uint64_t id_seed = 0;  // random per server run, so ids differ across restarts
  std::atomic<uint64_t> next_id{1};

  // "cmpl-3f2a...", "chatcmpl-..." — unique within and across runs.
  std::string new_id(const char* prefix);
};

}  // namespace quiver
