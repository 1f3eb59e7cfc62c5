// link: qv_core
// `quiver generate` with bad requests mixed into good ones: each bad line gets an error
// line naming what is wrong, in input order, and every good request still runs.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "e2e/overflow_adapter.h"
#include "e2e/scratch.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using quiver::testing::scratch;

const fs::path kModel = fs::path(QUIVER_SOURCE_DIR) / "tests/fixtures/llama_gqa";

std::vector<json> generate(const std::vector<std::string>& lines, const std::string& extra = "") {
  const fs::path in = scratch("errors_in.jsonl");
  const fs::path out = scratch("errors_out.jsonl");
  {
    std::ofstream f(in);
    for (const auto& l : lines) f << l << "\n";
  }
  const std::string cmd = std::string(QUIVER_BINARY) + " generate --model " + kModel.string() + " --lora r8=" +
                          (kModel / "adapters/r8_all").string() + " --input " + in.string() + " --output " +
                          out.string() + " " + extra;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<json> res;
  std::ifstream f(out);
  for (std::string l; std::getline(f, l);) res.push_back(json::parse(l));
  return res;
}

std::string error_of(const json& j) { return j.contains("error") ? j["error"]["message"].get<std::string>() : ""; }

TEST(GenerateErrors, BadLinesGetErrorsAndTheOthersRun) {
  const std::string good = R"({"id": "good", "prompt_token_ids": [1, 2, 3], "max_tokens": 4, "temperature": 0})";
  auto res = generate({
      good,
      R"({"id": "vocab", "prompt_token_ids": [1, 512], "max_tokens": 4})",
      R"({"id": "empty", "prompt_token_ids": [], "max_tokens": 4})",
      R"({"id": "zero", "prompt_token_ids": [1], "max_tokens": 0})",
      R"({"id": "neg", "prompt_token_ids": [1], "max_tokens": -3})",
      R"({"id": "broken", "prompt_token_ids": [1, )",
      R"({"id": "adapter", "prompt_token_ids": [1], "lora": "nope"})",
      R"({"id": "text", "prompt": "no tokenizer here"})",
      R"({"id": "both", "prompt": "x", "prompt_token_ids": [1]})",
      R"({"id": "temp", "prompt_token_ids": [1], "temperature": -1})",
      R"({"id": "topp", "prompt_token_ids": [1], "top_p": 0})",
      R"({"id": "long", "prompt_token_ids": [1], "max_tokens": 100000})",
      R"({"id": "type", "prompt_token_ids": [1], "max_tokens": "ten"})",
      R"({"id": "lora", "prompt_token_ids": [4, 5, 6], "lora": "r8", "max_tokens": 4, "temperature": 0})",
      R"({"id": "good", "prompt_token_ids": [1], "max_tokens": 2})",
      R"({"id": "bias_vocab", "prompt_token_ids": [1], "logit_bias": {"512": 1}})",
      R"({"id": "bias", "prompt_token_ids": [1], "max_tokens": 3, "temperature": 0, "logit_bias": {"77": 100}})",
  });
  ASSERT_EQ(res.size(), 17u);
  EXPECT_NE(error_of(res[15]).find("logit_bias"), std::string::npos) << res[15].dump();
  EXPECT_EQ(res[16]["token_ids"], json::array({77, 77, 77})) << res[16].dump();
  EXPECT_EQ(res[0]["id"], "good");
  EXPECT_EQ(res[0]["token_ids"].size(), 4u);
  EXPECT_NE(error_of(res[1]).find("512"), std::string::npos) << error_of(res[1]);
  EXPECT_NE(error_of(res[1]).find("vocabulary"), std::string::npos);
  EXPECT_NE(error_of(res[2]).find("empty"), std::string::npos) << error_of(res[2]);
  EXPECT_NE(error_of(res[3]).find("max_tokens"), std::string::npos) << error_of(res[3]);
  EXPECT_NE(error_of(res[4]).find("max_tokens"), std::string::npos);
  EXPECT_NE(error_of(res[5]).find("not valid JSON"), std::string::npos) << error_of(res[5]);
  EXPECT_NE(error_of(res[6]).find("nope"), std::string::npos) << error_of(res[6]);
  EXPECT_NE(error_of(res[7]).find("tokenizer"), std::string::npos) << error_of(res[7]);
  EXPECT_NE(error_of(res[8]).find("exactly one"), std::string::npos) << error_of(res[8]);
  EXPECT_NE(error_of(res[9]).find("temperature"), std::string::npos);
  EXPECT_NE(error_of(res[10]).find("top_p"), std::string::npos);
  EXPECT_NE(error_of(res[11]).find("context length"), std::string::npos) << error_of(res[11]);
  EXPECT_NE(error_of(res[12]).find("max_tokens"), std::string::npos) << error_of(res[12]);
  EXPECT_EQ(res[13]["token_ids"].size(), 4u) << res[13].dump();
  EXPECT_NE(error_of(res[14]).find("duplicate"), std::string::npos) << res[14].dump();
}

