// link: qv_lora qv_io qv_backend
// Adapter tokenizers through the AdapterRegistry: which tokenizer each folder layout gives,
// what is refused at registration (and leaves the name unregistered), and that the tokenizer
// stays with the registration while the host LRU evicts and reloads the weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "e2e/scratch.h"
#include "io/model_config.h"
#include "lora/adapter_registry.h"
#include "unit/adapter_tokenizer_folders.h"

namespace quiver {
namespace {

namespace tf = tokenizer_folders;
using nlohmann::json;

const std::string kText = "[user] hello world [/user]";

bool has_new_id(const std::vector<int32_t>& ids) {
  return std::any_of(ids.begin(), ids.end(), [](int32_t id) { return id >= 512; });
}

class AdapterTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::scratch("adapter_tokenizer_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(root_);
    base_dir_ = tf::make_base(root_);
    auto config = load_model_config(base_dir_.string());
    ASSERT_TRUE(config.is_ok()) << config.message();
    config_ = config.value();
    auto tok = Tokenizer::load(base_dir_.string());
    ASSERT_TRUE(tok.is_ok()) << tok.message();
    base_tok_ = std::move(tok).value();
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  AdapterRegistry registry(int max_cpu_loras = 4, bool with_base_tokenizer = true) {
    return AdapterRegistry(config_, 8, max_cpu_loras, VocabLimits{256, 256}, DType::kF32,
                           with_base_tokenizer ? base_tok_ : nullptr);
  }

  // Registering must fail, name the adapter and contain every one of `parts`, and leave the
  // name free.
  void expect_refused(AdapterRegistry& reg, const std::string& name, const std::filesystem::path& dir,
                      const std::vector<std::string>& parts) {
    auto r = reg.add(name, dir.string());
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.message().find("LoRA adapter '" + name + "'"), std::string::npos) << r.message();
    for (const std::string& p : parts) EXPECT_NE(r.message().find(p), std::string::npos) << r.message();
    EXPECT_FALSE(reg.find(name).is_ok());
  }

