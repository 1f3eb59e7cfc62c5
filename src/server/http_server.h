// HttpServer: the OpenAI-compatible HTTP front end. Routes, API-key check, body-size limit
// and JSON errors for everything httplib answers on its own (404, 413, ...) on cpp-httplib's
// request processing; connections are accepted and read by HttpListener.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "core/status.h"
#include "server/engine_loop.h"
#include "server/http_listener.h"
#include "server/metrics.h"
#include "server/server_context.h"
#include "server/server_options.h"

namespace quiver {

class Router;

class HttpServer {
 public:
  HttpServer(ServerOptions options, EngineLoop* loop, ServerMetrics* metrics, std::string model_name,
             std::string model_path);
  ~HttpServer();

  // Binds options.host:options.port (port 0 picks a free one).
  Status bind();
  int port() const { return port_; }
  // Serves until stop(); returns once every in-flight handler has finished. Returns at once
  // if stop() came first.
  void run();
  // Stops accepting connections (safe from any thread, before or during run()); once it
  // returns, run() has returned or will return at once. Streams still being written are
  // cut off, so drain first (EngineLoop::begin_drain, open_streams() == 0).
  void stop();
  // Server-Sent Events responses not yet completely written.
  int open_streams() const { return ctx_.open_streams.load(); }

 private:
  void install_routes();

  ServerContext ctx_;
  ServerMetrics* metrics_;
  std::unique_ptr<Router> router_;
  std::unique_ptr<HttpListener> listener_;
  int port_ = 0;

  std::mutex run_mu_;  // run() and stop() from different threads
  std::condition_variable run_cv_;
  bool running_ = false;
};

// The version /version reports.
inline constexpr const char* kQuiverVersion = "0.1.0";

}  // namespace quiver
