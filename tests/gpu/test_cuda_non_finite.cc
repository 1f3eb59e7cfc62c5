// link: qv_engine
// Non-finite logits on the GPU sampling path: an adapter that overflows the activations
// makes its greedy, device-sampled request end with an error naming it, while the base-model
// requests in the same batch finish normally. Skips without a GPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

#include "e2e/overflow_adapter.h"
#include "e2e/scratch.h"
#include "engine/llm_engine.h"
#include "gpu/cuda_test_util.h"

namespace quiver {
namespace {

const std::filesystem::path kModel = std::filesystem::path(QUIVER_SOURCE_DIR) / "tests/fixtures/llama_gqa";

class CudaNonFinite : public test::CudaTest {};

TEST_F(CudaNonFinite, DeviceSampledRequestEndsWithAnErrorOthersFinish) {
  const std::filesystem::path dir = testing::scratch("cuda_overflow_adapter");
  ASSERT_TRUE(testing::write_overflowing_adapter(kModel / "adapters/r8_all", dir));
  EngineArgs a;
  a.model = kModel.string();
  a.device = "cuda";
  a.enable_lora = true;
  a.max_loras = 2;
  a.max_lora_rank = 8;
  a.lora_modules = {{"big", dir.string()}};
  auto created = LLMEngine::create(a);
  ASSERT_TRUE(created.is_ok()) << created.message();
  LLMEngine& engine = *created.value();
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.max_tokens = 3;
  greedy.ignore_eos = true;
  PromptInput prompt;
  prompt.token_ids = {1, 2, 3};
  ASSERT_TRUE(engine.add_request("base", prompt, greedy).is_ok());
  ASSERT_TRUE(engine.add_request("bad", prompt, greedy, LoRARequest{"big", 0, ""}).is_ok());
  ASSERT_TRUE(engine.add_request("base2", prompt, greedy).is_ok());
  std::map<std::string, RequestOutput> out;
  while (engine.has_unfinished_requests())
    for (RequestOutput& o : engine.step())
      if (o.finished) out[o.request_id] = std::move(o);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_NE(out["bad"].error.find("non-finite logit"), std::string::npos) << out["bad"].error;
  EXPECT_NE(out["bad"].error.find("'big'"), std::string::npos) << out["bad"].error;
  for (const char* id : {"base", "base2"}) {
    EXPECT_TRUE(out[id].error.empty()) << id << ": " << out[id].error;
    ASSERT_EQ(out[id].outputs.size(), 1u) << id;
    EXPECT_EQ(out[id].outputs[0].token_ids.size(), 3u) << id;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace quiver
