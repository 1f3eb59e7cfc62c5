// Streaming a chat choice under a tool plan (ToolStream): for each parser and answers with
// and without calls, fed whole, token-sized and one byte at a time, the streamed content
// is the answer's text up to its first call (all of it without calls), no byte of a call
// marker goes out as content, and the calls equal what the whole-text parser finds; an
// answer without calls streams as it comes.
#include <gtest/gtest.h>

#include "server/tool_stream.h"

namespace quiver {
namespace {

using nlohmann::json;

ToolPlan auto_plan(ToolCallParser parser) {
  ToolPlan plan;
  plan.mode = ToolPlan::Mode::kAuto;
  plan.parser = parser;
  return plan;
}

std::function<std::string()> ids() {
  auto n = std::make_shared<int>(0);
  return [n] { return "call-" + std::to_string((*n)++); };
}

struct Streamed {
  std::vector<std::string> sent;  // what each feed returned
  ParsedTools last;               // finish()
  std::string content() const {
    std::string all;
    for (const std::string& s : sent) all += s;
    return all + last.content;
  }
};

// The text cut every `step` bytes; the last cut goes to finish().
Streamed stream(const ToolPlan& plan, const std::string& text, size_t step) {
  ToolStream s(&plan);
  Streamed out;
  size_t at = 0;
  while (text.size() - at > step) {
    out.sent.push_back(s.feed(text.substr(at, step)));
    at += step;
  }
  out.last = s.finish(text.substr(at), ids());
  return out;
}

void expect_like_whole(const ToolPlan& plan, const std::string& text, const std::string& content_before_calls) {
  const ParsedTools whole = parse_tool_output(text, plan, ids());
  for (size_t step : {text.size() + 1, size_t{3}, size_t{1}}) {
    SCOPED_TRACE("step " + std::to_string(step) + ": " + text);
    const Streamed s = stream(plan, text, step);
    EXPECT_EQ(s.last.tool_calls, whole.tool_calls);
    EXPECT_EQ(s.content(), whole.tool_calls.empty() ? text : content_before_calls);
    EXPECT_EQ(s.content(), whole.tool_calls.empty() ? text : whole.content);  // the whole response's content
  }
}

TEST(ToolStream, HermesStreamsContentUntilTheFirstCall) {
  const ToolPlan plan = auto_plan(ToolCallParser::kHermes);
  const std::string call = R"(<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>)";
  expect_like_whole(plan, "Let me check. " + call + "\n" + call, "Let me check. ");
  expect_like_whole(plan, call, "");
  expect_like_whole(plan, "No tools needed: 2 < 3, and <tool is not a tag.", "");
  expect_like_whole(plan, "Broken: <tool_call>{not json</tool_call>", "");  // no call parsed: all content
  // Byte by byte, nothing of the marker is ever sent, and content before it goes out as it comes.
  const Streamed s = stream(plan, "Hi <tool_call>" + call.substr(11), 1);
  EXPECT_EQ(s.sent[0], "H");
  EXPECT_EQ(s.sent[2], " ");
  for (size_t i = 3; i < s.sent.size(); ++i) EXPECT_EQ(s.sent[i], "") << i;
  ASSERT_EQ(s.last.tool_calls.size(), 1u);
  EXPECT_EQ(s.content(), "Hi ");
}

TEST(ToolStream, MistralStreamsContentUntilItsToken) {
  const ToolPlan plan = auto_plan(ToolCallParser::kMistral);
  const std::string calls = R"([TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Oslo"}}])";
  expect_like_whole(plan, "Sure. " + calls, "Sure. ");
  expect_like_whole(plan, calls, "");
  expect_like_whole(plan, "An [array] of [TOOL words", "");
}

TEST(ToolStream, Llama3JsonDecidesOnTheFirstCharacters) {
  const ToolPlan plan = auto_plan(ToolCallParser::kLlama3Json);
  const std::string call = R"({"name": "get_weather", "parameters": {"city": "Oslo"}})";
  expect_like_whole(plan, call, "");
  expect_like_whole(plan, "  <|python_tag|>" + call + "; " + call, "");
  expect_like_whole(plan, "The weather is fine {really}.", "");
  expect_like_whole(plan, "<|python", "");  // cut short: only the tag's start, which is content
  expect_like_whole(plan, "{not a call", "");
  const Streamed text = stream(plan, "  Sunny.", 1);
  EXPECT_EQ(text.sent[0], "");  // blanks: undecided
  EXPECT_EQ(text.sent[2], "  S");
  EXPECT_EQ(text.sent[3], "u");
  const Streamed tag = stream(plan, "<|python_tag|>" + call, 1);
  for (const std::string& piece : tag.sent) EXPECT_EQ(piece, "");
  EXPECT_EQ(tag.last.content, "");
  ASSERT_EQ(tag.last.tool_calls.size(), 1u);
}

TEST(ToolStream, PythonicDecidesOnTheFirstCharacter) {
  const ToolPlan plan = auto_plan(ToolCallParser::kPythonic);
  expect_like_whole(plan, "[get_weather(city='Oslo'), ping()]", "");
  expect_like_whole(plan, "It is [sunny] today.", "");
  expect_like_whole(plan, "[not_a_call", "");
  const Streamed text = stream(plan, "Sunny.", 1);
  EXPECT_EQ(text.sent[0], "S");
  const Streamed calls = stream(plan, "[ping()]", 1);
  for (const std::string& piece : calls.sent) EXPECT_EQ(piece, "");
  ASSERT_EQ(calls.last.tool_calls.size(), 1u);
}

TEST(ToolStream, RequiredAndNamedHoldEverything) {
  ToolPlan plan;
  plan.mode = ToolPlan::Mode::kNamed;
  plan.function = "get_weather";
  const Streamed s = stream(plan, R"({"city": "Oslo"})", 2);
  for (const std::string& piece : s.sent) EXPECT_EQ(piece, "");
  ASSERT_EQ(s.last.tool_calls.size(), 1u);
  EXPECT_EQ(s.last.tool_calls[0]["function"]["arguments"], R"({"city": "Oslo"})");
  EXPECT_EQ(s.content(), "");
}

}  // namespace
}  // namespace quiver
