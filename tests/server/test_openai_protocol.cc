// OpenAI request parsing (shapes, defaults, 400s that name the parameter) and response
// JSON (choices, logprob blocks, chunks, SSE framing).
#include <gtest/gtest.h>

#include <algorithm>

#include "server/openai_protocol.h"
#include "server/openai_response.h"
#include "server/tool_calls.h"

namespace quiver {
namespace {

using nlohmann::json;

TEST(OpenAiParse, CompletionPromptShapes) {
  auto text = parse_completion_request(R"({"prompt": "hi"})");
  ASSERT_TRUE(text.is_ok());
  ASSERT_EQ(text.value().prompts.size(), 1u);
  EXPECT_EQ(*text.value().prompts[0].text, "hi");
  EXPECT_FALSE(text.value().max_tokens.has_value());  // 16 is applied later

  auto texts = parse_completion_request(R"({"prompt": ["a", "b"]})");
  ASSERT_TRUE(texts.is_ok());
  EXPECT_EQ(texts.value().prompts.size(), 2u);

  auto ids = parse_completion_request(R"({"prompt": [1, 2, 3]})");
  ASSERT_TRUE(ids.is_ok());
  EXPECT_EQ(ids.value().prompts[0].token_ids, (std::vector<int32_t>{1, 2, 3}));

  auto lists = parse_completion_request(R"({"prompt": [[1], [2, 3]]})");
  ASSERT_TRUE(lists.is_ok());
  ASSERT_EQ(lists.value().prompts.size(), 2u);
  EXPECT_EQ(lists.value().prompts[1].token_ids, (std::vector<int32_t>{2, 3}));
}

TEST(OpenAiParse, CompletionFields) {
  auto r = parse_completion_request(
      R"({"model": "sql", "prompt": [5], "max_tokens": 7, "temperature": 0, "top_p": 0.5, "top_k": 3,
          "min_p": 0.1, "n": 2, "stop": "x", "seed": -1, "logprobs": 2, "echo": true, "stream": true,
          "stream_options": {"include_usage": true}, "presence_penalty": 1, "frequency_penalty": -1,
          "repetition_penalty": 1.5, "return_token_ids": true, "ignore_eos": true, "user": "ignored"})");
  ASSERT_TRUE(r.is_ok()) << r.error().message;
  const CompletionRequest& c = r.value();
  EXPECT_EQ(c.model, "sql");
  EXPECT_EQ(*c.max_tokens, 7);
  EXPECT_EQ(c.params.temperature, 0.0f);
  EXPECT_EQ(c.params.top_k, 3);
  EXPECT_EQ(c.params.n, 2);
  EXPECT_EQ(c.params.stop, (std::vector<std::string>{"x"}));
  EXPECT_EQ(*c.params.seed, static_cast<uint64_t>(-1));
  EXPECT_EQ(c.params.logprobs, 2);
  EXPECT_TRUE(c.echo && c.stream && c.include_usage && c.return_token_ids && c.params.ignore_eos);
  EXPECT_FLOAT_EQ(c.params.repetition_penalty, 1.5f);
}

TEST(OpenAiParse, ErrorsNameTheParameter) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({})", "prompt"},
      {R"({"prompt": []})", "prompt"},
      {R"({"prompt": [1, "a"]})", "prompt"},
      {R"({"prompt": [-1]})", "prompt"},
      {R"({"prompt": [[]]})", "prompt"},
      {R"({"prompt": ""})", "prompt"},
      {R"({"prompt": [1], "temperature": -0.1})", "temperature"},
      {R"({"prompt": [1], "temperature": "hot"})", "temperature"},
      {R"({"prompt": [1], "top_p": 0})", "top_p"},
      {R"({"prompt": [1], "top_p": 1.01})", "top_p"},
      {R"({"prompt": [1], "top_k": -2})", "top_k"},
      {R"({"prompt": [1], "min_p": 2})", "min_p"},
      {R"({"prompt": [1], "n": 0})", "n"},
      {R"({"prompt": [1], "n": 1.5})", "n"},
      {R"({"prompt": [1], "max_tokens": 0})", "max_tokens"},
      {R"({"prompt": [1], "max_tokens": 1e20})", "max_tokens"},
      {R"({"prompt": [1], "logprobs": 21})", "logprobs"},
      {R"({"prompt": [1], "presence_penalty": 2.5})", "presence_penalty"},
      {R"({"prompt": [1], "repetition_penalty": 0})", "repetition_penalty"},
      {R"({"prompt": [1], "stop": [1]})", "stop"},
      {R"({"prompt": [1], "stop": [""]})", "stop"},
      {R"({"prompt": [1], "stream_options": {"include_usage": true}})", "stream_options"},
      {R"({"prompt": [1], "stream": "yes"})", "stream"},
      {R"({"prompt": [1], "best_of": 3})", "best_of"},
      {R"({"prompt": [1], "logit_bias": {"five": 1}})", "logit_bias"},
      {R"({"prompt": [1], "logit_bias": {"-5": 1}})", "logit_bias"},
      {R"({"prompt": [1], "logit_bias": {"5": 101}})", "logit_bias"},
      {R"({"prompt": [1], "logit_bias": {"5": "1"}})", "logit_bias"},
      {R"({"prompt": [1], "logit_bias": [5, 1]})", "logit_bias"},
      {R"({"prompt": [1], "suffix": "x"})", "suffix"},
      {R"({"prompt": [1], "model": 5})", "model"},
      {R"({"prompt": [1], "min_tokens": 20})", "min_tokens"},
      {R"({"prompt": [1], "allowed_token_ids": []})", "allowed_token_ids"},
      {R"({"prompt": [1], "allowed_token_ids": [-1]})", "allowed_token_ids"},
      {R"({"prompt": [1], "allowed_token_ids": 5})", "allowed_token_ids"},
      {R"({"prompt": [1], "bad_words": "x"})", "bad_words"},
      {R"({"prompt": [1], "bad_words": [1]})", "bad_words"},
      {R"({"prompt": [1], "bad_words": [" "]})", "bad_words"},
      {R"({"prompt": [1], "truncate_prompt_tokens": 0})", "truncate_prompt_tokens"},
      {R"({"prompt": [1], "truncate_prompt_tokens": -2})", "truncate_prompt_tokens"},
      {R"({"prompt": [1], "priority": 1.5})", "priority"},
      {R"({"prompt": [1], "cache_salt": ""})", "cache_salt"},
      {R"({"prompt": [1], "cache_salt": 7})", "cache_salt"},
      {R"({"prompt": [1], "use_beam_search": 1})", "use_beam_search"},
      {R"({"prompt": [1], "length_penalty": "long"})", "length_penalty"},
  };
  for (const auto& [body, param] : cases) {
    auto r = parse_completion_request(body);
    ASSERT_FALSE(r.is_ok()) << body;
    EXPECT_EQ(r.error().status, 400) << body;
    EXPECT_EQ(r.error().param, param) << body << ": " << r.error().message;
  }
}

