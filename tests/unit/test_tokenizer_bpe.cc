// link: qv_tokenizer
// The whole encode/decode pipeline on tiny hand-built tokenizer.json documents: BPE merge
// order, byte fallback, unk fusing, ignore_merges, added-token flags, Metaspace schemes,
// BOS/EOS from tokenizer_config.json.
#include <gtest/gtest.h>

#include "unit/tokenizer_test_util.h"

namespace quiver {
namespace {

using nlohmann::json;
using testing::byte_level_json;
using testing::make_tokenizer;
using testing::sentencepiece_json;
using V = std::vector<int32_t>;

constexpr int32_t kSp = 259, kA = 260, kB = 261, kSpA = 262, kAB = 263, kSpAB = 264, kSpB = 265;
int32_t byte_id(unsigned char b) { return 3 + b; }

json sp_doc() {
  return sentencepiece_json({"\u2581", "a", "b", "\u2581a", "ab", "\u2581ab", "\u2581b"},
                            {"\u2581 a", "a b", "\u2581a b", "\u2581 b"});
}

V encode(const Tokenizer& t, const std::string& text, bool special = false) {
  auto r = t.encode(text, special);
  EXPECT_TRUE(r.is_ok()) << r.message();
  return r.is_ok() ? r.value() : V{};
}

std::string decode(const Tokenizer& t, const V& ids, bool skip = false) {
  auto r = t.decode(ids, skip);
  EXPECT_TRUE(r.is_ok()) << r.message();
  return r.is_ok() ? r.value() : "";
}

TEST(SentencePieceBpe, MergesByRankAndAddsBos) {
  auto t = make_tokenizer(sp_doc());
  EXPECT_EQ(encode(*t, "ab", true), (V{1, kSpAB}));
  EXPECT_EQ(encode(*t, "ab"), (V{kSpAB}));
  EXPECT_EQ(encode(*t, "a b"), (V{kSpA, kSpB}));
  EXPECT_EQ(encode(*t, "b a"), (V{kSpB, kSpA}));
  EXPECT_EQ(encode(*t, "", true), (V{1}));  // nothing to prepend to: BOS only
  EXPECT_EQ(encode(*t, ""), V{});
  EXPECT_EQ(decode(*t, {1, kSpAB, kSpB}), "<s> ab b");
  EXPECT_EQ(decode(*t, {1, kSpAB, kSpB}, true), "ab b");
  EXPECT_EQ(decode(*t, {kA, kB}), "ab");
}

TEST(SentencePieceBpe, ByteFallbackRoundTrips) {
  auto t = make_tokenizer(sp_doc());
  EXPECT_EQ(encode(*t, "\u00e9"), (V{kSp, byte_id(0xC3), byte_id(0xA9)}));
  EXPECT_EQ(decode(*t, {kSp, byte_id(0xC3), byte_id(0xA9)}), "\u00e9");
  EXPECT_EQ(decode(*t, {byte_id(0xC3)}), "\ufffd");
  EXPECT_EQ(decode(*t, {byte_id(0xF0), byte_id(0x9F), kA}), "\ufffd\ufffda");
  for (std::string s : {"a\u00e9b", "\U0001F600 x", "  a  b ", "\n\t"}) {
    EXPECT_EQ(decode(*t, encode(*t, s)), s);
  }
}

TEST(SentencePieceBpe, AddedTokensSplitBeforeNormalization) {
  auto t = make_tokenizer(sp_doc());
  // Each piece around "<s>" gets its own prepended U+2581.
  EXPECT_EQ(encode(*t, "a<s>b"), (V{kSpA, 1, kSpB}));
  EXPECT_EQ(encode(*t, "<s>"), (V{1}));
  EXPECT_EQ(decode(*t, encode(*t, "a</s>b"), true), "a b");
}

TEST(SentencePieceBpe, UnknownCharactersFuseIntoOneUnk) {
  json doc = sp_doc();
  doc["model"]["byte_fallback"] = false;
  EXPECT_EQ(encode(*make_tokenizer(doc), "axyz"), (V{kSpA, 0}));
  doc["model"]["fuse_unk"] = false;
  EXPECT_EQ(encode(*make_tokenizer(doc), "axyz"), (V{kSpA, 0, 0, 0}));
  doc["model"].erase("unk_token");
  EXPECT_EQ(encode(*make_tokenizer(doc), "axyz"), (V{kSpA}));  // dropped without an unk token
}

TEST(SentencePieceBpe, ConfigOverridesBosEos) {
  TokenizerConfig config;
  config.bos_token = "<s>";
  config.eos_token = "</s>";
  config.add_eos_token = true;
  auto t = make_tokenizer(sp_doc(), config);
  EXPECT_EQ(encode(*t, "ab", true), (V{1, kSpAB, 2}));  // BOS kept from the template
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_TRUE(t->is_special(2));
  EXPECT_FALSE(t->is_special(kA));
  config.add_bos_token = false;
  EXPECT_EQ(encode(*make_tokenizer(sp_doc(), config), "ab", true), (V{kSpAB, 2}));
}

TEST(SentencePieceBpe, MetaspacePreTokenizerFirstScheme) {
  json doc = sp_doc();
  doc["normalizer"] = nullptr;
  doc["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", false}};
  auto t = make_tokenizer(doc);
  EXPECT_EQ(encode(*t, "a b"), (V{kSpA, kSpB}));
  EXPECT_EQ(encode(*t, "<s>a"), (V{1, kA}));  // not at the start of the input: no U+2581
  doc["pre_tokenizer"]["prepend_scheme"] = "always";
  EXPECT_EQ(encode(*make_tokenizer(doc), "<s>a"), (V{1, kSpA}));
  doc["pre_tokenizer"]["prepend_scheme"] = "never";
  EXPECT_EQ(encode(*make_tokenizer(doc), "a"), (V{kA}));
}

json with_added(json doc, const json& token) {
  doc["added_tokens"].push_back(token);
  return doc;
}

json tag_token(bool lstrip, bool rstrip, bool single_word, bool normalized = false, const char* content = "<tag>") {
  return json{{"id", 300}, {"content", content}, {"lstrip", lstrip}, {"rstrip", rstrip},
              {"single_word", single_word}, {"normalized", normalized}, {"special", false}};
}

TEST(AddedTokens, StripAndSingleWordFlags) {
  auto plain = make_tokenizer(with_added(sp_doc(), tag_token(false, false, false)));
  EXPECT_EQ(plain->vocab_size(), 301);
  EXPECT_EQ(encode(*plain, "a <tag> b"), (V{kSpA, kSp, 300, kSp, kSpB}));
  EXPECT_EQ(encode(*make_tokenizer(with_added(sp_doc(), tag_token(true, false, false))), "a <tag> b"),
            (V{kSpA, 300, kSp, kSpB}));
  EXPECT_EQ(encode(*make_tokenizer(with_added(sp_doc(), tag_token(false, true, false))), "a <tag> b"),
            (V{kSpA, kSp, 300, kSpB}));
  auto single = make_tokenizer(with_added(sp_doc(), tag_token(false, false, true)));
  EXPECT_EQ(encode(*single, "a <tag> b"), (V{kSpA, kSp, 300, kSp, kSpB}));
  EXPECT_NE(encode(*single, "a<tag>b"), (V{kSpA, 300, kSpB}));  // inside a word: not a token
  EXPECT_EQ(decode(*plain, {kSpA, 300}), "a<tag>");
  EXPECT_FALSE(plain->is_special(300));
  EXPECT_EQ(decode(*plain, {kSpA, 300}, true), "a<tag>");  // not special: kept
}

TEST(AddedTokens, NormalizedTokenMatchesNormalizedText) {
  // Content "a b" is normalized to "\u2581a\u2581b" and matched after normalization.
  auto t = make_tokenizer(with_added(sp_doc(), tag_token(false, false, false, true, "a b")));
  EXPECT_EQ(encode(*t, "a b"), (V{300}));
  EXPECT_EQ(t->token_to_id("a b"), 300);
  EXPECT_EQ(t->id_to_token(kSpA), "\u2581a");
}

json bl_doc() {
  // Byte stand-ins are ids 0..255; "ab" = 256, "abc" = 257 (not reachable by merges).
  return byte_level_json({"ab", "abc", "\xC4\xA0" "ab"}, {"a b", "\xC4\xA0 ab"});
}

TEST(ByteLevelBpe, EncodesBytesAndRoundTrips) {
  auto t = make_tokenizer(bl_doc());
  EXPECT_EQ(encode(*t, "abc"), (V{256, 'c'}));
  EXPECT_EQ(encode(*t, "ab ab"), (V{256, 258}));
  EXPECT_EQ(encode(*t, "\n"), (V{'\n'}));
  for (std::string s : {"x\u00e9 \U0001F600\U0001F3FD  \n\n\t end", "", "   ", "I'm 123,456"}) {
    EXPECT_EQ(decode(*t, encode(*t, s)), s);
  }
}

TEST(ByteLevelBpe, IgnoreMergesAndPairMerges) {
  json doc = bl_doc();
  doc["model"]["ignore_merges"] = true;
  EXPECT_EQ(encode(*make_tokenizer(doc), "abc"), (V{257}));  // whole word is in the vocab
  doc = bl_doc();
  doc["model"]["merges"] = json::array({json::array({"a", "b"})});
  EXPECT_EQ(encode(*make_tokenizer(doc), "ab"), (V{256}));
}

TEST(ByteLevelBpe, SplitPreTokenizerWithModelRegex) {
  json doc = bl_doc();
  doc["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers",
                           {{{"type", "Split"}, {"pattern", {{"Regex", "\\p{N}{1,3}"}}}, {"behavior", "Isolated"}, {"invert", false}},
                            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  auto t = make_tokenizer(doc);
  EXPECT_EQ(encode(*t, "1234"), (V{'1', '2', '3', '4'}));
  EXPECT_EQ(decode(*t, encode(*t, "ab 12345")), "ab 12345");
}

}  // namespace
}  // namespace quiver
