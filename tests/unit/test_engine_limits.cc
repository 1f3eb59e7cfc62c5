// link: qv_engine
// validate(EngineArgs) and check_engine_limits: flags that would exhaust memory or threads
// are refused up front, with the memory they would need; negative sizes and unknown names
// are errors, not silently ignored.
#include <gtest/gtest.h>

#include <tuple>

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
    args_.model = "model";
    args_.max_num_batched_tokens = 2048;
    in_.memory_bytes = 16 * kGiB;
    in_.kv_bytes_per_block = 16 * 2 * 32 * 32 * 128 * 4;
    in_.max_model_len = 4096;
  }
  Status check() const {
    auto parsed = validate(args_);
    return parsed.is_ok() ? check_engine_limits(args_, config_, in_) : parsed.status();
  }
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

TEST_F(EngineLimitsTest, NamesAreParsedOnce) {
  args_.kv_cache_dtype = "bf16";
  args_.dtype = "half";
  args_.load_format = "dummy";
  auto p = validate(args_);
  ASSERT_TRUE(p.is_ok()) << p.message();
  EXPECT_EQ(p->kv_cache_dtype, DType::kBF16);
  EXPECT_EQ(p->dtype, DType::kF16);
  EXPECT_EQ(p->load_format, LoadFormat::kDummy);
  EXPECT_FALSE(p->lora_dtype.has_value());
  for (auto [field, value, flag] : {std::tuple<std::string EngineArgs::*, const char*, const char*>{
                                        &EngineArgs::kv_cache_dtype, "fp9", "--kv-cache-dtype"},
                                    {&EngineArgs::dtype, "int4", "--dtype"},
                                    {&EngineArgs::load_format, "pt", "--load-format"},
                                    {&EngineArgs::device, "tpu", "--device"},
                                    {&EngineArgs::matmul_precision, "max", "--matmul-precision"},
                                    {&EngineArgs::kv_cache_memory, "lots", "--kv-cache-memory"}}) {
    EngineArgs a = args_;
    a.*field = value;
    auto bad = validate(a);
    ASSERT_FALSE(bad.is_ok()) << flag;
    EXPECT_NE(bad.message().find(flag), std::string::npos) << bad.message();
  }
  // --quantization: int8 on the host backends, fp8 on every backend; the methods of
  // pre-quantized checkpoints are not flags here.
  for (auto [value, device, ok, says] :
       {std::tuple<const char*, const char*, bool, const char*>{"int8", "cpu", true, ""},
        {"int8", "ref", true, ""},
        {"", "cpu", true, ""},
        {"int8", "cuda", false, "cuda backend has no int8 kernels"},
        {"fp8", "cpu", true, ""},
        {"fp8", "cuda", true, ""},
        {"gptq", "cpu", false, "unknown --quantization 'gptq' (supported: fp8 on every backend, int8"}}) {
    EngineArgs a = args_;
    a.quantization = value;
    a.device = device;
    auto p = validate(a);
    ASSERT_EQ(p.is_ok(), ok) << value << " on " << device;
    const auto kind = std::string(value) == "int8"  ? WeightQuantization::kInt8
                      : std::string(value) == "fp8" ? WeightQuantization::kFp8
                                                    : WeightQuantization::kNone;
    if (ok) EXPECT_EQ(p->quantization, kind);
    else EXPECT_NE(p.message().find(says), std::string::npos) << p.message();
  }
  args_.enable_lora = true;
  args_.lora_dtype = "float16";
  expect_error("--lora-dtype");
  args_.lora_dtype = "auto";
  args_.max_loras = 0;
  expect_error("--max-loras");
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
