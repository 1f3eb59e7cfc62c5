// link: qv_engine
// Per-adapter tokenizers through LLMEngine, on llama_vocab's weights with a 512-id tokenizer
// (tests/unit/adapter_tokenizer_folders.h): in one engine and one batch, a text prompt with
// "[user]" is the new id for adapters whose folders bring tokenizer files (either layout) and
// base pieces for the base model and an adapter without them; generated new ids stream as
// their text and stop strings made of them stop; structured outputs see the adapter's
// vocabulary; base requests are what they are alone.
#include <gtest/gtest.h>

#include <algorithm>

#include "e2e/run_all.h"
#include "e2e/scratch.h"
#include "engine/llm_engine.h"
#include "unit/adapter_tokenizer_folders.h"

namespace quiver {
namespace {

namespace tf = tokenizer_folders;
namespace fs = std::filesystem;
using testing::run_all;

const std::string kText = "[user] hello world [/user]";
// llama_vocab's request v02 on vocab_added: HF's greedy tokens start 513 181 513 (margins
// 5.8, 0.33, 3.5), i.e. the model generates "[/user]".
const std::vector<int32_t> kNewIdPrompt = {1, 512, 402, 241, 234, 263, 513, 440, 303, 100, 514};

bool has_new_id(const std::vector<int32_t>& ids) {
  return std::any_of(ids.begin(), ids.end(), [](int32_t id) { return id >= 512; });
}

PromptInput text(const std::string& t) {
  PromptInput p;
  p.text = t;
  return p;
}

PromptInput ids(std::vector<int32_t> t) {
  PromptInput p;
  p.token_ids = std::move(t);
  return p;
}

SamplingParams greedy(int max_tokens, std::vector<std::string> stop = {}) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.stop = std::move(stop);
  return p;
}

std::optional<LoRARequest> lora(const std::string& name) { return LoRARequest{name, 0, ""}; }

class AdapterTokenizerEngine : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new fs::path(testing::scratch("adapter_tokenizer_engine"));
    fs::remove_all(*root_);
    tf::make_base(*root_);
    tf::add_tokenizer_json(tf::make_adapter(*root_, "own"));
    tf::add_hf_files(tf::make_adapter(*root_, "hf"), /*with_decoder=*/true);
    tf::make_adapter(*root_, "tt", "vocab_tt");
  }
  static void TearDownTestSuite() {
    fs::remove_all(*root_);
    delete root_;
  }

  void SetUp() override {
    EngineArgs a;
    a.model = (*root_ / "base").string();
    a.enable_lora = true;
    a.max_loras = 3;
    a.max_lora_rank = 8;
    auto e = LLMEngine::create(a);
    ASSERT_TRUE(e.is_ok()) << e.message();
    engine_ = std::move(e).value();
    for (const char* name : {"own", "hf", "tt"}) {
      auto added = engine_->add_lora(name, (*root_ / name).string());
      ASSERT_TRUE(added.is_ok()) << added.message();
    }
  }

  static fs::path* root_;
  std::unique_ptr<LLMEngine> engine_;
};

fs::path* AdapterTokenizerEngine::root_ = nullptr;

TEST_F(AdapterTokenizerEngine, EachRequestEncodesWithItsAdaptersTokenizerInOneBatch) {
  auto base_ids = engine_->tokenizer()->encode(kText, true);
  ASSERT_TRUE(base_ids.is_ok());
  ASSERT_FALSE(has_new_id(*base_ids));
  ASSERT_TRUE(engine_->add_request("base", text(kText), greedy(6)).is_ok());
  for (const char* name : {"own", "hf", "tt"}) {
    Status s = engine_->add_request(name, text(kText), greedy(6), lora(name));
    ASSERT_TRUE(s.is_ok()) << name << ": " << s.message();
  }
  engine_->step();
  EXPECT_EQ(engine_->last_step().num_seqs, 4);
  EXPECT_EQ(engine_->last_step().adapters, (std::vector<std::string>{"hf", "own", "tt"}));
  auto done = run_all(*engine_);
  ASSERT_EQ(done.size(), 4u);
  EXPECT_EQ(done["base"].prompt_token_ids, *base_ids);
  EXPECT_EQ(done["tt"].prompt_token_ids, *base_ids);
  const std::vector<int32_t>& own = done["own"].prompt_token_ids;
  ASSERT_GE(own.size(), 3u);
  EXPECT_EQ(own[1], 512);
  EXPECT_EQ(own.back(), 513);
  EXPECT_EQ(done["hf"].prompt_token_ids, own);
  EXPECT_LT(own.size(), base_ids->size());

  // The base request in that batch is what it is alone.
  ASSERT_TRUE(engine_->add_request("alone", text(kText), greedy(6)).is_ok());
  auto alone = run_all(*engine_);
  EXPECT_EQ(alone["alone"].outputs[0].token_ids, done["base"].outputs[0].token_ids);
  EXPECT_EQ(alone["alone"].outputs[0].text, done["base"].outputs[0].text);
  EXPECT_FALSE(has_new_id(done["base"].outputs[0].token_ids));
}

