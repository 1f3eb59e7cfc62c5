// link: qv_engine
// Randomized differential stress on the CPU (stress_harness.h): 500 requests in 25 rounds of
// random engine settings, each request checked against the same request alone. The CUDA
// run, which also checks greedy tokens against the CPU, is tests/gpu/test_cuda_stress.cc.
#include "e2e/stress_harness.h"

namespace quiver::stress {
namespace {

TEST(EngineStress, RandomSchedulesMatchEachRequestAlone) {
  const Counts c = stress("cpu", "", /*rounds=*/25, /*per_round=*/20, /*seed=*/20261201, /*margin=*/1e-2);
  EXPECT_EQ(c.requests, 500);
  EXPECT_GT(c.greedy, 0);
  EXPECT_GT(c.sampled, 0);
}

}  // namespace
}  // namespace quiver::stress
