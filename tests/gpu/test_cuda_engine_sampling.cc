// link: qv_engine
// Sampling on the GPU through LLMEngine (llama3_bf16 fixture): a seeded request sampled with
// temperature / top-k / top-p gives the same tokens alone, batched with requests that take the
// host path (penalties, min_tokens) or other settings, and eagerly; a graph engine and an
// --enforce-eager engine agree bit for bit on every request's tokens and logprobs; and a
// device-sampled greedy request reports the same logprobs as the host path computes from
// the same logits (up to the device's float log-sum-exp). Structured outputs (demo model,
// which has a tokenizer) sample on the device under their masks: every output matches its
// constraint, alone == batched == eager, and a greedy constrained request takes the same
// tokens as on the host path; so do allowed_token_ids and bad_words, whose masks the device
// sampler applies as it does a grammar's. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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

EngineRun run(bool eager, const std::vector<Req>& reqs, const std::filesystem::path& model = kModel) {
  EngineArgs a;
  a.model = model.string();
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
    if (q.prompt.empty()) prompt.text = "Answer:";
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

const std::filesystem::path kDemo = std::filesystem::path(QUIVER_SOURCE_DIR) / "models/demo/base";

std::vector<Req> structured_requests() {
  auto make = [](std::string id, float t, uint64_t seed, StructuredOutputSpec spec) {
    Req r{std::move(id), {}, SamplingParams{}};
    r.params.temperature = t;
    r.params.seed = seed;
    r.params.max_tokens = 120;
    r.params.logprobs = 2;
    r.params.structured_outputs = std::move(spec);
    return r;
  };
  const StructuredOutputSpec json{StructuredOutputSpec::Kind::kJson,
                                  R"({"type":"object","properties":{"city":{"enum":["Paris","Oslo"]},)"
                                  R"("sunny":{"type":"boolean"},"note":{"type":"string","maxLength":12}},)"
                                  R"("required":["city","sunny","note"]})",
                                  "",
                                  {}, {}};
  const StructuredOutputSpec regex{StructuredOutputSpec::Kind::kRegex, "", "[a-z]{3,8}-[0-9]{2}", {}, {}};
  const StructuredOutputSpec choice{StructuredOutputSpec::Kind::kChoice, "", "", {"yes", "no", "maybe not"}, {}};
  std::vector<Req> reqs;
  for (int i = 0; i < 3; ++i) {
    reqs.push_back(make("json" + std::to_string(i), 1.0f, 10 + i, json));
    reqs.push_back(make("regex" + std::to_string(i), 0.8f, 20 + i, regex));
  }
  reqs.push_back(make("greedy-json", 0.0f, 1, json));
  reqs.push_back(make("choice", 1.0f, 30, choice));
  Req free = make("free", 1.0f, 40, StructuredOutputSpec{});
  free.params.max_tokens = 16;
  free.params.ignore_eos = true;
  reqs.push_back(free);
  return reqs;
}

TEST_F(CudaEngineSampling, StructuredOutputsSampleOnTheDevice) {
  const std::vector<Req> all = structured_requests();
  const EngineRun graph = run(false, all, kDemo);
  const EngineRun eager = run(true, all, kDemo);
  ASSERT_EQ(graph.out.size(), all.size());
  EXPECT_GT(graph.graph_steps, 0);
  const std::regex re("[a-z]{3,8}-[0-9]{2}");
  for (const Req& q : all) {
    const CompletionOutput& g = graph.out.at(q.id);
    EXPECT_EQ(g.token_ids, eager.out.at(q.id).token_ids) << q.id << ": graph vs eager";
    if (q.id == "free") continue;
    EXPECT_EQ(g.finish_reason, "stop") << q.id << ": " << g.text;
    if (q.id.find("json") != std::string::npos) {
      const auto v = nlohmann::json::parse(g.text, nullptr, false);
      ASSERT_TRUE(v.is_object()) << q.id << ": " << g.text;
      EXPECT_TRUE(v["city"] == "Paris" || v["city"] == "Oslo") << g.text;
      EXPECT_TRUE(v["sunny"].is_boolean()) << g.text;
      EXPECT_TRUE(v["note"].is_string() && v["note"].get<std::string>().size() <= 12) << g.text;
    } else if (q.id.rfind("regex", 0) == 0) {
      EXPECT_TRUE(std::regex_match(g.text, re)) << q.id << ": " << g.text;
    } else {
      EXPECT_TRUE(g.text == "yes" || g.text == "no" || g.text == "maybe not") << g.text;
    }
  }
  // Alone: the same tokens as in the batch.
  for (const char* id : {"json1", "regex2", "free"}) {
    const Req& q = *std::find_if(all.begin(), all.end(), [&](const Req& r) { return r.id == id; });
    EXPECT_EQ(run(false, {q}, kDemo).out.at(id).token_ids, graph.out.at(id).token_ids) << id << ": alone vs batched";
  }
  // Greedy under a mask: the host path (forced by a zero logit bias) picks the same tokens.
  Req host = *std::find_if(all.begin(), all.end(), [](const Req& r) { return r.id == "greedy-json"; });
  host.id = "host";
  host.params.logit_bias = {{0, 0.0f}};
  const EngineRun both = run(false, {all[6], host}, kDemo);
  EXPECT_EQ(both.out.at("host").token_ids, both.out.at("greedy-json").token_ids) << both.out.at("host").text;
}

// allowed_token_ids and bad_words (demo model) ride the structured-output mask on the
// device: every token in the set, no bad word's tokens, graph == eager, and greedy rows
// take the same tokens as on the host path (forced by a zero logit bias).
TEST_F(CudaEngineSampling, AllowedTokensAndBadWordsSampleOnTheDevice) {
  Req free{"free", {}, SamplingParams{}};
  free.params.temperature = 0.0f;
  free.params.max_tokens = 32;
  free.params.ignore_eos = true;
  const CompletionOutput free_out = run(false, {free}, kDemo).out.at("free");
  const std::vector<int32_t>& free_ids = free_out.token_ids;
  // Two words of the free output, as bad words: the greedy row must leave its path.
  std::vector<std::string> words;
  std::istringstream text(free_out.text);
  for (std::string w; text >> w && words.size() < 2;)
    if (w.size() >= 2 && std::all_of(w.begin(), w.end(), [](unsigned char c) { return std::isalpha(c); }))
      words.push_back(w);
  ASSERT_EQ(words.size(), 2u) << free_out.text;
  std::vector<int32_t> allowed;
  for (int32_t t : free_ids)
    if (allowed.size() < 8 && std::find(allowed.begin(), allowed.end(), t) == allowed.end()) allowed.push_back(t);
  ASSERT_EQ(allowed.size(), 8u);
  std::vector<Req> reqs;
  for (int i = 0; i < 3; ++i) {
    Req r{"allowed" + std::to_string(i), {}, free.params};
    r.params.temperature = i == 0 ? 0.0f : 1.0f;
    r.params.seed = 50 + i;
    r.params.allowed_token_ids = allowed;
    reqs.push_back(r);
  }
  Req bad{"bad", {}, free.params};
  bad.params.bad_words = words;
  reqs.push_back(bad);
  Req bad_sampled = bad;
  bad_sampled.id = "bad-sampled";
  bad_sampled.params.temperature = 1.0f;
  bad_sampled.params.seed = 60;
  reqs.push_back(bad_sampled);
  for (const char* id : {"allowed0", "bad"}) {
    Req host = *std::find_if(reqs.begin(), reqs.end(), [&](const Req& r) { return r.id == id; });
    host.id = std::string(id) + "-host";
    host.params.logit_bias = {{0, 0.0f}};
    reqs.push_back(host);
  }
  const EngineRun graph = run(false, reqs, kDemo);
  const EngineRun eager = run(true, reqs, kDemo);
  EXPECT_GT(graph.graph_steps, 0);
  for (const Req& q : reqs) {
    const std::vector<int32_t>& g = graph.out.at(q.id).token_ids;
    EXPECT_EQ(g, eager.out.at(q.id).token_ids) << q.id << ": graph vs eager";
    ASSERT_EQ(g.size(), 32u) << q.id;
    if (q.id.rfind("allowed", 0) == 0) {
      for (int32_t t : g) EXPECT_NE(std::find(allowed.begin(), allowed.end(), t), allowed.end()) << q.id << ": " << t;
    }
  }
  EXPECT_EQ(graph.out.at("allowed0-host").token_ids, graph.out.at("allowed0").token_ids);
  EXPECT_EQ(graph.out.at("bad-host").token_ids, graph.out.at("bad").token_ids);
  EXPECT_NE(graph.out.at("bad").token_ids, free_ids) << "the bad words changed nothing";
}

}  // namespace
}  // namespace quiver
