// link: qv_engine
// End to end: an adapter whose weights are adapter_model.bin (torch.save format,
// tests/fixtures/torch_bin) generates exactly what its safetensors twin generates, through
// `quiver generate` on the CPU, in a batch mixed with base-model requests, and matches the
// Hugging Face + PEFT reference tokens of that adapter. A broken .bin fails the whole
// command with a message naming the file.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "e2e/jsonl.h"
#include "e2e/scratch.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using quiver::testing::read_jsonl;
using quiver::testing::scratch;

const fs::path kFixtures = fs::path(QUIVER_SOURCE_DIR) / "tests/fixtures";
const fs::path kModel = kFixtures / "llama_gqa";

// The fixture's requests for adapter r8_all and for the base model, with their references.
struct Batch {
  fs::path input;
  std::map<std::string, json> expected;  // id -> HF reference line
  int num_adapter = 0;
};

Batch make_batch() {
  Batch b;
  b.input = scratch("torch_bin_requests.jsonl");
  std::map<std::string, json> refs;
  for (auto& e : read_jsonl(kModel / "expected.jsonl")) refs[e["id"].get<std::string>()] = e;
  std::ofstream out(b.input);
  for (auto& r : read_jsonl(kModel / "requests.jsonl")) {
    if (!r["lora"].is_null() && r["lora"] != "r8_all") continue;
    b.num_adapter += !r["lora"].is_null();
    b.expected[r["id"].get<std::string>()] = refs.at(r["id"].get<std::string>());
    out << r.dump() << "\n";
  }
  return b;
}

// Runs the batch with adapter name r8_all loaded from `adapter_dir`; returns lines by id.
std::map<std::string, json> run(const Batch& b, const fs::path& adapter_dir, const std::string& tag) {
  const fs::path out = scratch("torch_bin_" + tag + ".jsonl");
  const std::string cmd = std::string(QUIVER_BINARY) + " generate --model " + kModel.string() +
                          " --lora r8_all=" + adapter_dir.string() + " --max-lora-rank 64 --device cpu --input " +
                          b.input.string() + " --output " + out.string() + " 2>/dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::map<std::string, json> by_id;
  for (auto& l : read_jsonl(out)) by_id[l["id"].get<std::string>()] = l;
  fs::remove(out);
  return by_id;
}

TEST(TorchBinAdapter, GeneratesExactlyWhatTheSafetensorsTwinGenerates) {
  const Batch b = make_batch();
  ASSERT_EQ(b.num_adapter, 3);
  ASSERT_GT(b.expected.size(), 3u);
  const auto st = run(b, kModel / "adapters/r8_all", "st");
  const auto bin = run(b, kFixtures / "torch_bin/llama_gqa_r8_all", "bin");
  ASSERT_EQ(st.size(), b.expected.size());
  ASSERT_EQ(bin.size(), b.expected.size());
  for (const auto& [id, ref] : b.expected) {
    const json& x = st.at(id);
    const json& y = bin.at(id);
    ASSERT_FALSE(y.contains("error")) << id << ": " << y.dump();
    // Same weights, same batch, same schedule: every token and logprob is bit-identical.
    EXPECT_EQ(x["token_ids"], y["token_ids"]) << id;
    EXPECT_EQ(x["logprobs"], y["logprobs"]) << id;
    EXPECT_EQ(x["prompt_logprobs"], y["prompt_logprobs"]) << id;
    // And the adapter is applied: the tokens are HF's (up to the first near-tie, after which a
    // legitimate tie-break may diverge), not the base model's (base_token_ids).
    for (size_t i = 0; i < ref["token_ids"].size() && i < y["token_ids"].size(); ++i) {
      if (ref["margins"][i].get<double>() < 1e-2) break;
      ASSERT_EQ(y["token_ids"][i], ref["token_ids"][i]) << id << " position " << i;
    }
    if (!ref["base_token_ids"].is_null()) {
      EXPECT_NE(y["token_ids"], ref["base_token_ids"]) << id;
    }
  }
}

TEST(TorchBinAdapter, BrokenBinFailsNamingTheFile) {
  const fs::path dir = scratch("torch_bin_broken");
  fs::create_directories(dir);
  fs::copy_file(kFixtures / "torch_bin/llama_gqa_r8_all/adapter_config.json", dir / "adapter_config.json",
                fs::copy_options::overwrite_existing);
  fs::copy_file(fs::path(QUIVER_SOURCE_DIR) / "tests/fuzz/torch_bin_seeds/bad_global.bin", dir / "adapter_model.bin",
                fs::copy_options::overwrite_existing);
  const fs::path err = scratch("torch_bin_broken.err");
  const Batch b = make_batch();
  const std::string cmd = std::string(QUIVER_BINARY) + " generate --model " + kModel.string() + " --lora r8_all=" +
                          dir.string() + " --max-lora-rank 64 --device cpu --input " + b.input.string() +
                          " --output " + scratch("torch_bin_broken.jsonl").string() + " 2>" + err.string();
  EXPECT_NE(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(err);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find((dir / "adapter_model.bin").string()), std::string::npos) << text;
  EXPECT_NE(text.find("global 'os.system' is not allowed"), std::string::npos) << text;
  fs::remove_all(dir);
}

}  // namespace
