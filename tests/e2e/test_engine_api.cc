// link: qv_engine
// LLMEngine's API semantics on the fixture model: seeds, n, abort, adapters removed or
// reloaded under the same name while the engine runs, prefix caching across adapters,
// stop strings and stop tokens (demo model), requests refused without side effects.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>

#include "e2e/run_all.h"
#include "engine/llm_engine.h"

namespace quiver {
namespace {

namespace fs = std::filesystem;
const fs::path kRoot = QUIVER_SOURCE_DIR;
const fs::path kModel = kRoot / "tests/fixtures/llama_gqa";

std::string adapter(const std::string& name) { return (kModel / "adapters" / name).string(); }

std::unique_ptr<LLMEngine> make_engine(int max_loras = 2, bool prefix_caching = true) {
  EngineArgs a;
  a.model = kModel.string();
  a.enable_lora = true;
  a.max_loras = max_loras;
  a.max_lora_rank = 64;
  a.enable_prefix_caching = prefix_caching;
  a.block_size = 4;
  auto e = LLMEngine::create(a);
  EXPECT_TRUE(e.is_ok()) << e.message();
  return std::move(e).value();
}

PromptInput ids(std::vector<int32_t> t) {
  PromptInput p;
  p.token_ids = std::move(t);
  return p;
}

SamplingParams greedy(int max_tokens = 8) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.logprobs = 1;
  return p;
}

using testing::run_all;

const std::vector<int32_t> kPrompt = {5, 17, 33, 101, 7, 9, 250, 3, 44, 12, 80, 61};

// vLLM's bounds on max_lora_rank: a start-up error naming the flag, not a crash later.
TEST(EngineApi, MaxLoraRankOutOfRangeIsRefused) {
  for (int rank : {0, 513, 1024}) {
    EngineArgs a;
    a.model = kModel.string();
    a.enable_lora = true;
    a.max_lora_rank = rank;
    auto e = LLMEngine::create(a);
    ASSERT_FALSE(e.is_ok()) << rank;
    EXPECT_NE(e.message().find("--max-lora-rank must be in [1, 512]"), std::string::npos) << e.message();
  }
}

// The step token budget: 0 (the default) resolves to the device's value (2,048 on the CPU;
// engine_defaults.h), which args() then reports; an explicit value is kept; a negative one
// is refused naming the flag.
TEST(EngineApi, TokenBudgetResolvesByDeviceAndNegativeIsRefused) {
  EngineArgs a;
  a.model = kModel.string();
  auto e = LLMEngine::create(a);
  ASSERT_TRUE(e.is_ok()) << e.message();
  EXPECT_EQ(e.value()->args().max_num_batched_tokens, 2048);
  a.max_num_batched_tokens = 96;
  e = LLMEngine::create(a);
  ASSERT_TRUE(e.is_ok()) << e.message();
  EXPECT_EQ(e.value()->args().max_num_batched_tokens, 96);
  a.max_num_batched_tokens = -1;
  e = LLMEngine::create(a);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.message().find("--max-num-batched-tokens must be at least 1"), std::string::npos) << e.message();
}

// The start-up memory plan on the host: the report's weights are the checkpoint's bytes,
// the default cache holds max_num_seqs full contexts when RAM allows (this model's are
// tiny), an explicit block count wins, and a cache shorter than one max_model_len
// sequence is refused with its numbers instead of failing requests later.
TEST(EngineApi, MemoryPlanReportsItsSharesAndRefusesACacheShorterThanOneSequence) {
  EngineArgs a;
  a.model = kModel.string();
  a.max_num_seqs = 8;
  a.block_size = 4;
  auto e = LLMEngine::create(a);
  ASSERT_TRUE(e.is_ok()) << e.message();
  const MemoryReport& r = e.value()->memory_report();
  EXPECT_EQ(r.weights, static_cast<int64_t>(e.value()->weight_bytes()));
  EXPECT_GT(r.activations, 0);
  EXPECT_EQ(r.lora_slots, 0);
  EXPECT_EQ(r.kv_tokens, 8 * 256);
  EXPECT_EQ(r.max_model_len, 256);
  EXPECT_DOUBLE_EQ(r.max_concurrency(), 8.0);
  EXPECT_EQ(e.value()->last_step().kv_blocks_total, 8 * 256 / 4);
  // f32 cache: 3 layers x K and V x 2 heads x 8 x 4 bytes = 384 bytes a token.
  EXPECT_EQ(r.kv_cache, 8 * 256 * 384);
  a.num_kv_blocks = 100;
  e = LLMEngine::create(a);
  ASSERT_TRUE(e.is_ok()) << e.message();
  EXPECT_EQ(e.value()->memory_report().kv_tokens, 400);
  EXPECT_EQ(e.value()->memory_report().kv_source, "--num-kv-blocks 100");
  a.num_kv_blocks = 10;
  e = LLMEngine::create(a);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.message().find("holds 40 tokens (10 blocks of 4"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("--max-model-len 256 needs (64 blocks"), std::string::npos) << e.message();
  a.max_model_len = 40;
  EXPECT_TRUE(LLMEngine::create(a).is_ok());
  a.gpu_memory_utilization = 0;
  e = LLMEngine::create(a);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.message().find("--gpu-memory-utilization must be in (0, 1]"), std::string::npos) << e.message();
}

