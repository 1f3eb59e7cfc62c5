// What `quiver serve` reports and applies around requests: the request log line and the
// periodic stats line, generation_config.json sampling defaults (vLLM's --generation-config),
// and a --chat-template that replaces the tokenizer's.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "io/generation_defaults.h"
#include "server/generation_prepare.h"
#include "server/openai_protocol.h"
#include "server/serving_log.h"
#include "tokenizer/tokenizer.h"

namespace quiver {
namespace {

namespace fs = std::filesystem;

TEST(ServingLog, RequestLineNamesEverything) {
  const std::string line = request_log_line({"cmpl-ab12", "sql", 12, 16, 0.0456, 1.2304, "length"});
  EXPECT_EQ(line, "request cmpl-ab12 model=sql prompt_tokens=12 output_tokens=16 ttft=45.6ms total=1.230s finish=length");
  EXPECT_NE(request_log_line({"x", "m", 3, 0, -1, 0.01, "abort"}).find("ttft=- "), std::string::npos);
}

TEST(ServingLog, StatsLineIsThroughputOverTheInterval) {
  EngineGauges before, now;
  before.prompt_tokens = 100;
  before.generation_tokens = 40;
  now.prompt_tokens = 300;
  now.generation_tokens = 90;
  now.num_running = 3;
  now.num_waiting = 1;
  now.kv_blocks_used = 5;
  now.kv_blocks_total = 20;
  now.running_adapters = {"sql"};
  now.waiting_adapters = {"pirate"};
  now.max_loras = 2;
  EXPECT_EQ(stats_line(before, now, 10.0),
            "stats: prompt throughput 20.0 tokens/s, generation throughput 5.0 tokens/s, running 3, waiting 1, "
            "KV cache usage 25.0% (5 of 20 blocks), adapters pirate,sql (max 2)");
}

TEST(ServingLog, DisabledRequestLogWritesNothing) {
  std::ostringstream on, off;
  ServingLog(&on, true).request_finished({"a", "m", 1, 1, 0.1, 0.2, "stop"});
  ServingLog(&off, false).request_finished({"a", "m", 1, 1, 0.1, 0.2, "stop"});
  EXPECT_NE(on.str().find("request a model=m"), std::string::npos) << on.str();
  EXPECT_EQ(off.str(), "");
}

TEST(ServingLog, StatsThreadReportsActivityAndStaysQuietWhenIdle) {
  std::ostringstream out;
  ServerMetrics metrics("m", CacheConfigInfo{16, 8, true}, 64);
  {
    ServingLog log(&out, true);
    log.start_stats(&metrics, 0.05);
    usleep(200 * 1000);  // idle: no line
    EXPECT_EQ(out.str(), "");
    EngineGauges g;
    g.num_running = 1;
    g.generation_tokens = 10;
    g.kv_blocks_total = 8;
    metrics.set_engine_state(g);
    for (int i = 0; i < 100 && out.str().empty(); ++i) usleep(10 * 1000);
    log.stop_stats();
  }
  EXPECT_NE(out.str().find("stats: prompt throughput 0.0 tokens/s, generation throughput"), std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("running 1,"), std::string::npos) << out.str();
}

fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("quiver_ops_" + std::to_string(::getpid()) + "_" + name);
  fs::create_directories(d);
  return d;
}

TEST(GenerationDefaults, ReadsVllmsFieldsOnly) {
  auto d = parse_generation_defaults(
      R"({"temperature": 0.6, "top_p": 0.9, "top_k": 20, "repetition_penalty": 1.1, "eos_token_id": 2,
          "do_sample": true})",
      "g.json");
  ASSERT_TRUE(d.is_ok()) << d.message();
  EXPECT_DOUBLE_EQ(*d->temperature, 0.6);
  EXPECT_EQ(*d->top_k, 20);
  EXPECT_FALSE(d->min_p.has_value());
  EXPECT_EQ(d->describe(), "temperature=0.6, top_p=0.9, top_k=20, repetition_penalty=1.1");
  auto bad = parse_generation_defaults(R"({"top_k": "many"})", "g.json");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.message().find("top_k"), std::string::npos) << bad.message();
  // vLLM's max_tokens from HF's max_new_tokens; null is unset; non-positive is refused.
  auto len = parse_generation_defaults(R"({"max_new_tokens": 512, "min_p": null})", "g.json");
  ASSERT_TRUE(len.is_ok()) << len.message();
  EXPECT_EQ(*len->max_new_tokens, 512);
  EXPECT_FALSE(len->min_p.has_value());
  EXPECT_EQ(len->describe(), "max_tokens=512");
  for (const char* text : {R"({"max_new_tokens": 0})", R"({"max_new_tokens": 2.5})"}) {
    auto b = parse_generation_defaults(text, "g.json");
    ASSERT_FALSE(b.is_ok()) << text;
    EXPECT_NE(b.message().find("max_new_tokens"), std::string::npos) << b.message();
  }
}

