// link: qv_engine
// check_engine_limits: flags that would exhaust memory or threads are refused up front,
// with the memory they would need; negative sizes are errors, not silently ignored.
#include <gtest/gtest.h>

#include "engine/engine_limits.h"
#include "unit/lora_test_util.h"

namespace quiver {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

class EngineLimitsTest : public ::testing::Test {
 protected:
  EngineLimitsTest() {
    config_.hidden_size = 4096;
    config_.intermediate_size = 11008;
    config_.num_layers = 32;
    config_.num_heads = 32;
    config_.num_kv_heads = 32;
    config_.head_dim = 128;
    config_.vocab_size = 32000;
    args_.max_num_batched_tokens = 2048;
    in_.memory_bytes = 16 * kGiB;
    in_.kv_bytes_per_block = 16 * 2 * 32 * 32 * 128 * 4;
    in_.max_model_len = 4096;
  }
  Status check() const { return check_engine_limits(args_, config_, in_); }
  void expect_error(const std::string& part) const {
    Status s = check();
    ASSERT_FALSE(s.is_ok()) << "expected an error containing '" << part << "'";
    EXPECT_NE(s.message().find(part), std::string::npos) << s.message();
  }

  ModelConfig config_ = lora_test::tiny_config();
  EngineArgs args_;
  EngineLimitsInput in_;
};

TEST_F(EngineLimitsTest, DefaultsPass) { EXPECT_TRUE(check().is_ok()) << check().message(); }

TEST_F(EngineLimitsTest, NegativeSizesAreErrors) {
  args_.num_kv_blocks = -5;
  expect_error("--num-kv-blocks");
  args_.num_kv_blocks = 0;
  args_.max_model_len = -5;
  expect_error("--max-model-len");
}

TEST_F(EngineLimitsTest, ThreadsAreBounded) {
  args_.threads = 100000;
  expect_error("--threads");
  args_.threads = 64;
  EXPECT_TRUE(check().is_ok());
}

TEST_F(EngineLimitsTest, LoraSlotsGiveTheMemoryTheyNeed) {
  args_.enable_lora = true;
  args_.max_loras = 100000;
  expect_error("GiB");
  expect_error("--max-loras 100000");
  args_.max_loras = 8;
  EXPECT_TRUE(check().is_ok()) << check().message();
}

TEST_F(EngineLimitsTest, HugeCountsAreRefused) {
  args_.max_num_seqs = 2000000000;
  expect_error("--max-num-seqs");
  args_.max_num_seqs = 256;
  args_.max_num_batched_tokens = 10000000;
  expect_error("per-step buffers");
  args_.max_num_batched_tokens = 2048;
  args_.num_kv_blocks = 10000000;
  expect_error("--num-kv-blocks 10000000 needs");
}

TEST_F(EngineLimitsTest, LongContextsNeedAnExplicitLength) {
  in_.max_model_len = 20000000;
  expect_error("--max-model-len");
}

}  // namespace
}  // namespace quiver
