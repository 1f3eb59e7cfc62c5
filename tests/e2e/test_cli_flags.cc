// link: qv_core
// The command line as a vLLM user meets it: --help shows each option's default, both
// adapter spellings (--lora, --lora-modules) work in every subcommand, and vLLM's other
// spellings run: --tokenizer, --max-logprobs, and flags for what quiver always does.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "e2e/scratch.h"

namespace {

namespace fs = std::filesystem;
using quiver::testing::scratch;

const fs::path kModel = fs::path(QUIVER_SOURCE_DIR) / "tests/fixtures/llama_gqa";

// Runs a shell command, stdout and stderr together; the exit status in *rc.
std::string run_shell(const std::string& command, int* rc) {
  const std::string cmd = command + " 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = pclose(p);
  *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

std::string run(const std::string& args, int* rc) { return run_shell(std::string(QUIVER_BINARY) + " " + args, rc); }

// Builds without cpp-httplib have no serve subcommand.
bool has_serve() {
  int rc = 0;
  return run("--help", &rc).find("serve") != std::string::npos;
}

TEST(CliFlags, HelpShowsDefaults) {
  int rc = 0;
  const std::string generate = run("generate --help", &rc);
  EXPECT_EQ(rc, 0);
  for (const char* want : {"--max-lora-rank INT=16", "--max-num-seqs INT=256", "--block-size INT=16",
                           "--device TEXT=cpu"})
    EXPECT_NE(generate.find(want), std::string::npos) << want << " in\n" << generate;
  if (!has_serve()) return;
  const std::string serve = run("serve --help", &rc);
  EXPECT_EQ(rc, 0);
  for (const char* want : {"--port INT=8000", "--host TEXT=127.0.0.1", "--shutdown-timeout FLOAT=30"})
    EXPECT_NE(serve.find(want), std::string::npos) << want << " in\n" << serve;
}

TEST(CliFlags, BothAdapterSpellingsEverywhere) {
  const fs::path in = scratch("flags_in.jsonl");
  std::ofstream(in) << R"({"id": "a", "prompt_token_ids": [4, 5, 6], "lora": "r8", "max_tokens": 3, "temperature": 0})"
                    << "\n";
  const std::string adapter = "r8=" + (kModel / "adapters/r8_all").string();
  std::string outputs[2];
  const char* spellings[2] = {"--lora", "--lora-modules"};
  for (int i = 0; i < 2; ++i) {
    const fs::path out = scratch(std::string("flags_out") + std::to_string(i) + ".jsonl");
    int rc = 0;
    const std::string log = run("generate --model " + kModel.string() + " " + spellings[i] + " " + adapter +
                                    " --input " + in.string() + " --output " + out.string(),
                                &rc);
    ASSERT_EQ(rc, 0) << spellings[i] << ": " << log;
    std::ifstream f(out);
    std::getline(f, outputs[i]);
    EXPECT_TRUE(nlohmann::json::parse(outputs[i]).contains("token_ids")) << outputs[i];
  }
  EXPECT_EQ(outputs[0], outputs[1]);
  if (!has_serve()) return;
  // serve takes --lora too: a missing adapter folder is reported as such, not as an unknown flag.
  int rc = 0;
  const std::string log = run("serve --model " + kModel.string() + " --port 0 --lora x=/nonexistent/adapter", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(log.find("/nonexistent/adapter"), std::string::npos) << log;
  EXPECT_EQ(log.find("not expected"), std::string::npos) << log;
}

// --tokenizer serves a tokenizer from another folder (this model has none of its own);
// --max-logprobs bounds what a request may ask; flags for what quiver always does (remote
// code never runs, prompts are always chunked, prefix caching is on unless refused) run,
// the one asking for what quiver does not do is refused by name.
TEST(CliFlags, VllmSpellings) {
  const fs::path in = scratch("vllm_in.jsonl");
  std::ofstream(in) << R"({"id": "t", "prompt": "hello world", "max_tokens": 3, "temperature": 0, "logprobs": 2})"
                    << "\n";
  const std::string base = "generate --model " + kModel.string() + " --input " + in.string() + " --output ";
  const std::string tokenizer = " --tokenizer " + (fs::path(QUIVER_SOURCE_DIR) / "tests/fixtures/tokenizers/llama512").string();
  auto first_line = [](const fs::path& p) {
    std::string line;
    std::ifstream f(p);
    std::getline(f, line);
    return nlohmann::json::parse(line, nullptr, false);
  };
  int rc = 0;
  const fs::path without = scratch("vllm_out_none.jsonl");
  std::string log = run(base + without.string(), &rc);
  EXPECT_TRUE(first_line(without).contains("error")) << log;  // a text prompt, and no tokenizer
  std::string texts[3];
  const char* extra[3] = {"", " --trust-remote-code --enable-chunked-prefill --enable-prefix-caching",
                          " --no-enable-prefix-caching --max-logprobs 2"};
  for (int i = 0; i < 3; ++i) {
    const fs::path out = scratch("vllm_out" + std::to_string(i) + ".jsonl");
    log = run(base + out.string() + tokenizer + extra[i], &rc);
    ASSERT_EQ(rc, 0) << extra[i] << ": " << log;
    const nlohmann::json j = first_line(out);
    ASSERT_TRUE(j.contains("token_ids")) << extra[i] << ": " << j.dump();
    EXPECT_EQ(j["token_ids"].size(), 3u);
    texts[i] = j.dump();
  }
  EXPECT_EQ(texts[0], texts[1]);
  EXPECT_EQ(texts[0], texts[2]);
  const fs::path fewer = scratch("vllm_out_fewer.jsonl");
  log = run(base + fewer.string() + tokenizer + " --max-logprobs 1", &rc);
  const nlohmann::json refused = first_line(fewer);
  ASSERT_TRUE(refused.contains("error")) << refused.dump() << log;
  EXPECT_NE(refused["error"]["message"].get<std::string>().find("max_logprobs (1)"), std::string::npos) << refused.dump();
  for (const char* bad : {" --max-logprobs 21", " --no-enable-chunked-prefill", " --tokenizer /nonexistent"}) {
    log = run(base + scratch("vllm_bad.jsonl").string() + bad, &rc);
    EXPECT_NE(rc, 0) << bad;
    const std::string flag = std::string(bad).substr(1, std::string(bad).find(' ', 1) - 1);
    EXPECT_NE(log.find(flag), std::string::npos) << bad << ": " << log;
  }
}

// Weight loading reports progress: plain lines into a pipe; a bar redrawn with '\r' on a
// terminal (a pseudo-terminal from util-linux `script`, when present).
TEST(CliFlags, WeightLoadingProgress) {
  const fs::path in = scratch("progress_in.jsonl");
  std::ofstream(in) << R"({"id": "a", "prompt_token_ids": [4, 5], "max_tokens": 1})" << "\n";
  const std::string args = "generate --model " + kModel.string() + " --input " + in.string() + " --output " +
                           scratch("progress_out.jsonl").string();
  int rc = 0;
  const std::string piped = run(args, &rc);
  ASSERT_EQ(rc, 0) << piped;
  EXPECT_NE(piped.find("loading weights: "), std::string::npos) << piped;
  EXPECT_NE(piped.find("layers (100%)"), std::string::npos) << piped;
  EXPECT_EQ(piped.find('\r'), std::string::npos) << "no carriage returns in a log";
  if (std::system("command -v script >/dev/null 2>&1") != 0) GTEST_SKIP() << "no `script` for a pseudo-terminal";
  const std::string tty = run_shell("script -qec '" + std::string(QUIVER_BINARY) + " " + args + "' /dev/null", &rc);
  EXPECT_NE(tty.find("\rloading weights ["), std::string::npos) << tty;
  EXPECT_NE(tty.find("layers,"), std::string::npos) << tty;
}

}  // namespace
