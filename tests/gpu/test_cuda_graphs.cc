// link: qv_engine
// CUDA graphs for decode vs eager, through LLMEngine on the llama3_bf16 fixture (head_dim
// 32, which the CUDA attention supports; llama_gqa's is 8) with 8 adapters written here
// with random weights: the same requests in a graph engine and in an --enforce-eager engine must give
// exactly the same tokens and logprobs (padded decode runs the same kernels on the same
// shapes in both), at every bucket size, with mixed adapters, after adapters were evicted
// and others loaded into the same slots between replays, and for batches with no adapter
// (the lora=false graph). Skips without a GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/llm_engine.h"
#include "io/model_config.h"
#include "io/peft_adapter.h"
#include "io/safetensors_writer.h"

namespace quiver {
namespace {

namespace fs = std::filesystem;

const fs::path kModel = fs::path(QUIVER_SOURCE_DIR) / "tests/fixtures/llama3_bf16";
const fs::path kAdapters =
    fs::temp_directory_path() / ("quiver_graph_test_adapters_" + std::to_string(::getpid()));

// Eight PEFT adapters with ranks 1..16 on all seven projections, random weights (fixed
// seeds), written once per process.
std::vector<std::string> adapter_names() {
  static const std::vector<std::string> names = [] {
    auto config = load_model_config(kModel.string());
    EXPECT_TRUE(config.is_ok()) << config.message();
    std::vector<std::string> out;
    std::mt19937 rng(42);
    std::normal_distribution<float> nd(0.f, 0.2f);
    for (int i = 0; i < 8; ++i) {
      const int rank = 1 + (i * 5) % 16;
      const std::string name = "a" + std::to_string(i);
      const fs::path dir = kAdapters / name;
      fs::create_directories(dir);
      std::vector<SafetensorsEntry> entries;
      for (int64_t l = 0; l < config->num_layers; ++l) {
        for (int t = 0; t < kNumLoraTargets; ++t) {
          const LoraTarget target = static_cast<LoraTarget>(t);
          const int64_t in = lora_target_in(*config, target), outf = lora_target_out(*config, target);
          const std::string group = t <= static_cast<int>(LoraTarget::kO) ? "self_attn" : "mlp";
          const std::string base = "base_model.model.model.layers." + std::to_string(l) + "." + group + "." +
                                   lora_target_name(target);
          std::vector<float> a(static_cast<size_t>(rank * in)), b(static_cast<size_t>(outf * rank));
          for (auto& x : a) x = nd(rng);
          for (auto& x : b) x = nd(rng);
          entries.push_back(make_safetensors_entry(base + ".lora_A.weight", DType::kF32, {rank, in}, a));
          entries.push_back(make_safetensors_entry(base + ".lora_B.weight", DType::kF32, {outf, rank}, b));
        }
      }
      EXPECT_TRUE(write_safetensors((dir / "adapter_model.safetensors").string(), entries).is_ok());
      std::ofstream(dir / "adapter_config.json")
          << R"({"peft_type": "LORA", "r": )" << rank << R"(, "lora_alpha": )" << 2 * rank
          << R"(, "bias": "none", "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]})";
      out.push_back(name);
    }
    return out;
  }();
  return names;
}

struct Req {
  std::string id;
  std::vector<int32_t> prompt;
  std::string lora;  // "" = base model
  int max_tokens;
};

struct Output {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> logprobs;
};

struct EngineRun {
  std::map<std::string, Output> out;
  std::set<std::string> paths;                // every step's path
  std::set<std::pair<int, bool>> graph_keys;  // (bucket, lora_active) of replayed steps
  int graphs = 0;
};

EngineArgs engine_args(bool eager, int max_loras) {
  EngineArgs a;
  a.model = kModel.string();
  a.device = "cuda";
  a.enforce_eager = eager;
  a.enable_lora = true;
  a.max_loras = max_loras;
  a.max_lora_rank = 64;
  a.max_cpu_loras = 8;
  a.max_num_seqs = 64;
  for (const auto& n : adapter_names()) a.lora_modules.emplace_back(n, (kAdapters / n).string());
  return a;
}

