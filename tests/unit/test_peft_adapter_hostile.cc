// link: qv_lora qv_io qv_backend
// Adapter folders built to break the loader: every one must end in a clear error for that
// load (never an exception, a hang or a wrapped integer), and runtime reloads must keep
// honouring the folder allow-list and never echo a file's bytes.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>

#include "io/peft_adapter.h"
#include "lora/adapter_registry.h"
#include "unit/lora_test_util.h"

namespace quiver {
namespace {

namespace fs = std::filesystem;
using OJson = nlohmann::ordered_json;
constexpr int kMaxRank = 8;

class HostileAdapterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = lora_test::make_temp_dir("hostile");
    ASSERT_FALSE(root_.empty());
    dir_ = root_ + "/allowed/ad";
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(root_); }

  std::map<std::string, lora_test::HostTensor> qv(int rank = 4) {
    return lora_test::adapter_tensors(base_, {LoraTarget::kQ, LoraTarget::kV}, rank, 1);
  }
  Result<LoraAdapter> load(const OJson& config, const std::map<std::string, lora_test::HostTensor>& tensors) {
    lora_test::write_adapter(dir_, config, tensors);
    return load_peft_adapter(dir_, "ad", base_, kMaxRank);
  }
  static void expect_error(const Result<LoraAdapter>& r, const std::string& part) {
    ASSERT_FALSE(r.is_ok()) << "expected an error containing '" << part << "'";
    EXPECT_NE(r.message().find(part), std::string::npos) << r.message();
  }

  ModelConfig base_ = lora_test::tiny_config();
  std::string root_, dir_;
};

TEST_F(HostileAdapterTest, HugeLayerIndexIsAnError) {
  auto t = qv();
  t["base_model.model.model.layers.99999999999999999999.self_attn.q_proj.lora_A.weight"] =
      t[lora_test::tensor_name(0, LoraTarget::kQ, true)];
  expect_error(load(lora_test::lora_config(4, 4, {"q_proj", "v_proj"}), t), "out of range");
}

TEST_F(HostileAdapterTest, HugeLayerInLayersToTransformIsAnError) {
  OJson c = lora_test::lora_config(4, 4, {"q_proj", "v_proj"});
  c["layers_to_transform"] = {0};
  c["layers_pattern"] = "layers";
  // The module names are quiver's own, so only the config's values can be huge here.
  c["layers_to_transform"] = {std::numeric_limits<int64_t>::max()};
  Result<LoraAdapter> r = load(c, qv());
  EXPECT_FALSE(r.is_ok());  // layer 2^63-1 targets nothing, so the tensors are unexpected
}

TEST_F(HostileAdapterTest, CatastrophicRegexEndsQuicklyWithAnError) {
  // The first hung std::regex for good; PCRE2 sees that 'X' cannot occur. The second
  // defeats that shortcut and must stop at the backtracking limit.
  for (const char* pattern : {"^(([a-z._0-9])+)+X$", "^([a-z._0-9]+)+[^a-z._0-9]"}) {
    const auto start = std::chrono::steady_clock::now();
    Result<LoraAdapter> r = load(lora_test::lora_config(4, 4, pattern), qv());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_FALSE(r.is_ok()) << pattern;
    EXPECT_LT(s, 5.0) << pattern;
  }
  expect_error(load(lora_test::lora_config(4, 4, "^([a-z._0-9]+)+[^a-z._0-9]"), qv()), "backtracks too much");
}

TEST_F(HostileAdapterTest, CatastrophicPatternKeysAndExcludesAreBounded) {
  OJson c = lora_test::lora_config(4, 4, {"q_proj", "v_proj"});
  c["rank_pattern"] = {{"([a-z._0-9]+)+[^a-z._0-9]", 4}};
  expect_error(load(c, qv()), "rank_pattern");
  c = lora_test::lora_config(4, 4, {"q_proj", "v_proj"});
  c["exclude_modules"] = "^([a-z._0-9]+)+[^a-z._0-9]";
  expect_error(load(c, qv()), "exclude_modules");
}

TEST_F(HostileAdapterTest, RanksDoNotWrap) {
  // 4294967312 = 2^32 + 16: read as a 32-bit int it would pass as rank 16.
  OJson c = lora_test::lora_config(4, 4, {"q_proj", "v_proj"});
  c["r"] = 4294967312ull;
  expect_error(load(c, qv()), "out of range");
  c = lora_test::lora_config(4, 4, {"q_proj", "v_proj"});
  c["rank_pattern"] = {{"q_proj", 4294967300ull}};
  expect_error(load(c, qv()), "rank_pattern['q_proj']");
  c["rank_pattern"] = {{"q_proj", -4}};
  expect_error(load(c, qv()), "positive rank");
}

TEST_F(HostileAdapterTest, AbsurdAlphaIsRefused) {
  for (double alpha : {1e308, 2147483648.0, -2147483648.0}) {
    expect_error(load(lora_test::lora_config(4, alpha, {"q_proj", "v_proj"}), qv()), "lora_alpha");
  }
  OJson c = lora_test::lora_config(4, 4, {"q_proj", "v_proj"});
  c["alpha_pattern"] = {{"v_proj", 1e300}};
  expect_error(load(c, qv()), "alpha_pattern['v_proj']");
  EXPECT_TRUE(load(lora_test::lora_config(4, 64, {"q_proj", "v_proj"}), qv()).is_ok());
}

