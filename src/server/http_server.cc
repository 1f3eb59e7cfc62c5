// Routes of `quiver serve`. With --api-key every route needs the key except /health and
// /metrics (probes and scrapers) and CORS preflights (browsers send them without it).
#include "server/http_server.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <random>

#include "core/splitmix.h"
#include "server/cors.h"
#include "server/generation_handler.h"
#include "server/http_reply.h"
#include "server/lora_paths.h"
#include "server/tokenize_handler.h"

namespace quiver {

using nlohmann::json;

// httplib's routing and request processing, driven by HttpListener's workers instead of
// httplib's own accept loop and thread pool.
class Router : public httplib::Server {
 public:
  bool answer(httplib::Stream& stream, bool close_connection, bool& connection_closed) {
    return process_request(stream, close_connection, connection_closed, nullptr);
  }
  // httplib ends a response being streamed once its listening socket reads invalid; the
  // socket itself is HttpListener's, so any valid value marks "serving".
  void set_serving(bool on) { svr_sock_ = on ? 0 : INVALID_SOCKET; }
};

namespace {

// Idle time and requests a kept-alive connection gets; httplib states both in each
// response's Keep-Alive header. 5 s is vLLM's (uvicorn's) keep-alive timeout.
constexpr int kKeepAliveSeconds = 5;
constexpr int kRequestsPerConnection = 1000;

// Compares without an early exit, so timing does not reveal how much of a key matched.
bool constant_time_equal(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

bool authorized(const ServerOptions& o, const httplib::Request& req) {
  if (o.api_key.empty()) return true;
  const std::string h = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  if (h.size() <= prefix.size() || h.compare(0, prefix.size(), prefix) != 0) return false;
  return constant_time_equal(h.substr(prefix.size()), o.api_key);
}

std::string status_message(int status) {
  switch (status) {
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Request body too large";
    case 414: return "Request URI too long";
    default: return "HTTP " + std::to_string(status);
  }
}

json model_card(const std::string& id, const std::string& root, const json& parent, int64_t created,
                int max_model_len) {
  return json{{"id", id},
              {"object", "model"},
              {"created", created},
              {"owned_by", "quiver"},
              {"root", root},
              {"parent", parent},
              {"max_model_len", max_model_len},
              {"permission", json::array()}};
}

// `root` is the served name unless --show-model-paths: folder layouts are the operator's.
void handle_models(ServerContext& ctx, httplib::Response& res) {
  const bool paths = ctx.options.show_model_paths;
  json data = json::array();
  data.push_back(model_card(ctx.model_name, paths ? ctx.model_path : ctx.model_name, nullptr, ctx.started_unix,
                            ctx.loop->max_model_len()));
  for (const std::string& alias : ctx.options.served_model_names)  // --served-model-name's others
    if (alias != ctx.model_name)
      data.push_back(model_card(alias, paths ? ctx.model_path : alias, nullptr, ctx.started_unix,
                                ctx.loop->max_model_len()));
  for (const AdapterInfo& a : ctx.loop->adapters())
    data.push_back(model_card(a.name, paths ? a.path : a.name, ctx.model_name, ctx.started_unix,
                              ctx.loop->max_model_len()));
  send_json(res, 200, json{{"object", "list"}, {"data", data}});
}

void handle_load_lora(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  if (!ctx.options.allow_runtime_lora_updating)
    return send_error(res, ApiError::not_found("runtime LoRA updating is disabled (--allow-runtime-lora-updating)"));
  auto parsed = parse_load_lora_request(req.body);
  if (!parsed.is_ok()) return send_error(res, parsed.error());
  const LoadLoraRequest& r = parsed.value();
  const std::vector<std::string>& names = ctx.options.served_model_names;
  if (r.name == ctx.model_name || std::find(names.begin(), names.end(), r.name) != names.end())
    return send_error(res, ApiError::bad_request("lora_name must differ from the base model's names", "lora_name"));
  auto path = resolve_allowed_lora_path(r.path, ctx.options.lora_path_allowlist);
  if (!path.is_ok()) return send_error(res, ApiError::bad_request(path.message(), "lora_path"));
  auto loaded = ctx.loop->load_lora(r.name, path.value(), ctx.options.lora_path_allowlist);
  if (!loaded.is_ok()) return send_error(res, loaded.error());
  res.status = 200;
  res.set_content("Success: LoRA adapter '" + r.name + "' added successfully.", "text/plain");
}

void handle_unload_lora(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  if (!ctx.options.allow_runtime_lora_updating)
    return send_error(res, ApiError::not_found("runtime LoRA updating is disabled (--allow-runtime-lora-updating)"));
  auto parsed = parse_unload_lora_request(req.body);
  if (!parsed.is_ok()) return send_error(res, parsed.error());
  if (auto error = ctx.loop->unload_lora(parsed.value())) return send_error(res, *error);
  res.status = 200;
  res.set_content("Success: LoRA adapter '" + parsed.value() + "' removed successfully.", "text/plain");
}

// 413 for a body over --max-body-bytes; `size` is what is known of its length.
void refuse_large_body(httplib::Response& res, const std::string& size, size_t max) {
  send_error(res, ApiError{413, "Request body too large: " + size + " (limit " + std::to_string(max) + " bytes)", ""});
  res.set_header("Connection", "close");
}

bool over_limit(const std::string& content_length, size_t max) {
  char* end = nullptr;
  const unsigned long long n = std::strtoull(content_length.c_str(), &end, 10);
  return !content_length.empty() && end != content_length.c_str() && n > max;
}

bool needs_no_key(const std::string& path) { return path == "/health" || path == "/metrics"; }

using Handler = void (*)(ServerContext&, const httplib::Request&, httplib::Response&);

// A POST route whose body is read here, counted against --max-body-bytes whatever its
// transfer encoding: httplib's own limit only sees Content-Length, so a chunked body (or
// one without a length) would otherwise grow without bound.
httplib::Server::HandlerWithContentReader with_body(ServerContext& ctx, Handler handler) {
  return [&ctx, handler](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
    const size_t max = ctx.options.max_body_bytes;
    // A declared length over the limit is refused before reading (httplib then closes).
    const std::string declared = req.get_header_value("Content-Length");
    if (over_limit(declared, max)) return refuse_large_body(res, declared + " bytes", max);
    std::string body;
    bool too_large = false;
    const bool read = reader([&](const char* data, size_t n) {
      if (n > max - body.size()) return !(too_large = true);
      body.append(data, n);
      return true;
    });
    if (too_large) return refuse_large_body(res, "more than the limit", max);
    if (!read) return send_error(res, ApiError::bad_request("the request body could not be read"));
    httplib::Request with = req;
    with.body = std::move(body);
    handler(ctx, with, res);
  };
}

}  // namespace

std::string ServerContext::new_id(const char* prefix) {
  const uint64_t z = splitmix64_mix(id_seed + kSplitmixGamma * next_id.fetch_add(1));
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(z));
  return std::string(prefix) + buf;
}

HttpServer::HttpServer(ServerOptions options, EngineLoop* loop, ServerMetrics* metrics, std::string model_name,
                       std::string model_path)
    : metrics_(metrics), router_(std::make_unique<Router>()) {
  ctx_.options = std::move(options);
  ctx_.loop = loop;
  ctx_.model_name = std::move(model_name);
  ctx_.model_path = std::move(model_path);
  ctx_.started_unix = static_cast<int64_t>(std::time(nullptr));
  std::random_device rd;
  ctx_.id_seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  install_routes();
  ListenerOptions lo;
  lo.workers = ctx_.options.http_threads;
  lo.max_connections = ctx_.options.http_max_connections;
  lo.header_timeout = std::chrono::milliseconds(static_cast<int64_t>(ctx_.options.http_header_timeout_s * 1000));
  lo.max_body_bytes = ctx_.options.max_body_bytes;
  lo.keep_alive = std::chrono::seconds(kKeepAliveSeconds);
  lo.max_requests_per_connection = kRequestsPerConnection;
  listener_ = std::make_unique<HttpListener>(
      lo, [r = router_.get()](httplib::Stream& s, bool close, bool& closed) { return r->answer(s, close, closed); });
}

HttpServer::~HttpServer() = default;

void HttpServer::install_routes() {
  httplib::Server& s = *router_;
  const ServerOptions& o = ctx_.options;
  s.set_payload_max_length(o.max_body_bytes);
  s.set_keep_alive_timeout(kKeepAliveSeconds);
  s.set_keep_alive_max_count(kRequestsPerConnection);
  // Refuse an oversized body before the client sends it (curl and most clients send
  // "Expect: 100-continue" for large bodies); without that header httplib checks the
  // Content-Length itself and answers 413.
  s.set_expect_100_continue_handler([max = o.max_body_bytes](const httplib::Request& req, httplib::Response& res) {
    const std::string len = req.get_header_value("Content-Length");
    if (!over_limit(len, max)) return 100;
    // httplib writes `res` as it is, so the status must be set here as well.
    refuse_large_body(res, len + " bytes", max);
    return 413;
  });
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    // A browser's CORS preflight carries no credentials: answer it before the API key check.
    if (req.method == "OPTIONS" && req.has_header("Origin") && req.has_header("Access-Control-Request-Method")) {
      const PreflightAnswer a =
          cors_preflight(ctx_.options.cors, req.get_header_value("Origin"),
                         req.get_header_value("Access-Control-Request-Method"),
                         req.get_header_value("Access-Control-Request-Headers"));
      res.status = a.status;
      for (const auto& [k, v] : a.headers) res.set_header(k, v);
      res.set_content(a.body, "text/plain");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!needs_no_key(req.path) && !authorized(ctx_.options, req)) {
      send_error(res, ApiError{401, "Unauthorized: a valid API key is required (Authorization: Bearer KEY)", ""});
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Every response to an allowed origin, errors included, so a browser client can read it.
  s.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (ctx_.options.enable_request_id_headers && !res.has_header("X-Request-Id"))
      res.set_header("X-Request-Id", req.has_header("X-Request-Id") ? req.get_header_value("X-Request-Id")
                                                                     : ctx_.new_id(""));
    // (a preflight answered before routing already has its headers)
    if (!req.has_header("Origin") || res.has_header("Access-Control-Allow-Origin")) return;
    for (const auto& [k, v] : cors_response_headers(ctx_.options.cors, req.get_header_value("Origin")))
      res.set_header(k, v);
  });
  // httplib's own answers (no route, body too large, ...) get the API's error shape.
  s.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.content_provider_) return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, ApiError{res.status, status_message(res.status) + ": " + req.method + " " + req.path, ""});
    return httplib::Server::HandlerResponse::Handled;
  }));
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, ApiError{500, what, ""});
  });

  // /ping is vLLM's (SageMaker's) name for the same probe, on GET and POST.
  const auto health = [this](const httplib::Request&, httplib::Response& res) {
    res.status = ctx_.loop->failed() ? 503 : 200;
  };
  s.Get("/health", health);
  s.Get("/ping", health);
  s.Post("/ping", health);
  s.Get("/version", [](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, json{{"version", kQuiverVersion}});
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_->render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) { handle_models(ctx_, res); });
  s.Post("/v1/completions", with_body(ctx_, handle_completions));
  s.Post("/v1/chat/completions", with_body(ctx_, handle_chat_completions));
  s.Post("/v1/responses", with_body(ctx_, handle_responses));
  s.Post("/invocations", with_body(ctx_, handle_invocations));
  s.Post("/tokenize", with_body(ctx_, handle_tokenize));
  s.Post("/detokenize", with_body(ctx_, handle_detokenize));
  s.Post("/v1/load_lora_adapter", with_body(ctx_, handle_load_lora));
  s.Post("/v1/unload_lora_adapter", with_body(ctx_, handle_unload_lora));
}

Status HttpServer::bind() {
  auto bound = listener_->bind(ctx_.options.host, ctx_.options.port);
  if (!bound.is_ok()) return bound.status();
  port_ = bound.value();
  return Status::ok();
}

void HttpServer::run() {
  {
    std::lock_guard<std::mutex> lock(run_mu_);
    if (listener_->stopping()) return;
    running_ = true;
  }
  router_->set_serving(true);
  listener_->run();
  std::lock_guard<std::mutex> lock(run_mu_);
  running_ = false;
  run_cv_.notify_all();
}

void HttpServer::stop() {
  router_->set_serving(false);
  listener_->stop();
  std::unique_lock<std::mutex> lock(run_mu_);
  run_cv_.wait(lock, [this] { return !running_; });
}

}  // namespace quiver