TEST(OpenAiParse, VllmSamplingAndSchedulingFields) {
  auto r = parse_completion_request(
      R"({"prompt": [1], "allowed_token_ids": [3, 9], "bad_words": ["no", " way out"], "truncate_prompt_tokens": -1,
          "priority": -4, "cache_salt": "tenant-a", "use_beam_search": true, "length_penalty": 0.5})");
  ASSERT_TRUE(r.is_ok()) << r.error().message;
  const CompletionRequest& c = r.value();
  EXPECT_EQ(c.params.allowed_token_ids, (std::vector<int32_t>{3, 9}));
  EXPECT_EQ(c.params.bad_words, (std::vector<std::string>{"no", " way out"}));
  EXPECT_EQ(c.params.truncate_prompt_tokens, -1);
  EXPECT_EQ(c.priority, -4);
  EXPECT_EQ(c.cache_salt, "tenant-a");
  EXPECT_TRUE(c.use_beam_search);
  EXPECT_FLOAT_EQ(c.length_penalty, 0.5f);
  auto chat = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "x"}], "truncate_prompt_tokens": 8, "priority": 2})");
  ASSERT_TRUE(chat.is_ok()) << chat.error().message;
  EXPECT_EQ(chat.value().params.truncate_prompt_tokens, 8);
  EXPECT_EQ(chat.value().priority, 2);
  EXPECT_FALSE(chat.value().cache_salt.has_value());
}

TEST(OpenAiParse, LogitBias) {
  auto r = parse_completion_request(R"({"prompt": [1], "logit_bias": {"5": 1.5, "1000": -100}})");
  ASSERT_TRUE(r.is_ok()) << r.error().message;
  auto bias = r.value().params.logit_bias;
  std::sort(bias.begin(), bias.end());
  EXPECT_EQ(bias, (std::vector<std::pair<int32_t, float>>{{5, 1.5f}, {1000, -100.0f}}));
}

