// link: qv_tokenizer
// quiver's tokenizer against Hugging Face tokenizers on real tokenizer files: for every line
// of tests/fixtures/tokenizer_corpus.jsonl, the ids with and without special tokens and both
// decodes must equal tests/fixtures/tokenizer_expected/<name>.jsonl (made by
// tools/make_tokenizer_fixtures.py or its Node twin). Tokenizers that are neither committed
// nor fetched (tools/fetch_tokenizers.sh), or have no expected file, are skipped.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "unit/tokenizer_test_util.h"

namespace quiver {
namespace {

using nlohmann::json;

class HfParity : public ::testing::TestWithParam<std::string> {};

TEST_P(HfParity, CorpusMatchesHfTokenizers) {
  const std::string& name = GetParam();
  std::string dir = testing::real_tokenizer_dir(name);
  if (dir.empty()) GTEST_SKIP() << name << " tokenizer absent: run tools/fetch_tokenizers.sh";
  std::string expected_path = std::string(QUIVER_SOURCE_DIR) + "/tests/fixtures/tokenizer_expected/" + name + ".jsonl";
  if (!std::filesystem::exists(expected_path)) {
    GTEST_SKIP() << expected_path << " missing: run tools/make_tokenizer_fixtures.py";
  }
  auto loaded = Tokenizer::load(dir);
  ASSERT_TRUE(loaded.is_ok()) << loaded.message();
  const Tokenizer& t = *loaded.value();

  std::vector<std::string> texts = testing::corpus_texts();
  std::ifstream in(expected_path);
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    json row = json::parse(line);
    std::string text = row.at("text");
    ASSERT_LT(n, texts.size());
    ASSERT_EQ(text, texts[n]) << "expected file is out of date with the corpus: re-run the generator";
    ++n;
    auto ids = t.encode(text, true);
    auto plain = t.encode(text, false);
    ASSERT_TRUE(ids.is_ok() && plain.is_ok()) << ids.message();
    EXPECT_EQ(ids.value(), row.at("ids").get<std::vector<int32_t>>()) << name << ": " << text;
    EXPECT_EQ(plain.value(), row.at("ids_no_special").get<std::vector<int32_t>>()) << name << ": " << text;
    // Decode the reference ids, so a decode bug shows even where encode differs.
    auto ref_ids = row.at("ids").get<std::vector<int32_t>>();
    auto decoded = t.decode(ref_ids, false);
    auto decoded_skip = t.decode(ref_ids, true);
    ASSERT_TRUE(decoded.is_ok() && decoded_skip.is_ok()) << decoded.message();
    EXPECT_EQ(decoded.value(), row.at("decoded").get<std::string>()) << name << ": " << text;
    EXPECT_EQ(decoded_skip.value(), row.at("decoded_skip_special").get<std::string>()) << name << ": " << text;
  }
  EXPECT_EQ(n, texts.size()) << "expected file is out of date with the corpus: re-run the generator";
}

INSTANTIATE_TEST_SUITE_P(Real, HfParity, ::testing::ValuesIn(testing::real_tokenizer_names()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

TEST(HfParity, RealTokenizerMetadata) {
  std::string dir = testing::real_tokenizer_dir("qwen3");
  if (dir.empty()) GTEST_SKIP() << "qwen3 tokenizer absent: run tools/fetch_tokenizers.sh";
  auto t = Tokenizer::load(dir);
  ASSERT_TRUE(t.is_ok()) << t.message();
  EXPECT_EQ(t.value()->eos_token(), "<|im_end|>");
  EXPECT_EQ(t.value()->eos_id(), 151645);
  EXPECT_FALSE(t.value()->bos_id().has_value());
  EXPECT_EQ(t.value()->vocab_size(), 151669);
  EXPECT_TRUE(t.value()->is_special(151644));
  EXPECT_NE(t.value()->chat_template(), nullptr);
}

}  // namespace
}  // namespace quiver
