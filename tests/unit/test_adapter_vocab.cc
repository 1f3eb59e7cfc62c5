// link: qv_io
// Adapters that change vocabulary rows, in the three layouts (vLLM's added_tokens.json +
// new_embeddings.safetensors, PEFT's modules_to_save and trainable_token_indices): read,
// validated, and resolved by load_peft_adapter into one AdapterVocab (ids and rows).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>

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
  ASSERT_TRUE(a.is_ok()) << a.message();
  const AdapterVocab& av = a.value().vocab;
  EXPECT_EQ(av.new_tokens, 4);
  EXPECT_EQ(av.new_token_names, v.tokens);
  EXPECT_EQ(av.input_ids, (std::vector<int32_t>{32, 33, 34, 35}));
  EXPECT_EQ(av.output_ids, (std::vector<int32_t>{32, 33, 34, 35}));
  EXPECT_EQ(av.input_rows, v.input_rows);
  EXPECT_EQ(av.output_rows, v.output_rows);
  EXPECT_EQ(av.rows(), 4);
}

TEST_F(AdapterVocabTest, TiedBasesTakeTheInputRowsForLmHead) {
  write_tokens(R"({"[user]": 32, "[/user]": 33})");
  write_rows({{"input_embeddings", rows(2, 8)}});
  auto untied = load_peft_adapter(dir_, "ad", base_, 8);
  ASSERT_FALSE(untied.is_ok());
  EXPECT_NE(untied.message().find("no output_embeddings"), std::string::npos) << untied.message();
  ModelConfig tied = base_;
  tied.tie_word_embeddings = true;
  auto a = load_peft_adapter(dir_, "ad", tied, 8);
  ASSERT_TRUE(a.is_ok()) << a.message();
  EXPECT_EQ(a.value().vocab.output_rows, a.value().vocab.input_rows);
  write_rows({{"output_embeddings", rows(2, 8)}});
  auto no_input = load_peft_adapter(dir_, "ad", tied, 8);
  ASSERT_FALSE(no_input.is_ok());
  EXPECT_NE(no_input.message().find("no input_embeddings"), std::string::npos) << no_input.message();
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


// PEFT's layouts, through load_peft_adapter.
class PeftVocabTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = lora_test::make_temp_dir("peftvocab");
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  Result<LoraAdapter> load(const nlohmann::ordered_json& extra, std::map<std::string, HostTensor> more,
                           const ModelConfig* base = nullptr) {
    auto config = lora_test::lora_config(2, 2, {"q_proj"});
    for (const auto& [k, v] : extra.items()) config[k] = v;
    auto tensors = lora_test::adapter_tensors(base_, {LoraTarget::kQ}, 2, 1);
    for (auto& [k, v] : more) tensors[k] = v;
    lora_test::write_adapter(dir_, config, tensors);
    return load_peft_adapter(dir_, "ad", base ? *base : base_, 8);
  }
  static void expect(const Result<LoraAdapter>& r, const std::vector<std::string>& parts) {
    ASSERT_FALSE(r.is_ok()) << parts[0];
    for (const auto& p : parts) EXPECT_NE(r.message().find(p), std::string::npos) << r.message();
  }
  static std::vector<int32_t> iota(int32_t n) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
    return v;
  }
  ModelConfig base_ = lora_test::tiny_config();  // vocab 32, hidden 8, untied
  std::string dir_;
};

TEST_F(PeftVocabTest, ModulesToSaveOverAResizedVocabulary) {
  const HostTensor full = test_rows(36, 8);
  auto a = load({{"modules_to_save", {"embed_tokens", "lm_head"}}},
                {{"base_model.model.model.embed_tokens.weight", full}, {"base_model.model.lm_head.weight", full}});
  ASSERT_TRUE(a.is_ok()) << a.message();
  const AdapterVocab& v = a.value().vocab;
  EXPECT_EQ(v.new_tokens, 4);
  EXPECT_EQ(v.input_ids, iota(36));
  EXPECT_EQ(v.output_ids, iota(36));
  EXPECT_EQ(v.input_rows, full.values);
  EXPECT_EQ(v.rows(), 36);
  EXPECT_EQ(a.value().layers[0][0]->rank, 2);  // the LoRA part is still there

  // The tokenizer's added_tokens.json beside it only names the new ids.
  std::ofstream(dir_ + "/added_tokens.json") << R"({"<a>": 32, "<b>": 33, "<c>": 34, "<d>": 35})";
  auto named = load_peft_adapter(dir_, "ad", base_, 8);
  ASSERT_TRUE(named.is_ok()) << named.message();
  EXPECT_EQ(named.value().vocab.new_token_names, (std::vector<std::string>{"<a>", "<b>", "<c>", "<d>"}));
  std::ofstream(dir_ + "/added_tokens.json") << R"({"<a>": 32, "<b>": 33, "<c>": 34, "<d>": 35, "<e>": 36})";
  expect(load_peft_adapter(dir_, "ad", base_, 8), {"names ids up to 36", "end at id 35"});
  std::filesystem::remove(dir_ + "/added_tokens.json");

  expect(load({{"modules_to_save", {"lm_head"}}}, {{"base_model.model.lm_head.weight", full}}),
         {"resizes the vocabulary to 36 but saves only lm_head", "embed_tokens rows are not in the adapter"});
  expect(load({{"modules_to_save", {"lm_head"}}}, {}),
         {"modules_to_save needs tensor base_model.model.lm_head.weight, which is missing"});
  expect(load({{"modules_to_save", {"embed_tokens"}}}, {{"base_model.model.model.embed_tokens.weight", test_rows(30, 8)}}),
         {"must be [vocab, 8] with vocab >= the base's 32"});
  // Without a resize, one replaced module is fine.
  auto lm = load({{"modules_to_save", {"lm_head"}}}, {{"base_model.model.lm_head.weight", test_rows(32, 8)}});
  ASSERT_TRUE(lm.is_ok()) << lm.message();
  EXPECT_TRUE(lm.value().vocab.input_ids.empty());
  EXPECT_EQ(lm.value().vocab.output_ids, iota(32));
  EXPECT_EQ(lm.value().vocab.new_tokens, 0);
}