// --lora-dtype auto (vLLM's lora_dtype default) takes the model's dtype where the slot
// stacks have it: bf16 stacks for a bf16 model, float32 for an f32 one; args() reports the
// resolved value. An unknown value is refused naming the flag.
TEST(EngineApi, LoraDtypeAutoFollowsTheModel) {
  EngineArgs a;
  a.enable_lora = true;
  a.lora_dtype = "auto";
  a.model = kModel.string();  // float32
  auto e = LLMEngine::create(a);
  ASSERT_TRUE(e.is_ok()) << e.message();
  EXPECT_EQ(e.value()->args().lora_dtype, "float32");
  a.model = (kRoot / "tests/fixtures/llama3_bf16").string();
  e = LLMEngine::create(a);
  ASSERT_TRUE(e.is_ok()) << e.message();
  EXPECT_EQ(e.value()->args().lora_dtype, "bfloat16");
  a.lora_dtype = "float16";
  e = LLMEngine::create(a);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.message().find("unknown --lora-dtype 'float16'"), std::string::npos) << e.message();
}

TEST(EngineApi, SeededSamplingIsTheSameAloneAndBatched) {
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_p = 0.9f;
  p.seed = 1234;
  p.max_tokens = 12;
  p.ignore_eos = true;
  auto alone = make_engine();
  ASSERT_TRUE(alone->add_request("x", ids(kPrompt), p).is_ok());
  auto a = run_all(*alone)["x"].outputs[0].token_ids;

  auto batched = make_engine();
  ASSERT_TRUE(batched->add_request("x", ids(kPrompt), p).is_ok());
  SamplingParams other = p;
  other.seed.reset();
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(batched->add_request("o" + std::to_string(i), ids({1, 2, static_cast<int32_t>(3 + i)}), other,
                                     LoRARequest{"r8", 0, adapter("r8_all")})
                    .is_ok());
  EXPECT_EQ(run_all(*batched)["x"].outputs[0].token_ids, a);
}

TEST(EngineApi, NCompletionsDifferAndAreReproducible) {
  SamplingParams p;
  p.n = 3;
  p.temperature = 1.0f;
  p.seed = 7;
  p.max_tokens = 10;
  p.ignore_eos = true;
  auto e1 = make_engine();
  ASSERT_TRUE(e1->add_request("n", ids(kPrompt), p).is_ok());
  auto r1 = run_all(*e1)["n"];
  ASSERT_EQ(r1.outputs.size(), 3u);
  EXPECT_NE(r1.outputs[0].token_ids, r1.outputs[1].token_ids);
  auto e2 = make_engine();
  ASSERT_TRUE(e2->add_request("n", ids(kPrompt), p).is_ok());
  auto r2 = run_all(*e2)["n"];
  for (int i = 0; i < 3; ++i) EXPECT_EQ(r1.outputs[i].token_ids, r2.outputs[i].token_ids);
}

TEST(EngineApi, AbortFreesEverything) {
  auto e = make_engine();
  ASSERT_TRUE(e->add_request("a", ids(kPrompt), greedy(50)).is_ok());
  ASSERT_TRUE(e->add_request("b", ids(kPrompt), greedy(5), LoRARequest{"r8", 0, adapter("r8_all")}).is_ok());
  e->step();
  e->step();
  EXPECT_TRUE(e->abort_request("a"));
  EXPECT_FALSE(e->abort_request("unknown"));
  auto done = run_all(*e);
  EXPECT_EQ(done["a"].outputs[0].finish_reason, "abort");
  EXPECT_EQ(done["b"].outputs[0].finish_reason, "length");
  e->step();
  EXPECT_EQ(e->last_step().kv_blocks_used, 0) << "only prefix-cached blocks may remain, and none are in use";
}