TEST_F(AdapterTokenizerEngine, GeneratedNewIdsStreamAsTheirTextAndStopStrings) {
  for (const char* name : {"own", "hf"}) {
    SCOPED_TRACE(name);
    const std::string id = name;
    ASSERT_TRUE(engine_->add_request(id + "-text", ids(kNewIdPrompt), greedy(3), lora(name)).is_ok());
    ASSERT_TRUE(engine_->add_request(id + "-stop", ids(kNewIdPrompt), greedy(3, {"[/user]"}), lora(name)).is_ok());
    // A base request beside them, stopping on the same string it cannot produce.
    ASSERT_TRUE(engine_->add_request(id + "-base", text(kText), greedy(3, {"[/user]"})).is_ok());
    std::map<std::string, std::string> streamed;
    std::map<std::string, RequestOutput> done;
    while (engine_->has_unfinished_requests()) {
      for (RequestOutput& o : engine_->step()) {
        streamed[o.request_id] += o.outputs.at(0).delta_text;
        if (o.finished) done[o.request_id] = o;
      }
    }
    const CompletionOutput& full = done[id + "-text"].outputs.at(0);
    ASSERT_EQ(full.token_ids.size(), 3u);
    EXPECT_EQ(full.token_ids[0], 513);
    EXPECT_EQ(full.token_ids[2], 513);
    EXPECT_EQ(streamed[id + "-text"], full.text);
    auto tok = engine_->tokenizer_for(lora(name));
    ASSERT_TRUE(tok.is_ok() && tok.value() != nullptr);
    EXPECT_EQ(full.text, tok.value()->decode(full.token_ids, true).value());
    EXPECT_EQ(full.text.substr(0, 7), "[/user]");
    EXPECT_EQ(full.text.substr(full.text.size() - 7), "[/user]");

    const CompletionOutput& stopped = done[id + "-stop"].outputs.at(0);
    EXPECT_EQ(stopped.finish_reason, "stop");
    EXPECT_EQ(stopped.stop_reason, std::optional<std::string>("[/user]"));
    EXPECT_EQ(stopped.token_ids, std::vector<int32_t>{513});
    EXPECT_EQ(stopped.text, "");
    EXPECT_EQ(streamed[id + "-stop"], "");

    EXPECT_EQ(done[id + "-base"].outputs.at(0).finish_reason, "length");
  }
}

// The structured-output vocabulary comes from the request's tokenizer: for the adapter the
// one token 513 spells "[/user]"; the base model's tokenizer has no such token.
TEST_F(AdapterTokenizerEngine, StructuredOutputsUseTheAdaptersVocabulary) {
  SamplingParams p = greedy(8);
  p.ignore_eos = false;
  p.structured_outputs.kind = StructuredOutputSpec::Kind::kChoice;
  p.structured_outputs.choice = {"[/user]", "no"};
  ASSERT_TRUE(engine_->add_request("base", text(kText), p).is_ok());
  ASSERT_TRUE(engine_->add_request("own", ids(kNewIdPrompt), p, lora("own")).is_ok());
  ASSERT_TRUE(engine_->add_request("tt", text(kText), p, lora("tt")).is_ok());
  auto done = run_all(*engine_);
  for (const char* name : {"base", "own", "tt"}) {
    SCOPED_TRACE(name);
    const CompletionOutput& c = done[name].outputs.at(0);
    EXPECT_TRUE(c.text == "[/user]" || c.text == "no") << c.text;
    EXPECT_EQ(c.finish_reason, "stop");
  }
  EXPECT_EQ(done["own"].outputs[0].token_ids.at(0), 513);
  EXPECT_FALSE(has_new_id(done["base"].outputs[0].token_ids));
  EXPECT_FALSE(has_new_id(done["tt"].outputs[0].token_ids));
}

// An adapter registered by a request's path gets its tokenizer as it registers, in time for
// that request's text; an unknown name has no tokenizer.
TEST_F(AdapterTokenizerEngine, AdapterNamedByPathTokenizesItsFirstRequest) {
  const std::string path = (*root_ / "own").string();
  ASSERT_TRUE(engine_->add_request("late", text(kText), greedy(2), LoRARequest{"late", 7, path}).is_ok());
  auto done = run_all(*engine_);
  EXPECT_EQ(done["late"].prompt_token_ids.at(1), 512);
  auto tok = engine_->tokenizer_for(LoRARequest{"late", 7, ""});
  ASSERT_TRUE(tok.is_ok());
  EXPECT_NE(tok.value(), engine_->shared_tokenizer());
  EXPECT_FALSE(engine_->tokenizer_for(LoRARequest{"nope", 8, ""}).is_ok());
}

}  // namespace
}  // namespace quiver