  std::filesystem::path root_, base_dir_;
  ModelConfig config_;
  std::shared_ptr<const Tokenizer> base_tok_;
};

// Checks the adapter tokenizer of llama_vocab's new tokens: the text of the new ids, and text
// holding them encodes to them where the base tokenizer has pieces.
void expect_new_tokens(const Tokenizer& tok, const Tokenizer& base) {
  auto ids = tok.encode(kText, true);
  ASSERT_TRUE(ids.is_ok()) << ids.message();
  ASSERT_GE(ids->size(), 3u);
  EXPECT_EQ((*ids)[0], 1);  // <s>
  EXPECT_EQ((*ids)[1], 512);
  EXPECT_EQ(ids->back(), 513);
  auto base_ids = base.encode(kText, true);
  ASSERT_TRUE(base_ids.is_ok());
  EXPECT_FALSE(has_new_id(*base_ids));
  EXPECT_GT(base_ids->size(), ids->size());
  for (int i = 0; i < 4; ++i) {
    const int32_t id[1] = {512 + i};
    auto text = tok.decode(id, /*skip_special_tokens=*/true);  // not special: kept
    ASSERT_TRUE(text.is_ok()) << text.message();
    EXPECT_EQ(text.value(), tf::kNewTokens[i]);
    EXPECT_FALSE(tok.is_special(512 + i));
  }
  // The space before "[/user]" went into the token's match (its normalized content is
  // "▁[/user]"), as in HF's Llama tokenizers.
  auto back = tok.decode(*ids, /*skip_special_tokens=*/true);
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(back.value(), "[user] hello world[/user]");
  EXPECT_EQ(tok.vocab_size(), 516);
  auto chat = tok.apply_chat_template(json::array({{{"role", "user"}, {"content", "hi"}}}), true);
  ASSERT_TRUE(chat.is_ok()) << chat.message();
  EXPECT_EQ(chat.value(), "[user] hi [/user] [assistant]");
}

TEST_F(AdapterTokenizerTest, FolderWithTokenizerJsonUsesIt) {
  auto dir = tf::make_adapter(root_, "own");
  tf::add_tokenizer_json(dir);
  auto reg = registry();
  auto info = reg.add("own", dir.string());
  ASSERT_TRUE(info.is_ok()) << info.message();
  ASSERT_NE(info->tokenizer, nullptr);
  EXPECT_NE(info->tokenizer, base_tok_);
  EXPECT_EQ(info->vocab_size, 516);
  expect_new_tokens(*info->tokenizer, *base_tok_);
}

// vLLM's sql-lora layout, with the flags from tokenizer_config.json's added_tokens_decoder
// and, without it, from added_tokens.json with add_tokens' defaults: both give the base
// tokenizer plus the new tokens, and the adapter's chat template.
TEST_F(AdapterTokenizerTest, FolderWithHfFilesExtendsTheBaseTokenizer) {
  for (bool with_decoder : {true, false}) {
    SCOPED_TRACE(with_decoder ? "added_tokens_decoder" : "added_tokens.json");
    const std::string name = with_decoder ? "decoder" : "names";
    auto dir = tf::make_adapter(root_, name);
    tf::add_hf_files(dir, with_decoder);
    auto reg = registry();
    auto info = reg.add(name, dir.string());
    ASSERT_TRUE(info.is_ok()) << info.message();
    ASSERT_NE(info->tokenizer, nullptr);
    EXPECT_NE(info->tokenizer, base_tok_);
    expect_new_tokens(*info->tokenizer, *base_tok_);
    EXPECT_EQ(info->tokenizer->bos_id(), std::optional<int32_t>(1));
    EXPECT_EQ(info->tokenizer->eos_id(), std::optional<int32_t>(2));
  }
}

// normalized=True (add_tokens' default) matches the new tokens in normalized text, where the
// Llama normalizer turned spaces into ▁: "[user]" right after a word still matches.
TEST_F(AdapterTokenizerTest, AddedTokensJsonTokensAreNormalized) {
  auto dir = tf::make_adapter(root_, "names");
  tf::add_hf_files(dir, /*with_decoder=*/false);
  auto reg = registry();
  auto info = reg.add("names", dir.string());
  ASSERT_TRUE(info.is_ok()) << info.message();
  const auto has_514 = [](const Tokenizer& tok, const std::string& text) {
    auto ids = tok.encode(text, false);
    return ids.is_ok() && std::find(ids->begin(), ids->end(), 514) != ids->end();
  };
  EXPECT_TRUE(has_514(*info->tokenizer, "a [assistant] b"));
  EXPECT_TRUE(has_514(*info->tokenizer, "[assistant]b"));
  // Its normalized content is "▁[assistant]": glued to a word it is not matched.
  EXPECT_FALSE(has_514(*info->tokenizer, "a[assistant]"));
  // added_tokens_decoder's flags are honored: not normalized, it is matched in the raw text.
  auto raw_dir = tf::make_adapter(root_, "raw");
  tf::add_hf_files(raw_dir, /*with_decoder=*/true);
  json raw_config = tf::read_json(raw_dir / "tokenizer_config.json");
  raw_config["added_tokens_decoder"]["514"]["normalized"] = false;
  tf::write_text(raw_dir / "tokenizer_config.json", raw_config.dump());
  auto raw = reg.add("raw", raw_dir.string());
  ASSERT_TRUE(raw.is_ok()) << raw.message();
  EXPECT_TRUE(has_514(*raw->tokenizer, "a[assistant]"));
  // A special-token field naming one of them makes it special (transformers' rule).
  auto special_dir = tf::make_adapter(root_, "special");
  tf::add_hf_files(special_dir, /*with_decoder=*/false);
  json config = tf::read_json(special_dir / "tokenizer_config.json");
  config["additional_special_tokens"] = json::array({"[assistant]"});
  tf::write_text(special_dir / "tokenizer_config.json", config.dump());
  auto special = reg.add("special", special_dir.string());
  ASSERT_TRUE(special.is_ok()) << special.message();
  EXPECT_TRUE(special->tokenizer->is_special(514));
  EXPECT_FALSE(special->tokenizer->is_special(512));
  const int32_t one[1] = {514};
  EXPECT_EQ(special->tokenizer->decode(one, /*skip_special_tokens=*/true).value(), "");
}

TEST_F(AdapterTokenizerTest, FolderWithoutTokenizerFilesUsesTheBaseTokenizer) {
  auto reg = registry();
  auto tt = reg.add("tt", tf::make_adapter(root_, "tt", "vocab_tt").string());
  ASSERT_TRUE(tt.is_ok()) << tt.message();
  EXPECT_EQ(tt->tokenizer, base_tok_);
  // Only a chat template of its own: the base tokenizer with the adapter's template.
  auto dir = tf::make_adapter(root_, "tt_chat", "vocab_tt");
  tf::add_hf_files(dir, /*with_decoder=*/false);
  auto chat = reg.add("tt_chat", dir.string());
  ASSERT_TRUE(chat.is_ok()) << chat.message();
  ASSERT_NE(chat->tokenizer, nullptr);
  EXPECT_NE(chat->tokenizer, base_tok_);
  EXPECT_EQ(chat->tokenizer->vocab_size(), base_tok_->vocab_size());
  EXPECT_EQ(chat->tokenizer->encode(kText, true).value(), base_tok_->encode(kText, true).value());
  EXPECT_EQ(chat->tokenizer->apply_chat_template(json::array({{{"role", "user"}, {"content", "x"}}}), false).value(),
            "[user] x [/user]");
}

// Without a base tokenizer: a tokenizer.json of its own still loads; added tokens have
// nothing to extend, so the adapter takes token ids as the base model does.
TEST_F(AdapterTokenizerTest, BaseWithoutTokenizer) {
  auto reg = registry(4, /*with_base_tokenizer=*/false);
  auto own_dir = tf::make_adapter(root_, "own");
  tf::add_tokenizer_json(own_dir);
  auto own = reg.add("own", own_dir.string());
  ASSERT_TRUE(own.is_ok()) << own.message();
  ASSERT_NE(own->tokenizer, nullptr);
  EXPECT_EQ(own->tokenizer->encode("[user]", false).value(), std::vector<int32_t>{512});
  auto hf_dir = tf::make_adapter(root_, "hf");
  tf::add_hf_files(hf_dir, true);
  auto hf = reg.add("hf", hf_dir.string());
  ASSERT_TRUE(hf.is_ok()) << hf.message();
  EXPECT_EQ(hf->tokenizer, nullptr);
}

TEST_F(AdapterTokenizerTest, TokenizerJsonThatDoesNotParseIsRefused) {
  auto dir = tf::make_adapter(root_, "bad");
  tf::add_tokenizer_json(dir);
  tf::write_text(dir / "tokenizer.json", "{\"model\": ");
  auto reg = registry();
  expect_refused(reg, "bad", dir, {"tokenizer.json", "not valid JSON"});
}

TEST_F(AdapterTokenizerTest, TokenizerWithIdsPastTheAdaptersVocabularyIsRefused) {
  auto dir = tf::make_adapter(root_, "big");
  json tok = tf::read_json(tf::kTokenizer512 / "tokenizer.json");
  for (const json& a : tf::new_token_entries()) tok["added_tokens"].push_back(a);
  tok["added_tokens"].push_back({{"id", 516}, {"content", "[extra]"}, {"special", false}});
  tf::add_tokenizer_json(dir, &tok);
  auto reg = registry();
  expect_refused(reg, "big", dir, {"tokenizer.json", "ids up to 516", "ends at id 515"});
  // Another model's tokenizer altogether.
  auto gpt2 = tf::make_adapter(root_, "gpt2");
  std::filesystem::copy_file(tf::kRoot / "tests/fixtures/tokenizers/gpt2/tokenizer.json", gpt2 / "tokenizer.json");
  expect_refused(reg, "gpt2", gpt2, {"tokenizer.json", "ids up to 50256"});
}

TEST_F(AdapterTokenizerTest, TokenizerJsonThatDisagreesWithAddedTokensJsonIsRefused) {
  auto reg = registry();
  // Without the new tokens.
  auto plain = tf::make_adapter(root_, "plain");
  json tok = tf::read_json(tf::kTokenizer512 / "tokenizer.json");
  tf::add_tokenizer_json(plain, &tok);
  expect_refused(reg, "plain", plain, {"tokenizer.json", "'[user]' id 512", "does not have it"});
  // With two of them swapped.
  auto swapped = tf::make_adapter(root_, "swapped");
  json added = tf::new_token_entries();
  std::swap(added[0]["content"], added[1]["content"]);
  for (const json& a : added) tok["added_tokens"].push_back(a);
  tf::add_tokenizer_json(swapped, &tok);
  expect_refused(reg, "swapped", swapped, {"tokenizer.json", "'[user]' id 512", "gives it id 513"});
}

TEST_F(AdapterTokenizerTest, HfFilesThatDisagreeAreRefused) {
  auto reg = registry();
  // An HF-layout folder whose tokenizer_config.json's added_tokens_decoder `edit` changes.
  const auto hf_folder = [&](const std::string& name, const std::function<void(json&)>& edit) {
    auto dir = tf::make_adapter(root_, name);
    tf::add_hf_files(dir, true);
    json config = tf::read_json(dir / "tokenizer_config.json");
    edit(config["added_tokens_decoder"]);
    tf::write_text(dir / "tokenizer_config.json", config.dump());
    return dir;
  };
  // A gap: ids must continue the base tokenizer's.
  auto gap = hf_folder("gap", [](json& d) {
    d["517"] = d["515"];
    d.erase("515");
  });
  expect_refused(reg, "gap", gap, {"tokenizer_config.json", "'[/assistant]' has id 517", "next id", "515"});
  // Names other than added_tokens.json's.
  auto renamed = hf_folder("renamed", [](json& d) { d["512"]["content"] = "[usr]"; });
  expect_refused(reg, "renamed", renamed, {"tokenizer_config.json", "'[user]' id 512", "does not have it"});
  // A base id under another name.
  auto base_id = hf_folder("base_id", [](json& d) { d["1"]["content"] = "<bos>"; });
  expect_refused(reg, "base_id", base_id, {"tokenizer_config.json", "'<bos>' has id 1", "'<s>'"});
  // added_tokens.json is the vocabulary's too: a name it gives an id the weights lack.
  auto wrong = tf::make_adapter(root_, "wrong");
  tf::add_hf_files(wrong, true);
  std::filesystem::remove(wrong / "added_tokens.json");
  tf::write_text(wrong / "added_tokens.json", R"({"[user]": 512, "[/user]": 514})");
  auto r = reg.add("wrong", wrong.string());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("added_tokens.json"), std::string::npos) << r.message();
  EXPECT_FALSE(reg.find("wrong").is_ok());
}

