// link: qv_tokenizer
// Chat message content: OpenAI's text parts joined as the server and the Python package join
// them, and continue_final_message's cut, by transformers' rule (the final message's last
// occurrence, stripped; cut after its trailing whitespace when the template kept the message
// as written), on hand-made renders and on a real template (llama3's fixture, which ends
// every render with an assistant header).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tokenizer/chat_content.h"
#include "tokenizer/chat_template.h"

namespace quiver {
namespace {

using nlohmann::json;

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

}  // namespace
}  // namespace quiver
