// link: qv_io
// vLLM's added-token layout (added_tokens.json + new_embeddings.safetensors): read and
// validated by load_added_vocab, and refused by load_peft_adapter as not supported yet,
// naming the tokens, instead of being ignored (the base model would then see ids it lacks).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "io/adapter_vocab.h"
#include "io/peft_adapter.h"
#include "unit/lora_test_util.h"

namespace quiver {
namespace {

using lora_test::HostTensor;

// Rows whose value at [r, c] is r + c / 8, so a transposed or shifted read shows.
HostTensor test_rows(int64_t n, int64_t hidden, const std::string& dtype = "F32") {
  HostTensor t{dtype, {n, hidden}, {}};
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < hidden; ++c) t.values.push_back(static_cast<float>(r) + static_cast<float>(c) / 8.f);
  return t;
}

class AdapterVocabTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = lora_test::make_temp_dir("vocab");
    ASSERT_FALSE(dir_.empty());
    lora_test::write_adapter(dir_, lora_test::lora_config(2, 2, {"q_proj"}),
                             lora_test::adapter_tensors(base_, {LoraTarget::kQ}, 2, 1));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void write_tokens(const std::string& json) { std::ofstream(dir_ + "/added_tokens.json") << json; }
  static HostTensor rows(int64_t n, int64_t hidden, const std::string& dtype = "F32") {
    return test_rows(n, hidden, dtype);
  }
  void write_rows(const std::map<std::string, HostTensor>& tensors) {
    lora_test::write_safetensors(dir_ + "/new_embeddings.safetensors", tensors);
  }
  void expect_error(const std::vector<std::string>& parts) {
    auto r = load_added_vocab(dir_, base_);
    ASSERT_FALSE(r.is_ok()) << parts[0];
    for (const auto& p : parts) EXPECT_NE(r.message().find(p), std::string::npos) << r.message();
  }

  ModelConfig base_ = lora_test::tiny_config();  // vocab 32, hidden 8
  std::string dir_;
};

TEST_F(AdapterVocabTest, ReadsTheSeedLayout) {
  write_tokens(R"({"[user]": 32, "[/user]": 33, "[assistant]": 34, "[/assistant]": 35})");
  write_rows({{"input_embeddings", rows(4, 8)}, {"output_embeddings", rows(4, 8, "BF16")}});
  auto r = load_added_vocab(dir_, base_);
  ASSERT_TRUE(r.is_ok()) << r.message();
  ASSERT_TRUE(r.value().has_value());
  const AddedVocab& v = *r.value();
  EXPECT_EQ(v.first_id, 32);
  EXPECT_EQ(v.tokens, (std::vector<std::string>{"[user]", "[/user]", "[assistant]", "[/assistant]"}));
  ASSERT_EQ(v.input_rows.size(), 32u);
  ASSERT_EQ(v.output_rows.size(), 32u);
  EXPECT_EQ(v.input_rows[3 * 8 + 5], 3.625f);
  EXPECT_EQ(v.output_rows[1 * 8 + 2], 1.25f);

  auto a = load_peft_adapter(dir_, "sql", base_, 8);
  ASSERT_FALSE(a.is_ok());
  for (const char* p : {"adds 4 tokens", "[user], [/user], [assistant], [/assistant]", "ids 32-35", "not supported yet"})
    EXPECT_NE(a.message().find(p), std::string::npos) << a.message();
}

TEST_F(AdapterVocabTest, TokensTheBaseAlreadyHasAddNothing) {
  write_tokens(R"({"<pad>": 0, "<s>": 31})");
  auto r = load_added_vocab(dir_, base_);
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_FALSE(r.value().has_value());
  EXPECT_TRUE(load_peft_adapter(dir_, "ad", base_, 8).is_ok());
}

