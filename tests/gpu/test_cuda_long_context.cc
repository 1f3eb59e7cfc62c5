// link: qv_engine
// Decode at contexts past 2,048 keys on the GPU, graphs and eager, against the CPU: the
// padded decode step bounds attention by the engine's max_model_len (here 4,096), which
// sizes the split-K partitions (decode_split.h); a bound below the real context would give
// a sequence more partitions than its scratch holds. llama_gqa (f32) with its
// max_position_embeddings raised in a scratch copy; three sequences of 40, 2,300 and 3,000
// prompt tokens decode together. Skips without a GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "e2e/longer_fixture.h"
#include "engine/llm_engine.h"

namespace quiver {
namespace {

namespace fs = std::filesystem;

constexpr int kMaxModelLen = 4096;

fs::path model_dir() {
  static const fs::path dir = testing::longer_fixture("llama_gqa", kMaxModelLen);
  return dir;
}

struct Out {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
};

std::map<std::string, Out> run(const std::string& device, bool eager) {
  EngineArgs a;
  a.model = model_dir().string();
  a.device = device;
  a.enforce_eager = eager;
  a.max_model_len = kMaxModelLen;
  a.max_num_seqs = 4;
  a.threads = 1;
  auto created = LLMEngine::create(a);
  EXPECT_TRUE(created.is_ok()) << created.message();
  std::map<std::string, Out> out;
  if (!created.is_ok()) return out;
  LLMEngine& e = *created.value();
  std::mt19937 rng(7);
  for (int len : {40, 2300, 3000}) {
    PromptInput p;
    for (int i = 0; i < len; ++i) p.token_ids.push_back(static_cast<int32_t>(rng() % 512));
    SamplingParams sp;
    sp.temperature = 0;
    sp.max_tokens = 6;
    sp.ignore_eos = true;
    sp.logprobs = 1;
    EXPECT_TRUE(e.add_request("len" + std::to_string(len), p, sp).is_ok());
  }
  std::set<std::string> paths;
  while (e.has_unfinished_requests()) {
    for (const RequestOutput& o : e.step()) {
      if (!o.finished) continue;
      Out& r = out[o.request_id];
      r.tokens = o.outputs[0].token_ids;
      for (const auto& lp : o.outputs[0].logprobs) r.logprobs.push_back(lp.logprob);
    }
    paths.insert(e.last_step().path);
  }
  if (device == "cuda") {
    EXPECT_TRUE(paths.count(eager ? "eager bs=4 (padded)" : "graph bs=4")) << "no padded decode step ran";
  }
  return out;
}

TEST(CudaLongContext, DecodePast2048KeysMatchesTheCpu) {
  std::string err;
  BackendOptions o;
  o.kind = "cuda";
  if (!make_backend(o, &err)) GTEST_SKIP() << err;
  const auto cpu = run("cpu", true);
  for (bool eager : {false, true}) {
    const auto gpu = run("cuda", eager);
    ASSERT_EQ(gpu.size(), 3u);
    for (const auto& [id, c] : cpu) {
      const Out& g = gpu.at(id);
      EXPECT_EQ(g.tokens, c.tokens) << id << (eager ? " eager" : " graphs");
      ASSERT_EQ(g.logprobs.size(), c.logprobs.size()) << id;
      for (size_t i = 0; i < c.logprobs.size(); ++i)
        EXPECT_NEAR(g.logprobs[i], c.logprobs[i], 2e-3) << id << " token " << i << (eager ? " eager" : " graphs");
    }
  }
}

}  // namespace
}  // namespace quiver
