// link: qv_engine
// Beam search through the engine (LLMEngine::add_beam_search) on the demo model: one beam
// is greedy decoding; every beam's logprobs are the engine's own for its tokens (rescored
// as a prompt, with the sql adapter), and beams come best first by vLLM's score; a request
// batched beside a search gets the tokens it gets alone; a search keeps its adapter when
// the name is removed midway; an abort ends the search and frees everything; refusals name
// what is wrong and leave nothing behind.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "e2e/run_all.h"
#include "engine/llm_engine.h"
#include "tokenizer/tokenizer.h"

namespace quiver {
namespace {

namespace fs = std::filesystem;
const fs::path kDemo = fs::path(QUIVER_SOURCE_DIR) / "models/demo";

std::unique_ptr<LLMEngine> make_engine() {
  EngineArgs a;
  a.model = (kDemo / "base").string();
  a.enable_lora = true;
  a.max_lora_rank = 16;
  auto e = LLMEngine::create(a);
  EXPECT_TRUE(e.is_ok()) << e.message();
  return std::move(e).value();
}

using testing::run_all;

PromptInput text(const std::string& t) {
  PromptInput p;
  p.text = t;
  return p;
}

BeamSearchParams beams(int width, int max_tokens, bool ignore_eos = false) {
  BeamSearchParams p;
  p.beam_width = width;
  p.max_tokens = max_tokens;
  p.ignore_eos = ignore_eos;
  p.logprobs = 2;
  return p;
}

const char* kFortune = "[user] Tell me a fortune. [/user] [assistant]";

TEST(BeamSearchEngine, OneBeamIsGreedyAndBatchMatesAreUntouched) {
  auto e = make_engine();
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.max_tokens = 16;
  greedy.ignore_eos = true;
  SamplingParams sampled = greedy;
  sampled.temperature = 1;
  sampled.seed = 9;
  ASSERT_TRUE(e->add_request("greedy", text(kFortune), greedy).is_ok());
  ASSERT_TRUE(e->add_request("alone", text("Hello"), sampled).is_ok());
  auto first = run_all(*e);
  ASSERT_TRUE(e->add_beam_search("beam", text(kFortune), beams(1, 16, true)).is_ok());
  ASSERT_TRUE(e->add_beam_search("wide", text(kFortune), beams(3, 8)).is_ok());
  ASSERT_TRUE(e->add_request("beside", text("Hello"), sampled).is_ok());
  EXPECT_EQ(e->num_unfinished_requests(), 3);
  auto done = run_all(*e);
  ASSERT_EQ(done.size(), 3u);  // the searches' own step requests are not reported
  const RequestOutput& beam = done["beam"];
  ASSERT_TRUE(beam.error.empty()) << beam.error;
  ASSERT_EQ(beam.outputs.size(), 1u);
  EXPECT_EQ(beam.outputs[0].token_ids, first["greedy"].outputs[0].token_ids);
  EXPECT_EQ(beam.outputs[0].text, first["greedy"].outputs[0].text);
  EXPECT_EQ(beam.outputs[0].finish_reason, "length");
  EXPECT_EQ(beam.prompt_token_ids, first["greedy"].prompt_token_ids);
  EXPECT_EQ(done["wide"].outputs.size(), 3u);
  EXPECT_EQ(done["beside"].outputs[0].token_ids, first["alone"].outputs[0].token_ids);
  EXPECT_FALSE(e->has_unfinished_requests());
  EXPECT_EQ(e->num_unfinished_requests(), 0);
}

TEST(BeamSearchEngine, BeamsScoreAsTheEngineScoresThem) {
  auto e = make_engine();
  const LoRARequest sql{"sql", 1, (kDemo / "adapters/sql").string()};
  const std::string question =
      "[user] Write a SQL query to answer the question based on the table schema.\n\n context: CREATE TABLE "
      "table_name_74 (icao VARCHAR, airport VARCHAR)\n\n question: Name the ICAO for lilongwe airport [/user] [assistant]";
  ASSERT_TRUE(e->add_beam_search("q", text(question), beams(4, 10), sql).is_ok());
  const RequestOutput out = run_all(*e)["q"];
  ASSERT_TRUE(out.error.empty()) << out.error;
  ASSERT_EQ(out.outputs.size(), 4u);
  EXPECT_EQ(out.lora_name, "sql");
  const std::vector<int64_t>& eos = e->model_config().eos_token_ids;
  double previous = 0;
  for (size_t i = 0; i < out.outputs.size(); ++i) {
    const CompletionOutput& c = out.outputs[i];
    ASSERT_EQ(c.logprobs.size(), c.token_ids.size());
    for (const TokenLogprobs& lp : c.logprobs) EXPECT_LE(lp.top.size(), 2u);  // as many as asked
    double cum = 0;
    for (const TokenLogprobs& lp : c.logprobs) cum += lp.logprob;
    Beam b{out.prompt_token_ids, {}, cum, false};
    b.tokens.insert(b.tokens.end(), c.token_ids.begin(), c.token_ids.end());
    const double score = beam_score(b, eos, 1.0f);
    if (i > 0) {
      EXPECT_LE(score, previous + 1e-12) << "beam " << i << " out of order";
    }
    previous = score;
    // The engine's logprob of each generated token, from the whole beam as a prompt.
    SamplingParams rescore;
    rescore.max_tokens = 1;
    rescore.prompt_logprobs = 0;
    PromptInput whole;
    whole.token_ids = b.tokens;
    ASSERT_TRUE(e->add_request("r", whole, rescore, sql).is_ok());
    const RequestOutput r = run_all(*e)["r"];
    double expected = 0;
    for (size_t k = out.prompt_token_ids.size(); k < b.tokens.size(); ++k) expected += r.prompt_logprobs[k]->logprob;
    EXPECT_NEAR(cum, expected, 1e-3) << "beam " << i;
  }
  // The adapter's best beam begins its greedy answer.
  EXPECT_EQ(out.outputs[0].text.rfind(" SELECT icao FROM", 0), 0u) << out.outputs[0].text;
}

// A search keeps the adapter its first step found, as a running request keeps its own:
// removing the name midway changes nothing in its beams.
TEST(BeamSearchEngine, AdapterRemovedMidwayKeepsServingTheSearch) {
  const LoRARequest sql{"sql", 1, (kDemo / "adapters/sql").string()};
  auto whole = make_engine();
  ASSERT_TRUE(whole->add_beam_search("q", text(kFortune), beams(3, 8), sql).is_ok());
  const RequestOutput want = run_all(*whole)["q"];
  auto e = make_engine();
  ASSERT_TRUE(e->add_beam_search("q", text(kFortune), beams(3, 8), sql).is_ok());
  e->step();
  e->step();
  ASSERT_TRUE(e->remove_lora("sql").is_ok());
  const RequestOutput got = run_all(*e)["q"];
  ASSERT_TRUE(got.error.empty()) << got.error;
  ASSERT_EQ(got.outputs.size(), want.outputs.size());
  for (size_t i = 0; i < got.outputs.size(); ++i) EXPECT_EQ(got.outputs[i].token_ids, want.outputs[i].token_ids);
  EXPECT_TRUE(e->list_loras().empty());
}

TEST(BeamSearchEngine, AbortAndRefusals) {
  auto e = make_engine();
  ASSERT_TRUE(e->add_beam_search("b", text(kFortune), beams(2, 50, true)).is_ok());
  e->step();
  e->step();
  EXPECT_TRUE(e->abort_request("b"));
  auto done = run_all(*e);
  ASSERT_EQ(done.size(), 1u);
  for (const CompletionOutput& c : done["b"].outputs) EXPECT_EQ(c.finish_reason, "abort");
  EXPECT_EQ(e->counters().requests_finished, 1);

  const std::pair<BeamSearchParams, const char*> bad[] = {{beams(11, 4), "max_logprobs"},
                                                          {beams(0, 4), "beam_width"},
                                                          {beams(2, 100000), "maximum context length"}};
  for (const auto& [p, what] : bad) {
    Status s = e->add_beam_search("x", text(kFortune), p);
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  }
  Status unknown = e->add_beam_search("x", text(kFortune), beams(2, 4), LoRARequest{"nope", 1, ""});
  EXPECT_FALSE(unknown.is_ok());
  ASSERT_TRUE(e->add_request("dup", text("x"), SamplingParams{}).is_ok());
  EXPECT_NE(e->add_beam_search("dup", text(kFortune), beams(2, 4)).message().find("already in use"), std::string::npos);
  run_all(*e);
  EXPECT_FALSE(e->has_unfinished_requests());
}

}  // namespace
}  // namespace quiver
