// link: qv_tokenizer
// The request lines of `quiver tokenize`: encode, decode, chat template, and errors for
// malformed requests (each is reported for its own line; the CLI keeps going).
#include <gtest/gtest.h>

#include "tokenizer/tokenize_request.h"
#include "unit/tokenizer_test_util.h"

namespace quiver {
namespace {

using nlohmann::json;

class TokenizeRequest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = Tokenizer::load(testing::real_tokenizer_dir("mistral"));
    ASSERT_TRUE(t.is_ok()) << t.message();
    tokenizer_ = std::move(t.value());
  }
  Result<json> run(const json& request) { return run_tokenize_request(*tokenizer_, request); }
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(TokenizeRequest, EncodeAndDecode) {
  auto enc = run({{"text", "Hello world"}, {"id", 7}});
  ASSERT_TRUE(enc.is_ok()) << enc.message();
  EXPECT_EQ(enc.value()["ids"], json({1, 22557, 1526}));
  EXPECT_EQ(enc.value()["id"], 7);
  auto plain = run({{"text", "Hello world"}, {"add_special_tokens", false}});
  EXPECT_EQ(plain.value()["ids"], json({22557, 1526}));
  auto dec = run({{"ids", {1, 22557, 1526}}});
  EXPECT_EQ(dec.value()["text"], "<s> Hello world");
  auto skip = run({{"ids", {1, 22557, 1526}}, {"skip_special_tokens", true}});
  EXPECT_EQ(skip.value()["text"], "Hello world");
}

TEST_F(TokenizeRequest, BadRequestsAreErrors) {
  EXPECT_FALSE(run(json::array()).is_ok());
  EXPECT_FALSE(run({{"nothing", 1}}).is_ok());
  EXPECT_FALSE(run({{"text", 5}}).is_ok());
  EXPECT_FALSE(run({{"text", "a"}, {"add_special_tokens", "yes"}}).is_ok());
  EXPECT_FALSE(run({{"ids", {1, "x"}}}).is_ok());
  EXPECT_FALSE(run({{"ids", {99999999}}}).is_ok());       // outside the vocabulary
  EXPECT_FALSE(run({{"text", "bad \xFF utf8"}}).is_ok());
  // Mistral's tokenizer_config.json has no chat template.
  auto chat = run({{"messages", {{{"role", "user"}, {"content", "hi"}}}}});
  ASSERT_FALSE(chat.is_ok());
  EXPECT_NE(chat.message().find("chat template"), std::string::npos);
}

TEST(TokenizeRequestChat, RendersAndEncodesWithoutAddingSpecials) {
  std::string dir = testing::real_tokenizer_dir("qwen3");
  if (dir.empty()) GTEST_SKIP() << "qwen3 tokenizer absent: run tools/fetch_tokenizers.sh";
  auto t = Tokenizer::load(dir);
  ASSERT_TRUE(t.is_ok()) << t.message();
  json request = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"add_generation_prompt", true}};
  auto r = run_tokenize_request(*t.value(), request);
  ASSERT_TRUE(r.is_ok()) << r.message();
  std::string text = r.value()["text"];
  EXPECT_EQ(text.rfind("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", 0), 0u) << text;
  auto ids = r.value()["ids"].get<std::vector<int32_t>>();
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), 151644);  // <|im_start|> as one token
  EXPECT_EQ(t.value()->decode(ids, false).value(), text);
}

}  // namespace
}  // namespace quiver
