// The Responses API's pure parts: a request read as the chat request it means (input items,
// instructions, tools, text.format), errors naming the Responses field, the fields refused
// because responses are not stored; a choice as output items; the event stream's order.
#include <gtest/gtest.h>

#include "server/responses_stream.h"

namespace quiver {
namespace {

using nlohmann::json;

ResponsesRequest parse(const std::string& body) {
  auto r = parse_responses_request(body);
  EXPECT_TRUE(r.is_ok()) << body << ": " << (r.is_ok() ? "" : r.error().message);
  return r.is_ok() ? std::move(r).value() : ResponsesRequest{};
}

std::string refused(const std::string& body) {
  auto r = parse_responses_request(body);
  EXPECT_FALSE(r.is_ok()) << body;
  return r.is_ok() ? "" : r.error().param;
}

TEST(Responses, InputItemsBecomeChatMessages) {
  ResponsesRequest r = parse(R"({"input": "hi", "instructions": "be brief", "max_output_tokens": 7})");
  EXPECT_EQ(r.chat.messages.dump(),
            R"([{"role":"system","content":"be brief"},{"role":"user","content":"hi"}])");
  EXPECT_EQ(*r.chat.max_tokens, 7);
  r = parse(R"({"input": [
      {"role": "developer", "content": "rules"},
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
      {"type": "reasoning", "id": "rs_1", "summary": []},
      {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"x\": 1}"},
      {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "c1", "output": "42"}]})");
  EXPECT_EQ(r.chat.messages.dump(),
            R"([{"role":"system","content":"rules"},{"role":"user","content":"a\nb"},)"
            R"({"role":"assistant","content":null,"tool_calls":[)"
            R"({"id":"c1","type":"function","function":{"name":"f","arguments":{"x":1}}},)"
            R"({"id":"c2","type":"function","function":{"name":"g","arguments":{}}}]},)"
            R"({"role":"tool","tool_call_id":"c1","content":"42"}])");
  EXPECT_EQ(refused(R"({"input": [{"type": "input_image", "image_url": "x"}]})"), "input");
  EXPECT_EQ(refused(R"({"input": [{"role": "user", "content": [{"type": "input_image"}]}]})"), "input");
  EXPECT_EQ(refused(R"({"input": []})"), "input");
  EXPECT_EQ(refused(R"({"model": "x"})"), "input");
  // Fields of the wrong type are 400s naming the field, not server errors.
  EXPECT_EQ(refused(R"({"input": [{"type": 1, "role": "user", "content": "x"}]})"), "input");
  EXPECT_EQ(refused(R"({"input": [{"type": null, "role": "user", "content": "x"}]})"), "input");
  EXPECT_EQ(refused(R"({"input": [{"role": "user", "content": [{"type": 1, "text": "x"}]}]})"), "input");
  EXPECT_EQ(refused(R"({"input": "x", "tools": [{"type": 1}]})"), "tools");
  EXPECT_EQ(refused(R"({"input": "x", "text": {"format": {"type": 1}}})"), "text");
  EXPECT_EQ(refused(R"({"input": "x", "text": {"format": {"type": "json_schema", "name": 1, "schema": {}}}})"), "text");
  EXPECT_EQ(refused(R"({"input": "x", "tool_choice": {"type": 1}})"), "tool_choice");
  EXPECT_EQ(refused(R"({"input": [{"role": "assistant", "content": null}, {"type": "function_call", "call_id": "c",
                        "name": "f", "arguments": ")" + std::string(1000, '[') + R"("}]})"),
            "input");
}

TEST(Responses, ToolsTextAndSamplingFields) {
  ResponsesRequest r = parse(R"({"input": "hi", "temperature": 0.5, "top_p": 0.9, "seed": 3,
      "tools": [{"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}}],
      "tool_choice": {"type": "function", "name": "f"}, "parallel_tool_calls": false,
      "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}}},
      "store": true, "metadata": {"k": "v"}, "user": "u"})");
  EXPECT_FLOAT_EQ(r.chat.params.temperature, 0.5f);
  EXPECT_EQ(r.chat.tools.dump(),
            R"([{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object"}}}])");
  EXPECT_EQ(r.chat.tool_choice["function"]["name"], "f");
  EXPECT_FALSE(r.chat.parallel_tool_calls);
  EXPECT_TRUE(r.chat.params.structured_outputs.active());
  EXPECT_EQ(r.echo["store"], false);  // never stored, as vLLM by default
  EXPECT_EQ(r.echo["metadata"]["k"], "v");
  EXPECT_EQ(r.echo["tool_choice"]["name"], "f");
  EXPECT_EQ(refused(R"({"input": "x", "tools": [{"type": "web_search"}]})"), "tools");
  EXPECT_EQ(refused(R"({"input": "x", "text": {"format": {"type": "grammar"}}})"), "text");
  EXPECT_EQ(refused(R"({"input": "x", "max_output_tokens": 0})"), "max_output_tokens");
  EXPECT_EQ(refused(R"({"input": "x", "max_tokens": 5})"), "max_tokens");  // not a Responses field
}

