// Strict request keys: unknown keys and unsupported vLLM/OpenAI parameters are 400s naming
// the key; the no-op value of an unsupported parameter, JSON null, and the structured-output
// and tool keys pass; implemented extras (prompt_logprobs, add_special_tokens, request_id,
// documents) reach the parsed request.
#include <gtest/gtest.h>

#include <string>

#include "io/json_fields.h"
#include "server/openai_protocol.h"
#include "server/openai_response.h"

namespace quiver {
namespace {

using nlohmann::json;

std::string completion(const std::string& extra) { return R"({"prompt": [1], )" + extra + "}"; }
std::string chat(const std::string& extra) {
  return R"({"messages": [{"role": "user", "content": "x"}], )" + extra + "}";
}

TEST(RequestFields, UnknownKeyIsNamed) {
  auto completion_typo = parse_completion_request(completion(R"("max_token": 3)"));
  auto chat_typo = parse_chat_request(chat(R"("max_token": 3)"));
  ASSERT_FALSE(completion_typo.is_ok() || chat_typo.is_ok());
  for (const ApiError* e : {&completion_typo.error(), &chat_typo.error()}) {
    EXPECT_EQ(e->status, 400);
    EXPECT_EQ(e->param, "max_token");
    EXPECT_NE(e->message.find("unknown field 'max_token'"), std::string::npos) << e->message;
  }
  // The issue's examples: none of these is a parameter of either endpoint.
  for (const char* key : {"lora_request", "detokenize"}) {
    std::string extra = "\"";
    extra.append(key).append("\": 1");
    auto r = parse_completion_request(completion(extra));
    ASSERT_FALSE(r.is_ok()) << key;
    EXPECT_EQ(r.error().param, key);
  }
  // A key that exists on one endpoint only is unknown on the other.
  auto top = parse_completion_request(completion(R"("top_logprobs": 2)"));
  ASSERT_FALSE(top.is_ok());
  EXPECT_EQ(top.error().param, "top_logprobs");
  auto prompt = parse_chat_request(chat(R"("prompt": "x")"));
  ASSERT_FALSE(prompt.is_ok());
  EXPECT_EQ(prompt.error().param, "prompt");
}

TEST(RequestFields, UnsupportedKeyIsSaidSo) {
  const std::pair<const char*, const char*> completions[] = {
      {R"("logits_processors": ["x"])", "logits_processors"},
      {R"("suffix": "x")", "suffix"},
      {R"("prompt_embeds": "x")", "prompt_embeds"},
  };
  for (const auto& [extra, key] : completions) {
    auto r = parse_completion_request(completion(extra));
    ASSERT_FALSE(r.is_ok()) << extra;
    EXPECT_EQ(r.error().param, key);
    EXPECT_NE(r.error().message.find("is not supported"), std::string::npos) << r.error().message;
  }
  for (const char* extra : {R"("mm_processor_kwargs": {})", R"("reasoning_effort": "low")", R"("store": true)"}) {
    auto r = parse_chat_request(chat(extra));
    ASSERT_FALSE(r.is_ok()) << extra;
    EXPECT_NE(r.error().message.find("is not supported"), std::string::npos) << r.error().message;
  }
}

TEST(RequestFields, NoOpValuesNullAndDelegatedKeysPass) {
  for (const char* extra : {R"("use_beam_search": false)", R"("length_penalty": 1)", R"("priority": 0)",
                            R"("truncate_prompt_tokens": null)", R"("bad_words": [])", R"("user": "u1")",
                            R"("guided_json": {"type": "object"})", R"("guided_regex": "a+")",
                            R"("guided_choice": ["a"])",
                            R"("structured_outputs": {"regex": "a"})", R"("response_format": {"type": "text"})"}) {
    auto r = parse_completion_request(completion(extra));
    EXPECT_TRUE(r.is_ok()) << extra << ": " << r.error().message;
  }
  // Delegated keys are parsed where they are implemented, which refuses what it lacks.
  auto grammar = parse_completion_request(completion(R"("guided_grammar": "x")"));
  ASSERT_FALSE(grammar.is_ok());
  EXPECT_NE(grammar.error().message.find("guided_grammar is not supported"), std::string::npos);
  for (const char* extra : {R"("tools": [])", R"("tool_choice": "auto")", R"("parallel_tool_calls": true)",
                            R"("echo": false)", R"("include_reasoning": true)", R"("max_completion_tokens": 4)"}) {
    auto r = parse_chat_request(chat(extra));
    EXPECT_TRUE(r.is_ok()) << extra << ": " << r.error().message;
  }
}

// The options inside structured_outputs are judged by their own names, wherever they stand
// beside the constraint (an option after it was once called a second constraint).
TEST(RequestFields, StructuredOutputOptionsAreNamed) {
  for (const char* ok : {R"({"regex": "a", "disable_fallback": true})",
                         R"({"regex": "a", "disable_any_whitespace": false, "disable_additional_properties": false})"}) {
    auto r = parse_completion_request(completion(std::string(R"("structured_outputs": )") + ok));
    EXPECT_TRUE(r.is_ok()) << ok << ": " << r.error().message;
  }
  const std::pair<const char*, const char*> refused[] = {
      {R"({"regex": "a", "disable_any_whitespace": true})", "structured_outputs.disable_any_whitespace=true"},
      {R"({"json": {}, "disable_additional_properties": true})", "structured_outputs.disable_additional_properties=true"},
      {R"({"json": {}, "whitespace_pattern": " "})", "structured_outputs.whitespace_pattern is not supported"},
      {R"({"regex": "a", "disable_fallback": 1})", "structured_outputs.disable_fallback must be a boolean"},
      {R"({"regex": "a", "choice": ["b"]})", "give only one of"},
  };
  for (const auto& [body, message] : refused) {
    auto r = parse_completion_request(completion(std::string(R"("structured_outputs": )") + body));
    ASSERT_FALSE(r.is_ok()) << body;
    EXPECT_NE(r.error().message.find(message), std::string::npos) << body << ": " << r.error().message;
  }
}

TEST(RequestFields, ImplementedExtrasReachTheRequest) {
  auto r = parse_completion_request(
      completion(R"("prompt_logprobs": 2, "add_special_tokens": false, "request_id": "abc",
                    "return_tokens_as_token_ids": true)"));
  ASSERT_TRUE(r.is_ok()) << r.error().message;
  EXPECT_EQ(r.value().params.prompt_logprobs, 2);
  EXPECT_EQ(r.value().add_special_tokens, std::optional<bool>(false));
  EXPECT_EQ(r.value().request_id, "abc");
  EXPECT_TRUE(r.value().return_tokens_as_token_ids);

  auto c = parse_chat_request(chat(R"("documents": [{"title": "t", "text": "d"}])"));
  ASSERT_TRUE(c.is_ok()) << c.error().message;
  EXPECT_EQ(c.value().template_variables["documents"][0]["title"], "t");

  // vLLM refuses prompt logprobs on a stream.
  auto s = parse_completion_request(completion(R"("prompt_logprobs": 1, "stream": true)"));
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.error().param, "prompt_logprobs");
}

TEST(RequestFields, StreamOptionsKeys) {
  auto usage = parse_completion_request(completion(R"("stream": true, "stream_options": {})"));
  ASSERT_TRUE(usage.is_ok()) << usage.error().message;
  EXPECT_TRUE(usage.value().include_usage);  // vLLM's default once stream_options is given
  auto off = parse_completion_request(completion(R"("stream": true, "stream_options": {"include_usage": false})"));
  ASSERT_TRUE(off.is_ok());
  EXPECT_FALSE(off.value().include_usage);
  auto typo = parse_completion_request(completion(R"("stream": true, "stream_options": {"include_usag": true})"));
  ASSERT_FALSE(typo.is_ok());
  EXPECT_NE(typo.error().message.find("include_usag"), std::string::npos);
  auto cont = parse_chat_request(chat(R"("stream": true, "stream_options": {"continuous_usage_stats": true})"));
  ASSERT_TRUE(cont.is_ok()) << cont.error().message;
  EXPECT_TRUE(cont.value().include_usage && cont.value().continuous_usage);
  auto bad = parse_chat_request(chat(R"("stream": true, "stream_options": {"continuous_usage_stats": 1})"));
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.error().message.find("continuous_usage_stats"), std::string::npos) << bad.error().message;
}

TEST(RequestFields, PromptLogprobsOnTheChoice) {
  ChoicePiece p;
  p.text = "x";
  TokenLogprobs second;
  second.token = 7;
  second.logprob = -2.5f;
  second.rank = 3;
  second.top = {{4, -0.5f}, {9, -1.0f}};
  p.prompt_logprobs = std::vector<std::optional<TokenLogprobs>>{std::nullopt, second};
  const TokenText text = [](int32_t id) { return std::to_string(id).insert(0, 1, 't'); };
  const json c = completion_choice_json(p, false, text, 0, false);
  ASSERT_TRUE(c.contains("prompt_logprobs"));
  const json& pl = c["prompt_logprobs"];
  ASSERT_EQ(pl.size(), 2u);
  EXPECT_TRUE(pl[0].is_null());
  EXPECT_EQ(pl[1].size(), 3u);
  EXPECT_EQ(pl[1]["7"]["rank"], 3);
  EXPECT_DOUBLE_EQ(pl[1]["7"]["logprob"].get<double>(), -2.5);
  EXPECT_EQ(pl[1]["7"]["decoded_token"], "t7");
  EXPECT_EQ(pl[1]["4"]["rank"], 1);
  EXPECT_EQ(pl[1]["9"]["rank"], 2);
  // Without prompt logprobs asked, the key is absent (as before).
  EXPECT_FALSE(completion_choice_json(ChoicePiece{}, false, text, 0, false).contains("prompt_logprobs"));
}

TEST(JsonFields, FirstProblemNamesTheKey) {
  const FieldRule rules[] = {{"a"}, {"b", FieldUse::kUnsupported, "false"}, {"c", FieldUse::kUnsupported}};
  EXPECT_FALSE(check_fields(json{{"a", 1}, {"b", false}, {"c", nullptr}}, rules, "api").has_value());
  auto b = check_fields(json{{"b", true}}, rules, "api");
  ASSERT_TRUE(b.has_value());
  EXPECT_FALSE(b->unknown);
  EXPECT_EQ(b->field, "b");
  auto d = check_fields(json{{"d", 0}}, rules, "api");
  ASSERT_TRUE(d.has_value());
  EXPECT_TRUE(d->unknown);
  EXPECT_NE(d->message.find("api"), std::string::npos);
}

}  // namespace
}  // namespace quiver
