// libFuzzer target for the OpenAI request parsers (completions, chat, responses) and the
// error/response JSON they feed,
// and for the tool call parsers, whole and streamed, reading the same bytes as model output.
// Not part of the CMake build: tools/fuzz.sh openai_parser compiles it with clang's
// -fsanitize=fuzzer,address,undefined together with the two pure server files it needs.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/openai_protocol.h"
#include "server/openai_response.h"
#include "server/responses_api.h"
#include "server/tool_stream.h"

namespace {

// Every error must serialise; every accepted request must be self-consistent.
void check_error(const quiver::ApiError& e) {
  if (e.status < 400 || e.status > 599 || e.message.empty()) __builtin_trap();
  (void)quiver::safe_dump(quiver::api_error_json(e));
}

void check_common(const quiver::CommonRequest& r) {
  const auto& p = r.params;
  if (p.n < 1 || p.n > quiver::kMaxChoices) __builtin_trap();
  if (p.temperature < 0 || !(p.top_p > 0 && p.top_p <= 1) || p.min_p < 0 || p.min_p > 1) __builtin_trap();
  if (p.logprobs > quiver::kMaxLogprobs || p.prompt_logprobs > quiver::kMaxLogprobs) __builtin_trap();
  if (r.max_tokens.has_value() && *r.max_tokens < 1) __builtin_trap();
  if (r.include_usage && !r.stream) __builtin_trap();
  for (const auto& s : p.stop)
    if (s.empty()) __builtin_trap();
}

// Each parser on `text` as a model's answer: the streamed content (fed in pieces of 7 bytes)
// and the calls agree with the whole-text parse, and every call is OpenAI-shaped.
void check_tools(std::string_view text) {
  const std::string answer(text);
  for (auto parser : {quiver::ToolCallParser::kLlama3Json, quiver::ToolCallParser::kHermes,
                      quiver::ToolCallParser::kMistral, quiver::ToolCallParser::kPythonic}) {
    quiver::ToolPlan plan;
    plan.mode = quiver::ToolPlan::Mode::kAuto;
    plan.parser = parser;
    int n = 0;
    auto ids = [&n] { return std::to_string(n++); };
    const quiver::ParsedTools whole = quiver::parse_tool_output(answer, plan, ids);
    quiver::ToolStream stream(&plan);
    std::string content;
    size_t at = 0;
    for (; answer.size() - at > 7; at += 7) content += stream.feed(answer.substr(at, 7));
    n = 0;
    const quiver::ParsedTools last = stream.finish(answer.substr(at), ids);
    content += last.content;
    if (last.tool_calls != whole.tool_calls) __builtin_trap();
    if (content != (whole.tool_calls.empty() ? answer : whole.content)) __builtin_trap();
    for (const auto& call : whole.tool_calls)
      if (!call["function"]["name"].is_string() || !call["function"]["arguments"].is_string()) __builtin_trap();
    (void)quiver::safe_dump(whole.tool_calls);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);

  auto completion = quiver::parse_completion_request(body);
  if (completion.is_ok()) {
    check_common(completion.value());
    if (completion.value().prompts.empty()) __builtin_trap();
    for (const auto& p : completion.value().prompts)
      if (!p.text.has_value() && p.token_ids.empty()) __builtin_trap();
  } else {
    check_error(completion.error());
  }

  auto chat = quiver::parse_chat_request(body);
  if (chat.is_ok()) {
    check_common(chat.value());
    const auto& m = chat.value().messages;
    if (!m.is_array() || m.empty()) __builtin_trap();
    for (const auto& msg : m)
      if (msg.contains("content") && !msg["content"].is_string() && !msg["content"].is_null()) __builtin_trap();
    (void)quiver::safe_dump(m);
  } else {
    check_error(chat.error());
  }

  auto load = quiver::parse_load_lora_request(body);
  if (load.is_ok() && (load.value().name.empty() || load.value().path.empty())) __builtin_trap();
  if (!load.is_ok()) check_error(load.error());
  auto unload = quiver::parse_unload_lora_request(body);
  if (!unload.is_ok()) check_error(unload.error());
  auto responses = quiver::parse_responses_request(body);
  if (responses.is_ok()) {
    check_common(responses.value().chat);
    if (responses.value().chat.messages.empty()) __builtin_trap();
    (void)quiver::safe_dump(nlohmann::json(responses.value().echo));
  } else {
    check_error(responses.error());
  }
  check_tools(body);
  return 0;
}
