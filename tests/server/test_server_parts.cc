// Server pieces without HTTP or an engine: adapter path allow-listing, the output
// assembler (cumulative engine outputs -> streaming deltas and whole choices), metrics,
// and constraints compiled while a request is prepared (before the engine sees it).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "server/generation_prepare.h"
#include "server/lora_paths.h"
#include "server/metrics.h"
#include "server/output_assembler.h"

namespace quiver {
namespace {

namespace fs = std::filesystem;

class LoraPaths : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("quiver_lora_paths_" + std::to_string(::getpid()));
    fs::create_directories(root_ / "allowed" / "a");
    fs::create_directories(root_ / "allowed-evil" / "b");
    fs::create_directories(root_ / "outside" / "c");
    fs::create_directory_symlink(root_ / "outside" / "c", root_ / "allowed" / "link");
    std::ofstream(root_ / "allowed" / "file.txt") << "x";
  }
  void TearDown() override { fs::remove_all(root_); }
  Result<std::string> resolve(const fs::path& p) { return resolve_allowed_lora_path(p.string(), {(root_ / "allowed").string()}); }
  fs::path root_;
};

TEST_F(LoraPaths, InsideIsAllowedAndCanonical) {
  auto r = resolve(root_ / "allowed" / "." / "a");
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ(r.value(), fs::canonical(root_ / "allowed" / "a").string());
}

TEST_F(LoraPaths, EscapesAreRefused) {
  EXPECT_FALSE(resolve(root_ / "allowed" / ".." / "outside" / "c").is_ok());
  EXPECT_FALSE(resolve(root_ / "allowed" / "link").is_ok());         // symlink pointing out
  EXPECT_FALSE(resolve(root_ / "allowed-evil" / "b").is_ok());       // shares a string prefix only
  EXPECT_FALSE(resolve(root_ / "allowed" / "missing").is_ok());
  EXPECT_FALSE(resolve(root_ / "allowed" / "file.txt").is_ok());     // not a folder
  EXPECT_FALSE(resolve_allowed_lora_path((root_ / "allowed" / "a").string(), {}).is_ok());
  EXPECT_FALSE(resolve_allowed_lora_path("", {(root_ / "allowed").string()}).is_ok());
}

RequestOutput output(std::vector<std::vector<int32_t>> tokens_per_seq, std::vector<size_t> fresh,
                     std::vector<std::string> finish) {
  RequestOutput out;
  out.prompt_token_ids = {1, 2};
  for (size_t i = 0; i < tokens_per_seq.size(); ++i) {
    CompletionOutput c;
    c.index = static_cast<int>(i);
    c.token_ids = tokens_per_seq[i];
    c.num_new_tokens = fresh[i];
    c.delta_text = std::string(fresh[i], 'x');
    c.text = std::string(c.token_ids.size(), 'x');
    c.finish_reason = finish[i];
    if (finish[i] == "stop") c.stop_reason = std::to_string(c.token_ids.back());
    out.outputs.push_back(c);
  }
  out.finished = std::all_of(finish.begin(), finish.end(), [](const std::string& f) { return !f.empty(); });
  return out;
}

TEST(OutputAssembler, StreamingDeltasAndWholeChoices) {
  AssemblerOptions o;
  o.num_jobs = 2;
  o.n = 2;
  o.return_token_ids = true;
  OutputAssembler a(o);
  auto p = a.add(1, output({{5}, {6}}, {1, 1}, {"", ""}));
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].index, 2);  // job 1, choice 0
  EXPECT_EQ(p[1].index, 3);
  EXPECT_TRUE(p[0].prompt_token_ids.has_value());  // first piece of each choice
  p = a.add(1, output({{5, 7}, {6}}, {1, 0}, {"length", "stop"}));
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].token_ids, (std::vector<int32_t>{7}));
  EXPECT_FALSE(p[0].prompt_token_ids.has_value());
  EXPECT_EQ(p[1].finish_reason, "stop");
  EXPECT_TRUE(p[1].stop_reason_is_token);
  EXPECT_TRUE(p[1].token_ids.empty());
  // Finished choices are not reported again.
  EXPECT_TRUE(a.add(1, output({{5, 7}, {6}}, {0, 0}, {"length", "stop"})).empty());
  a.add(0, output({{9}, {9}}, {1, 1}, {"length", "length"}));

  auto whole = a.final_choices();
  ASSERT_EQ(whole.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(whole[i].index, i);
  EXPECT_EQ(whole[2].token_ids, (std::vector<int32_t>{5, 7}));
  const Usage u = a.usage();
  EXPECT_EQ(u.prompt_tokens, 4);      // two prompts of 2, once each
  EXPECT_EQ(u.completion_tokens, 5);  // 2 + 1 + 1 + 1
}

