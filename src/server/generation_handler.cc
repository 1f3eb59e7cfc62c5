// Submitting a prepared generation and answering it. Waits are short (kPoll) so the HTTP
// thread can notice its client leaving: then the request is cancelled, which aborts it
// in the engine and frees its KV blocks. A streaming response is produced by a chunked
// content provider that httplib calls repeatedly on this connection's thread.
#include "server/generation_handler.h"

#include <chrono>
#include <memory>

#include "server/connection_probe.h"
#include "server/generation_prepare.h"
#include "server/http_reply.h"
#include "server/output_assembler.h"
#include "server/reasoning.h"
#include "server/responses_stream.h"
#include "server/tool_stream.h"

namespace quiver {

namespace {

using nlohmann::json;
constexpr auto kPoll = std::chrono::milliseconds(50);

// Everything a response needs after the handler returned (streaming outlives it).
struct Generation {
  ServerContext* ctx = nullptr;
  PreparedGeneration prep;
  std::shared_ptr<ResponseChannel> channel;
  std::unique_ptr<OutputAssembler> assembler;
  TokenText token_text;
  ClientWatch watch;                 // this client's socket, for disconnect checks
  bool http11 = true;                // may get an interim 1xx response (not HTTP/1.0)
  std::vector<size_t> text_offsets;  // per choice: text already streamed (completion logprobs)
  bool preamble_sent = false;
  bool done = false;
  std::vector<ToolStream> tool_streams;  // per choice, streaming chat with tools
  std::vector<ReasoningStream> reasoning;  // per choice, streaming chat under --reasoning-parser
  std::optional<ResponsesRequest> responses;  // /v1/responses: its request, for the response object
  std::unique_ptr<ResponsesStream> responses_stream;

  bool parses_reasoning() const { return prep.chat && ctx->options.reasoning_parser != ReasoningParser::kNone; }
  // A whole choice's text as reasoning and content.
  void apply_reasoning(ChoicePiece& p) {
    if (parses_reasoning()) set_reasoning(p, split_reasoning(p.text, ctx->options.reasoning_parser));
  }
  // A streamed piece: what of its reasoning and content can be sent now.
  void stream_reasoning(ChoicePiece& p) {
    if (parses_reasoning())
      set_reasoning(p, reasoning[static_cast<size_t>(p.index)].feed(p.text, !p.finish_reason.empty()));
  }
  void set_reasoning(ChoicePiece& p, ReasoningSplit s) const {
    if (prep.include_reasoning) p.reasoning = std::move(s.reasoning);
    p.text = std::move(s.content);
    p.reasoning_parsed = true;
  }

  Usage usage() const {
    Usage u = assembler->usage();
    u.prompt_tokens_details = ctx->options.enable_prompt_tokens_details;
    return u;
  }

  void cancel() { ctx->loop->cancel(channel); }
  // Before the response has started: the probe is an interim 100 Continue.
  bool client_gone() {
    return watch.gone([this] { return http11 && send_interim_continue(watch.fd()); });
  }

  // Content and tool_calls from a whole choice's text; finish "tool_calls" when the
  // model stopped after calling.
  void apply_tools(ChoicePiece& p) { set_tools(p, parse_tool_output(p.text, prep.tools, tool_id())); }
  void set_tools(ChoicePiece& p, ParsedTools parsed) const {
    p.text = std::move(parsed.content);
    p.tool_calls = std::move(parsed.tool_calls);
    if (!p.tool_calls.empty() && p.finish_reason == "stop") p.finish_reason = "tool_calls";
  }
  // Names of /v1/responses output items ("msg_...", "fc_...").
  std::function<std::string(const char*)> item_id() const {
    return [ctx = ctx](const char* prefix) { return ctx->new_id(prefix); };
  }
  std::function<std::string()> tool_id() const {
    return [ctx = ctx, parser = prep.tools.parser] { return tool_call_id(parser, ctx->new_id("")); };
  }
  // Streaming with tools: content goes out until a call begins (ToolStream); the finishing
  // piece carries the rest and the tool_calls. True when the piece's text is all held back.
  bool stream_tools(ChoicePiece& p) {
    if (!prep.chat || !prep.tools.active()) return false;
    ToolStream& s = tool_streams[static_cast<size_t>(p.index)];
    if (p.finish_reason.empty()) {
      const bool had_text = !p.text.empty();
      p.text = s.feed(p.text);
      return had_text && p.text.empty();
    }
    set_tools(p, s.finish(p.text, tool_id()));
    return false;
  }

