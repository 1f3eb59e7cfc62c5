// link: qv_core
// `quiver bench` end to end on a tiny fixture model: the JSON record must count the work
// exactly (tokens and steps per phase, bytes a decode step reads: weights without the
// input embedding, one adapter slice per distinct adapter, K/V of every context position),
// run adapter groups one after another when asked, measure every request online, and
// refuse bad flags with exit code 2. Nothing here depends on how fast the machine is.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// tests/fixtures/llama_gqa: hidden 64, 8 heads of 8, 2 KV heads, intermediate 176,
// 3 layers, vocab 512, float32, untied.
constexpr double kWeightBytesRead = 661248;    // all weights (794 KB) minus the 512 x 64 embedding
constexpr double kAdapterBytes = 1136 * 16 * 4 * 3;  // sum of in+out over 7 targets, rank 16, f32, 3 layers
constexpr double kKvBytesPerPosition = 2 * 3 * 2 * 8 * 4;  // K and V, 3 layers, 2 heads of 8, f32

class BenchCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("quiver_bench_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `quiver bench` on the fixture with `flags`; returns the exit code.
  int run(const std::string& flags, const std::string& json_name = "") {
    std::string cmd = std::string(QUIVER_BINARY) + " bench --model " + QUIVER_SOURCE_DIR +
                      "/tests/fixtures/llama_gqa --threads 1 --warmup-steps 1 " + flags;
    if (!json_name.empty()) cmd += " --json-output " + (dir_ / json_name).string();
    cmd += " > " + (dir_ / "stdout.txt").string() + " 2> " + (dir_ / "stderr.txt").string();
    const int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  }
  json read(const std::string& name) {
    std::ifstream in(dir_ / name);
    return json::parse(in);
  }
  std::string stderr_text() {
    std::ifstream in(dir_ / "stderr.txt");
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  fs::path dir_;
};

TEST_F(BenchCommand, OfflineCountsTokensStepsAndBytes) {
  ASSERT_EQ(run("--batch-size 3 --input-len 8 --output-len 5 --num-iters 2 --num-adapters 3 --compare base", "r.json"),
            0)
      << stderr_text();
  json r = read("r.json");
  ASSERT_EQ(r["iterations"].size(), 2u);
  ASSERT_EQ(r["compare_iterations"].size(), 2u);
  for (const json& it : r["iterations"]) {
    EXPECT_EQ(it["prefill"]["tokens"], 24);  // one prefill step for the whole batch
    EXPECT_EQ(it["prefill"]["steps"], 1);
    EXPECT_EQ(it["decode"]["steps"], 4);     // the first token comes from prefill
    EXPECT_EQ(it["decode"]["tokens"], 12);
    EXPECT_EQ(it["end_to_end"]["output_tokens"], 15);
    EXPECT_DOUBLE_EQ(it["decode"]["weight_bytes_per_step"].get<double>(), kWeightBytesRead);
    // Three requests on three adapters: three slices every decode step.
    EXPECT_DOUBLE_EQ(it["decode"]["adapter_bytes_per_step"].get<double>(), 3 * kAdapterBytes);
    // Contexts 9, 10, 11, 12 over the four decode steps, three sequences each.
    EXPECT_DOUBLE_EQ(it["decode"]["kv_bytes_per_step"].get<double>(), 3 * 10.5 * kKvBytesPerPosition);
    EXPECT_GT(it["decode"]["achieved_gb_per_s"].get<double>(), 0);
  }
  for (const json& it : r["compare_iterations"]) {
    EXPECT_DOUBLE_EQ(it["decode"]["adapter_bytes_per_step"].get<double>(), 0);  // the base model
    EXPECT_EQ(it["decode"]["tokens"], 12);
  }
  EXPECT_EQ(r["ratio_main_over_compare"]["decode_tokens_per_s"]["per_iteration"].size(), 2u);
  // The floor of the step-time ratio: the adapters' bytes over the base model's per step.
  const double base_bytes = kWeightBytesRead + 3 * 10.5 * kKvBytesPerPosition;
  EXPECT_NEAR(r["ratio_main_over_compare"]["decode_bytes_per_step"]["median"].get<double>(),
              (base_bytes + 3 * kAdapterBytes) / base_bytes, 1e-9);
  EXPECT_EQ(r["options"]["max_loras"], 3);  // min(adapters, batch) when not given
  const json& m = r["machine"];
  EXPECT_EQ(m["date_utc"].get<std::string>().size(), 20u);  // 2026-01-01T00:00:00Z
  EXPECT_FALSE(m["git_commit"].get<std::string>().empty());
  EXPECT_FALSE(m["cpu"].get<std::string>().empty());
  EXPECT_NE(m["command_line"].get<std::string>().find("--compare base"), std::string::npos);
}

TEST_F(BenchCommand, SequentialAdaptersRunGroupsOneAfterAnother) {
  ASSERT_EQ(run("--batch-size 4 --input-len 6 --output-len 3 --num-adapters 2 --sequential-adapters", "s.json"), 0)
      << stderr_text();
  const json it = read("s.json")["iterations"][0];
  EXPECT_EQ(it["prefill"]["steps"], 2);  // one per adapter group
  EXPECT_EQ(it["prefill"]["tokens"], 24);
  EXPECT_EQ(it["decode"]["steps"], 4);   // two groups of two requests, two decode steps each
  EXPECT_EQ(it["decode"]["tokens"], 8);
  EXPECT_DOUBLE_EQ(it["decode"]["adapter_bytes_per_step"].get<double>(), kAdapterBytes);
}

TEST_F(BenchCommand, LoraFractionLeavesTheRestOnTheBaseModel) {
  ASSERT_EQ(run("--batch-size 4 --input-len 6 --output-len 3 --num-adapters 2 --lora-fraction 0.5", "f.json"), 0)
      << stderr_text();
  // Requests 1 and 3 carry adapters 0 and 1: two slices a step.
  EXPECT_DOUBLE_EQ(read("f.json")["iterations"][0]["decode"]["adapter_bytes_per_step"].get<double>(),
                   2 * kAdapterBytes);
}

TEST_F(BenchCommand, OnlineMeasuresEveryRequestAndToken) {
  ASSERT_EQ(run("--num-requests 5 --request-rate 200 --input-len 6 --output-len 4 --num-adapters 2", "o.json"), 0)
      << stderr_text();
  const json o = read("o.json")["online"];
  EXPECT_EQ(o["num_requests"], 5);
  EXPECT_EQ(o["output_tokens"], 20);
  EXPECT_EQ(o["ttft_ms"]["count"], 5);
  EXPECT_EQ(o["e2e_ms"]["count"], 5);
  EXPECT_EQ(o["itl_ms"]["count"], 15);  // tokens after the first
  EXPECT_GT(o["duration_s"].get<double>(), 0);
  EXPECT_LE(o["ttft_ms"]["p50"].get<double>(), o["e2e_ms"]["p50"].get<double>());
}

TEST_F(BenchCommand, BadFlagsExitWithTwo) {
  EXPECT_EQ(run("--batch-size 0"), 2);
  EXPECT_NE(stderr_text().find("--batch-size must be at least 1"), std::string::npos);
  EXPECT_EQ(run("--num-requests 3 --request-rate fast"), 2);
  EXPECT_NE(stderr_text().find("--request-rate"), std::string::npos);
  EXPECT_EQ(run("--compare base"), 2);
  EXPECT_EQ(run("--lora-fraction 1.5"), 2);
}

}  // namespace
