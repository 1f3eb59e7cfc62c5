#include "server/responses_api.h"

#include "io/json_fields.h"
#include "io/json_util.h"

namespace quiver {

namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr FieldUse kNo = FieldUse::kUnsupported;

// OpenAI's ResponseCreateParams and vLLM's additions. Fields with a no-op only are checked
// in read_echo (their refusals say why).
constexpr FieldRule kResponsesFields[] = {
    {"model"},
    {"input"},
    {"instructions"},
    {"max_output_tokens"},
    {"temperature"},
    {"top_p"},
    {"tools"},
    {"tool_choice"},
    {"parallel_tool_calls"},
    {"stream"},
    {"stream_options"},
    {"store"},  // accepted, never stored: the response says "store": false, as vLLM's default
    {"metadata"},
    {"user"},
    {"safety_identifier"},
    {"prompt_cache_key"},  // the prefix cache needs no key
    {"text"},
    {"include"},
    {"reasoning"},
    {"truncation"},
    {"top_logprobs"},
    {"previous_response_id"},
    {"background"},
    {"top_k"},
    {"min_p"},
    {"repetition_penalty"},
    {"seed"},
    {"request_id"},
    {"priority"},
    {"cache_salt"},
    {"service_tier", kNo, "\"auto\""},
    {"conversation", kNo},
    {"prompt", kNo},
    {"max_tool_calls", kNo},
};

// Chat fields a Responses field became, for error messages.
std::string responses_param(const std::string& chat_param) {
  if (chat_param == "messages") return "input";
  if (chat_param == "max_tokens") return "max_output_tokens";
  if (chat_param == "response_format") return "text";
  return chat_param;
}

std::optional<ApiError> refuse(const std::string& message, const char* field) {
  return ApiError::bad_request(message, field);
}

// A message item's content: a string, or text parts (input_text, output_text), joined.
std::optional<ApiError> message_content(const ojson& content, std::string* out) {
  if (content.is_string()) {
    *out = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array()) return refuse("a message's content must be a string or a list of text parts", "input");
  for (const ojson& part : content) {
    const std::string type = part.is_object() ? string_field_or(part, "type", "") : "";
    if ((type != "input_text" && type != "output_text" && type != "text") || !part.contains("text") ||
        !part["text"].is_string())
      return refuse("only text content parts ({\"type\": \"input_text\", \"text\": ...}) are supported", "input");
    if (!out->empty()) *out += "\n";
    *out += part["text"].get<std::string>();
  }
  return std::nullopt;
}

// The input items as chat messages: messages (developer as system), function calls as an
// assistant message's tool_calls (consecutive ones in one message), their outputs as tool
// messages; reasoning items are context the template does not take, and are left out.
std::optional<ApiError> input_messages(const ojson& input, ojson* messages) {
  if (input.is_string()) {
    messages->push_back({{"role", "user"}, {"content", input}});
    return std::nullopt;
  }
  if (!input.is_array() || input.empty()) return refuse("input must be a string or a non-empty list of items", "input");
  for (const ojson& item : input) {
    if (!item.is_object()) return refuse("each input item must be an object", "input");
    const std::string type = item.contains("type") ? string_field_or(item, "type", "")
                             : item.contains("role") ? "message"
                                                     : "";
    if (type == "message") {
      if (!item.contains("role") || !item["role"].is_string()) return refuse("a message item needs a role", "input");
      std::string role = item["role"].get<std::string>(), text;
      if (role == "developer") role = "system";
      if (role != "system" && role != "user" && role != "assistant")
        return refuse("a message's role must be user, assistant, system or developer", "input");
      if (auto e = message_content(item.contains("content") ? item["content"] : ojson(""), &text)) return e;
      messages->push_back({{"role", role}, {"content", text}});
    } else if (type == "function_call") {
      for (const char* key : {"call_id", "name", "arguments"})
        if (!item.contains(key) || !item[key].is_string())
          return refuse(std::string("a function_call item needs a string ") + key, "input");
      const ojson call = {{"id", item["call_id"]},
                          {"type", "function"},
                          {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}};
      const bool joins = !messages->empty() && string_field_or(messages->back(), "role", "") == "assistant" &&
                         messages->back().contains("tool_calls");
      if (joins) messages->back()["tool_calls"].push_back(call);
      else messages->push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", ojson::array({call})}});
    } else if (type == "function_call_output") {
      if (!item.contains("call_id") || !item["call_id"].is_string() || !item.contains("output") ||
          !item["output"].is_string())
        return refuse("a function_call_output item needs a string call_id and output", "input");
      messages->push_back({{"role", "tool"}, {"tool_call_id", item["call_id"]}, {"content", item["output"]}});
    } else if (type != "reasoning") {
      return refuse("input item type '" + type +
                        "' is not supported (supported: message, function_call, function_call_output, reasoning)",
                    "input");
    }
  }
  if (messages->empty()) return refuse("input has no message", "input");
  return std::nullopt;
}

// Function tools ({"type": "function", "name", "description", "parameters"}) in chat's shape.
std::optional<ApiError> chat_tools(const ojson& tools, ojson* out) {
  if (!tools.is_array()) return refuse("tools must be a list", "tools");
  *out = ojson::array();
  for (const ojson& t : tools) {
    if (!t.is_object() || string_field_or(t, "type", "") != "function" || !t.contains("name") || !t["name"].is_string())
      return refuse("only function tools ({\"type\": \"function\", \"name\": ..., \"parameters\": ...}) are supported",
                    "tools");
    ojson f = {{"name", t["name"]}};
    if (t.contains("description")) f["description"] = t["description"];
    if (t.contains("parameters")) f["parameters"] = t["parameters"];
    out->push_back({{"type", "function"}, {"function", std::move(f)}});
  }
  return std::nullopt;
}

// text.format as chat's response_format: text (none), json_object, json_schema.
std::optional<ApiError> response_format(const ojson& text, ojson* out) {
  if (!text.is_object()) return refuse("text must be an object", "text");
  if (!text.contains("format") || text["format"].is_null()) return std::nullopt;
  const ojson& f = text["format"];
  const std::string type = f.is_object() ? string_field_or(f, "type", "") : "";
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    *out = {{"type", "json_object"}};
  } else if (type == "json_schema" && f.contains("schema") && (!f.contains("name") || f["name"].is_string())) {
    ojson schema = {{"name", string_field_or(f, "name", "response")}, {"schema", f["schema"]}};
    if (f.contains("strict")) schema["strict"] = f["strict"];
    *out = {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
  } else {
    return refuse("text.format must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or {\"type\": "
                  "\"json_schema\", \"name\": ..., \"schema\": {...}}",
                  "text");
  }
  return std::nullopt;
}

bool null_or(const ojson& body, const char* key, const std::function<bool(const ojson&)>& ok) {
  return !body.contains(key) || body[key].is_null() || ok(body[key]);
}

// Fields that ask for what is not kept or not computed: refused with the reason.
std::optional<ApiError> refuse_unkept(const ojson& body) {
  if (!null_or(body, "previous_response_id", [](const ojson&) { return false; }))
    return refuse("previous_response_id needs stored responses, which quiver does not keep (send the whole "
                  "conversation as input)",
                  "previous_response_id");
  if (!null_or(body, "background", [](const ojson& v) { return v == false; }))
    return refuse("background mode needs stored responses, which quiver does not keep", "background");
  if (!null_or(body, "include", [](const ojson& v) { return v.is_array() && v.empty(); }))
    return refuse("include is not supported (no encrypted reasoning, logprobs or search results to add)", "include");
  if (!null_or(body, "reasoning", [](const ojson& v) {
        return v.is_object() && (!v.contains("effort") || v["effort"].is_null());
      }))
    return refuse("reasoning.effort is not supported: the models quiver serves take no effort setting", "reasoning");
  if (!null_or(body, "truncation", [](const ojson& v) { return v == "disabled"; }))
    return refuse("truncation \"auto\" is not supported (an input past the context is a 400)", "truncation");
  if (!null_or(body, "top_logprobs", [](const ojson& v) { return v == 0; }))
    return refuse("top_logprobs is not supported on /v1/responses (use /v1/chat/completions)", "top_logprobs");
  return std::nullopt;
}

}  // namespace

