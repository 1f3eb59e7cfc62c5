// `quiver serve`: the OpenAI-compatible HTTP server (vLLM's `vllm serve`).
//
// Shutdown: SIGTERM/SIGINT are blocked in every thread and taken by a watcher thread with
// sigtimedwait, so no signal handler runs at all (and nothing async-signal-unsafe can
// happen in one). The watcher drains: new generation requests get 503, in-flight ones may
// finish for --shutdown-timeout seconds (a second signal cuts that short), the rest are
// aborted and their streams end properly; only then does it stop the HTTP server (httplib
// cuts streams that are still open at stop()). The command then returns 0.
#if defined(QUIVER_HAS_SERVER)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "io/generation_defaults.h"
#include "io/json_util.h"
#include "server/engine_loop.h"
#include "server/http_server.h"

namespace quiver {

namespace {

struct ServeOptions {
  EngineFlags engine;
  ServerOptions server;
  std::string allowed_origins, allowed_methods, allowed_headers;  // CORS, vLLM's JSON-list form
  std::string generation_config = "auto";
  std::string override_generation_config;  // a JSON object over the file's fields
  std::string chat_template;  // a file, or the template itself
  std::string tool_call_parser;
  std::string reasoning_parser;
  bool enable_log_requests = false;  // vLLM's --enable-log-requests: quiver's default already
};

// --chat-template as vLLM reads it: a file's contents when the file exists; otherwise the
// text itself when it looks like a template (has braces or a newline), else an error, so a
// mistyped path is not served as a one-line template.
Status finalize_chat_template(ServeOptions* o) {
  const std::string& arg = o->chat_template;
  if (arg.empty()) return Status::ok();
  std::string source;
  std::error_code ec;
  if (std::filesystem::is_regular_file(arg, ec)) {
    QV_ASSIGN_OR_RETURN(source, read_text_file(arg));
  } else if (arg.find_first_of("{}\n") != std::string::npos) {
    source = arg;
  } else {
    return Status::error("--chat-template " + arg + ": no such file (and not a template)");
  }
  auto parsed = ChatTemplate::parse(source);
  if (!parsed.is_ok()) return parsed.status().with_context("--chat-template");
  o->server.chat_template = std::make_shared<const ChatTemplate>(std::move(parsed).value());
  return Status::ok();
}

// The model's generation_config.json sampling fields as request defaults.
Status finalize_generation_config(ServeOptions* o) {
  QV_ASSIGN_OR_RETURN(GenerationDefaults d, load_generation_defaults(o->generation_config, o->engine.args.model,
                                                                     o->override_generation_config));
  SamplingParams& p = o->server.sampling_defaults;
  if (d.temperature) p.temperature = static_cast<float>(*d.temperature);
  if (d.top_p) p.top_p = static_cast<float>(*d.top_p);
  if (d.top_k) p.top_k = static_cast<int>(*d.top_k);
  if (d.min_p) p.min_p = static_cast<float>(*d.min_p);
  if (d.repetition_penalty) p.repetition_penalty = static_cast<float>(*d.repetition_penalty);
  if (d.max_new_tokens) o->server.max_tokens_cap = static_cast<int>(std::min<int64_t>(*d.max_new_tokens, INT32_MAX));
  if (!d.empty()) std::cerr << "quiver serve: sampling defaults from generation_config.json: " << d.describe() << "\n";
  return Status::ok();
}

// --tool-call-parser into server.tools; auto tool choice needs a parser, as in vLLM.
Status finalize_tools(ServeOptions* o) {
  ToolOptions& t = o->server.tools;
  if (!o->tool_call_parser.empty()) {
    auto parser = parse_tool_call_parser(o->tool_call_parser);
    if (!parser.is_ok()) return Status::error("--tool-call-parser: " + parser.error().message);
    t.parser = parser.value();
  }
  if (t.enable_auto_tool_choice && t.parser == ToolCallParser::kNone)
    return Status::error(
        "--enable-auto-tool-choice needs --tool-call-parser (llama3_json, hermes, mistral or pythonic)");
  return Status::ok();
}

// --reasoning-parser into server.reasoning_parser.
Status finalize_reasoning(ServeOptions* o) {
  if (o->reasoning_parser.empty()) return Status::ok();
  auto parser = parse_reasoning_parser(o->reasoning_parser);
  if (!parser.is_ok()) return Status::error(parser.error().message);
  o->server.reasoning_parser = parser.value();
  return Status::ok();
}

// The CORS list flags into server.cors; an error names the flag.
Status finalize_cors(ServeOptions* o) {
  CorsOptions& c = o->server.cors;
  const std::pair<const std::string*, std::vector<std::string>*> lists[] = {
      {&o->allowed_origins, &c.allowed_origins}, {&o->allowed_methods, &c.allowed_methods},
      {&o->allowed_headers, &c.allowed_headers}};
  const char* flags[] = {"--allowed-origins", "--allowed-methods", "--allowed-headers"};
  for (int i = 0; i < 3; ++i) {
    if (lists[i].first->empty()) continue;
    QV_ASSIGN_OR_RETURN(*lists[i].second, parse_cors_list(*lists[i].first, flags[i]));
  }
  return Status::ok();
}

sigset_t shutdown_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

// Waits up to `seconds` for a shutdown signal; the signal number, or 0 on timeout.
int wait_signal(double seconds) {
  const sigset_t set = shutdown_signals();
  timespec ts{static_cast<time_t>(seconds), static_cast<long>((seconds - static_cast<time_t>(seconds)) * 1e9)};
  const int sig = sigtimedwait(&set, nullptr, &ts);
  return sig > 0 ? sig : 0;
}

// Polls `done` every 50 ms for up to `seconds`; true if it became true. A second signal
// ends the wait early.
template <typename Done>
bool wait_until(Done done, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline || wait_signal(0.05) != 0) return false;
  }
  return true;
}