TEST(EngineApi, AdapterRemovedWhileItsRequestWaitsStillRuns) {
  auto reference = make_engine(1);
  ASSERT_TRUE(reference->add_request("r", ids(kPrompt), greedy(), LoRARequest{"a", 0, adapter("r16_rslora")}).is_ok());
  auto want = run_all(*reference)["r"].outputs[0].token_ids;

  auto e = make_engine(1);
  ASSERT_TRUE(e->add_lora("a", adapter("r16_rslora")).is_ok());
  ASSERT_TRUE(e->add_lora("b", adapter("r8_all")).is_ok());
  // "b" takes the only slot; "a" waits, and is removed from the registry meanwhile.
  ASSERT_TRUE(e->add_request("first", ids({1, 2, 3}), greedy(20), LoRARequest{"b", 0, ""}).is_ok());
  ASSERT_TRUE(e->add_request("r", ids(kPrompt), greedy(), LoRARequest{"a", 0, ""}).is_ok());
  e->step();
  ASSERT_TRUE(e->remove_lora("a").is_ok());
  EXPECT_FALSE(e->add_request("late", ids(kPrompt), greedy(), LoRARequest{"a", 0, ""}).is_ok());
  auto done = run_all(*e);
  EXPECT_EQ(done["r"].outputs[0].token_ids, want);
}

// vLLM's LoRARequest path: an adapter is read from disk on its first request, kept in
// the host LRU (max_cpu_loras = max_loras = 2 here) and read again only after eviction;
// a path that does not load fails that request alone.
TEST(EngineApi, AdaptersLoadOnFirstUseAndStayInTheHostLru) {
  auto e = make_engine(2);
  EXPECT_EQ(e->lora_cache_stats().loads, 0);
  const LoRARequest a{"a", 1, adapter("r8_all")};
  ASSERT_TRUE(e->add_request("x", ids(kPrompt), greedy(), a).is_ok());
  ASSERT_TRUE(e->add_request("y", ids(kPrompt), greedy(), a).is_ok());
  EXPECT_EQ(e->lora_cache_stats().loads, 1);
  EXPECT_EQ(e->lora_cache_stats().num_cached, 1);
  ASSERT_EQ(e->list_loras().size(), 1u);
  EXPECT_EQ(e->list_loras()[0].name, "a");

  Status bad = e->add_request("z", ids(kPrompt), greedy(), LoRARequest{"bad", 2, adapter("no_such_adapter")});
  EXPECT_FALSE(bad.is_ok());
  EXPECT_EQ(e->list_loras().size(), 1u);
  auto done = run_all(*e);
  EXPECT_EQ(done.size(), 2u);
  EXPECT_EQ(done["x"].outputs[0].token_ids, done["y"].outputs[0].token_ids);

  ASSERT_TRUE(e->add_request("b", ids(kPrompt), greedy(), LoRARequest{"b", 3, adapter("r16_rslora")}).is_ok());
  ASSERT_TRUE(e->add_request("c", ids(kPrompt), greedy(), LoRARequest{"c", 4, adapter("r1_qv")}).is_ok());
  run_all(*e);
  EXPECT_EQ(e->lora_cache_stats().loads, 3);
  EXPECT_EQ(e->lora_cache_stats().num_cached, 2);
  ASSERT_TRUE(e->add_request("again", ids(kPrompt), greedy(), a).is_ok());  // "a" was evicted
  EXPECT_EQ(e->lora_cache_stats().loads, 4);
  EXPECT_EQ(run_all(*e)["again"].outputs[0].token_ids, done["x"].outputs[0].token_ids);
}

// step_seconds adds up the time inside step(): no more than the caller's wall time, and
// every step's share (last_step().ms) is in it.
// A request refused by any check leaves nothing behind: its adapter (named with a path,
// so the request would register it) is not registered, and the engine is idle.
TEST(EngineApi, ARefusedRequestHasNoSideEffects) {
  auto e = make_engine();
  SamplingParams p = greedy();
  p.stop = {"x"};  // the fixture has no tokenizer: stop strings are refused
  const Status s = e->add_request("r", ids(kPrompt), p, LoRARequest{"late", 0, adapter("r8_all")});
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("stop strings"), std::string::npos) << s.message();
  for (const AdapterInfo& a : e->list_loras()) EXPECT_NE(a.name, "late");
  EXPECT_FALSE(e->has_unfinished_requests());
  EXPECT_TRUE(e->step().empty());
}

TEST(EngineApi, StepSecondsSumTheStepTimes) {
  auto e = make_engine();
  ASSERT_TRUE(e->add_request("x", ids(kPrompt), greedy(6)).is_ok());
  double sum_ms = 0;
  const auto start = std::chrono::steady_clock::now();
  while (e->has_unfinished_requests()) {
    e->step();
    sum_ms += e->last_step().ms;
  }
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(e->counters().steps, 6);
  EXPECT_GT(e->counters().step_seconds, 0.0);
  EXPECT_NEAR(e->counters().step_seconds, sum_ms / 1e3, 1e-9);
  EXPECT_LE(e->counters().step_seconds, wall_s);
}