TEST(OpenAiParse, MalformedBodies) {
  for (const char* body : {"", "{", "[1]", "\"x\"", "null", "{\"prompt\": [1]} trailing"}) {
    auto r = parse_completion_request(body);
    ASSERT_FALSE(r.is_ok()) << body;
    EXPECT_EQ(r.error().status, 400);
  }
  std::string deep(10000, '[');
  EXPECT_FALSE(parse_json_object(deep).is_ok());
  // Brackets inside strings do not count as nesting.
  std::string brackets_in_string = R"({"prompt": ")";
  brackets_in_string.append(1000, '[');
  brackets_in_string.append(R"("})");
  EXPECT_TRUE(parse_json_object(brackets_in_string).is_ok());
}

TEST(OpenAiParse, Chat) {
  auto r = parse_chat_request(
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                       {"role": "assistant", "content": null}],
          "max_tokens": 5, "max_completion_tokens": 9, "logprobs": true, "top_logprobs": 3,
          "tools": [{"type": "function"}], "chat_template_kwargs": {"enable_thinking": false}})");
  ASSERT_TRUE(r.is_ok()) << r.error().message;
  const ChatRequest& c = r.value();
  EXPECT_EQ(c.messages[0]["content"], "a\nb");
  EXPECT_TRUE(c.messages[1]["content"].is_null());
  EXPECT_EQ(*c.max_tokens, 9);
  EXPECT_EQ(c.params.logprobs, 3);
  EXPECT_EQ(c.template_variables["enable_thinking"], false);
  EXPECT_TRUE(c.template_variables["tools"].is_array());

  // continue_final_message needs add_generation_prompt false, as in vLLM.
  auto cont = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "x"}], "continue_final_message": true, "add_generation_prompt": false})");
  ASSERT_TRUE(cont.is_ok()) << cont.error().message;
  EXPECT_TRUE(cont.value().continue_final_message && !cont.value().add_generation_prompt);
  EXPECT_FALSE(cont.value().echo);
  EXPECT_TRUE(parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "echo": true})").value().echo);
  EXPECT_EQ(parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "continue_final_message": true})")
                .error()
                .param,
            "continue_final_message");

  EXPECT_EQ(parse_chat_request(R"({"messages": []})").error().param, "messages");
  EXPECT_EQ(parse_chat_request(R"({"messages": [{"content": "x"}]})").error().param, "messages");
  EXPECT_EQ(parse_chat_request(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})").error().param,
            "messages");
  EXPECT_EQ(parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})").error().param,
            "top_logprobs");
  EXPECT_EQ(parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": 1}})")
                .error()
                .param,
            "response_format");
  // No logprobs asked for: none computed.
  EXPECT_EQ(parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}]})").value().params.logprobs, -1);
}

// What the chat template prints with `tojson` keeps the body's key order, as vLLM's Python
// dicts do (nlohmann::json would sort it), and an assistant's tool call arguments reach the
// template as the object their JSON string holds, in its own order.
TEST(OpenAiParse, ChatKeepsKeyOrderAndToolArgumentsAsObjects) {
  auto r = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "weather?"},
                       {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                        "function": {"name": "get_weather", "arguments": "{\"unit\": \"c\", \"city\": \"Oslo\"}"}}]},
                       {"role": "tool", "tool_call_id": "c1", "content": "3"}],
          "tools": [{"type": "function", "function": {"name": "get_weather", "description": "d",
                     "parameters": {"type": "object", "properties": {"unit": {}, "city": {}}}}}],
          "chat_template_kwargs": {"z": 1, "a": 2}, "documents": [{"title": "t", "text": "x"}]})");
  ASSERT_TRUE(r.is_ok()) << r.error().message;
  const ChatRequest& c = r.value();
  EXPECT_EQ(c.messages[1]["tool_calls"][0]["function"].dump(),
            R"({"name":"get_weather","arguments":{"unit":"c","city":"Oslo"}})");
  EXPECT_EQ(c.messages[2].dump(), R"({"role":"tool","tool_call_id":"c1","content":"3"})");
  EXPECT_EQ(c.template_variables["tools"].dump(),
            R"([{"type":"function","function":{"name":"get_weather","description":"d","parameters":{"type":"object",)"
            R"("properties":{"unit":{},"city":{}}}}}])");
  EXPECT_EQ(c.template_variables.dump(), R"({"tools":)" + c.template_variables["tools"].dump() +
                                             R"(,"z":1,"a":2,"documents":[{"title":"t","text":"x"}]})");
  for (const char* wrong_type : {R"({"messages": [{"role": "assistant", "tool_calls": [{"type": 1,
                                     "function": {}}]}]})",
                                 R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": 1}],
                                     "tool_choice": "required"})"}) {
    auto r = parse_chat_request(wrong_type);  // a 400, not an exception
    if (r.is_ok()) {
      EXPECT_FALSE(plan_tools(r.value().tools, r.value().tool_choice, ToolOptions{}).is_ok()) << wrong_type;
    }
  }
  auto bad = parse_chat_request(R"({"messages": [{"role": "assistant", "tool_calls": [{"type": "function",
                                    "function": {"name": "f", "arguments": "{oops"}}]}]})");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.error().param, "messages");
  EXPECT_NE(bad.error().message.find("messages[0].tool_calls"), std::string::npos) << bad.error().message;
}

