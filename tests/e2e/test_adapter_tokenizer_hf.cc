// link: qv_engine
// Adapter tokenizers against Hugging Face's (tests/fixtures/<model>/tokenize_expected.jsonl,
// made by tools/make_vocab_fixtures.py): the engine's tokenizer for each request's adapter
// encodes, decodes and renders chats as HF's AutoTokenizer of the adapter folder does, for
// an adapter with its own tokenizer.json (vocab_mts) and one laid out like vLLM's sql-lora
// adapter, tokenizer_config.json and added_tokens.json over the base's tokenizer.json
// (vocab_added).
#include <gtest/gtest.h>

#include <filesystem>

#include "e2e/jsonl.h"
#include "engine/llm_engine.h"
#include "tokenizer/tokenizer.h"

namespace quiver {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path fixture(const std::string& model) { return fs::path(QUIVER_SOURCE_DIR) / "tests/fixtures" / model; }

class AdapterTokenizerHf : public ::testing::TestWithParam<std::string> {};

TEST_P(AdapterTokenizerHf, EncodesDecodesAndRendersAsHf) {
  const fs::path dir = fixture(GetParam());
  EngineArgs args;
  args.model = dir.string();
  args.device = "cpu";
  args.enable_lora = true;
  args.max_lora_rank = 8;
  args.num_kv_blocks = 64;
  for (const std::string name : {"vocab_added", "vocab_mts"})
    args.lora_modules.emplace_back(name, (dir / "adapters" / name).string());
  auto engine = LLMEngine::create(args);
  ASSERT_TRUE(engine.is_ok()) << engine.message();
  int checked = 0;
  for (const json& row : testing::read_jsonl(dir / "tokenize_expected.jsonl")) {
    std::optional<LoRARequest> lora;
    if (!row["lora"].is_null()) lora = LoRARequest{row["lora"].get<std::string>(), 0, ""};
    auto tok = engine.value()->tokenizer_for(lora);
    ASSERT_TRUE(tok.is_ok() && tok.value()) << tok.message();
    const Tokenizer& t = *tok.value();
    const std::string who = row["lora"].is_null() ? "base" : row["lora"].get<std::string>();
    const auto ids = row["ids"].get<std::vector<int32_t>>();
    if (row.contains("messages")) {
      auto rendered = t.apply_chat_template(row["messages"], true);
      ASSERT_TRUE(rendered.is_ok()) << who << ": " << rendered.message();
      EXPECT_EQ(rendered.value(), row["rendered"].get<std::string>()) << who;
      EXPECT_EQ(t.encode(rendered.value(), false).value(), ids) << who << ": " << rendered.value();
    } else {
      const std::string text = row["text"];
      EXPECT_EQ(t.encode(text, true).value(), ids) << who << ": " << text;
      EXPECT_EQ(t.encode(text, false).value(), row["ids_no_special"].get<std::vector<int32_t>>()) << who << ": " << text;
      EXPECT_EQ(t.decode(ids, true).value(), row["decoded"].get<std::string>()) << who << ": " << text;
      EXPECT_EQ(t.decode(ids, false).value(), row["decoded_all"].get<std::string>()) << who << ": " << text;
    }
    ++checked;
  }
  EXPECT_GE(checked, 20);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, AdapterTokenizerHf, ::testing::Values("llama_vocab", "qwen2_vocab"));

}  // namespace
}  // namespace quiver