TEST(OutputAssembler, EchoAndStopStrings) {
  AssemblerOptions o;
  o.echo = true;
  o.prompt_texts = {"P:"};
  o.stop = {"5"};
  OutputAssembler a(o);
  auto p = a.add(0, output({{5}}, {1}, {"stop"}));
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].text, "P:x");
  EXPECT_EQ(p[0].echo_token_ids, (std::vector<int32_t>{1, 2}));
  EXPECT_FALSE(p[0].stop_reason_is_token);  // "5" is one of the request's stop strings
}

// Every prompt's job carries the one automaton, compiled on the preparing (HTTP) thread; a
// refused constraint is a 400 in the engine's words before anything is queued.
TEST(PrepareGeneration, ConstraintsArriveCompiled) {
  structured::AutomatonCache automata;
  ModelView view;
  view.base_name = "base";
  view.max_model_len = 64;
  view.automata = &automata;
  CompletionRequest r;
  r.prompts = {PromptSpec{std::nullopt, {1, 2, 3}}, PromptSpec{std::nullopt, {4, 5}}};
  r.params.structured_outputs.kind = StructuredOutputSpec::Kind::kRegex;
  r.params.structured_outputs.regex = "[0-9]{2}";
  auto g = prepare_completion(view, r);
  ASSERT_TRUE(g.is_ok()) << g.error().message;
  ASSERT_EQ(g.value().jobs.size(), 2u);
  const auto& dfa = g.value().jobs[0].params.structured_outputs.compiled;
  ASSERT_NE(dfa, nullptr);
  EXPECT_TRUE(dfa->matches("42"));
  EXPECT_FALSE(dfa->matches("4"));
  EXPECT_EQ(g.value().jobs[1].params.structured_outputs.compiled, dfa);
  EXPECT_EQ(automata.size(), 1u);

  r.params.structured_outputs.regex = "[0-9";
  auto bad = prepare_completion(view, r);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.error().status, 400);
  EXPECT_EQ(bad.error().message.rfind("structured_outputs: ", 0), 0u) << bad.error().message;

  view.automata = nullptr;  // without a cache the engine compiles: nothing is attached
  r.params.structured_outputs.regex = "[a-z]";
  auto plain = prepare_completion(view, r);
  ASSERT_TRUE(plain.is_ok());
  EXPECT_EQ(plain.value().jobs[0].params.structured_outputs.compiled, nullptr);
}

// A 64-token model and a one-prompt completion request, prepared as the server does.
struct Preparing {
  ModelView view;
  CompletionRequest request;
  Preparing() {
    view.base_name = "base";
    view.max_model_len = 64;
    request.prompts = {PromptSpec{std::nullopt, {1, 2, 3}}};
  }
  PreparedGeneration ok() {
    auto g = prepare_completion(view, request);
    EXPECT_TRUE(g.is_ok()) << g.error().message;
    return g.is_ok() ? std::move(g).value() : PreparedGeneration{};
  }
  int max_tokens(std::optional<int> asked) {
    request.max_tokens = asked;
    PreparedGeneration g = ok();
    return g.jobs.empty() ? -1 : g.jobs[0].params.max_tokens;
  }
};