// Unknown keys and unsupported SamplingParams fields are errors on their line, carrying
// the line's own id (not its line number); the no-op value of one is accepted.
TEST(GenerateErrors, UnknownAndUnsupportedFieldsNameTheKeyAndTheId) {
  auto res = generate({
      R"({"id": "typo", "prompt_token_ids": [1, 2], "max_token": 3})",
      R"({"id": "proc", "prompt_token_ids": [1, 2], "logits_processors": ["f"]})",
      R"({"id": "lr", "prompt_token_ids": [1, 2], "lora_request": {"name": "r8"}})",
      R"({"id": 7, "prompt_token_ids": [1, 2], "detokenize": false})",
      R"({"id": "noop", "prompt_token_ids": [1, 2], "max_tokens": 2, "detokenize": true, "use_beam_search": false})",
  });
  ASSERT_EQ(res.size(), 5u);
  EXPECT_EQ(res[0]["id"], "typo");
  EXPECT_NE(error_of(res[0]).find("unknown field 'max_token'"), std::string::npos) << res[0].dump();
  EXPECT_EQ(res[1]["id"], "proc");
  EXPECT_NE(error_of(res[1]).find("'logits_processors' is not supported"), std::string::npos) << res[1].dump();
  EXPECT_NE(error_of(res[2]).find("\"lora\""), std::string::npos) << res[2].dump();
  EXPECT_EQ(res[3]["id"], "7");
  EXPECT_NE(error_of(res[3]).find("detokenize"), std::string::npos) << res[3].dump();
  EXPECT_EQ(res[4]["token_ids"].size(), 2u) << res[4].dump();
}

// vLLM's per-request controls on a line: truncate_prompt_tokens, allowed_token_ids,
// cache_salt, use_beam_search; priority needs --scheduling-policy priority; bad values
// are the line's error.
TEST(GenerateErrors, RequestControlsOnALine) {
  auto res = generate({
      R"({"id": "trunc", "prompt_token_ids": [1, 2, 3], "max_tokens": 2, "truncate_prompt_tokens": 1, "cache_salt": "s"})",
      R"({"id": "allowed", "prompt_token_ids": [1, 2], "max_tokens": 3, "allowed_token_ids": [7], "ignore_eos": true})",
      R"({"id": "prio", "prompt_token_ids": [1, 2], "priority": 2})",
      R"({"id": "empty", "prompt_token_ids": [1, 2], "allowed_token_ids": []})",
      R"({"id": "cut0", "prompt_token_ids": [1, 2], "truncate_prompt_tokens": 0})",
      R"({"id": "beam", "prompt_token_ids": [1, 2], "max_tokens": 3, "n": 2, "use_beam_search": true})",
      R"({"id": "beamstop", "prompt_token_ids": [1, 2], "n": 2, "use_beam_search": true, "stop_token_ids": [5]})",
  });
  ASSERT_EQ(res.size(), 7u);
  EXPECT_EQ(res[0]["token_ids"].size(), 2u) << res[0].dump();
  EXPECT_EQ(res[1]["token_ids"], (std::vector<int>{7, 7, 7})) << res[1].dump();
  EXPECT_NE(error_of(res[2]).find("--scheduling-policy priority"), std::string::npos) << res[2].dump();
  EXPECT_NE(error_of(res[3]).find("allowed_token_ids"), std::string::npos) << res[3].dump();
  EXPECT_NE(error_of(res[4]).find("truncate_prompt_tokens"), std::string::npos) << res[4].dump();
  ASSERT_EQ(res[5]["outputs"].size(), 2u) << res[5].dump();  // two beams, best first
  EXPECT_EQ(res[5]["outputs"][0]["token_ids"].size(), 3u) << res[5].dump();
  EXPECT_NE(error_of(res[6]).find("stop_token_ids"), std::string::npos) << res[6].dump();
}