TEST(GenerationDefaults, AutoVllmOrAFolder) {
  const fs::path model = temp_dir("model");
  std::ofstream(model / "generation_config.json") << R"({"temperature": 0.25})";
  EXPECT_DOUBLE_EQ(*load_generation_defaults("auto", model.string()).value().temperature, 0.25);
  EXPECT_TRUE(load_generation_defaults("vllm", model.string()).value().empty());
  const fs::path none = temp_dir("none");
  EXPECT_TRUE(load_generation_defaults("auto", none.string()).value().empty());  // no file: no defaults
  EXPECT_FALSE(load_generation_defaults(none.string(), model.string()).is_ok());  // a named folder must have one
  EXPECT_DOUBLE_EQ(*load_generation_defaults(model.string(), none.string()).value().temperature, 0.25);
  // --override-generation-config: its fields over the file's, the rest kept; its errors named.
  auto over = load_generation_defaults("auto", model.string(), R"({"top_k": 5, "max_new_tokens": 9})");
  ASSERT_TRUE(over.is_ok()) << over.message();
  EXPECT_EQ(over->describe(), "temperature=0.25, top_k=5, max_tokens=9");
  EXPECT_DOUBLE_EQ(*load_generation_defaults("vllm", model.string(), R"({"temperature": 0.5})")->temperature, 0.5);
  auto bad = load_generation_defaults("auto", model.string(), R"({"temperature": "hot"})");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.message().find("--override-generation-config"), std::string::npos) << bad.message();
  fs::remove_all(model);
  fs::remove_all(none);
}

TEST(GenerationDefaults, ApplyToFieldsARequestLeavesOut) {
  SamplingParams defaults;
  defaults.temperature = 0.25f;
  defaults.top_k = 7;
  auto unset = parse_completion_request(R"({"prompt": [1]})", defaults);
  ASSERT_TRUE(unset.is_ok());
  EXPECT_FLOAT_EQ(unset.value().params.temperature, 0.25f);
  EXPECT_EQ(unset.value().params.top_k, 7);
  auto given = parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "temperature": 1.5})", defaults);
  ASSERT_TRUE(given.is_ok());
  EXPECT_FLOAT_EQ(given.value().params.temperature, 1.5f);
  EXPECT_EQ(given.value().params.top_k, 7);
}

TEST(ChatTemplateFlag, ReplacesTheTokenizersTemplate) {
  auto tok = Tokenizer::load(std::string(QUIVER_SOURCE_DIR) + "/models/demo/base");
  if (!tok.is_ok()) GTEST_SKIP() << "demo model missing: " << tok.message();
  auto tmpl = ChatTemplate::parse("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}");
  ASSERT_TRUE(tmpl.is_ok()) << tmpl.message();
  const nlohmann::json messages = {{{"role", "user"}, {"content", "hi"}}};
  auto own = tok.value()->apply_chat_template(messages, true, nlohmann::json::object());
  auto replaced = tok.value()->apply_chat_template(messages, true, nlohmann::json::object(), &tmpl.value());
  ASSERT_TRUE(replaced.is_ok()) << replaced.message();
  EXPECT_EQ(replaced.value(), "<user>hi");
  if (own.is_ok()) {
    EXPECT_NE(own.value(), replaced.value());
  }
}

// A request's own template ("chat_template", or chat_template_kwargs'), vLLM's rule: a 400
// saying why unless the server trusts request templates, then used instead of the server's.
TEST(ChatTemplateFlag, RequestTemplateOnlyWhenTrusted) {
  auto tok = Tokenizer::load(std::string(QUIVER_SOURCE_DIR) + "/models/demo/base");
  if (!tok.is_ok()) GTEST_SKIP() << "demo model missing: " << tok.message();
  auto server_tmpl = ChatTemplate::parse("server:{{ messages[0].content }}");
  ASSERT_TRUE(server_tmpl.is_ok());
  ModelView view;
  view.chat_template = &server_tmpl.value();
  auto body = [](const std::string& fields) {
    auto r = parse_chat_request(R"({"messages": [{"role": "user", "content": "hi"}])" + fields + "}");
    EXPECT_TRUE(r.is_ok()) << fields;
    return r.value();
  };
  EXPECT_EQ(render_chat(*tok.value(), body(""), view).value(), "server:hi");
  const std::string own = R"(, "chat_template": "own:{{ messages[0].content }}{{ flag }}")";
  const std::string kwarg = R"(, "chat_template_kwargs": {"chat_template": "kw:{{ messages[0].content }}"})";
  for (const std::string& fields : {own, kwarg}) {
    auto refused = render_chat(*tok.value(), body(fields), view);
    ASSERT_FALSE(refused.is_ok()) << fields;
    EXPECT_EQ(refused.error().param, "chat_template");
    EXPECT_NE(refused.error().message.find("--trust-request-chat-template"), std::string::npos);
  }
  view.trust_request_chat_template = true;
  EXPECT_EQ(render_chat(*tok.value(), body(own + R"(, "chat_template_kwargs": {"flag": "!"})"), view).value(),
            "own:hi!");
  EXPECT_EQ(render_chat(*tok.value(), body(kwarg), view).value(), "kw:hi");
  auto broken = render_chat(*tok.value(), body(R"(, "chat_template": "{% for %}")"), view);
  ASSERT_FALSE(broken.is_ok());
  EXPECT_EQ(broken.error().param, "chat_template");
  EXPECT_FALSE(parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "chat_template": 3})").is_ok());
}

}  // namespace
}  // namespace quiver
