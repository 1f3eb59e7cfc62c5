// link: qv_engine
// Structured outputs through the engine on the demo model (random-ish text without a
// constraint): a batch mixing JSON-schema, regex, choice and unconstrained requests, all
// sampled at temperature 1; every constrained output matches its constraint and ends by
// the constraint (finish "stop"), and the unconstrained one is untouched by the masks of
// its batch-mates (the same tokens as when run alone). Unsupported schemas are refused at
// add_request with a message naming the keyword. `quiver generate` lines take the same
// request fields as the server, and a bad constraint is that line's error only.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include <nlohmann/json.hpp>

#include "e2e/run_all.h"
#include "e2e/scratch.h"
#include "engine/llm_engine.h"

namespace quiver {
namespace {

namespace fs = std::filesystem;
const fs::path kModel = fs::path(QUIVER_SOURCE_DIR) / "models/demo/base";

std::unique_ptr<LLMEngine> make_engine() {
  EngineArgs a;
  a.model = kModel.string();
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

SamplingParams sampled(uint64_t seed, StructuredOutputSpec spec = {}) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = seed;
  p.max_tokens = 200;
  p.structured_outputs = std::move(spec);
  return p;
}

const char* kSchema = R"({"type":"object","properties":{"city":{"enum":["Paris","Oslo"]},"sunny":{"type":"boolean"},
  "days":{"type":"array","items":{"type":"integer","enum":[1,2,3]},"maxItems":3}},"required":["city","sunny"]})";

TEST(StructuredEngine, MixedBatchMatchesEachConstraint) {
  auto e = make_engine();
  StructuredOutputSpec json_spec{StructuredOutputSpec::Kind::kJson, kSchema, "", {}, {}};
  StructuredOutputSpec regex_spec{StructuredOutputSpec::Kind::kRegex, "", "[a-z]{3,8}-[0-9]{2}", {}, {}};
  StructuredOutputSpec choice_spec{StructuredOutputSpec::Kind::kChoice, "", "", {"yes", "no", "maybe not"}, {}};
  for (int i = 0; i < 8; ++i) {
    const std::string s = std::to_string(i);
    ASSERT_TRUE(e->add_request("json" + s, text("The weather:"), sampled(i, json_spec)).is_ok());
    ASSERT_TRUE(e->add_request("regex" + s, text("A code:"), sampled(100 + i, regex_spec)).is_ok());
    ASSERT_TRUE(e->add_request("choice" + s, text("Answer:"), sampled(200 + i, choice_spec)).is_ok());
  }
  SamplingParams free = sampled(7);
  free.max_tokens = 24;
  free.ignore_eos = true;
  ASSERT_TRUE(e->add_request("free", text("Once upon"), free).is_ok());
  auto done = run_all(*e);
  ASSERT_EQ(done.size(), 25u);
  const std::regex re("[a-z]{3,8}-[0-9]{2}");
  for (auto& [id, out] : done) {
    ASSERT_TRUE(out.error.empty()) << id << ": " << out.error;
    const CompletionOutput& c = out.outputs[0];
    if (id == "free") continue;
    EXPECT_EQ(c.finish_reason, "stop") << id << " ended by length: " << c.text;
    if (id.rfind("json", 0) == 0) {
      auto v = nlohmann::json::parse(c.text, nullptr, false);
      ASSERT_FALSE(v.is_discarded()) << c.text;
      ASSERT_TRUE(v.is_object()) << c.text;
      EXPECT_TRUE(v["city"] == "Paris" || v["city"] == "Oslo") << c.text;
      EXPECT_TRUE(v["sunny"].is_boolean()) << c.text;
      if (v.contains("days")) {
        EXPECT_LE(v["days"].size(), 3u) << c.text;
      }
      for (auto it = v.begin(); it != v.end(); ++it)
        EXPECT_TRUE(it.key() == "city" || it.key() == "sunny" || it.key() == "days") << c.text;
    } else if (id.rfind("regex", 0) == 0) {
      EXPECT_TRUE(std::regex_match(c.text, re)) << c.text;
    } else {
      EXPECT_TRUE(c.text == "yes" || c.text == "no" || c.text == "maybe not") << c.text;
    }
  }
  // The unconstrained request alone gives the same tokens.
  auto alone = make_engine();
  ASSERT_TRUE(alone->add_request("free", text("Once upon"), free).is_ok());
  auto solo = run_all(*alone);
  EXPECT_EQ(solo["free"].outputs[0].token_ids, done["free"].outputs[0].token_ids);
}

TEST(StructuredEngine, UnsupportedSchemaIsRefusedByName) {
  auto e = make_engine();
  StructuredOutputSpec bad{StructuredOutputSpec::Kind::kJson, R"({"type":"string","format":"date"})", "", {}, {}};
  Status s = e->add_request("x", text("Hi"), sampled(1, bad));
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("'format' is not supported"), std::string::npos) << s.message();
  StructuredOutputSpec regex{StructuredOutputSpec::Kind::kRegex, "", "(a", {}, {}};
  s = e->add_request("y", text("Hi"), sampled(1, regex));
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("missing ')'"), std::string::npos) << s.message();
  EXPECT_FALSE(e->has_unfinished_requests());
}

TEST(StructuredEngine, GenerateLinesTakeTheServerFields) {
  const fs::path in = testing::scratch("structured_in.jsonl"), out = testing::scratch("structured_out.jsonl");
  {
    std::ofstream f(in);
    f << R"({"id": "choice", "prompt": "Q:", "max_tokens": 20, "temperature": 1, "seed": 3, "guided_choice": ["left", "right"]})"
      << "\n"
      << R"({"id": "bad", "prompt": "Q:", "max_tokens": 20, "guided_json": {"type": "integer", "minimum": 1}})" << "\n"
      << R"({"id": "regex", "prompt": "Q:", "max_tokens": 40, "structured_outputs": {"regex": "[0-9]{4}"}})" << "\n"
      << R"({"id": "json", "prompt": "Q:", "max_tokens": 60, "temperature": 1, "seed": 5, )"
         R"("response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", )"
         R"("properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}}})"
      << "\n";
  }
  const std::string cmd = std::string(QUIVER_BINARY) + " generate --model " + kModel.string() + " --input " + in.string() +
                          " --output " + out.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::map<std::string, nlohmann::json> got;
  std::ifstream f(out);
  for (std::string line; std::getline(f, line);) {
    auto j = nlohmann::json::parse(line);
    got[j["id"]] = j;
  }
  ASSERT_EQ(got.size(), 4u);
  EXPECT_TRUE(got["choice"]["text"] == "left" || got["choice"]["text"] == "right") << got["choice"];
  EXPECT_NE(got["bad"]["error"]["message"].get<std::string>().find("'minimum' is not supported"), std::string::npos);
  EXPECT_TRUE(std::regex_match(got["regex"]["text"].get<std::string>(), std::regex("[0-9]{4}"))) << got["regex"];
  auto v = nlohmann::json::parse(got["json"]["text"].get<std::string>(), nullptr, false);
  ASSERT_TRUE(v.is_object()) << got["json"];
  EXPECT_TRUE(v["ok"].is_boolean()) << got["json"];
  fs::remove(in);
  fs::remove(out);
}

}  // namespace
}  // namespace quiver
