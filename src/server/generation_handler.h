// The two generation routes, /v1/completions and /v1/chat/completions: parse, pick the
// model or adapter, tokenize, check the context, submit to the engine loop, then answer
// with one JSON object or a Server-Sent Events stream. /invocations (SageMaker's route, as
// vLLM serves it) is either, by its body.
#pragma once

#include <httplib.h>

#include "server/generation_prepare.h"
#include "server/server_context.h"

namespace quiver {

// What request preparation needs to know about the running server (also /tokenize's).
ModelView model_view(const ServerContext& ctx);

void handle_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_chat_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
// POST /v1/responses: OpenAI's Responses API on the chat pipeline (responses_api.h).
void handle_responses(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
// A body with "messages" is a chat completion, one with "prompt" a completion.
void handle_invocations(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);

}  // namespace quiver