// save_pretrained over a resized vocabulary (PEFT's save_embedding_layers="auto") stores the
// trained copy twice and the resized base beside it, as the vocab fixtures' adapters have it.
TEST_F(PeftVocabTest, ModulesToSaveWithSavedEmbeddingLayers) {
  const HostTensor full = test_rows(36, 8), base_rows = test_rows(36, 8, "BF16");
  std::map<std::string, HostTensor> t;
  for (const std::string m : {"base_model.model.model.embed_tokens", "base_model.model.lm_head"}) {
    t[m + ".weight"] = full;
    t[m + ".modules_to_save.weight"] = full;
    t[m + ".original_module.weight"] = base_rows;
  }
  auto a = load({{"modules_to_save", {"embed_tokens", "lm_head"}}}, t);
  ASSERT_TRUE(a.is_ok()) << a.message();
  EXPECT_EQ(a.value().vocab.output_rows, full.values);
  HostTensor other = full;
  other.values[5] += 1.f;
  t["base_model.model.lm_head.modules_to_save.weight"] = other;
  expect(load({{"modules_to_save", {"embed_tokens", "lm_head"}}}, t), {"both hold the trained module but differ"});
}

TEST_F(PeftVocabTest, TrainableTokenIndices) {
  const std::string delta = "base_model.model.model.embed_tokens.token_adapter.trainable_tokens_delta";
  auto a = load({{"trainable_token_indices", {5, 3}}}, {{delta, test_rows(2, 8)}});
  ASSERT_TRUE(a.is_ok()) << a.message();
  const AdapterVocab& v = a.value().vocab;
  EXPECT_EQ(v.new_tokens, 0);
  EXPECT_EQ(v.input_ids, (std::vector<int32_t>{3, 5}));  // sorted, rows with them
  EXPECT_EQ(v.input_rows[0], 1.f);                        // id 3 was the second row
  EXPECT_EQ(v.input_rows[8], 0.f);
  EXPECT_TRUE(v.output_ids.empty());  // untied: lm_head keeps its rows

  ModelConfig tied = base_;
  tied.tie_word_embeddings = true;
  auto t = load({{"trainable_token_indices", {5, 3}}}, {{delta, test_rows(2, 8)}}, &tied);
  ASSERT_TRUE(t.is_ok()) << t.message();
  EXPECT_EQ(t.value().vocab.output_ids, (std::vector<int32_t>{3, 5}));
  EXPECT_EQ(t.value().vocab.output_rows, t.value().vocab.input_rows);

  const std::string lm_delta = "base_model.model.lm_head.token_adapter.trainable_tokens_delta";
  auto both = load({{"trainable_token_indices", {{"embed_tokens", {1}}, {"lm_head", {2, 9}}}}},
                   {{delta, test_rows(1, 8)}, {lm_delta, test_rows(2, 8)}});
  ASSERT_TRUE(both.is_ok()) << both.message();
  EXPECT_EQ(both.value().vocab.input_ids, (std::vector<int32_t>{1}));
  EXPECT_EQ(both.value().vocab.output_ids, (std::vector<int32_t>{2, 9}));

  expect(load({{"trainable_token_indices", {3, 5}}}, {{delta, test_rows(3, 8)}}),
         {"must be [2, 8] (one row per id of trainable_token_indices"});
  expect(load({{"trainable_token_indices", {3, 3}}}, {{delta, test_rows(2, 8)}}), {"id 3 appears twice"});
  expect(load({{"trainable_token_indices", {40}}}, {{delta, test_rows(1, 8)}}),
         {"40 is not a token id below the vocabulary size 32"});
  expect(load({{"trainable_token_indices", {{"lm_head", {1}}}}}, {}),
         {"trainable_token_indices needs tensor base_model.model.lm_head.token_adapter.trainable_tokens_delta"});
  HostTensor bad = test_rows(1, 8);
  bad.values[3] = std::numeric_limits<float>::infinity();
  expect(load({{"trainable_token_indices", {3}}}, {{delta, bad}}), {"non-finite value at row 0"});
}

TEST_F(PeftVocabTest, OneLayoutAtATime) {
  const std::string delta = "base_model.model.model.embed_tokens.token_adapter.trainable_tokens_delta";
  expect(load({{"trainable_token_indices", {3}}, {"modules_to_save", {"lm_head"}}},
              {{delta, test_rows(1, 8)}, {"base_model.model.lm_head.weight", test_rows(32, 8)}}),
         {"modules_to_save and trainable_token_indices both"});
  std::ofstream(dir_ + "/added_tokens.json") << R"({"<a>": 32})";
  lora_test::write_safetensors(dir_ + "/new_embeddings.safetensors",
                               {{"input_embeddings", test_rows(1, 8)}, {"output_embeddings", test_rows(1, 8)}});
  expect(load({{"trainable_token_indices", {3}}}, {{delta, test_rows(1, 8)}}),
         {"new_embeddings.safetensors adds rows beside PEFT's"});
}

}  // namespace
}  // namespace quiver
