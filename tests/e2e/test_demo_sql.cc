// link: qv_core
// The demo's promise, measured with quiver itself: the `sql` adapter answers >= 90% of
// 256 held-out text-to-SQL questions exactly (tables, columns and values unseen in
// training), the base model ~0% of the same prompts, and the seed example exactly.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "e2e/scratch.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using quiver::testing::scratch;

const fs::path kRoot = QUIVER_SOURCE_DIR;

std::map<std::string, json> run(const fs::path& input, const std::string& tag, const std::string& extra = "") {
  const fs::path out = scratch("demo_" + tag + ".jsonl");
  const std::string cmd = std::string(QUIVER_BINARY) + " generate --model " + (kRoot / "models/demo/base").string() +
                          " --lora sql=" + (kRoot / "models/demo/adapters/sql").string() +
                          " --lora pirate=" + (kRoot / "models/demo/adapters/pirate").string() +
                          " --max-loras 2 --input " + input.string() + " --output " + out.string() + " " + extra;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::map<std::string, json> by_id;
  std::ifstream in(out);
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line);
    by_id[j["id"]] = j;
  }
  return by_id;
}

std::map<std::string, std::string> expected_answers() {
  std::map<std::string, std::string> want;
  std::ifstream in(kRoot / "tests/fixtures/demo_sql_expected.jsonl");
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line);
    want[j["id"]] = j["answer"];
  }
  return want;
}

double exact_match(const std::map<std::string, json>& got, const std::map<std::string, std::string>& want) {
  int hits = 0;
  for (const auto& [id, answer] : want) {
    const json& o = got.at(id);
    EXPECT_FALSE(o.contains("error")) << id << ": " << o.dump();
    hits += o.value("text", "") == answer;
  }
  return static_cast<double>(hits) / want.size();
}

TEST(DemoSql, AdapterAnswersHeldOutQuestions) {
  const auto want = expected_answers();
  ASSERT_GE(want.size(), 200u);
  auto got = run(kRoot / "tests/fixtures/demo_sql_heldout.jsonl", "sql");
  const double em = exact_match(got, want);
  std::printf("sql adapter exact match: %.4f over %zu held-out questions\n", em, want.size());
  EXPECT_GE(em, 0.90);
  EXPECT_EQ(got.at("sql-000")["text"], " SELECT icao FROM table_name_74 WHERE airport = 'lilongwe' ");
  EXPECT_EQ(got.at("sql-000")["finish_reason"], "stop");
}

// The held-out questions on the base quantized at load (`flags`), its adapter beside it
// unquantized: the demo's promise (>= 90% exact) holds.
void expect_answers_kept(const std::string& tag, const std::string& flags) {
  const auto want = expected_answers();
  auto got = run(kRoot / "tests/fixtures/demo_sql_heldout.jsonl", tag, flags);
  const double em = exact_match(got, want);
  std::printf("sql adapter, %s: exact match %.4f over %zu held-out questions\n", flags.c_str(), em, want.size());
  EXPECT_GE(em, 0.90);
  EXPECT_EQ(got.at("sql-000")["text"], " SELECT icao FROM table_name_74 WHERE airport = 'lilongwe' ");
}

// int8 per output channel (measured: 94.9%, as unquantized).
TEST(DemoSql, Int8BaseKeepsTheAnswers) { expect_answers_kept("sql_int8", "--quantization int8"); }

// fp8 e4m3 per output channel, the weights the GPU multiplies (measured: 94.5%).
TEST(DemoSql, Fp8BaseKeepsTheAnswers) { expect_answers_kept("sql_fp8", "--quantization fp8"); }

TEST(DemoSql, BaseModelCannotDoIt) {
  const auto want = expected_answers();
  // Same prompts, no adapter.
  const fs::path base_input = scratch("demo_base_input.jsonl");
  {
    std::ifstream in(kRoot / "tests/fixtures/demo_sql_heldout.jsonl");
    std::ofstream out(base_input);
    for (std::string line; std::getline(in, line);) {
      json j = json::parse(line);
      j["lora"] = nullptr;
      out << j.dump() << "\n";
    }
  }
  const double em = exact_match(run(base_input, "base"), want);
  std::printf("base model exact match: %.4f\n", em);
  EXPECT_LE(em, 0.02);
}

}  // namespace