TEST_F(HostileAdapterTest, NonFiniteWeightsAreNamed) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    auto t = qv();
    const std::string name = lora_test::tensor_name(1, LoraTarget::kV, false);
    t[name].values[3] = bad;
    expect_error(load(lora_test::lora_config(4, 4, {"q_proj", "v_proj"}), t), name);
  }
}

TEST_F(HostileAdapterTest, ParseErrorsDoNotQuoteTheFile) {
  lora_test::write_adapter(dir_, lora_test::lora_config(4, 4, {"q_proj"}), qv());
  std::ofstream(dir_ + "/adapter_config.json") << "SECRET-TOKEN-abc123";
  Result<LoraAdapter> r = load_peft_adapter(dir_, "ad", base_, kMaxRank);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.message().find("SECRET"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("not valid JSON"), std::string::npos) << r.message();
}

TEST_F(HostileAdapterTest, FileLinkedOutsideTheAllowlistIsRefused) {
  lora_test::write_adapter(dir_, lora_test::lora_config(4, 4, {"q_proj", "v_proj"}), qv());
  const std::string outside = root_ + "/outside.json";
  std::ofstream(outside) << "{\"SECRET\": 1}";
  fs::remove(dir_ + "/adapter_config.json");
  fs::create_symlink(outside, dir_ + "/adapter_config.json");
  Result<LoraAdapter> r = load_peft_adapter(dir_, "ad", base_, kMaxRank, {root_ + "/allowed"});
  expect_error(r, "outside the allowed folders");
  EXPECT_EQ(r.message().find("SECRET"), std::string::npos) << r.message();
  // A link that stays inside the allow-list (as in a Hugging Face cache snapshot) is fine.
  fs::rename(outside, root_ + "/allowed/blob.json");
  std::ofstream(root_ + "/allowed/blob.json") << lora_test::lora_config(4, 4, {"q_proj", "v_proj"}).dump();
  fs::remove(dir_ + "/adapter_config.json");
  fs::create_symlink(root_ + "/allowed/blob.json", dir_ + "/adapter_config.json");
  EXPECT_TRUE(load_peft_adapter(dir_, "ad", base_, kMaxRank, {root_ + "/allowed"}).is_ok());
}

TEST_F(HostileAdapterTest, ReloadAfterEvictionRechecksTheAllowlist) {
  const std::string allowed = root_ + "/allowed";
  lora_test::write_adapter(dir_, lora_test::lora_config(4, 4, {"q_proj", "v_proj"}), qv());
  const std::string other = allowed + "/other";
  fs::create_directories(other);
  lora_test::write_adapter(other, lora_test::lora_config(4, 4, {"q_proj", "v_proj"}), qv());
  AdapterRegistry reg(base_, kMaxRank, /*max_cpu_loras=*/1);
  auto a = reg.add("a", dir_, {allowed});
  ASSERT_TRUE(a.is_ok()) << a.message();
  ASSERT_TRUE(reg.add("other", other, {allowed}).is_ok());  // evicts "a" from the host LRU

  // The folder is swapped for a link to a folder outside the allow-list.
  const std::string evil = root_ + "/evil";
  fs::create_directories(evil);
  lora_test::write_adapter(evil, lora_test::lora_config(4, 4, {"q_proj", "v_proj"}),
                           lora_test::adapter_tensors(base_, {LoraTarget::kQ, LoraTarget::kV}, 4, 99));
  fs::remove_all(dir_);
  fs::create_symlink(evil, dir_);
  auto reloaded = reg.get(a->uid);
  ASSERT_FALSE(reloaded.is_ok()) << "reloaded weights from outside the allow-list";
  EXPECT_NE(reloaded.message().find("outside the allowed folders"), std::string::npos) << reloaded.message();
}

TEST_F(HostileAdapterTest, BadFileSwappedInAfterEvictionIsThatReloadsError) {
  lora_test::write_adapter(dir_, lora_test::lora_config(4, 4, {"q_proj", "v_proj"}), qv());
  const std::string other = root_ + "/allowed/other";
  fs::create_directories(other);
  lora_test::write_adapter(other, lora_test::lora_config(4, 4, {"q_proj", "v_proj"}), qv());
  AdapterRegistry reg(base_, kMaxRank, 1);
  auto a = reg.add("a", dir_);
  ASSERT_TRUE(a.is_ok()) << a.message();
  ASSERT_TRUE(reg.add("other", other).is_ok());
  auto t = qv();
  t["base_model.model.model.layers.99999999999999999999.self_attn.q_proj.lora_A.weight"] =
      t[lora_test::tensor_name(0, LoraTarget::kQ, true)];
  lora_test::write_adapter(dir_, lora_test::lora_config(4, 4, {"q_proj", "v_proj"}), t);
  auto reloaded = reg.get(a->uid);
  ASSERT_FALSE(reloaded.is_ok());
  EXPECT_NE(reloaded.message().find("reloading evicted adapter"), std::string::npos) << reloaded.message();
}

}  // namespace
}  // namespace quiver
