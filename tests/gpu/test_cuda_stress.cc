// link: qv_engine
// Randomized differential stress on CUDA (tests/e2e/stress_harness.h): 512 requests in 16
// rounds of random engine settings (graphs or eager among them), each request checked
// against the same request alone on CUDA, and greedy ones against the CPU where its top-2
// margin is at least 1e-2 (the fixture is float32: CUDA matches HF to 1e-5 there). Skips
// without a GPU.
#include "backend/backend.h"
#include "e2e/stress_harness.h"

namespace quiver::stress {
namespace {

TEST(CudaStress, RandomSchedulesMatchAloneAndTheCpu) {
  std::string err;
  BackendOptions o;
  o.kind = "cuda";
  if (!make_backend(o, &err)) GTEST_SKIP() << err;
  const Counts c = stress("cuda", "cpu", /*rounds=*/16, /*per_round=*/32, /*seed=*/7, /*margin=*/1e-2);
  EXPECT_EQ(c.requests, 512);
}

}  // namespace
}  // namespace quiver::stress
