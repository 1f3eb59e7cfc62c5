#include "engine/engine_defaults.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "backend/backend.h"

namespace quiver {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(EngineDefaults, HostBackendsKeepTwoThousandTokensPerStep) {
  EXPECT_EQ(default_max_num_batched_tokens("", 0, EngineUsage::kOffline), 2048);
  EXPECT_EQ(default_max_num_batched_tokens("", 0, EngineUsage::kServer), 2048);
}

TEST(EngineDefaults, LargeGpusTakeLargerStepsOfflineThanServing) {
  EXPECT_EQ(default_max_num_batched_tokens("NVIDIA H200", 139 * kGiB, EngineUsage::kOffline), 16384);
  EXPECT_EQ(default_max_num_batched_tokens("NVIDIA H200", 139 * kGiB, EngineUsage::kServer), 8192);
  EXPECT_EQ(default_max_num_batched_tokens("NVIDIA H100 80GB HBM3", 79 * kGiB, EngineUsage::kOffline), 16384);
  EXPECT_EQ(default_max_num_batched_tokens("X", 70 * kGiB, EngineUsage::kOffline), 16384);  // the edge counts
}

TEST(EngineDefaults, SmallerGpusAndA100sKeepTheSmallerBudgets) {
  EXPECT_EQ(default_max_num_batched_tokens("NVIDIA A100-SXM4-80GB", 79 * kGiB, EngineUsage::kOffline), 8192);
  EXPECT_EQ(default_max_num_batched_tokens("NVIDIA A100-SXM4-80GB", 79 * kGiB, EngineUsage::kServer), 2048);
  EXPECT_EQ(default_max_num_batched_tokens("NVIDIA L4", 22 * kGiB, EngineUsage::kOffline), 8192);
  EXPECT_EQ(default_max_num_batched_tokens("NVIDIA L4", 22 * kGiB, EngineUsage::kServer), 2048);
  EXPECT_EQ(default_max_num_batched_tokens("X", 70 * kGiB - 1, EngineUsage::kOffline), 8192);
}

TEST(EngineDefaults, CpuBackendReportsNoDeviceMemory) {
  BackendOptions o;
  o.kind = "cpu";
  o.num_threads = 1;
  std::string err;
  auto b = make_backend(o, &err);
  ASSERT_TRUE(b) << err;
  EXPECT_EQ(b->device_memory_bytes(), 0);
  EXPECT_EQ(default_max_num_batched_tokens(b->device_name(), b->device_memory_bytes(), EngineUsage::kOffline), 2048);
}

}  // namespace
}  // namespace quiver