TEST(EngineApi, ReloadingANameNeverHitsStaleCache) {
  auto want_engine = make_engine(1, false);
  ASSERT_TRUE(want_engine->add_request("y", ids(kPrompt), greedy(), LoRARequest{"a", 0, adapter("r8_all")}).is_ok());
  auto want = run_all(*want_engine)["y"].outputs[0].token_ids;

  auto e = make_engine(1, true);
  ASSERT_TRUE(e->add_lora("a", adapter("r16_rslora")).is_ok());
  ASSERT_TRUE(e->add_request("x", ids(kPrompt), greedy(), LoRARequest{"a", 0, ""}).is_ok());
  auto first = run_all(*e)["x"].outputs[0].token_ids;
  ASSERT_TRUE(e->remove_lora("a").is_ok());
  ASSERT_TRUE(e->add_lora("a", adapter("r8_all")).is_ok());  // same name, other weights
  ASSERT_TRUE(e->add_request("y", ids(kPrompt), greedy(), LoRARequest{"a", 0, ""}).is_ok());
  auto second = run_all(*e)["y"].outputs[0].token_ids;
  EXPECT_EQ(second, want);
  EXPECT_NE(first, second);
}

TEST(EngineApi, PrefixCacheHitsGiveIdenticalOutputsAndAdaptersNeverShare) {
  auto e = make_engine(2, true);
  ASSERT_TRUE(e->add_request("base1", ids(kPrompt), greedy()).is_ok());
  const RequestOutput first = run_all(*e)["base1"];
  auto base1 = first.outputs[0].token_ids;
  EXPECT_EQ(first.num_cached_tokens, 0);
  const int64_t hits_before = e->counters().prefix_cache_hit_blocks;
  ASSERT_TRUE(e->add_request("base2", ids(kPrompt), greedy()).is_ok());
  ASSERT_TRUE(e->add_request("lora", ids(kPrompt), greedy(), LoRARequest{"r8", 0, adapter("r8_all")}).is_ok());
  auto done = run_all(*e);
  EXPECT_GT(e->counters().prefix_cache_hit_blocks, hits_before);
  EXPECT_EQ(done["base2"].outputs[0].token_ids, base1);
  // vLLM's num_cached_tokens: the prompt's blocks found in the cache (whole blocks, not
  // the last token, which is computed for its logits); none under another adapter.
  EXPECT_GT(done["base2"].num_cached_tokens, 0);
  EXPECT_LT(done["base2"].num_cached_tokens, static_cast<int>(done["base2"].prompt_token_ids.size()));
  EXPECT_EQ(done["lora"].num_cached_tokens, 0);

  auto fresh = make_engine(2, false);
  ASSERT_TRUE(fresh->add_request("lora", ids(kPrompt), greedy(), LoRARequest{"r8", 0, adapter("r8_all")}).is_ok());
  EXPECT_EQ(run_all(*fresh)["lora"].outputs[0].token_ids, done["lora"].outputs[0].token_ids);
}

TEST(EngineApi, StopStringsAndStopTokensOnTheDemoModel) {
  EngineArgs a;
  a.model = (kRoot / "models/demo/base").string();
  a.lora_modules = {{"sql", (kRoot / "models/demo/adapters/sql").string()}};
  a.enable_lora = true;
  auto created = LLMEngine::create(a);
  ASSERT_TRUE(created.is_ok()) << created.message();
  LLMEngine& e = *created.value();
  PromptInput p;
  p.text =
      "[user] Write a SQL query to answer the question based on the table schema.\n\n context: CREATE TABLE "
      "table_name_74 (icao VARCHAR, airport VARCHAR)\n\n question: Name the ICAO for lilongwe airport [/user] [assistant]";
  SamplingParams s = greedy(40);
  s.ignore_eos = false;
  s.stop = {"FROM"};
  ASSERT_TRUE(e.add_request("stop", p, s, LoRARequest{"sql", 0, ""}).is_ok());
  SamplingParams t = greedy(40);
  t.ignore_eos = false;
  ASSERT_TRUE(e.add_request("eos", p, t, LoRARequest{"sql", 0, ""}).is_ok());
  auto done = run_all(e);
  EXPECT_EQ(done["stop"].outputs[0].text, " SELECT icao ");
  EXPECT_EQ(done["stop"].outputs[0].finish_reason, "stop");
  EXPECT_EQ(done["stop"].outputs[0].stop_reason.value_or(""), "FROM");
  // "[/assistant]" ends the answer (an eos id in generation_config.json); its text is not output.
  EXPECT_EQ(done["eos"].outputs[0].text, " SELECT icao FROM table_name_74 WHERE airport = 'lilongwe' ");
  EXPECT_EQ(done["eos"].outputs[0].finish_reason, "stop");
  EXPECT_FALSE(done["eos"].outputs[0].stop_reason.has_value());
}

}  // namespace
}  // namespace quiver