TEST(GenerateErrors, IntegersDoNotWrap) {
  // Each value is 2^32 + a small number: read as a 32-bit int it became that small number.
  auto res = generate({
      R"({"id": "max", "prompt_token_ids": [1], "max_tokens": 4294967297})",
      R"({"id": "n", "prompt_token_ids": [1], "max_tokens": 1, "n": 4294967298})",
      R"({"id": "lp", "prompt_token_ids": [1], "max_tokens": 1, "logprobs": 4294967297})",
      R"({"id": "stop", "prompt_token_ids": [1], "max_tokens": 1, "stop_token_ids": [4294967296]})",
      R"({"id": "bign", "prompt_token_ids": [1], "max_tokens": 1, "n": 100000000})",
      R"({"id": "seed", "prompt_token_ids": [1], "max_tokens": 1, "seed": -1})",
      R"({"id": "ok", "prompt_token_ids": [1], "max_tokens": 2})",
  });
  ASSERT_EQ(res.size(), 7u);
  EXPECT_NE(error_of(res[0]).find("max_tokens"), std::string::npos) << res[0].dump();
  EXPECT_NE(error_of(res[1]).find("'n'"), std::string::npos) << res[1].dump();
  EXPECT_NE(error_of(res[2]).find("logprobs"), std::string::npos) << res[2].dump();
  EXPECT_NE(error_of(res[3]).find("stop_token_ids"), std::string::npos) << res[3].dump();
  EXPECT_NE(error_of(res[4]).find("n must be at most"), std::string::npos) << res[4].dump();
  EXPECT_NE(error_of(res[5]).find("seed"), std::string::npos) << res[5].dump();
  EXPECT_EQ(res[6]["token_ids"].size(), 2u) << res[6].dump();
}

TEST(GenerateErrors, ModelLoadFailuresExitWithAMessage) {
  const fs::path in = scratch("errors_in2.jsonl");
  std::ofstream(in) << R"({"prompt_token_ids": [1]})" << "\n";
  const std::string base = std::string(QUIVER_BINARY) + " generate --input " + in.string() + " --output /dev/null ";
  EXPECT_NE(std::system((base + "--model /nonexistent 2>/dev/null").c_str()), 0);
  // An adapter made for another model is refused at start-up with a message.
  const std::string other = (fs::path(QUIVER_SOURCE_DIR) / "tests/fixtures/mistral/adapters/all_r4").string();
  const fs::path err = scratch("errors_stderr.txt");
  EXPECT_NE(std::system((base + "--model " + kModel.string() + " --lora x=" + other + " 2>" + err.string()).c_str()), 0);
  std::ifstream e(err);
  std::string msg((std::istreambuf_iterator<char>(e)), {});
  EXPECT_NE(msg.find("another model"), std::string::npos) << msg;
}

// Files next to the model that disagree with it stop start-up: a tokenizer whose ids do
// not match the model's vocabulary (its text would silently lose tokens).
TEST(GenerateErrors, TokenizerForAnotherModelIsRefused) {
  const fs::path dir = scratch("other_tokenizer_model");
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(kModel))
    if (e.is_regular_file()) fs::create_symlink(e.path(), dir / e.path().filename());
  fs::copy_file(fs::path(QUIVER_SOURCE_DIR) / "tests/fixtures/tokenizers/gpt2/tokenizer.json", dir / "tokenizer.json");
  const fs::path in = scratch("errors_in3.jsonl");
  std::ofstream(in) << R"({"prompt_token_ids": [1]})" << "\n";
  const fs::path err = scratch("errors_stderr3.txt");
  const std::string cmd = std::string(QUIVER_BINARY) + " generate --model " + dir.string() + " --input " + in.string() +
                          " --output /dev/null 2>" + err.string();
  EXPECT_NE(std::system(cmd.c_str()), 0);
  std::ifstream e(err);
  std::string msg((std::istreambuf_iterator<char>(e)), {});
  EXPECT_NE(msg.find("tokenizer made for another model"), std::string::npos) << msg;
  fs::remove_all(dir);
}

