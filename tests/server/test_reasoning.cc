// --reasoning-parser: a chat choice's text as reasoning and content, whole and streamed, and
// the fields a response carries them in.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/generation_prepare.h"
#include "server/openai_response.h"
#include "server/reasoning.h"

namespace quiver {
namespace {

constexpr ReasoningParser kR1 = ReasoningParser::kDeepSeekR1;

TEST(Reasoning, DeepSeekR1Splits) {
  struct Case {
    const char* text;
    const char* reasoning;
    const char* content;
  };
  const Case cases[] = {
      {"<think>plan</think>answer", "plan", "answer"},
      {"plan</think>\n\nanswer", "plan", "\n\nanswer"},  // the template opened <think>
      {"plan, still thinking", "plan, still thinking", ""},  // no </think>: all reasoning
      {"<think></think>answer", "", "answer"},
      {"a</think>b</think>c", "a", "b</think>c"},  // only the first closes
      {"x<think>y</think>z", "x<think>y", "z"},    // only a leading <think> is dropped
      {"", "", ""},
  };
  for (const Case& c : cases) {
    const ReasoningSplit s = split_reasoning(c.text, kR1);
    EXPECT_EQ(s.reasoning, c.reasoning) << c.text;
    EXPECT_EQ(s.content, c.content) << c.text;
  }
  const ReasoningSplit none = split_reasoning("<think>a</think>b", ReasoningParser::kNone);
  EXPECT_EQ(none.content, "<think>a</think>b");
  EXPECT_TRUE(none.reasoning.empty());
}

// However the text is cut into pieces, the streamed reasoning and content add up to the
// whole text's split, and no piece sends the closing tag as reasoning.
TEST(Reasoning, StreamingMatchesTheWholeTextAtEveryCut) {
  for (const std::string text : {"<think>plan it</think>the answer", "<think>only thinking", "pla</think>n",
                                 "</think>", "<thin", "<think>a</thin", "no tags at all", "</thinking></think>x"}) {
    const ReasoningSplit whole = split_reasoning(text, kR1);
    for (size_t a = 0; a <= text.size(); ++a) {
      for (size_t b = a; b <= text.size(); ++b) {
        ReasoningStream stream(kR1);
        std::string reasoning, content;
        const std::vector<std::string> pieces = {text.substr(0, a), text.substr(a, b - a), text.substr(b)};
        for (size_t i = 0; i < pieces.size(); ++i) {
          const ReasoningSplit s = stream.feed(pieces[i], i + 1 == pieces.size());
          EXPECT_EQ(s.reasoning.find("</think>"), std::string::npos) << text << " cut at " << a << ", " << b;
          reasoning += s.reasoning;
          content += s.content;
        }
        EXPECT_EQ(reasoning, whole.reasoning) << text << " cut at " << a << ", " << b;
        EXPECT_EQ(content, whole.content) << text << " cut at " << a << ", " << b;
      }
    }
  }
}

TEST(Reasoning, ParserNames) {
  EXPECT_TRUE(parse_reasoning_parser("deepseek_r1").is_ok());
  auto bad = parse_reasoning_parser("qwen3");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.error().message.find("supported: deepseek_r1"), std::string::npos) << bad.error().message;
}

// The message carries `reasoning` and its earlier name `reasoning_content`; content is
// null when the model only reasoned. Without the parser neither field appears.
TEST(Reasoning, ResponseFields) {
  const TokenText token_text = make_token_text(nullptr);
  ChoicePiece p;
  p.text = "answer";
  p.reasoning = "plan";
  p.reasoning_parsed = true;
  p.finish_reason = "stop";
  const auto whole = chat_choice_json(p, "assistant", false, token_text, false);
  EXPECT_EQ(whole["message"]["reasoning"], "plan");
  EXPECT_EQ(whole["message"]["reasoning_content"], "plan");
  EXPECT_EQ(whole["message"]["content"], "answer");
  p.text.clear();
  EXPECT_TRUE(chat_choice_json(p, "assistant", false, token_text, false)["message"]["content"].is_null());
  p.reasoning.clear();
  EXPECT_TRUE(chat_choice_json(p, "assistant", false, token_text, false)["message"]["reasoning"].is_null());

  ChoicePiece d;
  d.reasoning = "step";
  d.reasoning_parsed = true;
  const auto delta = chat_delta_choice_json(d, "", false, token_text, false)["delta"];
  EXPECT_EQ(delta["reasoning"], "step");
  EXPECT_EQ(delta["reasoning_content"], "step");
  EXPECT_FALSE(delta.contains("content"));

  ChoicePiece plain;
  plain.text = "<think>x</think>y";
  EXPECT_FALSE(chat_choice_json(plain, "assistant", false, token_text, false)["message"].contains("reasoning"));
}

}  // namespace
}  // namespace quiver