ApiResult<ResponsesRequest> parse_responses_request(std::string_view body, const SamplingParams& defaults) {
  auto parsed = parse_json_object(body);
  if (!parsed.is_ok()) return parsed.error();
  if (auto problem = check_fields(parsed.value(), kResponsesFields, "/v1/responses"))
    return ApiError::bad_request(problem->message, problem->field);
  const ojson in = ojson::parse(body.begin(), body.end(), nullptr, false);  // in the body's key order
  if (auto e = refuse_unkept(in)) return *e;

  ojson messages = ojson::array();
  if (in.contains("instructions") && !in["instructions"].is_null()) {
    if (!in["instructions"].is_string()) return ApiError::bad_request("instructions must be a string", "instructions");
    messages.push_back({{"role", "system"}, {"content", in["instructions"]}});
  }
  if (!in.contains("input") || in["input"].is_null()) return ApiError::bad_request("input is required", "input");
  if (auto e = input_messages(in["input"], &messages)) return *e;

  ojson chat = {{"messages", std::move(messages)}};
  for (const char* key : {"model", "temperature", "top_p", "tool_choice", "parallel_tool_calls", "stream", "user",
                          "top_k", "min_p", "repetition_penalty", "seed", "request_id", "priority", "cache_salt"})
    if (in.contains(key)) chat[key] = in[key];
  if (in.contains("max_output_tokens")) chat["max_tokens"] = in["max_output_tokens"];
  if (in.contains("tool_choice") && in["tool_choice"].is_object()) {  // {"type": "function", "name": ...}
    const ojson& c = in["tool_choice"];
    if (string_field_or(c, "type", "") != "function" || !c.contains("name"))
      return ApiError::bad_request("tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                                   "\"name\": ...}",
                                   "tool_choice");
    chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", c["name"]}}}};
  }
  if (in.contains("tools") && !in["tools"].is_null()) {
    ojson tools;
    if (auto e = chat_tools(in["tools"], &tools)) return *e;
    chat["tools"] = std::move(tools);
  }
  if (in.contains("text") && !in["text"].is_null()) {
    ojson format;
    if (auto e = response_format(in["text"], &format)) return *e;
    if (!format.is_null()) chat["response_format"] = std::move(format);
  }
  if (in.contains("metadata") && !in["metadata"].is_null() && !in["metadata"].is_object())
    return ApiError::bad_request("metadata must be an object of strings", "metadata");

  auto request = parse_chat_request(chat.dump(), defaults);
  if (!request.is_ok()) {
    ApiError e = request.error();
    e.param = responses_param(e.param);
    return e;
  }
  ResponsesRequest r;
  r.chat = std::move(request).value();
  auto given = [&](const char* key, ojson fallback) {
    return in.contains(key) && !in[key].is_null() ? in[key] : std::move(fallback);
  };
  r.echo = {{"instructions", given("instructions", nullptr)},
            {"max_output_tokens", given("max_output_tokens", nullptr)},
            {"parallel_tool_calls", given("parallel_tool_calls", true)},
            {"previous_response_id", nullptr},
            {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
            {"store", false},
            {"temperature", given("temperature", nullptr)},
            {"text", given("text", {{"format", {{"type", "text"}}}})},
            {"tool_choice", given("tool_choice", "auto")},
            {"tools", given("tools", ojson::array())},
            {"top_p", given("top_p", nullptr)},
            {"truncation", "disabled"},
            {"user", given("user", nullptr)},
            {"metadata", given("metadata", ojson::object())}};
  return r;
}

json response_output_items(const ChoicePiece& choice, const std::function<std::string(const char*)>& new_id) {
  json items = json::array();
  if (!choice.reasoning.empty())
    items.push_back({{"id", new_id("rs_")},
                     {"type", "reasoning"},
                     {"summary", json::array()},
                     {"content", json::array({{{"type", "reasoning_text"}, {"text", choice.reasoning}}})},
                     {"status", "completed"}});
  if (!choice.text.empty() || (choice.tool_calls.empty() && choice.reasoning.empty()))
    items.push_back({{"id", new_id("msg_")},
                     {"type", "message"},
                     {"role", "assistant"},
                     {"status", response_status(choice)},  // "incomplete" when cut at max_output_tokens
                     {"content", json::array({{{"type", "output_text"},
                                               {"text", choice.text},
                                               {"annotations", json::array()},
                                               {"logprobs", json::array()}}})}});
  for (const json& call : choice.tool_calls)
    items.push_back({{"id", new_id("fc_")},
                     {"type", "function_call"},
                     {"call_id", call["id"]},
                     {"name", call["function"]["name"]},
                     {"arguments", call["function"]["arguments"]},
                     {"status", "completed"}});
  return items;
}

std::string response_status(const ChoicePiece& choice) {
  return choice.finish_reason == "length" ? "incomplete" : "completed";
}

json responses_usage_json(const Usage& usage) {
  return {{"input_tokens", usage.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", usage.cached_tokens}}},
          {"output_tokens", usage.completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
}

json response_object(const ResponsesRequest& request, const ResponseMeta& meta, const std::string& status,
                     json output, const Usage* usage) {
  json r = json(request.echo);
  r.update({{"id", meta.id},
            {"object", "response"},
            {"created_at", meta.created},
            {"status", status},
            {"background", false},
            {"error", nullptr},
            {"incomplete_details", nullptr},
            {"model", meta.model},
            {"output", std::move(output)},
            {"usage", usage ? responses_usage_json(*usage) : json(nullptr)}});
  if (status == "incomplete") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
  return r;
}

}  // namespace quiver
