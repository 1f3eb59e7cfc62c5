// Response JSON in the shapes the official OpenAI clients parse (and vLLM's extensions:
// stop_reason, token_ids, prompt_token_ids).
#include "server/openai_response.h"

#include <cmath>
#include <cstdlib>

namespace quiver {

using nlohmann::json;

namespace {

// JSON has no -inf; vLLM reports impossible tokens as -9999.0.
double clamp_logprob(float lp) { return std::isfinite(lp) ? static_cast<double>(lp) : -9999.0; }

json or_null(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }
json stop_reason_json(const ChoicePiece& p) {
  if (!p.stop_reason.has_value()) return nullptr;
  if (p.stop_reason_is_token) return std::strtoll(p.stop_reason->c_str(), nullptr, 10);
  return *p.stop_reason;
}

json utf8_bytes(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// Legacy completions block: tokens, token_logprobs, top_logprobs ({text: logprob}, the
// top-K plus the chosen token, as vLLM reports them) and text_offset.
json completion_logprobs_json(const ChoicePiece& p, const TokenText& token_text, size_t text_offset) {
  json tokens = json::array(), token_lps = json::array(), tops = json::array(), offsets = json::array();
  size_t offset = text_offset;
  auto add = [&](int32_t id, const TokenLogprobs* lp) {
    const std::string text = token_text(id);
    tokens.push_back(text);
    offsets.push_back(offset);
    offset += text.size();
    if (lp == nullptr) {
      token_lps.push_back(nullptr);
      tops.push_back(nullptr);
      return;
    }
    token_lps.push_back(clamp_logprob(lp->logprob));
    json top = json::object();
    for (const auto& [tid, tlp] : lp->top) top[token_text(tid)] = clamp_logprob(tlp);
    top[text] = clamp_logprob(lp->logprob);
    tops.push_back(std::move(top));
  };
  for (size_t i = 0; i < p.echo_token_ids.size(); ++i) {
    const auto* lp = i < p.echo_logprobs.size() && p.echo_logprobs[i].has_value() ? &*p.echo_logprobs[i] : nullptr;
    add(p.echo_token_ids[i], lp);
  }
  for (size_t i = 0; i < p.token_ids.size(); ++i) add(p.token_ids[i], i < p.logprobs.size() ? &p.logprobs[i] : nullptr);
  return json{{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

// Chat block: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}.
json chat_logprobs_json(const ChoicePiece& p, const TokenText& token_text) {
  json content = json::array();
  for (size_t i = 0; i < p.token_ids.size() && i < p.logprobs.size(); ++i) {
    const TokenLogprobs& lp = p.logprobs[i];
    const std::string text = token_text(p.token_ids[i]);
    json top = json::array();
    for (const auto& [tid, tlp] : lp.top) {
      const std::string t = token_text(tid);
      top.push_back({{"token", t}, {"logprob", clamp_logprob(tlp)}, {"bytes", utf8_bytes(t)}});
    }
    content.push_back(
        {{"token", text}, {"logprob", clamp_logprob(lp.logprob)}, {"bytes", utf8_bytes(text)}, {"top_logprobs", top}});
  }
  return json{{"content", content}};
}

// vLLM's prompt_logprobs: per prompt position null (the first) or {"<token id>": {logprob,
// rank, decoded_token}} for the top-K and the prompt's actual token.
json prompt_logprobs_json(const std::vector<std::optional<TokenLogprobs>>& positions, const TokenText& token_text) {
  json out = json::array();
  for (const auto& pos : positions) {
    if (!pos.has_value()) {
      out.push_back(nullptr);
      continue;
    }
    json entry = json::object();
    for (size_t i = 0; i < pos->top.size(); ++i) {
      const auto& [id, lp] = pos->top[i];
      entry[std::to_string(id)] = {
          {"logprob", clamp_logprob(lp)}, {"rank", static_cast<int>(i) + 1}, {"decoded_token", token_text(id)}};
    }
    entry[std::to_string(pos->token)] = {
        {"logprob", clamp_logprob(pos->logprob)}, {"rank", pos->rank}, {"decoded_token", token_text(pos->token)}};
    out.push_back(std::move(entry));
  }
  return out;
}

json envelope(const ResponseMeta& meta, const char* object, json choices) {
  return json{{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model},
              {"choices", std::move(choices)}};
}

}  // namespace

json usage_json(const Usage& u) {
  json j{{"prompt_tokens", u.prompt_tokens},
         {"completion_tokens", u.completion_tokens},
         {"total_tokens", u.prompt_tokens + u.completion_tokens}};
  if (u.prompt_tokens_details) j["prompt_tokens_details"] = {{"cached_tokens", u.cached_tokens}};
  return j;
}

namespace {
// vLLM's return_token_ids: the choice's token ids (and the prompt's, on the first piece).
void add_token_ids(json& c, const ChoicePiece& p, bool return_token_ids) {
  if (!return_token_ids) return;
  c["token_ids"] = p.token_ids;
  if (p.prompt_token_ids.has_value()) c["prompt_token_ids"] = *p.prompt_token_ids;
}
}  // namespace

json completion_choice_json(const ChoicePiece& p, bool logprobs, const TokenText& token_text, size_t text_offset,
                            bool return_token_ids) {
  json c = {{"index", p.index},
            {"text", p.text},
            {"logprobs", logprobs ? completion_logprobs_json(p, token_text, text_offset) : json(nullptr)},
            {"finish_reason", or_null(p.finish_reason)},
            {"stop_reason", stop_reason_json(p)}};
  add_token_ids(c, p, return_token_ids);
  if (p.prompt_logprobs.has_value()) c["prompt_logprobs"] = prompt_logprobs_json(*p.prompt_logprobs, token_text);
  return c;
}

json completion_response_json(const ResponseMeta& meta, json choices, const Usage& usage) {
  json r = envelope(meta, "text_completion", std::move(choices));
  r["usage"] = usage_json(usage);
  return r;
}

json completion_chunk_json(const ResponseMeta& meta, json choices) {
  return envelope(meta, "text_completion", std::move(choices));
}

json chat_choice_json(const ChoicePiece& p, const std::string& role, bool logprobs, const TokenText& token_text,
                      bool return_token_ids) {
  // With tool calls or reasoning and no other text, content is null, as OpenAI and vLLM send it.
  const json content = p.text.empty() && (!p.tool_calls.empty() || p.reasoning_parsed) ? json(nullptr) : json(p.text);
  json message = {{"role", role}, {"content", content}, {"tool_calls", p.tool_calls}};
  if (p.reasoning_parsed) {  // vLLM's field, and its earlier name
    message["reasoning"] = p.reasoning.empty() ? json(nullptr) : json(p.reasoning);
    message["reasoning_content"] = message["reasoning"];
  }
  json c = {{"index", p.index},
            {"message", std::move(message)},
            {"logprobs", logprobs ? chat_logprobs_json(p, token_text) : json(nullptr)},
            {"finish_reason", or_null(p.finish_reason)},
            {"stop_reason", stop_reason_json(p)}};
  add_token_ids(c, p, return_token_ids);
  return c;
}

json chat_delta_choice_json(const ChoicePiece& p, const std::string& role, bool logprobs, const TokenText& token_text,
                            bool return_token_ids) {
  json delta = json::object();
  const bool with_role = !role.empty();
  if (with_role) delta["role"] = role;
  if (!p.reasoning.empty()) delta["reasoning"] = delta["reasoning_content"] = p.reasoning;
  if (with_role || !p.text.empty()) delta["content"] = p.text;
  if (!p.tool_calls.empty()) {
    json calls = p.tool_calls;
    for (size_t i = 0; i < calls.size(); ++i) calls[i]["index"] = i;  // a stream's calls are numbered
    delta["tool_calls"] = std::move(calls);
  }
  json c = {{"index", p.index},
            {"delta", std::move(delta)},
            {"logprobs", logprobs && !p.token_ids.empty() ? chat_logprobs_json(p, token_text) : json(nullptr)},
            {"finish_reason", or_null(p.finish_reason)},
            {"stop_reason", stop_reason_json(p)}};
  add_token_ids(c, p, return_token_ids);
  return c;
}

json chat_response_json(const ResponseMeta& meta, json choices, const Usage& usage) {
  json r = envelope(meta, "chat.completion", std::move(choices));
  r["usage"] = usage_json(usage);
  return r;
}

json chat_chunk_json(const ResponseMeta& meta, json choices) {
  return envelope(meta, "chat.completion.chunk", std::move(choices));
}

json usage_chunk_json(const ResponseMeta& meta, const char* object, const Usage& usage) {
  json r = envelope(meta, object, json::array());
  r["usage"] = usage_json(usage);
  return r;
}

std::string safe_dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse_event(const json& j) { return "data: " + safe_dump(j) + "\n\n"; }

}  // namespace quiver
