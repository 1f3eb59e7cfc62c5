// link: qv_io
// LoRA on embed_tokens (lora_embedding_A/B) and lm_head (lora_A/B) as PEFT saves it, read by
// load_peft_adapter from the committed PEFT fixtures (tools/make_vocab_fixtures.py), and the
// whole base layers PEFT saves beside it (save_embedding_layers): only rows that differ
// from the base's become slot rows when the base is known.
#include <gtest/gtest.h>

#include <cmath>
#include <fcntl.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include "io/adapter_vocab.h"
#include "io/adapter_weights.h"
#include "io/model_config.h"
#include "io/peft_adapter.h"
#include "io/safetensors.h"
#include "unit/lora_test_util.h"

namespace quiver {
namespace {

namespace fs = std::filesystem;

fs::path fixture(const std::string& path) { return fs::path(QUIVER_SOURCE_DIR) / "tests/fixtures" / path; }

ModelConfig config_of(const std::string& model) { return load_model_config(fixture(model).string()).value(); }

// The checkpoint's embed_tokens / lm_head, as the engine hands them to the registry.
std::shared_ptr<BaseVocab> base_of(const std::string& model) {
  const ModelConfig c = config_of(model);
  auto ckpt = std::make_shared<Checkpoint>(Checkpoint::open(fixture(model).string()).value());
  auto v = std::make_shared<BaseVocab>();
  v->embed = v->lm_head = ckpt->get("model.embed_tokens.weight", {c.vocab_size, c.hidden_size}).value();
  if (!c.tie_word_embeddings) v->lm_head = ckpt->get("lm_head.weight", {c.vocab_size, c.hidden_size}).value();
  v->keep = ckpt;
  return v;
}

// An adapter file's tensor as float32, by name.
std::vector<float> tensor_of(const fs::path& dir, const std::string& name) {
  const std::string path = AdapterWeights::pick(dir.string());
  const int fd = ::open(path.c_str(), O_RDONLY);
  auto w = AdapterWeights::open_fd(fd, path);
  EXPECT_TRUE(w.is_ok()) << w.message();
  const TensorInfo& t = w.value().tensors().at(name);
  size_t n = 1;
  for (int64_t d : t.shape) n *= static_cast<size_t>(d);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = load_as_f32(t.data, t.dtype, i);
  return out;
}

Result<LoraAdapter> load(const std::string& model, const std::string& adapter, const BaseVocab* base = nullptr) {
  return load_peft_adapter(fixture(model + "/adapters/" + adapter).string(), adapter, config_of(model), 8, {}, base);
}

TEST(VocabLora, ReadsPeftsEmbeddingAndLmHeadLora) {
  for (const std::string model : {"llama_vocab", "qwen2_vocab"}) {
    auto a = load(model, "lora_emb");
    ASSERT_TRUE(a.is_ok()) << a.message();
    ASSERT_TRUE(a->embed_lora && a->lm_head_lora) << model;
    const int64_t v = 512, h = 64, r = 8;
    EXPECT_EQ(a->embed_lora->rank, r);
    EXPECT_EQ(a->lm_head_lora->rank, r);
    ASSERT_EQ(a->embed_lora->a.size(), static_cast<size_t>(v * r));  // [vocab, r]: A transposed
    ASSERT_EQ(a->embed_lora->b.size(), static_cast<size_t>(h * r));
    ASSERT_EQ(a->lm_head_lora->a.size(), static_cast<size_t>(r * h));
    ASSERT_EQ(a->lm_head_lora->b.size(), static_cast<size_t>(v * r));
    const fs::path dir = fixture(model + "/adapters/lora_emb");
    const auto ea = tensor_of(dir, "base_model.model.model.embed_tokens.lora_embedding_A");  // [r, vocab]
    const auto eb = tensor_of(dir, "base_model.model.model.embed_tokens.lora_embedding_B");  // [h, r]
    const auto hb = tensor_of(dir, "base_model.model.lm_head.lora_B.weight");                // [vocab, r]
    const double scale = 16.0 / 8.0;  // lora_alpha / r
    for (int64_t id : {0, 7, 511})
      for (int64_t k = 0; k < r; ++k) EXPECT_EQ(a->embed_lora->a[id * r + k], ea[k * v + id]) << id;
    for (size_t i = 0; i < eb.size(); i += 37) EXPECT_FLOAT_EQ(a->embed_lora->b[i], static_cast<float>(eb[i] * scale));
    for (size_t i = 0; i < hb.size(); i += 101) EXPECT_FLOAT_EQ(a->lm_head_lora->b[i], static_cast<float>(hb[i] * scale));
    EXPECT_EQ(a->max_rank, 8);
  }
}

TEST(VocabLora, PatternsAndRsloraScaleEachModule) {
  // lora_emb_bin (.bin): r 8, lora_alpha 8, use_rslora, rank_pattern {embed_tokens: 4},
  // alpha_pattern {lm_head: 24}: PEFT's scalings 8 / sqrt(4) = 4 and 24 / sqrt(8).
  auto a = load("llama_vocab", "lora_emb_bin");
  ASSERT_TRUE(a.is_ok()) << a.message();
  ASSERT_TRUE(a->embed_lora && a->lm_head_lora);
  EXPECT_EQ(a->embed_lora->rank, 4);
  EXPECT_EQ(a->lm_head_lora->rank, 8);
  const fs::path dir = fixture("llama_vocab/adapters/lora_emb_bin");
  const auto eb = tensor_of(dir, "base_model.model.model.embed_tokens.lora_embedding_B");
  const auto hb = tensor_of(dir, "base_model.model.lm_head.lora_B.weight");
  EXPECT_FLOAT_EQ(a->embed_lora->b[5], static_cast<float>(eb[5] * 4.0));
  EXPECT_FLOAT_EQ(a->lm_head_lora->b[9], static_cast<float>(hb[9] * 24.0 / std::sqrt(8.0)));
}

TEST(VocabLora, EnsureWeightTyingMakesTheEmbeddingLoraLmHeads) {
  // PEFT drops lm_head from target_modules under ensure_weight_tying on a tied base, and
  // saves lm_head's LoRA as the embedding's, transposed.
  auto a = load("qwen2_vocab", "lora_emb_tied");
  ASSERT_TRUE(a.is_ok()) << a.message();
  ASSERT_TRUE(a->embed_lora && a->lm_head_lora);
  const int64_t v = 512, h = 64, r = 8;
  for (int64_t k = 0; k < r; ++k) {
    for (int64_t j = 0; j < h; j += 7)  // lm_head A [r, h] = lora_embedding_B^T (B holds the scale)
      EXPECT_FLOAT_EQ(a->lm_head_lora->a[k * h + j] * 2.f, a->embed_lora->b[j * r + k]);
    for (int64_t id = 0; id < v; id += 31)  // lm_head B [v, r] = lora_embedding_A^T, scaled
      EXPECT_FLOAT_EQ(a->lm_head_lora->b[id * r + k], a->embed_lora->a[id * r + k] * 2.f);
  }
}

TEST(VocabLora, SavedBaseLayersKeepOnlyTheRowsThatDiffer) {
  // PEFT saved embed_tokens / lm_head.base_layer.weight beside the LoRA, equal to the base's.
  auto whole = load("llama_vocab", "lora_emb");
  ASSERT_TRUE(whole.is_ok()) << whole.message();
  EXPECT_EQ(whole->vocab.input_ids.size(), 512u);  // base unknown: every row
  EXPECT_EQ(whole->vocab.layout, "saved embedding layers");
  for (const std::string model : {"llama_vocab", "qwen2_vocab"}) {
    auto base = base_of(model);
    auto a = load(model, "lora_emb", base.get());
    ASSERT_TRUE(a.is_ok()) << a.message();
    EXPECT_TRUE(a->vocab.empty()) << model << ": " << a->vocab.input_ids.size() << " rows";
    // Resized by 4 tokens: their rows (and, untied, their lm_head rows) and nothing else;
    // the embed_tokens / lm_head LoRA covers the 516 ids.
    auto r = load(model, "emb_resized", base.get());
    ASSERT_TRUE(r.is_ok()) << r.message();
    EXPECT_EQ(r->vocab.new_tokens, 4);
    EXPECT_EQ(r->vocab.input_ids, (std::vector<int32_t>{512, 513, 514, 515})) << model;
    EXPECT_EQ(r->vocab.output_ids, (std::vector<int32_t>{512, 513, 514, 515})) << model;
    EXPECT_EQ(r->vocab.new_token_names, (std::vector<std::string>{"[user]", "[/user]", "[assistant]", "[/assistant]"}));
    ASSERT_TRUE(r->embed_lora && r->lm_head_lora);
    EXPECT_EQ(r->embed_lora->a.size(), 516u * 8u);
    EXPECT_EQ(r->lm_head_lora->b.size(), 516u * 8u);
  }
}

TEST(VocabLora, ModulesToSaveKeepsOnlyTheRowsThatDiffer) {
  // vocab_mts: 4 new rows and 20 retrained ones in each matrix (make_vocab_fixtures.py).
  auto base = base_of("llama_vocab");
  auto a = load("llama_vocab", "vocab_mts", base.get());
  ASSERT_TRUE(a.is_ok()) << a.message();
  EXPECT_EQ(a->vocab.input_ids.size(), 24u);
  EXPECT_EQ(a->vocab.output_ids.size(), 24u);
  EXPECT_EQ(a->vocab.input_ids.back(), 515);
  auto all = load("llama_vocab", "vocab_mts");
  ASSERT_TRUE(all.is_ok()) << all.message();
  EXPECT_EQ(all->vocab.input_ids.size(), 516u);
}

class VocabLoraErrors : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = lora_test::make_temp_dir("vocab_lora"); }
  void TearDown() override { fs::remove_all(dir_); }
  // An adapter of the tiny base (vocab 32, hidden 8) with LoRA on q_proj (every projection
  // for "all-linear") and on embed_tokens of `vocab` ids.
  void write(int64_t vocab, nlohmann::ordered_json targets, bool base_layer = false) {
    const ModelConfig c = lora_test::tiny_config();
    std::vector<LoraTarget> all;
    for (int i = 0; i < kNumLoraTargets; ++i) all.push_back(static_cast<LoraTarget>(i));
    auto t = lora_test::adapter_tensors(c, targets.is_string() ? all : std::vector<LoraTarget>{LoraTarget::kQ}, 2, 1);
    t["base_model.model.model.embed_tokens.lora_embedding_A"] = {"F32", {2, vocab}, std::vector<float>(2 * vocab, 0.5f)};
    t["base_model.model.model.embed_tokens.lora_embedding_B"] = {"F32", {8, 2}, std::vector<float>(16, 0.25f)};
    if (base_layer) t["base_model.model.lm_head.base_layer.weight"] = {"F32", {32, 8}, std::vector<float>(256, 1.f)};
    lora_test::write_adapter(dir_, lora_test::lora_config(2, 2, std::move(targets)), t);
  }
  std::string error() {
    auto r = load_peft_adapter(dir_, "ad", lora_test::tiny_config(), 8);
    return r.is_ok() ? "" : r.message();
  }
  std::string dir_;
};

TEST_F(VocabLoraErrors, NamesWhatIsWrong) {
  write(32, {"q_proj", "embed_tokens"});
  EXPECT_EQ(error(), "");
  write(33, {"q_proj", "embed_tokens"});
  EXPECT_NE(error().find("vocabulary dimension must be the base's 32"), std::string::npos) << error();
  write(32, {"q_proj"});
  EXPECT_NE(error().find("lora_embedding_A is for model.embed_tokens, which adapter_config.json does not target"),
            std::string::npos) << error();
  write(32, {"q_proj", "embed_tokens"}, /*base_layer=*/true);
  EXPECT_NE(error().find("lm_head.base_layer.weight is for lm_head"), std::string::npos) << error();
  write(32, "all-linear");  // all-linear never takes the embedding, as in PEFT
  EXPECT_NE(error().find("is for model.embed_tokens, which adapter_config.json does not target"), std::string::npos)
      << error();
  write(32, {"q_proj", "embed_tokens", "lm_head"});
  EXPECT_NE(error().find("missing tensor base_model.model.lm_head.lora_A.weight"), std::string::npos) << error();
}

}  // namespace
}  // namespace quiver