TEST(OpenAiParse, LoraBodies) {
  auto load = parse_load_lora_request(R"({"lora_name": "a", "lora_path": "/p"})");
  ASSERT_TRUE(load.is_ok());
  EXPECT_EQ(load.value().path, "/p");
  EXPECT_EQ(parse_load_lora_request(R"({"lora_name": "a"})").error().param, "lora_path");
  EXPECT_EQ(parse_unload_lora_request(R"({"lora_name": 3})").error().param, "lora_name");
  EXPECT_EQ(parse_unload_lora_request(R"({"lora_name": "a"})").value(), "a");
}

TEST(OpenAiResponse, ErrorShape) {
  json e = api_error_json(ApiError::not_found("nope", "model"));
  EXPECT_EQ(e["error"]["code"], 404);
  EXPECT_EQ(e["error"]["type"], "NotFoundError");
  EXPECT_EQ(e["error"]["param"], "model");
  EXPECT_TRUE(api_error_json(ApiError{503, "busy", ""})["error"]["param"].is_null());
}

TEST(OpenAiResponse, CompletionLogprobsAndEcho) {
  ChoicePiece p;
  p.index = 1;
  p.text = "PROMPT+gen";
  p.token_ids = {7};
  TokenLogprobs lp;
  lp.token = 7;
  lp.logprob = -0.5f;
  lp.top = {{7, -0.5f}, {8, -1.0f}};
  p.logprobs = {lp};
  p.echo_token_ids = {3, 4};
  p.echo_logprobs = {std::nullopt, lp};
  p.finish_reason = "stop";
  p.stop_reason = "7";
  p.stop_reason_is_token = true;
  auto text = [](int32_t id) {
    std::string s = "t";  // (not "t" + ...: g++ 12 raises a false -Wrestrict on that)
    return s.append(std::to_string(id));
  };
  json c = completion_choice_json(p, true, text, 0, true);
  EXPECT_EQ(c["index"], 1);
  EXPECT_EQ(c["stop_reason"], 7);
  EXPECT_EQ(c["token_ids"], json::array({7}));
  const json& l = c["logprobs"];
  EXPECT_EQ(l["tokens"], json::array({"t3", "t4", "t7"}));
  EXPECT_TRUE(l["token_logprobs"][0].is_null());
  EXPECT_EQ(l["text_offset"], json::array({0, 2, 4}));
  EXPECT_EQ(l["top_logprobs"][2].size(), 2u);
  EXPECT_DOUBLE_EQ(l["top_logprobs"][2]["t8"].get<double>(), -1.0);
}

TEST(OpenAiResponse, ChatChunksAndSse) {
  ChoicePiece p;
  p.token_ids = {1};
  TokenLogprobs lp;
  lp.logprob = -std::numeric_limits<float>::infinity();
  lp.top = {{1, -1.0f}};
  p.logprobs = {lp};
  p.text = "\xff";  // not UTF-8 on its own
  auto text = [](int32_t) { return std::string("\xe2\x82"); };
  json d = chat_delta_choice_json(p, "assistant", true, text, false);
  EXPECT_EQ(d["delta"]["role"], "assistant");
  EXPECT_DOUBLE_EQ(d["logprobs"]["content"][0]["logprob"].get<double>(), -9999.0);
  EXPECT_EQ(d["logprobs"]["content"][0]["bytes"], json::array({0xe2, 0x82}));
  ResponseMeta meta{"chatcmpl-1", "m", 5};
  const std::string event = sse_event(chat_chunk_json(meta, json::array({d})));
  EXPECT_EQ(event.rfind("data: {", 0), 0u);
  EXPECT_EQ(event.substr(event.size() - 2), "\n\n");
  EXPECT_NE(event.find("\xEF\xBF\xBD"), std::string::npos);  // invalid bytes become U+FFFD, no throw
  json u = usage_chunk_json(meta, "chat.completion.chunk", Usage{3, 4});
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["total_tokens"], 7);
}

}  // namespace
}  // namespace quiver
