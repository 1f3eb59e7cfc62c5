// link: qv_tokenizer
// Chat message content: OpenAI's text parts joined as the server and the Python package join
// them, and continue_final_message's cut, by transformers' rule (the final message's last
// occurrence, stripped; cut after its trailing whitespace when the template kept the message
// as written), on hand-made renders and on a real template (llama3's fixture, which ends
// every render with an assistant header); an assistant's tool call arguments as objects
// (vLLM's rule), rendered by Mistral's tool template as that template expects them.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tokenizer/chat_content.h"
#include "tokenizer/chat_template.h"

namespace quiver {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

json conversation(const std::string& final_text) {
  return json::array({{{"role", "user"}, {"content", "hello"}}, {{"role", "assistant"}, {"content", final_text}}});
}

TEST(ChatContent, TextPartsJoinWithNewlinesAndOtherPartsAreRefused) {
  auto joined = join_text_parts(json::parse(R"([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])"));
  ASSERT_TRUE(joined.is_ok());
  EXPECT_EQ(joined.value(), "a\nb");
  EXPECT_FALSE(join_text_parts(json::parse(R"([{"type": "image_url", "image_url": {}}])")).is_ok());
  EXPECT_FALSE(join_text_parts(json::parse(R"(["a"])")).is_ok());
}

TEST(ChatContent, CutAfterTheFinalMessageByTransformersRule) {
  struct Case {
    std::string rendered, final_text, want;
  };
  const Case cases[] = {
      // The template writes the message as given: cut right after it.
      {"U: hello\nA: Sure, the answer<eot>", "Sure, the answer", "U: hello\nA: Sure, the answer"},
      // ... trailing whitespace included.
      {"U: hello\nA: Sure <eot>", "Sure ", "U: hello\nA: Sure "},
      // The template trims the message: cut after the stripped text.
      {"U: hello\nA: Sure<eot>", "Sure  \n", "U: hello\nA: Sure"},
      // Leading whitespace in the message: the stripped text's end, as transformers.
      {"U: hello\nA:   Sure <eot>", "  Sure ", "U: hello\nA:   Sure"},
      // The last occurrence, not an earlier equal text.
      {"U: Sure\nA: Sure<eot>", "Sure", "U: Sure\nA: Sure"},
  };
  for (const Case& c : cases) {
    auto cut = cut_after_final_message(c.rendered, conversation(c.final_text));
    ASSERT_TRUE(cut.is_ok()) << cut.message();
    EXPECT_EQ(cut.value(), c.want) << c.rendered;
  }
  auto dropped = cut_after_final_message("U: hello\nA: <eot>", conversation("Sure"));
  ASSERT_FALSE(dropped.is_ok());
  EXPECT_NE(dropped.message().find("does not appear"), std::string::npos) << dropped.message();
  json no_text = conversation("x");
  no_text.back()["content"] = nullptr;
  EXPECT_FALSE(cut_after_final_message("U: hello\nA: ", no_text).is_ok());
  EXPECT_FALSE(cut_after_final_message("x", json::array()).is_ok());
}

TEST(ChatContent, RealTemplateEndsInsideTheAssistantTurn) {
  std::ifstream f(std::string(QUIVER_SOURCE_DIR) + "/tests/fixtures/chat_templates/llama3.jinja");
  std::stringstream source;
  source << f.rdbuf();
  auto tmpl = ChatTemplate::parse(source.str());
  ASSERT_TRUE(tmpl.is_ok()) << tmpl.message();
  const json messages = conversation("The capital is");
  auto rendered = tmpl.value().render(messages, false, json{{"bos_token", "<|begin_of_text|>"}});
  ASSERT_TRUE(rendered.is_ok()) << rendered.message();
  auto cut = cut_after_final_message(rendered.value(), messages);
  ASSERT_TRUE(cut.is_ok()) << cut.message();
  // This template ends every render with an assistant header, generation prompt or not: the
  // cut drops it with the final turn's <|eot_id|>.
  EXPECT_EQ(cut.value(),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhello<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nThe capital is");
  EXPECT_EQ(rendered.value().substr(0, cut.value().size()), cut.value());
}

std::string fixture_template(const std::string& name) {
  std::ifstream f(std::string(QUIVER_SOURCE_DIR) + "/tests/fixtures/chat_templates/" + name);
  std::stringstream source;
  source << f.rdbuf();
  return source.str();
}

ojson tool_call(const ojson& arguments) {
  ojson f = {{"name", "get_weather"}};
  if (!arguments.is_discarded()) f["arguments"] = arguments;
  return {{"id", "Ab3dE6gH9"}, {"type", "function"}, {"function", f}};
}

TEST(ChatContent, ToolCallArgumentsBecomeObjects) {
  ojson messages = ojson::array({
      {{"role", "user"}, {"content", "weather?"}},
      {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", ojson::array({
          tool_call(R"({"city": "Oslo", "days": [1, 2]})"), tool_call(ojson::object({{"city", "Rome"}})),
          tool_call(""), tool_call(nullptr), tool_call(ojson(ojson::value_t::discarded))})}},
      {{"role", "assistant"}, {"content", "no calls"}, {"tool_calls", ojson::array()}},
      {{"role", "tool"}, {"content", "{\"t\": 3}"}, {"tool_calls", ojson::array({tool_call("[1")})}},
  });
  ASSERT_TRUE(tool_call_arguments_as_objects(&messages).is_ok());
  const ojson& calls = messages[1]["tool_calls"];
  EXPECT_EQ(calls[0]["function"]["arguments"], ojson::parse(R"({"city": "Oslo", "days": [1, 2]})"));
  EXPECT_EQ(calls[1]["function"]["arguments"], ojson::parse(R"({"city": "Rome"})"));
  for (int i : {2, 3, 4}) EXPECT_EQ(calls[i]["function"]["arguments"], ojson::object()) << i;  // "", null, absent
  EXPECT_FALSE(messages[2].contains("tool_calls"));  // an empty list: the plain assistant path
  EXPECT_EQ(messages[3]["tool_calls"][0]["function"]["arguments"], "[1");  // only an assistant's

  ojson bad_json = ojson::array({{{"role", "assistant"}, {"tool_calls", ojson::array({tool_call("{city")})}}});
  Status s = tool_call_arguments_as_objects(&bad_json);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("messages[0].tool_calls"), std::string::npos) << s.message();
  ojson not_function = ojson::array({{{"role", "assistant"}, {"tool_calls", ojson::array({{{"type", "code"}}})}}});
  EXPECT_FALSE(tool_call_arguments_as_objects(&not_function).is_ok());
  ojson not_object = ojson::array({{{"role", "assistant"}, {"tool_calls", ojson::array({"call"})}}});
  EXPECT_FALSE(tool_call_arguments_as_objects(&not_object).is_ok());
  // Not crashes: a type that is not a string, and arguments nested past the body's limit
  // (the template would recurse through 100,000 levels).
  ojson type_number = ojson::array({{{"role", "assistant"}, {"tool_calls", ojson::array({{{"type", 1}}})}}});
  EXPECT_FALSE(tool_call_arguments_as_objects(&type_number).is_ok());
  const std::string nested = std::string(100000, '[') + std::string(100000, ']');
  ojson deep = ojson::array({{{"role", "assistant"}, {"tool_calls", ojson::array({tool_call(nested)})}}});
  Status too_deep = tool_call_arguments_as_objects(&deep);
  EXPECT_FALSE(too_deep.is_ok());
  EXPECT_NE(too_deep.message().find("nested deeper"), std::string::npos) << too_deep.message();
}

