// link: qv_engine
// The numerics knobs of EngineArgs (--kv-cache-dtype, --matmul-precision): unknown values
// are refused with a message naming the flag, "auto" keeps float32 on the CPU, and a 16-bit
// cache really stores 16 bits (its logprobs move away from the float32 cache's, and stay
// within the bf16 bound of docs/numerics.md). Runs on the CPU backend.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include "e2e/run_all.h"
#include "engine/llm_engine.h"

namespace quiver {
namespace {

namespace fs = std::filesystem;
const fs::path kModel = fs::path(QUIVER_SOURCE_DIR) / "tests/fixtures/llama_gqa";

// The bound docs/numerics.md states for bf16 paths against float32 (|Δ logprob|).
constexpr double kBf16Bound = 0.25;
// ... and for the fp8 e4m3 KV cache.
constexpr double kFp8Bound = 3.0;

Result<std::unique_ptr<LLMEngine>> make_engine(const std::string& kv_dtype, const std::string& precision = "default") {
  EngineArgs a;
  a.model = kModel.string();
  a.block_size = 4;
  a.kv_cache_dtype = kv_dtype;
  a.matmul_precision = precision;
  return LLMEngine::create(a);
}

// Greedy generation of 16 tokens for two prompts; logprobs of every generated and prompt position.
std::map<std::string, RequestOutput> run(LLMEngine& e) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 16;
  p.ignore_eos = true;
  p.logprobs = 1;
  p.prompt_logprobs = 1;
  PromptInput a, b;
  a.token_ids = {5, 17, 33, 101, 7, 9, 250, 3, 44, 12, 80, 61};
  b.token_ids = {400, 2, 2, 90};
  EXPECT_TRUE(e.add_request("a", a, p).is_ok());
  EXPECT_TRUE(e.add_request("b", b, p).is_ok());
  return testing::run_all(e);
}

// Largest |Δ logprob| over positions where both runs chose the same tokens so far.
double max_logprob_diff(const std::map<std::string, RequestOutput>& x, const std::map<std::string, RequestOutput>& y) {
  double worst = 0;
  for (const auto& [id, ox] : x) {
    const RequestOutput& oy = y.at(id);
    for (size_t i = 1; i < ox.prompt_logprobs.size(); ++i)
      worst = std::max(worst, std::fabs(static_cast<double>(ox.prompt_logprobs[i]->logprob - oy.prompt_logprobs[i]->logprob)));
    const auto& gx = ox.outputs[0].logprobs;
    const auto& gy = oy.outputs[0].logprobs;
    for (size_t i = 0; i < gx.size() && i < gy.size() && gx[i].token == gy[i].token; ++i)
      worst = std::max(worst, std::fabs(static_cast<double>(gx[i].logprob - gy[i].logprob)));
  }
  return worst;
}

TEST(EnginePrecisionFlags, UnknownValuesAreRefusedNamingTheFlag) {
  auto bad_kv = make_engine("fp8_e5m2");
  ASSERT_FALSE(bad_kv.is_ok());
  EXPECT_NE(bad_kv.status().message().find("--kv-cache-dtype 'fp8_e5m2'"), std::string::npos) << bad_kv.status().message();
  EXPECT_NE(bad_kv.status().message().find("fp8_e4m3"), std::string::npos) << bad_kv.status().message();
  auto bad_mm = make_engine("auto", "high");
  ASSERT_FALSE(bad_mm.is_ok());
  EXPECT_NE(bad_mm.status().message().find("--matmul-precision"), std::string::npos) << bad_mm.status().message();
}

TEST(EnginePrecisionFlags, CacheDtypeIsTheOneAsked) {
  const std::pair<const char*, DType> cases[] = {
      {"auto", DType::kF32},    {"float32", DType::kF32},    {"bfloat16", DType::kBF16},
      {"float16", DType::kF16}, {"fp8", DType::kF8E4M3}, {"fp8_e4m3", DType::kF8E4M3}};
  for (const auto& [name, dtype] : cases) {
    auto e = make_engine(name, "highest");  // highest: accepted everywhere, a no-op off the GPU
    ASSERT_TRUE(e.is_ok()) << name << ": " << e.status().message();
    EXPECT_EQ(e.value()->kv_cache_dtype(), dtype) << name;
  }
}

TEST(EnginePrecisionFlags, SixteenBitCachesStayWithinTheBf16Bound) {
  auto f32 = make_engine("float32");
  ASSERT_TRUE(f32.is_ok()) << f32.status().message();
  const auto ref = run(*f32.value());
  for (const char* name : {"bfloat16", "float16"}) {
    auto e = make_engine(name);
    ASSERT_TRUE(e.is_ok()) << e.status().message();
    const double diff = max_logprob_diff(ref, run(*e.value()));
    std::printf("kv cache %s vs float32: max |dlogprob| %.3g\n", name, diff);
    EXPECT_GT(diff, 0.0) << name << ": identical to the float32 cache, so the cache was not " << name;
    EXPECT_LE(diff, kBf16Bound) << name;
  }
}

// The fp8 e4m3 cache keeps 4 significant bits where bf16 keeps 8: its bound is its own
// (docs/numerics.md), and the scales the checkpoint does not give are 1.
TEST(EnginePrecisionFlags, Fp8CacheStaysWithinItsBound) {
  auto f32 = make_engine("float32");
  ASSERT_TRUE(f32.is_ok()) << f32.status().message();
  const auto ref = run(*f32.value());
  auto e = make_engine("fp8");
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  const double diff = max_logprob_diff(ref, run(*e.value()));
  std::printf("kv cache fp8 vs float32: max |dlogprob| %.3g\n", diff);
  EXPECT_GT(diff, 0.0) << "identical to the float32 cache, so the cache was not fp8";
  EXPECT_LE(diff, kFp8Bound);
}

}  // namespace
}  // namespace quiver