void watch_for_shutdown(const std::atomic<bool>& serving_done, HttpServer& server, EngineLoop& loop,
                        double grace_s) {
  while (!serving_done.load()) {
    const int sig = wait_signal(0.2);
    if (loop.failed()) {
      // The cause is already on stderr (engine_loop.cc). Exiting lets a supervisor start a
      // fresh engine instead of answering 503 for good.
      std::cerr << "quiver serve: the engine failed; stopping\n";
      server.stop();
      return;
    }
    if (sig == 0) continue;
    std::cerr << "quiver serve: " << (sig == SIGTERM ? "SIGTERM" : "SIGINT") << ", shutting down ("
              << loop.num_in_flight() << " requests in flight)\n";
    loop.begin_drain();
    if (!wait_until([&] { return loop.num_in_flight() == 0; }, grace_s)) {
      std::cerr << "quiver serve: aborting " << loop.num_in_flight() << " unfinished requests\n";
      loop.abort_all();
    }
    // Aborted requests end within a step; streams then write their last chunk and [DONE].
    wait_until([&] { return loop.num_in_flight() == 0 && server.open_streams() == 0; }, 10.0);
    server.stop();
    return;
  }
}

int run_serve(ServeOptions& o) {
  // Before any thread exists, so every thread inherits the mask (see the file comment).
  const sigset_t set = shutdown_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // A client that vanishes mid-write must be a failed write, not a dead server.
  std::signal(SIGPIPE, SIG_IGN);

  if (o.server.allow_runtime_lora_updating) o.engine.args.enable_lora = true;
  o.engine.args.usage = EngineUsage::kServer;
  Status s = finalize_engine_flags(&o.engine);
  if (s.is_ok()) s = finalize_cors(&o);
  if (s.is_ok()) s = finalize_generation_config(&o);
  if (s.is_ok()) s = finalize_chat_template(&o);
  if (s.is_ok()) s = finalize_tools(&o);
  if (s.is_ok()) s = finalize_reasoning(&o);
  if (s.is_ok()) s = validate(o.server);
  if (!s.is_ok()) {
    std::cerr << "quiver serve: " << s.message() << "\n";
    return 2;
  }
  if (o.server.served_model_names.empty()) o.server.served_model_names.push_back(o.engine.args.model);
  const std::vector<std::string>& names = o.server.served_model_names;
  for (const auto& [name, path] : o.engine.args.lora_modules) {
    if (std::find(names.begin(), names.end(), name) != names.end()) {
      std::cerr << "quiver serve: adapter name '" << name << "' is a name of the base model\n";
      return 2;
    }
  }
  auto created = LLMEngine::create(o.engine.args);
  if (!created.is_ok()) {
    std::cerr << "quiver serve: " << created.message() << "\n";
    return 1;
  }
  const std::string model_name = names.front();
  const LLMEngine& engine = *created.value();
  // As vLLM's: the mistral parser finds calls by their [TOOL_CALLS] token (v0.3's vocabulary).
  if (o.server.tools.parser == ToolCallParser::kMistral &&
      (engine.tokenizer() == nullptr || !engine.tokenizer()->token_to_id("[TOOL_CALLS]"))) {
    std::cerr << "quiver serve: --tool-call-parser mistral: the model's tokenizer has no [TOOL_CALLS] token "
                 "(Mistral-7B-Instruct-v0.3 and later have it)\n";
    return 2;
  }
  ServerMetrics metrics(model_name,
                        CacheConfigInfo{engine.args().block_size, engine.last_step().kv_blocks_total,
                                        engine.args().enable_prefix_caching},
                        engine.max_model_len());
  ServingLog log(&std::cerr, !o.server.disable_log_requests);
  const int64_t kv_blocks = engine.last_step().kv_blocks_total;
  log.line("KV cache: " + std::to_string(kv_blocks * engine.args().block_size) + " tokens (" +
           std::to_string(kv_blocks) + " blocks of " + std::to_string(engine.args().block_size) + ")");
  EngineLoop loop(std::move(created).value(), &metrics, o.server.max_pending_requests, &log, model_name);
  HttpServer server(o.server, &loop, &metrics, model_name, o.engine.args.model);
  Status bound = server.bind();
  if (!bound.is_ok()) {
    std::cerr << "quiver serve: " << bound.message() << "\n";
    return 1;
  }
  loop.start();
  if (!o.server.disable_log_stats) log.start_stats(&metrics, o.server.log_stats_interval_s);
  std::cerr << "quiver serve: model '" << model_name << "' on http://" << o.server.host << ":" << server.port()
            << (o.server.api_key.empty() ? "" : " (API key required)") << "\n";

  std::atomic<bool> serving_done{false};
  std::thread watcher([&] { watch_for_shutdown(serving_done, server, loop, o.server.shutdown_timeout_s); });
  server.run();
  serving_done = true;
  watcher.join();
  log.stop_stats();
  const bool failed = loop.failed();
  loop.stop();
  std::cerr << "quiver serve: stopped" << (failed ? " after an engine failure" : "") << "\n";
  return failed ? 1 : 0;
}

}  // namespace