TEST_F(AdapterVocabTest, RefusesInconsistentFiles) {
  write_rows({{"input_embeddings", rows(1, 8)}});
  expect_error({"added_tokens.json", "is not"});
  write_tokens(R"({"a": 32, "b": 34})");
  expect_error({"added_tokens.json", "token 'b' has id 34 but the next new id is 33"});
  write_tokens(R"({"a": 32, "b": 32})");
  expect_error({"both have id 32"});
  write_tokens(R"({"a": 32.5})");
  expect_error({"added_tokens.json"});
  write_tokens(R"({"a": -1})");
  expect_error({"negative id"});
  write_tokens(R"({"a": 100000000})");
  expect_error({"more than 65536 past the base vocabulary"});
  write_tokens(R"({"a": 32, "b": 33})");
  expect_error({"new_embeddings.safetensors", "input_embeddings must be [2, 8]"});
  write_rows({{"input_embeddings", rows(2, 7)}});
  expect_error({"input_embeddings must be [2, 8]", "hidden size 8"});
  write_rows({{"lm_head", rows(2, 8)}});
  expect_error({"unexpected tensor lm_head"});
  write_rows({});
  expect_error({"neither input_embeddings nor output_embeddings"});
  std::filesystem::remove(dir_ + "/new_embeddings.safetensors");
  expect_error({"adds 2 tokens from id 32", "no new_embeddings.safetensors"});
}


// PEFT's layouts, through load_peft_adapter: validated, then refused as not supported yet.
class PeftVocabTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = lora_test::make_temp_dir("peftvocab");
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  Result<LoraAdapter> load(const nlohmann::ordered_json& extra, std::map<std::string, HostTensor> more) {
    auto config = lora_test::lora_config(2, 2, {"q_proj"});
    for (const auto& [k, v] : extra.items()) config[k] = v;
    auto tensors = lora_test::adapter_tensors(base_, {LoraTarget::kQ}, 2, 1);
    for (auto& [k, v] : more) tensors[k] = v;
    lora_test::write_adapter(dir_, config, tensors);
    return load_peft_adapter(dir_, "ad", base_, 8);
  }
  static void expect(const Result<LoraAdapter>& r, const std::vector<std::string>& parts) {
    ASSERT_FALSE(r.is_ok()) << parts[0];
    for (const auto& p : parts) EXPECT_NE(r.message().find(p), std::string::npos) << r.message();
  }
  ModelConfig base_ = lora_test::tiny_config();  // vocab 32, hidden 8, untied
  std::string dir_;
};

TEST_F(PeftVocabTest, ModulesToSaveOverAResizedVocabulary) {
  const HostTensor full = test_rows(36, 8);
  expect(load({{"modules_to_save", {"embed_tokens", "lm_head"}}},
              {{"base_model.model.model.embed_tokens.weight", full}, {"base_model.model.lm_head.weight", full}}),
         {"modules_to_save replaces embed_tokens ([36, 8]", "lm_head", "not supported yet"});
  expect(load({{"modules_to_save", {"lm_head"}}}, {}),
         {"modules_to_save needs tensor base_model.model.lm_head.weight, which is missing"});
  expect(load({{"modules_to_save", {"embed_tokens"}}}, {{"base_model.model.model.embed_tokens.weight", test_rows(30, 8)}}),
         {"must be [vocab, 8] with vocab >= the base's 32"});
}

TEST_F(PeftVocabTest, TrainableTokenIndices) {
  const std::string delta = "base_model.model.model.embed_tokens.token_adapter.trainable_tokens_delta";
  expect(load({{"trainable_token_indices", {3, 5}}}, {{delta, test_rows(2, 8)}}),
         {"trainable_token_indices trains 2 embed_tokens rows", "not supported yet"});
  expect(load({{"trainable_token_indices", {3, 5}}}, {{delta, test_rows(3, 8)}}),
         {"must be [2, 8] (one row per id of trainable_token_indices"});
  expect(load({{"trainable_token_indices", {3, 3}}}, {{delta, test_rows(2, 8)}}), {"id 3 appears twice"});
  expect(load({{"trainable_token_indices", {40}}}, {{delta, test_rows(1, 8)}}),
         {"40 is not a token id below the vocabulary size 32"});
  expect(load({{"trainable_token_indices", {{"lm_head", {1}}}}}, {}),
         {"trainable_token_indices needs tensor base_model.model.lm_head.token_adapter.trainable_tokens_delta"});
}

}  // namespace
}  // namespace quiver