// generation_config.json's max_new_tokens bounds every request's max_tokens, given or
// defaulted (16 for completions, the context's rest for chat), as vLLM's smallest-of rule;
// a request asking more than the context is still refused by the context.
TEST(PrepareGeneration, GenerationConfigBoundsMaxTokens) {
  Preparing p;
  EXPECT_EQ(p.max_tokens(std::nullopt), 16);
  EXPECT_EQ(p.max_tokens(40), 40);
  p.view.max_tokens_cap = 10;
  EXPECT_EQ(p.max_tokens(std::nullopt), 10);
  EXPECT_EQ(p.max_tokens(40), 10);
  EXPECT_EQ(p.max_tokens(5), 5);
  p.request.max_tokens = 100;  // past the context: the context's error, not the bound
  EXPECT_FALSE(prepare_completion(p.view, p.request).is_ok());
  p.request.max_tokens = std::nullopt;
  p.request.params.min_tokens = 12;  // more than the bound leaves
  auto g = prepare_completion(p.view, p.request);
  ASSERT_FALSE(g.is_ok());
  EXPECT_EQ(g.error().param, "min_tokens");
}

// --enable-force-include-usage and --return-tokens-as-token-ids: server-wide defaults a
// request cannot undo; usage chunks only where there is a stream.
TEST(PrepareGeneration, ServerWideUsageAndTokenIds) {
  Preparing p;
  p.request.stream = true;
  EXPECT_FALSE(p.ok().include_usage);
  EXPECT_FALSE(p.ok().tokens_as_ids);
  p.view.force_include_usage = p.view.tokens_as_ids = true;
  EXPECT_TRUE(p.ok().include_usage);
  EXPECT_TRUE(p.ok().tokens_as_ids);
  p.request.stream = false;
  EXPECT_FALSE(p.ok().include_usage);  // a whole response always has its usage
}

TEST(Metrics, HistogramIsCumulative) {
  Histogram h({0.1, 1.0});
  h.observe(0.05);
  h.observe(0.5);
  h.observe(5);
  const std::string text = h.render("m", "a=\"b\"");
  EXPECT_NE(text.find("m_bucket{a=\"b\",le=\"0.10000000000000001\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("m_bucket{a=\"b\",le=\"1\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("m_bucket{a=\"b\",le=\"+Inf\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("m_count{a=\"b\"} 3\n"), std::string::npos) << text;
}

TEST(Metrics, VllmNamesAndPrefix) {
  ServerMetrics m("my \"model\"", CacheConfigInfo{16, 4, true}, 256);
  EngineGauges g;
  g.num_running = 2;
  g.kv_blocks_used = 1;
  g.kv_blocks_total = 4;
  g.running_adapters = {"sql", "pirate"};
  g.max_loras = 4;
  m.set_engine_state(g);
  m.observe_ttft(0.02);
  const std::string text = m.render();
  for (const char* name :
       {"vllm:num_requests_running{model_name=\"my \\\"model\\\"\"} 2", "vllm:num_requests_waiting{",
        "vllm:kv_cache_usage_perc{model_name=\"my \\\"model\\\"\"} 0.25", "vllm:prompt_tokens_total{",
        "vllm:generation_tokens_total{", "vllm:time_to_first_token_seconds_bucket{",
        "vllm:inter_token_latency_seconds_count{", "vllm:e2e_request_latency_seconds_sum{",
        "vllm:cache_config_info{block_size=\"16\",enable_prefix_caching=\"True\",num_gpu_blocks=\"4\"} 1",
        "vllm:request_prompt_tokens_bucket{model_name=\"my \\\"model\\\"\",le=\"200\"} 0",
        "vllm:lora_requests_info{running_lora_adapters=\"pirate,sql\",waiting_lora_adapters=\"\",max_lora=\"4\"}"})
    EXPECT_NE(text.find(name), std::string::npos) << name;
  EXPECT_EQ(text.find("le=\"500\""), std::string::npos) << "token buckets stop at max_model_len";
}

TEST(Metrics, KvTotalBeforeAnyStep) {
  ServerMetrics m("m", CacheConfigInfo{16, 77, false}, 128);
  EXPECT_NE(m.render().find("quiver:kv_cache_total_blocks{model_name=\"m\"} 77\n"), std::string::npos) << m.render();
}

TEST(Metrics, OneTwoFiveBuckets) {
  EXPECT_EQ(one_two_five_buckets(256), (std::vector<double>{1, 2, 5, 10, 20, 50, 100, 200}));
  EXPECT_EQ(one_two_five_buckets(1), (std::vector<double>{1}));
}

}  // namespace
}  // namespace quiver