EngineRun run(const EngineArgs& args, const std::vector<Req>& reqs) {
  EngineRun r;
  auto created = LLMEngine::create(args);
  EXPECT_TRUE(created.is_ok()) << created.message();
  if (!created.is_ok()) return r;
  LLMEngine& engine = *created.value();
  r.graphs = engine.graph_info().num_graphs;
  for (const Req& q : reqs) {
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = q.max_tokens;
    p.ignore_eos = true;
    p.logprobs = 5;
    PromptInput prompt;
    prompt.token_ids = q.prompt;
    std::optional<LoRARequest> lora;
    if (!q.lora.empty()) lora = LoRARequest{q.lora, 0, ""};
    Status s = engine.add_request(q.id, prompt, p, lora);
    EXPECT_TRUE(s.is_ok()) << q.id << ": " << s.message();
  }
  while (engine.has_unfinished_requests()) {
    for (const RequestOutput& o : engine.step())
      if (o.finished) r.out[o.request_id] = {o.outputs[0].token_ids, o.outputs[0].logprobs};
    const StepStats& st = engine.last_step();
    r.paths.insert(st.path);
    int bucket = 0;
    if (std::sscanf(st.path.c_str(), "graph bs=%d", &bucket) == 1) r.graph_keys.insert({bucket, st.lora_active});
  }
  return r;
}

// `n` requests alive at once: prompts of 1..9 tokens, request i on adapter i % (A + 1)
// (0 = base), max_tokens 3..8 so the batch shrinks through several buckets.
std::vector<Req> mixed_requests(int n, const std::vector<std::string>& adapters, uint32_t seed, bool use_lora = true) {
  std::vector<Req> reqs;
  uint32_t x = seed;
  auto next = [&x] { return x = x * 1664525u + 1013904223u; };
  for (int i = 0; i < n; ++i) {
    Req q;
    char id[16];
    std::snprintf(id, sizeof(id), "r%d", i);
    q.id = id;
    const int len = 1 + static_cast<int>(next() >> 8) % 9;
    for (int j = 0; j < len; ++j) q.prompt.push_back(static_cast<int32_t>((next() >> 8) % 512));
    const int k = i % static_cast<int>(adapters.size() + 1);
    q.lora = use_lora && k > 0 ? adapters[k - 1] : "";
    q.max_tokens = 3 + static_cast<int>(next() >> 8) % 6;
    reqs.push_back(q);
  }
  return reqs;
}

void expect_identical(const EngineRun& graph, const EngineRun& eager, const std::vector<Req>& reqs, const std::string& what) {
  ASSERT_EQ(graph.out.size(), reqs.size()) << what;
  ASSERT_EQ(eager.out.size(), reqs.size()) << what;
  for (const Req& q : reqs) {
    const Output& g = graph.out.at(q.id);
    const Output& e = eager.out.at(q.id);
    ASSERT_EQ(g.tokens, e.tokens) << what << " " << q.id << " (lora " << q.lora << ")";
    ASSERT_EQ(g.logprobs.size(), e.logprobs.size()) << what << " " << q.id;
    for (size_t i = 0; i < g.logprobs.size(); ++i) {
      EXPECT_EQ(g.logprobs[i].logprob, e.logprobs[i].logprob) << what << " " << q.id << " position " << i;
      ASSERT_EQ(g.logprobs[i].top.size(), e.logprobs[i].top.size());
      for (size_t k = 0; k < g.logprobs[i].top.size(); ++k) {
        EXPECT_EQ(g.logprobs[i].top[k].first, e.logprobs[i].top[k].first) << what << " " << q.id << " pos " << i;
        EXPECT_EQ(g.logprobs[i].top[k].second, e.logprobs[i].top[k].second) << what << " " << q.id << " pos " << i;
      }
    }
  }
}

std::string keys_string(const EngineRun& r) {
  std::string s;
  char buf[32];
  for (auto [b, l] : r.graph_keys) {
    std::snprintf(buf, sizeof(buf), " (%d,%s)", b, l ? "lora" : "base");
    s += buf;
  }
  return s;
}

class CudaGraphs : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string err;
    BackendOptions o;
    o.kind = "cuda";
    if (!make_backend(o, &err)) GTEST_SKIP() << err;
  }
};

TEST_F(CudaGraphs, MixedAdaptersEveryBucketMatchEager) {
  const auto adapters = adapter_names();
  ASSERT_EQ(adapters.size(), 8u);
  for (int n : {1, 2, 3, 5, 8, 13, 17, 33}) {
    const auto reqs = mixed_requests(n, adapters, 1000u + static_cast<uint32_t>(n));
    const EngineRun g = run(engine_args(false, 8), reqs);
    const EngineRun e = run(engine_args(true, 8), reqs);
    EXPECT_GT(g.graphs, 0);
    EXPECT_EQ(e.graphs, 0);
    EXPECT_FALSE(g.graph_keys.empty()) << "batch " << n << ": no step replayed a graph";
    EXPECT_TRUE(e.graph_keys.empty());
    std::printf("  batch %2d: graph keys replayed:%s\n", n, keys_string(g).c_str());
    expect_identical(g, e, reqs, "batch " + std::to_string(n));
  }
}

