// link: qv_engine
// plan_kv_cache: the KV cache's size from the GPU's utilization budget or the host's
// available RAM, explicit flags winning, the max_num_seqs cap, and refusals that name
// the numbers when one sequence of max_model_len does not fit.
#include <gtest/gtest.h>

#include "engine/memory_plan.h"

namespace quiver {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kMiB = int64_t{1} << 20;

// Llama-2-7B with a bf16 cache: 32 layers x K and V x 32 heads x 128 x 2 bytes = 512 KiB a
// token, 8 MiB a block of 16; an H200's 140 GiB.
KvPlanInput gpu_7b() {
  KvPlanInput in;
  in.device = true;
  in.total = 140 * kGiB;
  in.free = 140 * kGiB - 14 * kGiB;  // weights, slots, activations, CUDA context
  in.gpu_memory_utilization = 0.9;
  in.reserve = 256 * kMiB;
  in.bytes_per_block = 8 * kMiB;
  in.block_size = 16;
  in.max_model_len = 4096;
  in.max_num_seqs = 256;
  return in;
}

void expect_error(const Result<KvPlan>& r, const std::vector<std::string>& parts) {
  ASSERT_FALSE(r.is_ok());
  for (const auto& p : parts) EXPECT_NE(r.message().find(p), std::string::npos) << "'" << p << "' in: " << r.message();
}

TEST(MemoryPlan, GpuBudgetIsUtilizationLessWhatIsInUseAndTheGraphs) {
  const KvPlanInput in = gpu_7b();
  auto plan = plan_kv_cache(in);
  ASSERT_TRUE(plan.is_ok()) << plan.message();
  const int64_t budget = static_cast<int64_t>(0.9 * double(in.total)) - 14 * kGiB - in.reserve;
  EXPECT_EQ(plan->budget, budget);
  EXPECT_EQ(plan->num_blocks, budget / in.bytes_per_block);
  // 111.75 GiB of KV at 512 KiB a token: the issue's >= 200,000 tokens.
  EXPECT_GE(int64_t{plan->num_blocks} * in.block_size, 200000);
  EXPECT_NE(plan->source.find("--gpu-memory-utilization 0.90"), std::string::npos) << plan->source;
}

TEST(MemoryPlan, DefaultNeverExceedsMaxNumSeqsFullContexts) {
  KvPlanInput in = gpu_7b();
  in.max_num_seqs = 2;
  auto plan = plan_kv_cache(in);
  ASSERT_TRUE(plan.is_ok()) << plan.message();
  EXPECT_EQ(plan->num_blocks, 2 * 4096 / 16);
  EXPECT_NE(plan->source.find("capped at --max-num-seqs 2"), std::string::npos) << plan->source;
}

TEST(MemoryPlan, LowerUtilizationGivesLessAndTooLowIsRefusedWithNumbers) {
  KvPlanInput in = gpu_7b();
  in.gpu_memory_utilization = 0.5;
  auto half = plan_kv_cache(in);
  ASSERT_TRUE(half.is_ok()) << half.message();
  EXPECT_LT(half->num_blocks, plan_kv_cache(gpu_7b())->num_blocks);
  // 10% of 140 GiB is less than the 14 GiB already in use.
  in.gpu_memory_utilization = 0.1;
  expect_error(plan_kv_cache(in), {"--gpu-memory-utilization 0.10 allows 14.00 GiB", "14.00 GiB are in use",
                                   "one sequence of --max-model-len 4096 needs 2.00 GiB"});
  in.gpu_memory_utilization = 1.5;
  expect_error(plan_kv_cache(in), {"--gpu-memory-utilization must be in (0, 1]"});
}

TEST(MemoryPlan, ExplicitFlagsWinAndAreCheckedAgainstWhatIsFree) {
  KvPlanInput in = gpu_7b();
  in.num_kv_blocks = 1000;
  in.kv_cache_memory = 4 * kGiB;
  auto blocks = plan_kv_cache(in);
  ASSERT_TRUE(blocks.is_ok()) << blocks.message();
  EXPECT_EQ(blocks->num_blocks, 1000);
  EXPECT_EQ(blocks->source, "--num-kv-blocks 1000");
  in.num_kv_blocks = 0;
  auto memory = plan_kv_cache(in);
  ASSERT_TRUE(memory.is_ok()) << memory.message();
  EXPECT_EQ(memory->num_blocks, 512);
  in.kv_cache_memory = 200 * kGiB;
  expect_error(plan_kv_cache(in), {"takes 200.00 GiB", "free on the GPU"});
}

TEST(MemoryPlan, ACacheShorterThanOneSequenceIsRefused) {
  KvPlanInput in = gpu_7b();
  in.num_kv_blocks = 100;  // 1,600 tokens for a 4,096-token context
  expect_error(plan_kv_cache(in), {"holds 1,600 tokens (100 blocks of 16", "--max-model-len 4096 needs (256 blocks"});
  in.max_model_len = 1600;
  EXPECT_TRUE(plan_kv_cache(in).is_ok());
}

TEST(MemoryPlan, HostTakesHalfTheAvailableRamLessMappedWeights) {
  KvPlanInput in;
  in.total = 24 * kGiB;
  in.free = 20 * kGiB;
  in.mapped_weights = 2 * kGiB;
  in.bytes_per_block = 16 * 45056;  // TinyLlama in f32: 44 KiB a token
  in.block_size = 16;
  in.max_model_len = 2048;
  in.max_num_seqs = 256;
  auto plan = plan_kv_cache(in);
  ASSERT_TRUE(plan.is_ok()) << plan.message();
  EXPECT_EQ(plan->budget, 9 * kGiB);
  EXPECT_EQ(plan->num_blocks, 9 * kGiB / in.bytes_per_block);
  EXPECT_NE(plan->source.find("half of the 18.00 GiB of RAM available"), std::string::npos) << plan->source;
  in.max_num_seqs = 4;
  EXPECT_EQ(plan_kv_cache(in)->num_blocks, 4 * 2048 / 16);
}

TEST(MemoryPlan, TheReportStatesEveryShareAndTheConcurrency) {
  MemoryReport r;
  r.weights = 12 * kGiB + kGiB / 2;
  r.lora_slots = kGiB / 4;
  r.activations = 2 * kGiB;
  r.graphs = 64 * kMiB;
  r.kv_cache = 110 * kGiB;
  r.kv_tokens = 225280;
  r.max_model_len = 4096;
  r.kv_source = "--gpu-memory-utilization 0.90 of 140.00 GiB";
  EXPECT_DOUBLE_EQ(r.max_concurrency(), 55.0);
  EXPECT_EQ(describe(r),
            "memory: weights 12.50 GiB, LoRA slots 0.25 GiB, activations 2.00 GiB, decode graphs 0.06 GiB, KV cache "
            "110.00 GiB (--gpu-memory-utilization 0.90 of 140.00 GiB); KV cache: 225280 tokens, maximum concurrency "
            "55.00x at 4,096 tokens per request");
}

}  // namespace
}  // namespace quiver