  json choice_json(const ChoicePiece& p, bool streaming) {
    if (!prep.chat) {
      size_t& offset = text_offsets[static_cast<size_t>(p.index)];
      json c = completion_choice_json(p, prep.logprobs, token_text, streaming ? offset : 0, prep.return_token_ids);
      offset += p.text.size();
      return c;
    }
    return streaming ? chat_delta_choice_json(p, "", prep.logprobs, token_text, prep.return_token_ids)
                     : chat_choice_json(p, prep.role, prep.logprobs, token_text, prep.return_token_ids);
  }
  std::string chunk(const json& choice) const {
    json choices = json::array({choice});
    json c = prep.chat ? chat_chunk_json(prep.meta, std::move(choices))
                       : completion_chunk_json(prep.meta, std::move(choices));
    if (prep.continuous_usage) c["usage"] = usage_json(usage());
    return sse_event(c);
  }
};

// Waits until the engine admitted every job. False (and `res` answered or abandoned)
// when it did not.
bool await_admission(Generation& g, httplib::Response& res) {
  for (;;) {
    bool timed_out = false;
    if (auto error = g.channel->wait_admitted(kPoll, &timed_out)) {
      send_error(res, *error);
      return false;
    }
    if (!timed_out) return true;
    if (g.client_gone()) {
      g.cancel();
      res.status = 499;  // nobody reads it; nginx's "client closed request"
      return false;
    }
  }
}

void respond_whole(Generation& g, httplib::Response& res) {
  for (;;) {
    const bool finished = g.channel->all_finished();
    for (auto& [job, out] : g.channel->take(finished ? std::chrono::milliseconds(0) : kPoll)) g.assembler->add(job, out);
    if (auto error = g.channel->error()) return send_error(res, *error);
    if (finished) break;
    if (g.client_gone()) {
      g.cancel();
      res.status = 499;
      return;
    }
  }
  if (g.assembler->error()) return send_error(res, ApiError{500, *g.assembler->error(), ""});
  std::vector<ChoicePiece> pieces = g.assembler->final_choices();
  for (ChoicePiece& p : pieces) {
    g.apply_reasoning(p);  // tool calls are read from the content, after the reasoning
    if (g.prep.chat && g.prep.tools.active()) g.apply_tools(p);
    p.text = g.prep.echo + p.text;  // chat echo: the last message's text first (vLLM's)
  }
  const Usage usage = g.usage();
  if (g.responses) {  // one choice: its output items
    const ChoicePiece& p = pieces.at(0);
    return send_json(res, 200, response_object(*g.responses, g.prep.meta, response_status(p),
                                               response_output_items(p, g.item_id()), &usage));
  }
  json choices = json::array();
  for (const ChoicePiece& p : pieces) choices.push_back(g.choice_json(p, false));
  send_json(res, 200,
            g.prep.chat ? chat_response_json(g.prep.meta, std::move(choices), usage)
                        : completion_response_json(g.prep.meta, std::move(choices), usage));
}

// One call of the chunked content provider: send what arrived, end the stream when done.
// Returning false tells httplib to drop the connection.
bool stream_step(Generation& g, httplib::DataSink& sink) {
  auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
  if (!g.preamble_sent) {
    g.preamble_sent = true;
    if (g.responses_stream) {
      if (!write(g.responses_stream->start())) return false;
    } else if (g.prep.chat) {  // vLLM's first chat chunks: the role, then any echo, for every choice
      for (int i = 0; i < g.prep.assembler.n; ++i) {
        ChoicePiece role;
        role.index = i;
        if (!write(g.chunk(chat_delta_choice_json(role, g.prep.role, false, g.token_text, false)))) return false;
      }
      for (int i = 0; i < g.prep.assembler.n && !g.prep.echo.empty(); ++i) {
        ChoicePiece echo;
        echo.index = i;
        echo.text = g.prep.echo;
        if (!write(g.chunk(chat_delta_choice_json(echo, "", false, g.token_text, false)))) return false;
      }
    }
  }
  const bool finished = g.channel->all_finished();
  for (auto& [job, out] : g.channel->take(finished ? std::chrono::milliseconds(0) : kPoll))
    for (ChoicePiece& p : g.assembler->add(job, out)) {
      g.stream_reasoning(p);
      if (g.stream_tools(p) && p.reasoning.empty()) continue;  // held content; reasoning goes now
      if (g.responses_stream) {
        const std::string events = p.finish_reason.empty() ? g.responses_stream->piece(p)
                                                           : g.responses_stream->finish(p, g.usage());
        if (!events.empty() && !write(events)) return false;
        continue;
      }
      // Text held back as a possible tag, and nothing else in the piece: no empty delta.
      if (p.reasoning_parsed && p.text.empty() && p.reasoning.empty() && p.finish_reason.empty() &&
          !g.prep.logprobs && !g.prep.return_token_ids)
        continue;
      if (!write(g.chunk(g.choice_json(p, true)))) return false;
    }
  std::optional<ApiError> error = g.channel->error();
  if (!error && g.assembler->error()) error = ApiError{500, *g.assembler->error(), ""};
  if (error || finished) {
    if (g.responses_stream) {  // the final event went out with the finishing piece; no [DONE]
      if (error && !write(g.responses_stream->error(*error))) return false;
      g.done = true;
      sink.done();
      return true;
    }
    if (error) {
      if (!write(sse_event(api_error_json(*error)))) return false;
    } else if (g.prep.include_usage) {
      const char* object = g.prep.chat ? "chat.completion.chunk" : "text_completion";
      if (!write(sse_event(usage_chunk_json(g.prep.meta, object, g.usage())))) return false;
    }
    if (!write(kSseDone)) return false;
    g.done = true;
    sink.done();
    return true;
  }
  // Mid-stream the probe is a Server-Sent Events comment line, which clients skip.
  return !g.watch.gone([&] { return write(": \n\n"); });
}

void run_generation(ServerContext& ctx, const httplib::Request& req, httplib::Response& res,
                    ApiResult<PreparedGeneration> prepared, std::optional<ResponsesRequest> responses = std::nullopt) {
  if (!prepared.is_ok()) return send_error(res, prepared.error());
  auto g = std::make_shared<Generation>();
  g->ctx = &ctx;
  g->prep = std::move(prepared.value());
  g->responses = std::move(responses);
  const char* prefix = g->responses ? "resp_" : g->prep.chat ? "chatcmpl-" : "cmpl-";
  // vLLM's: an X-Request-Id header names the request before the body's request_id does.
  const std::string id = req.has_header("X-Request-Id") ? req.get_header_value("X-Request-Id") : g->prep.request_id;
  g->prep.meta.id = id.empty() ? ctx.new_id(prefix) : prefix + id;
  g->prep.meta.created = static_cast<int64_t>(std::time(nullptr));
  for (EngineJob& job : g->prep.jobs) job.log_id = g->prep.meta.id;
  if (g->responses && g->prep.stream)
    g->responses_stream = std::make_unique<ResponsesStream>(&*g->responses, g->prep.meta, g->item_id());
  g->channel = std::make_shared<ResponseChannel>(static_cast<int>(g->prep.jobs.size()));
  g->assembler = std::make_unique<OutputAssembler>(g->prep.assembler);
  g->token_text = make_token_text(g->prep.tokens_as_ids ? nullptr : g->prep.tokenizer);
  g->text_offsets.assign(g->prep.jobs.size() * static_cast<size_t>(g->prep.assembler.n), 0);
  g->tool_streams.assign(g->text_offsets.size(), ToolStream(&g->prep.tools));
  g->reasoning.assign(g->text_offsets.size(), ReasoningStream(ctx.options.reasoning_parser));
  g->watch = ClientWatch(find_connection_socket(req.local_addr, req.local_port, req.remote_addr, req.remote_port));
  g->http11 = req.version == "HTTP/1.1";

  if (auto busy = ctx.loop->submit(std::move(g->prep.jobs), g->channel)) return send_error(res, *busy);
  if (!await_admission(*g, res)) return;
  if (!g->prep.stream) return respond_whole(*g, res);

  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  ++ctx.open_streams;
  res.set_chunked_content_provider(
      "text/event-stream", [g](size_t, httplib::DataSink& sink) { return stream_step(*g, sink); },
      // Runs once the response is over, however it ended; if early (write failure,
      // provider false, server stop), abort what is still generating.
      [g](bool) {
        if (!g->done) g->cancel();
        --g->ctx->open_streams;
      });
}

}  // namespace

ModelView model_view(const ServerContext& ctx) {
  ModelView v{ctx.model_name,   ctx.loop->max_model_len(), ctx.loop->tokenizer(), ctx.loop,
              ctx.options.chat_template.get(), ctx.options.tools, &ctx.automata};
  v.max_tokens_cap = ctx.options.max_tokens_cap;
  v.force_include_usage = ctx.options.enable_force_include_usage;
  v.tokens_as_ids = ctx.options.return_tokens_as_token_ids;
  v.response_role = ctx.options.response_role;
  v.trust_request_chat_template = ctx.options.trust_request_chat_template;
  const std::vector<std::string>& names = ctx.options.served_model_names;
  if (names.size() > 1) v.base_aliases.assign(names.begin() + 1, names.end());
  return v;
}

void handle_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  auto parsed = parse_completion_request(req.body, ctx.options.sampling_defaults);
  if (!parsed.is_ok()) return send_error(res, parsed.error());
  run_generation(ctx, req, res, prepare_completion(model_view(ctx), std::move(parsed.value())));
}

void handle_chat_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  auto parsed = parse_chat_request(req.body, ctx.options.sampling_defaults);
  if (!parsed.is_ok()) return send_error(res, parsed.error());
  run_generation(ctx, req, res, prepare_chat(model_view(ctx), std::move(parsed.value())));
}

void handle_responses(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  auto parsed = parse_responses_request(req.body, ctx.options.sampling_defaults);
  if (!parsed.is_ok()) return send_error(res, parsed.error());
  ResponsesRequest r = std::move(parsed).value();
  auto prepared = prepare_chat(model_view(ctx), r.chat);
  if (prepared.is_ok()) prepared.value().include_usage = false;  // the usage is in the final event
  run_generation(ctx, req, res, std::move(prepared), std::move(r));
}

void handle_invocations(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  auto body = parse_json_object(req.body);
  if (!body.is_ok()) return send_error(res, body.error());
  if (body.value().contains("messages")) return handle_chat_completions(ctx, req, res);
  if (body.value().contains("prompt")) return handle_completions(ctx, req, res);
  send_error(res, ApiError::bad_request("/invocations needs \"messages\" (a chat completion) or \"prompt\" "
                                        "(a completion)"));
}

}  // namespace quiver