// fp8 weights (--quantization fp8): the GEMV (1-2 tokens), the skinny kernel (3-16) and
// cuBLASLt's FP8 GEMM (17 and up), each with its LoRA pairing, replayed from graphs give
// the eager bits.
TEST_F(CudaGraphs, Fp8WeightsEveryBucketMatchEager) {
  const auto adapters = adapter_names();
  for (int n : {1, 2, 5, 13, 17, 33}) {
    const auto reqs = mixed_requests(n, adapters, 2000u + static_cast<uint32_t>(n));
    EngineArgs ga = engine_args(false, 8), ea = engine_args(true, 8);
    ga.quantization = ea.quantization = "fp8";
    const EngineRun g = run(ga, reqs);
    const EngineRun e = run(ea, reqs);
    EXPECT_GT(g.graphs, 0);
    EXPECT_FALSE(g.graph_keys.empty()) << "batch " << n << ": no step replayed a graph";
    std::printf("  fp8 weights, batch %2d: graph keys replayed:%s\n", n, keys_string(g).c_str());
    expect_identical(g, e, reqs, "fp8 weights, batch " + std::to_string(n));
  }
}

TEST_F(CudaGraphs, AdaptersSwappedIntoSlotsBetweenReplaysMatchEager) {
  // Two device slots for 8 adapters: as requests finish, other adapters are loaded into
  // the same slots while the same graphs keep being replayed (rule 2: no re-capture).
  const auto adapters = adapter_names();
  const auto reqs = mixed_requests(40, adapters, 7);
  const EngineRun g = run(engine_args(false, 2), reqs);
  const EngineRun e = run(engine_args(true, 2), reqs);
  std::printf("  graph keys replayed:%s\n", keys_string(g).c_str());
  EXPECT_TRUE(g.graph_keys.count({1, true}) || g.graph_keys.size() > 1);
  expect_identical(g, e, reqs, "max_loras 2");
}

TEST_F(CudaGraphs, BatchWithoutAdaptersUsesTheBaseGraph) {
  const auto adapters = adapter_names();
  const auto reqs = mixed_requests(5, adapters, 99, /*use_lora=*/false);
  const EngineRun g = run(engine_args(false, 2), reqs);
  const EngineRun e = run(engine_args(true, 2), reqs);
  EXPECT_TRUE(g.graph_keys.count({8, false})) << keys_string(g);
  for (auto [b, l] : g.graph_keys) EXPECT_FALSE(l) << "bucket " << b << " replayed the lora graph";
  expect_identical(g, e, reqs, "base only");
  // And the same requests once more next to two adapter requests (7 sequences, all admitted
  // at once, so decode buckets stay <= 8 and the GEMV path): base rows through the lora=true
  // graph (their LoRA blocks exit early) give the same tokens as through lora=false.
  auto mixed = reqs;
  for (int i = 0; i < 2; ++i) mixed.push_back({"a" + adapters[i], {5, 6, 7}, adapters[i], 8});
  const EngineRun gm = run(engine_args(false, 2), mixed);
  EXPECT_TRUE(gm.graph_keys.count({8, true})) << keys_string(gm);
  for (const Req& q : reqs) EXPECT_EQ(gm.out.at(q.id).tokens, g.out.at(q.id).tokens) << q.id;
}

TEST_F(CudaGraphs, WithoutLoraOnlyBaseGraphs) {
  EngineArgs a = engine_args(false, 1);
  a.enable_lora = false;
  a.lora_modules.clear();
  EngineArgs b = a;
  b.enforce_eager = true;
  const auto reqs = mixed_requests(13, {}, 5, false);
  const EngineRun g = run(a, reqs);
  const EngineRun e = run(b, reqs);
  EXPECT_EQ(g.graphs, 11);  // buckets 1, 2, 4, 8, 16, ..., 64 with max_num_seqs 64
  expect_identical(g, e, reqs, "no LoRA");
}

}  // namespace
}  // namespace quiver