TEST(Responses, WhatNeedsStoredResponsesIsRefused) {
  for (const char* field : {R"("previous_response_id": "resp_1")", R"("background": true)",
                            R"("include": ["reasoning.encrypted_content"])", R"("reasoning": {"effort": "high"})",
                            R"("truncation": "auto")", R"("top_logprobs": 2)", R"("conversation": "c")"}) {
    auto r = parse_responses_request(std::string(R"({"input": "x", )") + field + "}");
    ASSERT_FALSE(r.is_ok()) << field;
    EXPECT_NE(std::string(field).find(r.error().param), std::string::npos) << field << ": " << r.error().param;
  }
  parse(R"({"input": "x", "background": false, "include": [], "reasoning": {"effort": null}, "truncation": "disabled",
            "top_logprobs": 0, "service_tier": "auto"})");
}

std::function<std::string(const char*)> ids() {
  auto n = std::make_shared<int>(0);
  return [n](const char* prefix) { return prefix + std::to_string((*n)++); };
}

TEST(Responses, ChoiceAsOutputItems) {
  ChoicePiece p;
  p.reasoning = "think";
  p.text = "answer";
  p.tool_calls = json::parse(R"([{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}])");
  p.finish_reason = "tool_calls";
  const json items = response_output_items(p, ids());
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0]["type"], "reasoning");
  EXPECT_EQ(items[0]["content"][0]["text"], "think");
  EXPECT_EQ(items[1]["type"], "message");
  EXPECT_EQ(items[1]["content"][0]["text"], "answer");
  EXPECT_EQ(items[2]["type"], "function_call");
  EXPECT_EQ(items[2]["call_id"], "c1");
  ChoicePiece empty;
  empty.finish_reason = "length";
  const json one = response_output_items(empty, ids());
  ASSERT_EQ(one.size(), 1u);  // nothing else: still a message, cut short
  EXPECT_EQ(one[0]["status"], "incomplete");
  EXPECT_EQ(response_status(empty), "incomplete");
}

// Events in OpenAI's order, numbered 0, 1, 2, ... as they go out.
TEST(Responses, StreamEventsInOrder) {
  ResponsesRequest r = parse(R"({"input": "hi"})");
  ResponsesStream s(&r, ResponseMeta{"resp_x", "m", 1}, ids());
  std::string all = s.start();
  ChoicePiece a;
  a.text = "Hel";
  all += s.piece(a);
  ChoicePiece b;
  b.text = "lo";
  b.finish_reason = "tool_calls";
  b.tool_calls = json::parse(R"([{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}])");
  all += s.finish(b, Usage{5, 2, 0, false});
  std::vector<std::string> types;
  json last;
  size_t at = 0;
  for (int seq = 0; (at = all.find("data: ", at)) != std::string::npos; ++seq) {
    const size_t end = all.find("\n\n", at);
    last = json::parse(all.substr(at + 6, end - at - 6));
    EXPECT_EQ(last["sequence_number"], seq);
    types.push_back(last["type"]);
    at = end;
  }
  const std::vector<std::string> want = {
      "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
      "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
      "response.content_part.done", "response.output_item.done", "response.output_item.added",
      "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
      "response.completed"};
  EXPECT_EQ(types, want);
  EXPECT_EQ(last["response"]["output"][0]["content"][0]["text"], "Hello");
  EXPECT_EQ(last["response"]["output"][1]["name"], "f");
  EXPECT_EQ(last["response"]["usage"]["total_tokens"], 7);
  EXPECT_NE(all.find("event: response.completed\ndata: "), std::string::npos);
}

}  // namespace
}  // namespace quiver
