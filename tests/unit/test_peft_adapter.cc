// link: qv_io
// load_peft_adapter: every accepted PEFT feature and every refusal, on tiny adapters
// written by the test itself (adapter_config.json + adapter_model.safetensors).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "io/peft_adapter.h"
#include "unit/lora_test_util.h"

namespace quiver {
namespace {

using lora_test::adapter_tensors;
using lora_test::lora_config;
using lora_test::tensor_name;
using OJson = nlohmann::ordered_json;
constexpr int kMaxRank = 8;

const std::vector<LoraTarget> kAll = {LoraTarget::kQ,    LoraTarget::kK,  LoraTarget::kV,   LoraTarget::kO,
                                      LoraTarget::kGate, LoraTarget::kUp, LoraTarget::kDown};

class PeftAdapterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = lora_test::make_temp_dir("peft");
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  Result<LoraAdapter> write_and_load(const OJson& config, const std::map<std::string, lora_test::HostTensor>& tensors,
                                     int max_rank = kMaxRank) {
    lora_test::write_adapter(dir_, config, tensors);
    return load_peft_adapter(dir_, "ad", base_, max_rank);
  }

  // Asserts the adapter targets exactly `expected` (layer, target) pairs.
  static void expect_modules(const LoraAdapter& a, const std::set<std::pair<int, LoraTarget>>& expected) {
    for (size_t l = 0; l < a.layers.size(); ++l)
      for (int t = 0; t < kNumLoraTargets; ++t)
        EXPECT_EQ(a.layers[l][t].has_value(), expected.count({static_cast<int>(l), static_cast<LoraTarget>(t)}) > 0)
            << "layer " << l << " " << lora_target_name(static_cast<LoraTarget>(t));
  }

  // Checks A == stored A and B == stored B * scale for one module.
  void expect_weights(const LoraAdapter& a, int layer, LoraTarget t, int rank, double scale, uint32_t seed = 1) {
    ASSERT_TRUE(a.layers[layer][static_cast<int>(t)].has_value());
    const LoraModule& m = *a.layers[layer][static_cast<int>(t)];
    EXPECT_EQ(m.rank, rank);
    auto ra = lora_test::module_a(base_, layer, t, rank, seed).values;
    auto rb = lora_test::module_b(base_, layer, t, rank, seed).values;
    ASSERT_EQ(m.a.size(), ra.size());
    ASSERT_EQ(m.b.size(), rb.size());
    for (size_t i = 0; i < ra.size(); ++i) EXPECT_EQ(m.a[i], ra[i]);
    for (size_t i = 0; i < rb.size(); ++i) EXPECT_NEAR(m.b[i], rb[i] * scale, 1e-6 * std::abs(scale)) << i;
  }

  static void expect_error(const Result<LoraAdapter>& r, const std::vector<std::string>& parts) {
    ASSERT_FALSE(r.is_ok()) << "expected an error containing '" << parts[0] << "'";
    for (const auto& p : parts) EXPECT_NE(r.message().find(p), std::string::npos) << r.message();
  }

