// vLLM's POST /tokenize and /detokenize: the token ids the server would compute for a
// prompt (or for chat messages through the chat template), and the text of token ids —
// what clients use to count tokens against max_model_len before sending a request.
#pragma once

#include <httplib.h>

#include <string_view>

#include "server/generation_prepare.h"
#include "server/server_context.h"

namespace quiver {

// {"prompt": text, "add_special_tokens": true} or {"messages": [...], "add_generation_prompt":
// true, "add_special_tokens": false, chat_template_kwargs / tools}, optional "model" ->
// {"count", "max_model_len", "tokens"}; errors as API errors naming the field. "model" picks
// the tokenizer (and chat template): an adapter's own where it has one, else the base's.
ApiResult<nlohmann::json> tokenize_response(const ModelView& view, std::string_view body);
// {"tokens": [ids], optional "model"} -> {"prompt": text}.
ApiResult<nlohmann::json> detokenize_response(const ModelView& view, std::string_view body);

void handle_tokenize(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
void handle_detokenize(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);

}  // namespace quiver