// max_cpu_loras 1 with two adapters: the weights of one are evicted and read again, its
// tokenizer is not (its tokenizer.json is broken on disk meanwhile, and the object is the
// same); registering the name again reads the files again.
TEST_F(AdapterTokenizerTest, EvictionKeepsTheTokenizerAndReRegistrationReloadsIt) {
  auto a_dir = tf::make_adapter(root_, "a");
  tf::add_tokenizer_json(a_dir);
  auto b_dir = tf::make_adapter(root_, "b");
  tf::add_hf_files(b_dir, true);
  auto reg = registry(/*max_cpu_loras=*/1);
  auto a = reg.add("a", a_dir.string());
  ASSERT_TRUE(a.is_ok()) << a.message();
  const Tokenizer* a_tok = a->tokenizer.get();
  auto b = reg.add("b", b_dir.string());
  ASSERT_TRUE(b.is_ok()) << b.message();
  EXPECT_EQ(reg.num_cached(), 1);
  EXPECT_EQ(reg.loads(), 2);

  tf::write_text(a_dir / "tokenizer.json", "broken");
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(reg.get(a->uid).is_ok());
    ASSERT_TRUE(reg.get(b->uid).is_ok());
  }
  EXPECT_EQ(reg.loads(), 6);  // each weights reload read the folder again
  auto found = reg.find("a");
  ASSERT_TRUE(found.is_ok());
  EXPECT_EQ(found->tokenizer.get(), a_tok);
  EXPECT_EQ(found->tokenizer->encode("[user]", false).value(), std::vector<int32_t>{512});

  ASSERT_TRUE(reg.remove("a").is_ok());
  expect_refused(reg, "a", a_dir, {"tokenizer.json", "not valid JSON"});
  tf::add_tokenizer_json(a_dir);
  auto again = reg.add("a", a_dir.string());
  ASSERT_TRUE(again.is_ok()) << again.message();
  EXPECT_NE(again->tokenizer.get(), nullptr);
  EXPECT_NE(again->tokenizer, found->tokenizer);
}

// A runtime adapter (allow-list given) may not read tokenizer files from outside it.
TEST_F(AdapterTokenizerTest, TokenizerFilesOutsideTheAllowListAreRefused) {
  auto allowed = root_ / "allowed";
  auto dir = tf::make_adapter(allowed, "a");
  // make_adapter links the weights from the fixtures: copy them in instead.
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const auto target = std::filesystem::read_symlink(e.path());
    std::filesystem::remove(e.path());
    std::filesystem::copy_file(target, e.path());
  }
  tf::write_text(root_ / "outside.json", tf::read_json(tf::kTokenizer512 / "tokenizer_config.json").dump());
  std::filesystem::create_symlink(root_ / "outside.json", dir / "tokenizer_config.json");
  auto reg = registry();
  auto r = reg.add("a", dir.string(), {allowed.string()});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("tokenizer_config.json"), std::string::npos) << r.message();
  std::filesystem::remove(dir / "tokenizer_config.json");
  tf::add_hf_files(dir, true);
  EXPECT_TRUE(reg.add("a", dir.string(), {allowed.string()}).is_ok());
}

}  // namespace
}  // namespace quiver
