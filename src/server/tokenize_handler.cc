#include "server/tokenize_handler.h"

#include "server/generation_handler.h"
#include "server/http_reply.h"
#include "tokenizer/tokenizer.h"

namespace quiver {

using nlohmann::json;

namespace {

ApiResult<bool> read_bool(const json& j, const char* key, bool fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) return ApiError::bad_request(std::string(key) + " must be a boolean", key);
  return j[key].get<bool>();
}

// The tokenizer of the model field (the base model when absent), which must name the base
// model or an adapter; the tokenizer must exist.
ApiResult<std::shared_ptr<const Tokenizer>> model_tokenizer(const ModelView& view, const json& j, const char* param) {
  std::string model;
  if (j.contains("model") && !j["model"].is_null()) {
    if (!j["model"].is_string()) return ApiError::bad_request("model must be a string", "model");
    model = j["model"].get<std::string>();
  }
  auto found = resolve_model(view, model);
  if (!found.is_ok()) return found.error();
  if (found.value().tokenizer == nullptr) return ApiError::bad_request("this model has no tokenizer", param);
  return found.value().tokenizer;
}

}  // namespace

ApiResult<json> tokenize_response(const ModelView& view, std::string_view body) {
  auto parsed = parse_json_object(body);
  if (!parsed.is_ok()) return parsed.error();
  const json& j = parsed.value();
  const bool chat = j.contains("messages");
  if (chat == j.contains("prompt"))
    return ApiError::bad_request("give exactly one of 'prompt' (a string) or 'messages'", "prompt");
  auto tokenizer = model_tokenizer(view, j, chat ? "messages" : "prompt");
  if (!tokenizer.is_ok()) return tokenizer.error();
  const Tokenizer& tok = *tokenizer.value();
  auto add_special = read_bool(j, "add_special_tokens", /*fallback=*/!chat);
  if (!add_special.is_ok()) return add_special.error();
  std::string text;
  if (chat) {
    // The chat request parser validates messages, tools and chat_template_kwargs the same
    // way /v1/chat/completions does.
    auto request = chat_request_from_json(j, nlohmann::ordered_json::parse(body.begin(), body.end(), nullptr, false));
    if (!request.is_ok()) return request.error();
    const ChatRequest& r = request.value();
    auto rendered = render_chat(tok, r, view);
    if (!rendered.is_ok()) return rendered.error();
    text = std::move(rendered).value();
  } else {
    if (!j["prompt"].is_string()) return ApiError::bad_request("prompt must be a string", "prompt");
    text = j["prompt"].get<std::string>();
  }
  auto ids = tok.encode(text, add_special.value());
  if (!ids.is_ok()) return ApiError::bad_request(ids.message(), chat ? "messages" : "prompt");
  return json{{"count", ids.value().size()}, {"max_model_len", view.max_model_len}, {"tokens", ids.value()}};
}

ApiResult<json> detokenize_response(const ModelView& view, std::string_view body) {
  auto parsed = parse_json_object(body);
  if (!parsed.is_ok()) return parsed.error();
  const json& j = parsed.value();
  auto tokenizer = model_tokenizer(view, j, "tokens");
  if (!tokenizer.is_ok()) return tokenizer.error();
  const Tokenizer& tok = *tokenizer.value();
  if (!j.contains("tokens") || !j["tokens"].is_array())
    return ApiError::bad_request("tokens must be a list of token ids", "tokens");
  std::vector<int32_t> ids;
  for (const auto& t : j["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok.vocab_size())
      return ApiError::bad_request("tokens must be token ids in [0, " + std::to_string(tok.vocab_size()) + "), got " +
                                       t.dump(),
                                   "tokens");
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  auto text = tok.decode(ids, /*skip_special_tokens=*/false);
  if (!text.is_ok()) return ApiError::bad_request(text.message(), "tokens");
  return json{{"prompt", text.value()}};
}

void handle_tokenize(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  auto r = tokenize_response(model_view(ctx), req.body);
  if (!r.is_ok()) return send_error(res, r.error());
  send_json(res, 200, r.value());
}

void handle_detokenize(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  auto r = detokenize_response(model_view(ctx), req.body);
  if (!r.is_ok()) return send_error(res, r.error());
  send_json(res, 200, r.value());
}

}  // namespace quiver