// An adapter whose weights are finite but overflow the activations: its requests end with
// an error naming it (instead of token 0 for ever), the base-model requests beside them
// in the same batch finish normally.
TEST(GenerateErrors, NonFiniteLogitsEndThatRequestOnly) {
  const fs::path dir = scratch("overflow_adapter");
  ASSERT_TRUE(quiver::testing::write_overflowing_adapter(kModel / "adapters/r8_all", dir));
  auto res = generate({R"({"id": "base", "prompt_token_ids": [1, 2, 3], "max_tokens": 3, "temperature": 0})",
                       R"({"id": "bad", "prompt_token_ids": [1, 2, 3], "lora": "big", "max_tokens": 3})",
                       R"({"id": "base2", "prompt_token_ids": [4, 5], "max_tokens": 2, "logprobs": 1})"},
                      "--max-loras 2 --lora big=" + dir.string());
  ASSERT_EQ(res.size(), 3u);
  EXPECT_EQ(res[0]["token_ids"].size(), 3u) << res[0].dump();
  EXPECT_NE(error_of(res[1]).find("non-finite logit"), std::string::npos) << res[1].dump();
  EXPECT_NE(error_of(res[1]).find("'big'"), std::string::npos) << res[1].dump();
  EXPECT_EQ(res[2]["token_ids"].size(), 2u) << res[2].dump();
  fs::remove_all(dir);
}

// vLLM's JSON form of an adapter spec gives the same outputs as NAME=DIR; malformed specs
// stop start-up with a message naming what is wrong.
TEST(GenerateErrors, AdapterSpecsInVllmJsonForm) {
  const fs::path in = scratch("lora_json_in.jsonl");
  std::ofstream(in) << R"({"id": "a", "prompt_token_ids": [4, 5, 6], "lora": "r8", "max_tokens": 4, "temperature": 0})"
                    << "\n";
  const std::string adapter = (kModel / "adapters/r8_all").string();
  const std::string base = std::string(QUIVER_BINARY) + " generate --model " + kModel.string() + " --input " +
                           in.string() + " ";
  auto run = [&](const std::string& lora, const fs::path& out) {
    const fs::path err = scratch("lora_json_err.txt");
    const int rc = std::system((base + "--lora '" + lora + "' --output " + out.string() + " 2>" + err.string()).c_str());
    std::ifstream e(err);
    return std::make_pair(rc, std::string((std::istreambuf_iterator<char>(e)), {}));
  };
  const fs::path plain = scratch("lora_plain.jsonl"), as_json = scratch("lora_json.jsonl");
  ASSERT_EQ(run("r8=" + adapter, plain).first, 0);
  // base_model_name is informational, as in vLLM (any value is accepted).
  ASSERT_EQ(run(R"({"name": "r8", "path": ")" + adapter + R"(", "base_model_name": "meta-llama/Llama-3.2-1B"})",
                as_json).first, 0);
  std::ifstream a(plain), b(as_json);
  const json ja = json::parse(a), jb = json::parse(b);
  ASSERT_TRUE(ja.contains("token_ids")) << ja.dump();
  EXPECT_EQ(ja["token_ids"], jb["token_ids"]) << ja.dump() << "\n" << jb.dump();
  EXPECT_EQ(jb["lora"], "r8");

  const std::pair<std::string, std::string> bad[] = {
      {R"({"name": "r8", "path": )", "not a JSON object"},
      {R"({"name": "r8"})", "needs non-empty"},
      {R"({"name": "r8", "path": "x", "rank": "8"})", "unknown field 'rank'"},
      {"r8", "must be NAME=DIR"},
  };
  for (const auto& [spec, message] : bad) {
    const auto [rc, err] = run(spec, scratch("lora_bad.jsonl"));
    EXPECT_NE(rc, 0) << spec;
    EXPECT_NE(err.find(message), std::string::npos) << spec << " -> " << err;
  }
}

}  // namespace