void register_serve(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (completions, chat, LoRA adapters)");
  add_engine_flags(cmd, &opts->engine, /*positional_model=*/true);
  ServerOptions& s = opts->server;
  cmd->add_option("--host", s.host, "address to listen on (default 127.0.0.1: this machine only)");
  cmd->add_option("--port", s.port, "port to listen on (0 = any free port)");
  cmd->add_option("--served-model-name", s.served_model_names,
                  "the base model's name(s) in the API, the first in responses (default: --model)");
  cmd->add_option("--api-key", s.api_key, "require 'Authorization: Bearer KEY' on every route but /health and /metrics");
  cmd->add_flag("--show-model-paths", s.show_model_paths, "list model and adapter folders in /v1/models");
  cmd->add_flag("--allow-runtime-lora-updating", s.allow_runtime_lora_updating,
                "enable /v1/load_lora_adapter and /v1/unload_lora_adapter");
  cmd->add_option("--lora-path-allowlist", s.lora_path_allowlist,
                  "folders runtime adapters may be loaded from (repeatable)");
  cmd->add_flag("--enable-auto-tool-choice", s.tools.enable_auto_tool_choice,
                "let the model choose to call tools (tool_choice \"auto\"); needs --tool-call-parser");
  cmd->add_option("--tool-call-parser", opts->tool_call_parser,
                  "how tool calls are read from the model's text: llama3_json, hermes, mistral or pythonic");
  cmd->add_option("--reasoning-parser", opts->reasoning_parser,
                  "split chat answers into reasoning and content: deepseek_r1 (<think>...</think>)");
  cmd->add_option("--max-body-bytes", s.max_body_bytes, "largest request body accepted (413 beyond)");
  cmd->add_option("--http-threads", s.http_threads, "HTTP worker threads (each request being answered holds one)");
  cmd->add_option("--http-max-connections", s.http_max_connections,
                  "open connections at most; past it the one waiting longest for its request is closed");
  cmd->add_option("--http-header-timeout", s.http_header_timeout_s,
                  "seconds a request's head may take from its first byte (slower clients get 408)");
  cmd->add_option("--max-pending-requests", s.max_pending_requests, "requests queued or running before 503");
  cmd->add_option("--shutdown-timeout", s.shutdown_timeout_s, "seconds in-flight requests may finish on SIGTERM");
  cmd->add_option("--allowed-origins", opts->allowed_origins,
                  "CORS: JSON list of origins browsers may call from, '[\"*\"]' = any (default: none)");
  cmd->add_option("--allowed-methods", opts->allowed_methods, "CORS: JSON list of methods (default '[\"*\"]')");
  cmd->add_option("--allowed-headers", opts->allowed_headers, "CORS: JSON list of request headers (default '[\"*\"]')");
  cmd->add_flag("--allow-credentials", s.cors.allow_credentials, "CORS: allow cookies / credentials");
  cmd->add_option("--chat-template", opts->chat_template,
                  "chat template file (or the Jinja text itself) used instead of the tokenizer's");
  cmd->add_flag("--trust-request-chat-template", s.trust_request_chat_template,
                "let a chat request bring its own template (\"chat_template\"); refused otherwise (vLLM's flag)");
  cmd->add_option("--generation-config", opts->generation_config,
                  "request sampling defaults: auto (the model's generation_config.json), vllm (none), or a folder");
  cmd->add_option("--override-generation-config", opts->override_generation_config,
                  "a JSON object of generation-config fields over --generation-config's, e.g. '{\"temperature\": 0.5}'");
  cmd->add_flag("--enable-force-include-usage", s.enable_force_include_usage,
                "every streamed response ends with a usage chunk, whether or not it asks (vLLM's flag)");
  cmd->add_flag("--enable-prompt-tokens-details", s.enable_prompt_tokens_details,
                "usage reports prompt_tokens_details.cached_tokens, the prompt tokens the prefix cache held (vLLM's flag)");
  cmd->add_flag("--return-tokens-as-token-ids", s.return_tokens_as_token_ids,
                "logprob blocks name tokens \"token_id:N\" for every request (vLLM's flag)");
  cmd->add_flag("--enable-request-id-headers", s.enable_request_id_headers,
                "every response carries an X-Request-Id header: the request's own, else a new one (vLLM's flag)");
  cmd->add_option("--response-role", s.response_role,
                  "the role of chat answers when the request adds a generation prompt (vLLM's flag; default assistant)");
  CLI::Option* no_log = cmd->add_flag("--disable-log-requests", s.disable_log_requests,
                                      "no log line per request (id, model, prompt/output tokens, TTFT, total time)");
  // vLLM's newer spelling (its requests are unlogged by default): here it asks for the default.
  cmd->add_flag("--enable-log-requests", opts->enable_log_requests,
                "a log line per request, as by default (vLLM's flag; excludes --disable-log-requests)")
      ->excludes(no_log);
  cmd->add_flag("--disable-log-stats", s.disable_log_stats, "no periodic stats line (throughput, queue, KV, adapters)");
  cmd->add_option("--log-stats-interval", s.log_stats_interval_s, "seconds between stats lines while there is work");
  cmd->callback([opts, exit_code] { *exit_code = run_serve(*opts); });
}

}  // namespace quiver

#endif  // QUIVER_HAS_SERVER