// Mistral's v3 template writes each call as `function|tojson`: with the arguments as the
// JSON string OpenAI sends, the model would read them quoted as a string; as objects they
// come out as the model was trained to write them.
TEST(ChatContent, MistralTemplateWritesToolCallArgumentsAsJson) {
  auto tmpl = ChatTemplate::parse(fixture_template("mistral_v3.jinja"));
  ASSERT_TRUE(tmpl.is_ok()) << tmpl.message();
  ojson messages = ojson::array({
      {{"role", "user"}, {"content", "weather in Oslo?"}},
      {{"role", "assistant"}, {"tool_calls", ojson::array({tool_call(R"({"city": "Oslo"})")})}},
      {{"role", "tool"}, {"tool_call_id", "Ab3dE6gH9"}, {"content", "{\"t\": 3}"}},
  });
  const ojson vars = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  auto as_sent = tmpl.value().render_ordered(messages, false, vars);
  ASSERT_TRUE(as_sent.is_ok()) << as_sent.message();
  EXPECT_NE(as_sent.value().find(R"("arguments": "{\"city\": \"Oslo\"}")"), std::string::npos) << as_sent.value();
  ASSERT_TRUE(tool_call_arguments_as_objects(&messages).is_ok());
  auto rendered = tmpl.value().render_ordered(messages, false, vars);
  ASSERT_TRUE(rendered.is_ok()) << rendered.message();
  const std::string call = R"([{"name": "get_weather", "arguments": {"city": "Oslo"}, "id": "Ab3dE6gH9"}]</s>)";
  EXPECT_NE(rendered.value().find("[TOOL_CALLS] " + call), std::string::npos)
      << rendered.value();
}

}  // namespace
}  // namespace quiver
