// link: qv_tokenizer
// Everything a user or a file can get wrong comes back as an error Status that names the
// file and JSON path: unsupported models and components, malformed fields, invalid UTF-8
// input, ids outside the vocabulary, missing files; plus tokenizer_config.json handling.
#include <gtest/gtest.h>

#include "unit/tokenizer_test_util.h"

namespace quiver {
namespace {

using nlohmann::json;
using testing::sentencepiece_json;

json sp_doc() { return sentencepiece_json({"\u2581", "a", "\u2581a"}, {"\u2581 a"}); }

std::string create_error(const json& doc) {
  auto t = HfTokenizer::create(doc, {});
  EXPECT_FALSE(t.is_ok());
  return t.is_ok() ? "" : t.message();
}

TEST(TokenizerErrors, OtherModelTypesAreNamed) {
  for (const char* type : {"WordPiece", "Unigram", "WordLevel"}) {
    json doc = sp_doc();
    doc["model"]["type"] = type;
    std::string msg = create_error(doc);
    EXPECT_NE(msg.find("model.type"), std::string::npos) << msg;
    EXPECT_NE(msg.find(type), std::string::npos) << msg;
  }
}

TEST(TokenizerErrors, UnsupportedComponentsNameTheirPath) {
  json doc = sp_doc();
  doc["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "ByteLevel"}}, {{"type", "Whitespace"}}}}};
  std::string msg = create_error(doc);
  EXPECT_NE(msg.find("pre_tokenizer.pretokenizers[1].type"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Whitespace"), std::string::npos) << msg;

  doc = sp_doc();
  doc["normalizer"]["normalizers"][1] = {{"type", "BertNormalizer"}};
  msg = create_error(doc);
  EXPECT_NE(msg.find("normalizer.normalizers[1].type"), std::string::npos) << msg;

  doc = sp_doc();
  doc["decoder"] = {{"type", "WordPiece"}};
  EXPECT_NE(create_error(doc).find("decoder.type"), std::string::npos);

  doc = sp_doc();
  doc["post_processor"] = {{"type", "Bogus"}};
  EXPECT_NE(create_error(doc).find("post_processor.type"), std::string::npos);
}

TEST(TokenizerErrors, MalformedFieldsNameTheirPath) {
  json doc = sp_doc();
  doc["model"].erase("vocab");
  EXPECT_NE(create_error(doc).find("model.vocab"), std::string::npos);

  doc = sp_doc();
  doc["model"]["merges"] = json::array({5});
  EXPECT_NE(create_error(doc).find("model.merges[0]"), std::string::npos);

  doc = sp_doc();
  doc["model"]["merges"] = json::array({"\u2581 zzz"});
  std::string msg = create_error(doc);
  EXPECT_NE(msg.find("model.merges[0]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not in the vocab"), std::string::npos) << msg;

  doc = sp_doc();
  doc["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  EXPECT_NE(create_error(doc).find("pre_tokenizer.pattern.Regex"), std::string::npos);

  doc = sp_doc();
  doc["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Sideways"}};
  EXPECT_NE(create_error(doc).find("pre_tokenizer.behavior"), std::string::npos);

  doc = sp_doc();
  doc["added_tokens"][0].erase("content");
  EXPECT_NE(create_error(doc).find("added_tokens[0].content"), std::string::npos);

  doc = sp_doc();
  doc["model"]["unk_token"] = "<nope>";
  EXPECT_NE(create_error(doc).find("model.unk_token"), std::string::npos);
}

TEST(TokenizerErrors, InvalidUtf8AndUnknownIds) {
  auto t = HfTokenizer::create(sp_doc(), {});
  ASSERT_TRUE(t.is_ok()) << t.message();
  auto bad = t.value()->encode("ok\xC3(", true);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.message().find("UTF-8"), std::string::npos);
  EXPECT_NE(bad.message().find("offset 2"), std::string::npos);
  std::vector<int32_t> ids = {259, 100000};
  EXPECT_FALSE(t.value()->decode(ids, false).is_ok());
  ids = {-1};
  EXPECT_FALSE(t.value()->decode(ids, false).is_ok());
}

TEST(TokenizerLoad, MissingAndMalformedFiles) {
  auto dir = testing::temp_dir("load");
  auto missing = Tokenizer::load(dir.string());
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.message().find("tokenizer.json: not found"), std::string::npos) << missing.message();

  testing::write_file(dir / "tokenizer.json", "{\"model\": ");
  auto malformed = Tokenizer::load(dir.string());
  ASSERT_FALSE(malformed.is_ok());
  EXPECT_NE(malformed.message().find("not valid JSON"), std::string::npos) << malformed.message();

  json doc = sp_doc();
  doc["model"]["type"] = "Unigram";
  testing::write_file(dir / "tokenizer.json", doc.dump());
  auto unigram = Tokenizer::load(dir.string());
  ASSERT_FALSE(unigram.is_ok());
  EXPECT_NE(unigram.message().find("tokenizer.json: model.type"), std::string::npos) << unigram.message();

  testing::write_file(dir / "tokenizer.json", sp_doc().dump());
  testing::write_file(dir / "tokenizer_config.json", R"({"bos_token": 5})");
  auto bad_config = Tokenizer::load(dir.string());
  ASSERT_FALSE(bad_config.is_ok());
  EXPECT_NE(bad_config.message().find("tokenizer_config.json: bos_token"), std::string::npos) << bad_config.message();

  testing::write_file(dir / "tokenizer_config.json", R"({"eos_token": "<missing>"})");
  EXPECT_FALSE(Tokenizer::load(dir.string()).is_ok());
  std::filesystem::remove_all(dir);
}

TEST(TokenizerLoad, ConfigTokensAsObjectsAndNoChatTemplate) {
  auto dir = testing::temp_dir("config");
  testing::write_file(dir / "tokenizer.json", sp_doc().dump());
  testing::write_file(dir / "tokenizer_config.json",
                      R"({"add_bos_token": false, "add_eos_token": true,
                          "bos_token": {"__type": "AddedToken", "content": "<s>", "special": true},
                          "eos_token": "</s>"})");
  auto t = Tokenizer::load(dir.string());
  ASSERT_TRUE(t.is_ok()) << t.message();
  EXPECT_EQ(t.value()->bos_token(), "<s>");
  EXPECT_EQ(t.value()->eos_id(), 2);
  EXPECT_EQ(t.value()->encode("a", true).value(), (std::vector<int32_t>{261, 2}));
  EXPECT_EQ(t.value()->chat_template(), nullptr);
  auto chat = t.value()->apply_chat_template(json::array(), true);
  ASSERT_FALSE(chat.is_ok());
  EXPECT_NE(chat.message().find("no chat template"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(TokenizerLoad, ChatTemplateSources) {
  auto dir = testing::temp_dir("chat");
  testing::write_file(dir / "tokenizer.json", sp_doc().dump());
  testing::write_file(dir / "tokenizer_config.json",
                      R"({"bos_token": "<s>", "eos_token": "</s>", "chat_template": [
                            {"name": "tool_use", "template": "T"},
                            {"name": "default", "template": "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{{ eos_token }}{% endfor %}"}]})");
  json messages = json::array({{{"role", "user"}, {"content", "hi"}}});
  auto t = Tokenizer::load(dir.string());
  ASSERT_TRUE(t.is_ok()) << t.message();
  ASSERT_NE(t.value()->chat_template(), nullptr);
  auto text = t.value()->apply_chat_template(messages, false);
  ASSERT_TRUE(text.is_ok()) << text.message();
  EXPECT_EQ(text.value(), "<s>hi</s>");

  // chat_template.jinja next to the config wins, as in transformers.
  testing::write_file(dir / "chat_template.jinja", "J{{ messages[0]['content'] }}");
  auto t2 = Tokenizer::load(dir.string());
  ASSERT_TRUE(t2.is_ok()) << t2.message();
  auto text2 = t2.value()->apply_chat_template(messages, false);
  ASSERT_TRUE(text2.is_ok()) << text2.message();
  EXPECT_EQ(text2.value(), "Jhi");

  testing::write_file(dir / "tokenizer_config.json", R"({"chat_template": [{"name": "rag", "template": "x"}]})");
  std::filesystem::remove(dir / "chat_template.jinja");
  auto no_default = Tokenizer::load(dir.string());
  ASSERT_FALSE(no_default.is_ok());
  EXPECT_NE(no_default.message().find("'default'"), std::string::npos) << no_default.message();
  std::filesystem::remove_all(dir);
}

TEST(TokenizerErrors, HugeIdsAreRefusedNotAllocated) {
  // id + 1 overflowed a 32-bit int (a crash), and a vocab id of 2^31-1 sized a 2^31 table.
  json doc = sp_doc();
  doc["added_tokens"] = json::array({{{"id", 2147483647}, {"content", "<x>"}, {"special", true}}});
  std::string msg = create_error(doc);
  EXPECT_NE(msg.find("added_tokens[0].id"), std::string::npos) << msg;
  doc = sp_doc();
  doc["model"]["vocab"]["big"] = 2147483647;
  msg = create_error(doc);
  EXPECT_NE(msg.find("model.vocab.big"), std::string::npos) << msg;
}

TEST(TokenizerLoad, DeepNestingIsAnErrorNotAStackOverflow) {
  auto dir = testing::temp_dir("deep");
  std::string deep = sp_doc().dump();
  const std::string normalizer = "\"normalizer\":";
  std::string nested;
  for (int i = 0; i < 100000; ++i) nested += R"({"type":"Sequence","normalizers":[)";
  nested += "null";
  for (int i = 0; i < 100000; ++i) nested += "]}";
  const size_t at = deep.find(normalizer);
  ASSERT_NE(at, std::string::npos);
  deep.insert(at + normalizer.size(), nested + ",\"unused\":");
  testing::write_file(dir / "tokenizer.json", deep);
  auto t = Tokenizer::load(dir.string());
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.message().find("nested more than"), std::string::npos) << t.message();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace quiver