  ModelConfig base_ = lora_test::tiny_config();
  std::string dir_;
};

TEST(LoraTargets, NamesAndFeatures) {
  ModelConfig c = lora_test::tiny_config();
  EXPECT_STREQ(lora_target_name(LoraTarget::kGate), "gate_proj");
  EXPECT_STREQ(lora_target_name(LoraTarget::kDown), "down_proj");
  EXPECT_EQ(lora_target_in(c, LoraTarget::kQ), 8);
  EXPECT_EQ(lora_target_out(c, LoraTarget::kQ), 12);
  EXPECT_EQ(lora_target_out(c, LoraTarget::kK), 6);
  EXPECT_EQ(lora_target_out(c, LoraTarget::kV), 6);
  EXPECT_EQ(lora_target_in(c, LoraTarget::kO), 12);
  EXPECT_EQ(lora_target_out(c, LoraTarget::kO), 8);
  EXPECT_EQ(lora_target_out(c, LoraTarget::kGate), 10);
  EXPECT_EQ(lora_target_out(c, LoraTarget::kUp), 10);
  EXPECT_EQ(lora_target_in(c, LoraTarget::kDown), 10);
  EXPECT_EQ(lora_target_out(c, LoraTarget::kDown), 8);
}

TEST_F(PeftAdapterTest, ListTargetsScaleFoldedIntoB) {
  auto r = write_and_load(lora_config(4, 8, {"q_proj", "v_proj"}),
                          adapter_tensors(base_, {LoraTarget::kQ, LoraTarget::kV}, 4, 1));
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ(r->name, "ad");
  EXPECT_EQ(r->path, dir_);
  EXPECT_EQ(r->max_rank, 4);
  expect_modules(*r, {{0, LoraTarget::kQ}, {0, LoraTarget::kV}, {1, LoraTarget::kQ}, {1, LoraTarget::kV}});
  expect_weights(*r, 1, LoraTarget::kQ, 4, 8.0 / 4);
  expect_weights(*r, 0, LoraTarget::kV, 4, 8.0 / 4);
  // q: 4*8 + 12*4, v: 4*8 + 6*4 floats, two layers.
  EXPECT_EQ(r->host_bytes(), 2 * ((32 + 48) + (32 + 24)) * sizeof(float));
}

TEST_F(PeftAdapterTest, ListEntriesWithModulePath) {
  // PEFT matches a list entry by exact name or by ".entry" suffix.
  auto tensors = adapter_tensors(base_, {LoraTarget::kK}, 2, 1, {1});
  auto more = adapter_tensors(base_, {LoraTarget::kUp}, 2, 1);
  tensors.insert(more.begin(), more.end());
  auto r = write_and_load(lora_config(2, 2, {"model.layers.1.self_attn.k_proj", "mlp.up_proj"}), tensors);
  ASSERT_TRUE(r.is_ok()) << r.message();
  expect_modules(*r, {{1, LoraTarget::kK}, {0, LoraTarget::kUp}, {1, LoraTarget::kUp}});
}

TEST_F(PeftAdapterTest, RegexTargetsFullMatch) {
  auto tensors = adapter_tensors(base_, {LoraTarget::kQ, LoraTarget::kK}, 4, 1, {1});
  auto r = write_and_load(lora_config(4, 4, R"(model\.layers\.1\.self_attn\.(q|k)_proj)"), tensors);
  ASSERT_TRUE(r.is_ok()) << r.message();
  expect_modules(*r, {{1, LoraTarget::kQ}, {1, LoraTarget::kK}});
  expect_weights(*r, 1, LoraTarget::kK, 4, 1.0);
}

TEST_F(PeftAdapterTest, RegexIsFullMatchNotSearch) {
  // "q_proj" as a regex string matches no full module name (re.fullmatch), unlike a list.
  auto r = write_and_load(lora_config(4, 4, "q_proj"), {});
  expect_error(r, {"targets no module"});
}

TEST_F(PeftAdapterTest, AllLinear) {
  auto r = write_and_load(lora_config(2, 4, "all-linear"), adapter_tensors(base_, kAll, 2, 1));
  ASSERT_TRUE(r.is_ok()) << r.message();
  std::set<std::pair<int, LoraTarget>> all;
  for (int l = 0; l < 2; ++l)
    for (LoraTarget t : kAll) all.insert({l, t});
  expect_modules(*r, all);
  expect_weights(*r, 1, LoraTarget::kDown, 2, 2.0);
}

TEST_F(PeftAdapterTest, RankPattern) {
  OJson c = lora_config(4, 8, {"q_proj", "v_proj", "down_proj"});
  c["rank_pattern"] = {{"v_proj", 2}, {"model.layers.1.mlp.down_proj", 6}};
  auto tensors = adapter_tensors(base_, {LoraTarget::kQ}, 4, 1);
  auto v = adapter_tensors(base_, {LoraTarget::kV}, 2, 1);
  auto d0 = adapter_tensors(base_, {LoraTarget::kDown}, 4, 1, {0});
  auto d1 = adapter_tensors(base_, {LoraTarget::kDown}, 6, 1, {1});
  for (auto* m : {&v, &d0, &d1}) tensors.insert(m->begin(), m->end());
  auto r = write_and_load(c, tensors);
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ(r->max_rank, 6);
  expect_weights(*r, 0, LoraTarget::kQ, 4, 8.0 / 4);
  expect_weights(*r, 1, LoraTarget::kV, 2, 8.0 / 2);  // scale uses the module's own rank
  expect_weights(*r, 0, LoraTarget::kDown, 4, 8.0 / 4);
  expect_weights(*r, 1, LoraTarget::kDown, 6, 8.0 / 6);
}

TEST_F(PeftAdapterTest, RankPatternKeyMustMatchWholeSegment) {
  // "proj" does not match "q_proj" under PEFT's (.*\.)?(key)$ rule, so r applies.
  OJson c = lora_config(4, 4, {"q_proj"});
  c["rank_pattern"] = {{"proj", 2}};
  auto r = write_and_load(c, adapter_tensors(base_, {LoraTarget::kQ}, 4, 1));
  ASSERT_TRUE(r.is_ok()) << r.message();
  expect_weights(*r, 0, LoraTarget::kQ, 4, 1.0);
}

TEST_F(PeftAdapterTest, AlphaPattern) {
  OJson c = lora_config(4, 8, {"q_proj", "down_proj"});
  c["alpha_pattern"] = {{"mlp\\.down_proj", 32}};  // keys are regexes
  auto r = write_and_load(c, adapter_tensors(base_, {LoraTarget::kQ, LoraTarget::kDown}, 4, 1));
  ASSERT_TRUE(r.is_ok()) << r.message();
  expect_weights(*r, 0, LoraTarget::kQ, 4, 8.0 / 4);
  expect_weights(*r, 1, LoraTarget::kDown, 4, 32.0 / 4);
}

TEST_F(PeftAdapterTest, RsLoraScale) {
  OJson c = lora_config(4, 8, {"o_proj"});
  c["use_rslora"] = true;
  auto r = write_and_load(c, adapter_tensors(base_, {LoraTarget::kO}, 4, 1));
  ASSERT_TRUE(r.is_ok()) << r.message();
  expect_weights(*r, 0, LoraTarget::kO, 4, 8.0 / std::sqrt(4.0));
}

TEST_F(PeftAdapterTest, LayersToTransformInt) {
  OJson c = lora_config(2, 2, {"gate_proj"});
  c["layers_to_transform"] = 1;
  auto r = write_and_load(c, adapter_tensors(base_, {LoraTarget::kGate}, 2, 1, {1}));
  ASSERT_TRUE(r.is_ok()) << r.message();
  expect_modules(*r, {{1, LoraTarget::kGate}});
}

TEST_F(PeftAdapterTest, LayersToTransformListWithPattern) {
  base_ = lora_test::tiny_config(3);
  OJson c = lora_config(2, 2, {"q_proj"});
  c["layers_to_transform"] = {0, 2};
  c["layers_pattern"] = "layers";
  auto r = write_and_load(c, adapter_tensors(base_, {LoraTarget::kQ}, 2, 1, {0, 2}));
  ASSERT_TRUE(r.is_ok()) << r.message();
  expect_modules(*r, {{0, LoraTarget::kQ}, {2, LoraTarget::kQ}});
}

TEST_F(PeftAdapterTest, LayersPatternThatMatchesNothingSelectsNoLayer) {
  OJson c = lora_config(2, 2, {"q_proj"});
  c["layers_to_transform"] = {0};
  c["layers_pattern"] = {"h", "blocks"};
  expect_error(write_and_load(c, {}), {"targets no module"});
}

TEST_F(PeftAdapterTest, RefusesLayersToTransformWithStringTargets) {
  // LoraConfig.__post_init__ raises for this, for a regex and for "all-linear" alike.
  OJson c = lora_config(2, 2, "all-linear");
  c["layers_to_transform"] = {0};
  expect_error(write_and_load(c, adapter_tensors(base_, kAll, 2, 1, {0})),
               {"layers_to_transform cannot be used when target_modules is a string"});
}

TEST_F(PeftAdapterTest, RefusesLayersPatternWithoutLayersToTransform) {
  OJson c = lora_config(2, 2, {"q_proj"});
  c["layers_pattern"] = "layers";
  expect_error(write_and_load(c, adapter_tensors(base_, {LoraTarget::kQ}, 2, 1)),
               {"layers_pattern is set but layers_to_transform is not"});
}

TEST_F(PeftAdapterTest, ExcludeModules) {
  OJson c = lora_config(2, 2, {"q_proj", "v_proj"});
  c["exclude_modules"] = {"model.layers.0.self_attn.v_proj"};
  auto tensors = adapter_tensors(base_, {LoraTarget::kQ}, 2, 1);
  auto v = adapter_tensors(base_, {LoraTarget::kV}, 2, 1, {1});
  tensors.insert(v.begin(), v.end());
  auto r = write_and_load(c, tensors);
  ASSERT_TRUE(r.is_ok()) << r.message();
  expect_modules(*r, {{0, LoraTarget::kQ}, {1, LoraTarget::kQ}, {1, LoraTarget::kV}});
}

TEST_F(PeftAdapterTest, Bf16AndF16Storage) {
  auto tensors = adapter_tensors(base_, {LoraTarget::kQ, LoraTarget::kUp}, 4, 1);
  for (auto& [name, t] : tensors) t.dtype = name.find("q_proj") != std::string::npos ? "BF16" : "F16";
  auto r = write_and_load(lora_config(4, 16, {"q_proj", "up_proj"}), tensors);
  ASSERT_TRUE(r.is_ok()) << r.message();
  expect_weights(*r, 0, LoraTarget::kQ, 4, 4.0);  // the test values are exact in both
  expect_weights(*r, 1, LoraTarget::kUp, 4, 4.0);
}

TEST_F(PeftAdapterTest, DefaultAdapterNameInTensorNames) {
  std::map<std::string, lora_test::HostTensor> tensors;
  for (auto& [name, t] : adapter_tensors(base_, {LoraTarget::kQ}, 2, 1)) {
    std::string n = name;
    n.replace(n.rfind(".weight"), 7, ".default.weight");
    tensors[n] = t;
  }
  auto r = write_and_load(lora_config(2, 2, {"q_proj"}), tensors);
  ASSERT_TRUE(r.is_ok()) << r.message();
  expect_weights(*r, 1, LoraTarget::kQ, 2, 1.0);
}

TEST_F(PeftAdapterTest, FanInFanOutIgnoredForLinear) {
  OJson c = lora_config(2, 2, {"q_proj"});
  c["fan_in_fan_out"] = true;
  auto r = write_and_load(c, adapter_tensors(base_, {LoraTarget::kQ}, 2, 1));
  ASSERT_TRUE(r.is_ok()) << r.message();
  expect_weights(*r, 0, LoraTarget::kQ, 2, 1.0);
}

TEST_F(PeftAdapterTest, TargetModulesNullUsesPeftDefault) {
  OJson c = lora_config(2, 2, nullptr);
  auto r = write_and_load(c, adapter_tensors(base_, {LoraTarget::kQ, LoraTarget::kV}, 2, 1));
  ASSERT_TRUE(r.is_ok()) << r.message();
  expect_modules(*r, {{0, LoraTarget::kQ}, {0, LoraTarget::kV}, {1, LoraTarget::kQ}, {1, LoraTarget::kV}});
}

// ---- refusals -------------------------------------------------------------------------

TEST_F(PeftAdapterTest, RefusesOtherPeftType) {
  OJson c = lora_config(2, 2, {"q_proj"});
  c["peft_type"] = "IA3";
  expect_error(write_and_load(c, adapter_tensors(base_, {LoraTarget::kQ}, 2, 1)), {"ad", "peft_type", "IA3"});
}

TEST_F(PeftAdapterTest, RefusesDora) {
  OJson c = lora_config(2, 2, {"q_proj"});
  c["use_dora"] = true;
  expect_error(write_and_load(c, adapter_tensors(base_, {LoraTarget::kQ}, 2, 1)), {"use_dora"});
}

// embed_tokens / lm_head replacements are vocabulary rows (test_adapter_vocab.cc); any other
// saved module would replace a base module quiver does not swap per request.
TEST_F(PeftAdapterTest, RefusesModulesToSave) {
  OJson c = lora_config(2, 2, {"q_proj"});
  c["modules_to_save"] = {"score"};
  expect_error(write_and_load(c, adapter_tensors(base_, {LoraTarget::kQ}, 2, 1)),
               {"modules_to_save", "replaces whole base modules"});
}

TEST_F(PeftAdapterTest, RefusesBias) {
  OJson c = lora_config(2, 2, {"q_proj"});
  c["bias"] = "lora_only";
  expect_error(write_and_load(c, adapter_tensors(base_, {LoraTarget::kQ}, 2, 1)), {"bias", "lora_only"});
}

// embed_tokens and lm_head are targets like the projections (tests/unit/test_vocab_lora.cc
// reads PEFT's own files): a target needs its tensors, a tensor needs its target.
TEST_F(PeftAdapterTest, EmbeddingAndLmHeadTargetsNeedTheirTensors) {
  const auto q = adapter_tensors(base_, {LoraTarget::kQ}, 2, 1);
  expect_error(write_and_load(lora_config(2, 2, {"q_proj", "embed_tokens"}), q),
               {"missing tensor base_model.model.model.embed_tokens.lora_embedding_A", "targets model.embed_tokens"});
  expect_error(write_and_load(lora_config(2, 2, {"q_proj", "lm_head"}), q),
               {"missing tensor base_model.model.lm_head.lora_A.weight"});
  expect_error(write_and_load(lora_config(2, 2, ".*(q_proj|lm_head)"), q), {"missing tensor base_model.model.lm_head"});
}

TEST_F(PeftAdapterTest, RefusesLmHeadTensorOfAnUntargetedModule) {
  auto tensors = adapter_tensors(base_, {LoraTarget::kQ}, 2, 1);
  tensors["base_model.model.lm_head.lora_A.weight"] = lora_test::HostTensor{"F32", {2, 8}, std::vector<float>(16)};
  expect_error(write_and_load(lora_config(2, 2, {"q_proj"}), tensors),
               {"lm_head.lora_A.weight is for lm_head", "does not target"});
}

TEST_F(PeftAdapterTest, RefusesUnknownTargetName) {
  expect_error(write_and_load(lora_config(2, 2, {"q_proj", "c_attn"}), {}), {"unknown module 'c_attn'", "q_proj"});
}

TEST_F(PeftAdapterTest, RefusesBinThatIsNotTorchSave) {
  std::ofstream(dir_ + "/adapter_config.json") << lora_config(2, 2, {"q_proj"}).dump();
  std::ofstream(dir_ + "/adapter_model.bin") << "pickle";
  auto r = load_peft_adapter(dir_, "ad", base_, kMaxRank);
  expect_error(r, {"adapter_model.bin", "not a PyTorch checkpoint"});
}

TEST_F(PeftAdapterTest, RefusesMissingWeights) {
  std::ofstream(dir_ + "/adapter_config.json") << lora_config(2, 2, {"q_proj"}).dump();
  expect_error(load_peft_adapter(dir_, "ad", base_, kMaxRank),
               {"neither adapter_model.safetensors nor adapter_model.bin found"});
}

TEST_F(PeftAdapterTest, RefusesMissingConfig) {
  lora_test::write_safetensors(dir_ + "/adapter_model.safetensors", adapter_tensors(base_, {LoraTarget::kQ}, 2, 1));
  expect_error(load_peft_adapter(dir_, "ad", base_, kMaxRank), {"adapter_config.json not found"});
}

TEST_F(PeftAdapterTest, RefusesMissingDirectory) {
  expect_error(load_peft_adapter(dir_ + "/nope", "ad", base_, kMaxRank), {"not a directory", "nope"});
}

TEST_F(PeftAdapterTest, RefusesMalformedJson) {
  std::ofstream(dir_ + "/adapter_config.json") << "{\"peft_type\": \"LORA\", \"r\": ";
  lora_test::write_safetensors(dir_ + "/adapter_model.safetensors", adapter_tensors(base_, {LoraTarget::kQ}, 2, 1));
  expect_error(load_peft_adapter(dir_, "ad", base_, kMaxRank), {"adapter_config.json", "not valid JSON"});
  std::ofstream(dir_ + "/adapter_config.json") << "{\"peft_type\": \"LORA\", \"lora_alpha\": 1e400}";
  expect_error(load_peft_adapter(dir_, "ad", base_, kMaxRank), {"adapter_config.json", "a number out of range"});
}

TEST_F(PeftAdapterTest, RefusesWrongJsonType) {
  OJson c = lora_config(2, 2, {"q_proj"});
  c["r"] = "eight";
  expect_error(write_and_load(c, adapter_tensors(base_, {LoraTarget::kQ}, 2, 1)),
               {"adapter_config.json", "r must be an integer", "\"eight\""});
}

TEST_F(PeftAdapterTest, RefusesRankAboveMax) {
  auto r = write_and_load(lora_config(16, 16, {"q_proj"}), adapter_tensors(base_, {LoraTarget::kQ}, 16, 1));
  expect_error(r, {"'ad'", "rank 16", "--max-lora-rank 8"});
}

TEST_F(PeftAdapterTest, RefusesRankPatternAboveMax) {
  OJson c = lora_config(4, 4, {"q_proj"});
  c["rank_pattern"] = {{"q_proj", 12}};
  expect_error(write_and_load(c, adapter_tensors(base_, {LoraTarget::kQ}, 12, 1)),
               {"'ad'", "rank 12", "rank_pattern['q_proj']", "--max-lora-rank 8"});
}

TEST_F(PeftAdapterTest, RefusesShapeForAnotherModel) {
  ModelConfig other = base_;
  other.hidden_size = 16;  // the adapter was trained on a wider model
  auto r = write_and_load(lora_config(2, 2, {"q_proj"}), adapter_tensors(other, {LoraTarget::kQ}, 2, 1));
  expect_error(r, {"adapter made for another model?", "[2, 16]", "expected [2, 8]"});
}

TEST_F(PeftAdapterTest, RefusesRankDisagreeingWithConfig) {
  auto r = write_and_load(lora_config(4, 4, {"q_proj"}), adapter_tensors(base_, {LoraTarget::kQ}, 2, 1));
  expect_error(r, {"expected [4, 8]", "rank 4 (r)"});
}

TEST_F(PeftAdapterTest, RefusesTensorForUntargetedModule) {
  auto r = write_and_load(lora_config(2, 2, {"q_proj"}), adapter_tensors(base_, {LoraTarget::kQ, LoraTarget::kK}, 2, 1));
  expect_error(r, {"k_proj", "does not target"});
}

TEST_F(PeftAdapterTest, RefusesTensorOutsideLayersToTransform) {
  OJson c = lora_config(2, 2, {"q_proj"});
  c["layers_to_transform"] = {0};
  expect_error(write_and_load(c, adapter_tensors(base_, {LoraTarget::kQ}, 2, 1)),
               {"model.layers.1.self_attn.q_proj", "does not target"});
}

TEST_F(PeftAdapterTest, RefusesMissingTensorForTargetedModule) {
  auto tensors = adapter_tensors(base_, {LoraTarget::kQ, LoraTarget::kV}, 2, 1);
  tensors.erase(tensor_name(1, LoraTarget::kV, false));
  expect_error(write_and_load(lora_config(2, 2, {"q_proj", "v_proj"}), tensors),
               {"missing tensor base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight"});
}

TEST_F(PeftAdapterTest, RefusesLayerBeyondModel) {
  ModelConfig deeper = lora_test::tiny_config(3);
  auto r = write_and_load(lora_config(2, 2, {"q_proj"}), adapter_tensors(deeper, {LoraTarget::kQ}, 2, 1));
  expect_error(r, {"layer 2", "2 layers", "adapter made for another model?"});
}

TEST_F(PeftAdapterTest, RefusesIntegerTensor) {
  // The writer knows only float dtypes; relabel one F32 tensor as I32 (same width).
  lora_test::write_adapter(dir_, lora_config(2, 2, {"q_proj"}), adapter_tensors(base_, {LoraTarget::kQ}, 2, 1));
  std::string path = dir_ + "/adapter_model.safetensors";
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  size_t at = bytes.find("\"dtype\":\"F32\"");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 13, "\"dtype\":\"I32\"");
  std::ofstream(path, std::ios::binary) << bytes;
  expect_error(load_peft_adapter(dir_, "ad", base_, kMaxRank), {"dtype I32", "F32, F16 and BF16"});
}

}  // namespace
}  // namespace quiver
