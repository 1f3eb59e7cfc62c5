// link: qv_engine
// Sampling on the GPU through LLMEngine (llama3_bf16 fixture): a seeded request sampled with
// temperature / top-k / top-p gives the same tokens alone, batched with requests that take the
// host path (penalties, min_tokens) or other settings, and eagerly; a graph engine and an
// --enforce-eager engine agree bit for bit on every request's tokens and logprobs; and a
// device-sampled greedy request reports the same logprobs as the host path computes from
// the same logits (up to the device's float log-sum-exp). Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "engine/llm_engine.h"
#include "gpu/cuda_test_util.h"

namespace quiver {
namespace {

const std::filesystem::path kModel = std::filesystem::path(QUIVER_SOURCE_DIR) / "tests/fixtures/llama3_bf16";

struct Req {
  std::string id;
  std::vector<int32_t> prompt;
  SamplingParams params;
};

std::vector<Req> requests() {
  auto make = [](std::string id, std::vector<int32_t> prompt, float t, int top_k, float top_p, float min_p,
                 uint64_t seed) {
    Req r{std::move(id), std::move(prompt), SamplingParams{}};
    r.params.temperature = t;
    r.params.top_k = top_k;
    r.params.top_p = top_p;
    r.params.min_p = min_p;
    r.params.seed = seed;
    r.params.max_tokens = 12;
    r.params.ignore_eos = true;
    r.params.logprobs = 3;
    return r;
  };
  std::vector<Req> reqs;
  reqs.push_back(make("seeded", {11, 22, 33, 44}, 0.9f, 50, 0.95f, 0.0f, 1234));
  reqs.push_back(make("greedy", {7, 8}, 0.0f, 0, 1.0f, 0.0f, 1));
  reqs.push_back(make("min_p", {300, 301, 302, 303, 304, 305}, 1.1f, 0, 1.0f, 0.05f, 77));
  Req pen = make("penalty", {5}, 1.0f, 0, 1.0f, 0.0f, 5);  // host path every step
  pen.params.presence_penalty = 0.5f;
  reqs.push_back(pen);
  Req min_tokens = make("min_tokens", {9, 9, 9}, 0.8f, 20, 1.0f, 0.0f, 3);  // host path for 4 steps
  min_tokens.params.ignore_eos = false;
  min_tokens.params.min_tokens = 4;
  reqs.push_back(min_tokens);
  return reqs;
}

struct EngineRun {
  std::map<std::string, CompletionOutput> out;
  int graph_steps = 0;
};

EngineRun run(bool eager, const std::vector<Req>& reqs) {
  EngineArgs a;
  a.model = kModel.string();
  a.device = "cuda";
  a.enforce_eager = eager;
  a.max_num_seqs = 16;
  EngineRun r;
  auto created = LLMEngine::create(a);
  EXPECT_TRUE(created.is_ok()) << created.message();
  if (!created.is_ok()) return r;
  LLMEngine& engine = *created.value();
  for (const Req& q : reqs) {
    PromptInput prompt;
    prompt.token_ids = q.prompt;
    const Status s = engine.add_request(q.id, prompt, q.params);
    EXPECT_TRUE(s.is_ok()) << q.id << ": " << s.message();
  }
  while (engine.has_unfinished_requests()) {
    for (const RequestOutput& o : engine.step())
      if (o.finished) r.out[o.request_id] = o.outputs[0];
    r.graph_steps += engine.last_step().path.rfind("graph", 0) == 0 ? 1 : 0;
  }
  return r;
}

// CudaTest skips without a GPU (its own backend is unused: each engine makes one).
class CudaEngineSampling : public test::CudaTest {};

TEST_F(CudaEngineSampling, SeededTokensAloneBatchedGraphAndEager) {
  const std::vector<Req> all = requests();
  const EngineRun alone = run(false, {all[0]});
  const EngineRun graph = run(false, all);
  const EngineRun eager = run(true, all);
  EXPECT_GT(graph.graph_steps, 0);
  EXPECT_EQ(eager.graph_steps, 0);
  ASSERT_EQ(graph.out.size(), all.size());
  ASSERT_EQ(eager.out.size(), all.size());
  EXPECT_EQ(alone.out.at("seeded").token_ids, graph.out.at("seeded").token_ids) << "alone vs batched";
  EXPECT_EQ(graph.out.at("seeded").token_ids.size(), 12u);
  for (const Req& q : all) {
    const CompletionOutput& g = graph.out.at(q.id);
    const CompletionOutput& e = eager.out.at(q.id);
    ASSERT_EQ(g.token_ids, e.token_ids) << q.id << ": graph vs eager";
    ASSERT_EQ(g.logprobs.size(), e.logprobs.size()) << q.id;
    for (size_t i = 0; i < g.logprobs.size(); ++i) {
      EXPECT_EQ(g.logprobs[i].logprob, e.logprobs[i].logprob) << q.id << " position " << i;
      EXPECT_EQ(g.logprobs[i].rank, e.logprobs[i].rank) << q.id << " position " << i;
      ASSERT_EQ(g.logprobs[i].top.size(), 3u) << q.id << " position " << i;
      for (size_t k = 0; k < 3; ++k) EXPECT_EQ(g.logprobs[i].top[k], e.logprobs[i].top[k]) << q.id << " position " << i;
    }
  }
  // The sampled requests do sample: some chosen token is not the most likely one.
  int below_top = 0;
  for (const char* id : {"seeded", "min_p"})
    for (const TokenLogprobs& lp : graph.out.at(id).logprobs) below_top += lp.rank > 1;
  EXPECT_GT(below_top, 0);
}

// Greedy: the device's logprob and top-K must be what logprobs_for gives on the logits; a
// min_tokens request with no EOS in reach takes the host path for its first tokens, so one
// engine run holds both paths for the same greedy request shape.
TEST_F(CudaEngineSampling, GreedyLogprobsOnBothPathsAgree) {
  std::vector<Req> reqs = requests();
  Req device = reqs[1], host = reqs[1];
  device.id = "device";
  host.id = "host";
  host.params.min_tokens = 12;  // EOS blocked on every step: host sampler
  host.params.ignore_eos = false;
  device.params.ignore_eos = false;
  device.params.min_tokens = 0;
  const EngineRun r = run(false, {device, host});
  const CompletionOutput& d = r.out.at("device");
  const CompletionOutput& h = r.out.at("host");
  // Same tokens as long as the device request did not pick an EOS the host one could not.
  const size_t n = std::min(d.token_ids.size(), h.token_ids.size());
  for (size_t i = 0; i < n && d.token_ids[i] == h.token_ids[i]; ++i) {
    EXPECT_NEAR(d.logprobs[i].logprob, h.logprobs[i].logprob, 1e-5) << "position " << i;
    EXPECT_EQ(d.logprobs[i].rank, h.logprobs[i].rank) << "position " << i;
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(d.logprobs[i].top[k].first, h.logprobs[i].top[k].first) << "position " << i;
      EXPECT_NEAR(d.logprobs[i].top[k].second, h.logprobs[i].top[k].second, 1e-5) << "position " << i;
    }
  }
}

}  // namespace
}  // namespace quiver
