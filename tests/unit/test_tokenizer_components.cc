// link: qv_tokenizer
// Tokenizer components in isolation: UTF-8 helpers, Unicode normalizers, split behaviors,
// decoders, post-processors.
#include <gtest/gtest.h>

#include "tokenizer/decoders.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizers.h"
#include "tokenizer/utf8.h"

namespace quiver {
namespace {

using nlohmann::json;

std::string normalize(const json& spec, std::string text) {
  auto n = parse_normalizer(spec, "normalizer");
  EXPECT_TRUE(n.is_ok()) << n.message();
  n.value()->normalize(text);
  return text;
}

std::vector<std::string> decode_chain(const json& spec, std::vector<std::string> tokens) {
  auto d = parse_decoder(spec, "decoder");
  EXPECT_TRUE(d.is_ok()) << d.message();
  d.value()->decode_chain(tokens);
  return tokens;
}

TEST(Utf8, ValidationFindsFirstBadByte) {
  EXPECT_TRUE(utf8::is_valid("plain \xC3\xA9 \xF0\x9F\x98\x80"));
  EXPECT_EQ(utf8::find_invalid("ab\xFF"), 2u);
  EXPECT_EQ(utf8::find_invalid("a\xC3"), 1u);              // truncated
  EXPECT_EQ(utf8::find_invalid("\xC0\xAF"), 0u);           // overlong
  EXPECT_EQ(utf8::find_invalid("x\xED\xA0\x80"), 1u);      // surrogate
  EXPECT_EQ(utf8::find_invalid("\xF4\x90\x80\x80"), 0u);   // > U+10FFFF
}

TEST(Utf8, LossyReplacesMaximalSubparts) {
  EXPECT_EQ(utf8::lossy("a\xE2\x82" "b"), "a\xEF\xBF\xBD" "b");        // one U+FFFD for E2 82
  EXPECT_EQ(utf8::lossy("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");      // one per invalid byte
  EXPECT_EQ(utf8::lossy("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
}

TEST(Utf8, IncompleteTail) {
  EXPECT_EQ(utf8::incomplete_tail("ab\xF0\x9F"), 2u);
  EXPECT_EQ(utf8::incomplete_tail("ab\xF0\x9F\x98\x80"), 0u);
  EXPECT_EQ(utf8::incomplete_tail("ab\xFF"), 0u);  // invalid, not incomplete
}

TEST(Utf8, ByteLevelTableRoundTrips) {
  const auto& t = utf8::byte_level_table();
  EXPECT_EQ(t.encode(' '), "\xC4\xA0");  // 'Ġ'
  EXPECT_EQ(t.encode('\n'), "\xC4\x8A");  // 'Ċ'
  EXPECT_EQ(t.encode('A'), "A");
  for (int b = 0; b < 256; ++b) {
    std::string s = t.encode(static_cast<uint8_t>(b));
    size_t pos = 0;
    EXPECT_EQ(t.decode(utf8::decode(s, pos)), b);
  }
}

TEST(Normalizers, UnicodeForms) {
  json nfc = {{"type", "NFC"}}, nfd = {{"type", "NFD"}}, nfkc = {{"type", "NFKC"}};
  EXPECT_EQ(normalize(nfc, "e\u0301"), "\u00e9");
  EXPECT_EQ(normalize(nfd, "\u00e9"), "e\u0301");
  EXPECT_EQ(normalize(nfc, "a\u0307\u0323"), "\u1ea1\u0307");       // reorder, then compose
  EXPECT_EQ(normalize(nfc, "\u1e0b\u0323"), "\u1e0d\u0307");
  EXPECT_EQ(normalize(nfc, "\u212b"), "\u00c5");                    // singleton
  EXPECT_EQ(normalize(nfc, "\u0958"), "\u0915\u093c");              // composition exclusion
  EXPECT_EQ(normalize(nfc, "\u1100\u1161\u11a8"), "\uac01");        // Hangul LVT
  EXPECT_EQ(normalize(nfd, "\uac01"), "\u1100\u1161\u11a8");
  EXPECT_EQ(normalize(nfkc, "\ufb01\u2460\uff26"), "fi1F");
  EXPECT_EQ(normalize(nfc, "\ufb01"), "\ufb01");                    // compat only in NFKC
  EXPECT_EQ(normalize(nfc, "plain ascii"), "plain ascii");
}

TEST(Normalizers, LowercaseIsPerCharacter) {
  // No final-sigma rule (HF lowercases character by character); İ -> i + combining dot.
  EXPECT_EQ(normalize({{"type", "Lowercase"}}, "\u00c0B\u0130\u0391\u03a3"), "\u00e0bi\u0307\u03b1\u03c3");
}

TEST(Normalizers, PrependReplaceStripSequence) {
  json prepend = {{"type", "Prepend"}, {"prepend", "\u2581"}};
  EXPECT_EQ(normalize(prepend, "hi"), "\u2581hi");
  EXPECT_EQ(normalize(prepend, ""), "");  // an empty piece stays empty
  json replace = {{"type", "Replace"}, {"pattern", {{"Regex", " {2,}"}}}, {"content", " "}};
  EXPECT_EQ(normalize(replace, "a   b  c d"), "a b c d");
  json literal = {{"type", "Replace"}, {"pattern", {{"String", "."}}}, {"content", "!"}};
  EXPECT_EQ(normalize(literal, "a.b"), "a!b");  // String patterns are not regexes
  json strip = {{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}};
  EXPECT_EQ(normalize(strip, "\u3000 x "), "x ");
  json seq = {{"type", "Sequence"}, {"normalizers", {prepend, {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}};
  EXPECT_EQ(normalize(seq, "a b"), "\u2581a\u2581b");
}

std::vector<std::string> apply_split(SplitBehavior behavior, bool invert) {
  std::string text = "the-final--countdown";
  std::vector<Span> matches;
  for (size_t i = 0; i < text.size(); ++i)
    if (text[i] == '-') matches.push_back({i, i + 1});
  std::vector<std::string> out;
  for (const Span& s : split_spans(text.size(), matches, behavior, invert)) {
    out.push_back(text.substr(s.start, s.end - s.start));
  }
  return out;
}

TEST(PreTokenizers, SplitBehaviorsMatchHfDocumentation) {
  using V = std::vector<std::string>;
  EXPECT_EQ(apply_split(SplitBehavior::kRemoved, false), (V{"the", "final", "countdown"}));
  EXPECT_EQ(apply_split(SplitBehavior::kIsolated, false), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(apply_split(SplitBehavior::kMergedWithPrevious, false), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(apply_split(SplitBehavior::kMergedWithNext, false), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(apply_split(SplitBehavior::kContiguous, false), (V{"the", "-", "final", "--", "countdown"}));
  // Inverted: the words are the matches, the dashes the gaps.
  EXPECT_EQ(apply_split(SplitBehavior::kRemoved, true), (V{"-", "-", "-"}));
  EXPECT_EQ(apply_split(SplitBehavior::kMergedWithPrevious, true), (V{"the", "-final", "-", "-countdown"}));
}

std::vector<std::string> pre_tokenize(const json& spec, const std::string& text, bool at_start = true) {
  auto p = parse_pre_tokenizer(spec, "pre_tokenizer");
  EXPECT_TRUE(p.is_ok()) << p.message();
  std::vector<PreToken> pieces = {{text, at_start}};
  p.value()->pre_tokenize(pieces);
  std::vector<std::string> out;
  for (auto& piece : pieces) out.push_back(piece.text);
  return out;
}

TEST(PreTokenizers, ByteLevelGpt2Pattern) {
  using V = std::vector<std::string>;
  json bl = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  EXPECT_EQ(pre_tokenize(bl, "I'm  ok 123!"), (V{"I", "'m", "\xC4\xA0", "\xC4\xA0ok", "\xC4\xA0" "123", "!"}));
  json prefix = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", false}};
  EXPECT_EQ(pre_tokenize(prefix, "hi\n"), (V{"\xC4\xA0hi\xC4\x8A"}));
}

TEST(PreTokenizers, MetaspaceSchemes) {
  using V = std::vector<std::string>;
  auto ms = [](const char* scheme, bool split) {
    return json{{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", scheme}, {"split", split}};
  };
  EXPECT_EQ(pre_tokenize(ms("always", true), "a b"), (V{"\u2581a", "\u2581b"}));
  EXPECT_EQ(pre_tokenize(ms("always", false), "a b"), (V{"\u2581a\u2581b"}));
  EXPECT_EQ(pre_tokenize(ms("never", false), "a b"), (V{"a\u2581b"}));
  EXPECT_EQ(pre_tokenize(ms("first", false), "a", true), (V{"\u2581a"}));
  EXPECT_EQ(pre_tokenize(ms("first", false), "a", false), (V{"a"}));  // not at the input's start
  // Legacy form: add_prefix_space instead of prepend_scheme.
  json legacy = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"add_prefix_space", false}};
  EXPECT_EQ(pre_tokenize(legacy, "a b"), (V{"a", "\u2581b"}));
}

TEST(PreTokenizers, SplitWithRegexAndDigits) {
  using V = std::vector<std::string>;
  json split = {{"type", "Split"}, {"pattern", {{"Regex", "\\p{N}{1,3}"}}}, {"behavior", "Isolated"}, {"invert", false}};
  EXPECT_EQ(pre_tokenize(split, "ab1234567c"), (V{"ab", "123", "456", "7", "c"}));
  json digits = {{"type", "Digits"}, {"individual_digits", true}};
  EXPECT_EQ(pre_tokenize(digits, "a12b"), (V{"a", "1", "2", "b"}));
  json seq = {{"type", "Sequence"}, {"pretokenizers", {split, {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  EXPECT_EQ(pre_tokenize(seq, "x 12"), (V{"x\xC4\xA0", "12"}));
}

TEST(Decoders, ByteFallbackInvalidRunGivesOneReplacementPerByte) {
  json bf = {{"type", "ByteFallback"}};
  using V = std::vector<std::string>;
  EXPECT_EQ(decode_chain(bf, {"<0xE2>", "<0x82>", "<0xAC>", "x"}), (V{"\u20ac", "x"}));
  EXPECT_EQ(decode_chain(bf, {"<0xE2>", "<0x82>", "x"}), (V{"\ufffd", "\ufffd", "x"}));
  EXPECT_EQ(decode_chain(bf, {"<0xZZ>", "<0x4>"}), (V{"<0xZZ>", "<0x4>"}));  // not byte tokens
}

TEST(Decoders, StripMetaspaceReplaceFuse) {
  using V = std::vector<std::string>;
  EXPECT_EQ(decode_chain({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 1}}, {"  a  ", " "}),
            (V{" a ", ""}));
  json ms = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}, {"split", true}};
  // Every replacement char of the first token is dropped, as HF does.
  EXPECT_EQ(decode_chain(ms, {"\u2581\u2581a", "\u2581b"}), (V{"a", " b"}));
  json never = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "never"}};
  EXPECT_EQ(decode_chain(never, {"\u2581a"}), (V{" a"}));
  json seq = {{"type", "Sequence"}, {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                                                  {{"type", "Fuse"}}}}};
  EXPECT_EQ(decode_chain(seq, {"\u2581a", "b", "\u2581c"}), (V{" ab c"}));
}

TEST(Decoders, ByteLevelDecodesAllBytesTogether) {
  using V = std::vector<std::string>;
  json bl = {{"type", "ByteLevel"}};
  // "€" split over two tokens (E2 82 | AC) decodes whole; an unfinished one is lossy.
  EXPECT_EQ(decode_chain(bl, {"\xC3\xA2\xC4\xA4", "\xC2\xAC"}), (V{"\u20ac"}));
  EXPECT_EQ(decode_chain(bl, {"\xC3\xA2\xC4\xA4", "A"}), (V{"\ufffd" "A"}));
  // A token with a character outside the byte table is taken as raw text.
  EXPECT_EQ(decode_chain(bl, {"\xC4\xA0hi", "\u4e16"}), (V{" hi\u4e16"}));
}

TEST(PostProcessor, TemplateAndSequence) {
  json tp = {{"type", "TemplateProcessing"},
             {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                         {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
             {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}}}, {"</s>", {{"id", "</s>"}, {"ids", {2}}}}}}};
  auto p = PostProcessor::parse(tp, "post_processor");
  ASSERT_TRUE(p.is_ok()) << p.message();
  std::vector<int32_t> ids = {7, 8};
  p.value()->process(ids, true);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 7, 8, 2}));
  ids = {7};
  p.value()->process(ids, false);
  EXPECT_EQ(ids, (std::vector<int32_t>{7}));
  json seq = {{"type", "Sequence"}, {"processors", {{{"type", "ByteLevel"}, {"trim_offsets", false}}, tp}}};
  auto s = PostProcessor::parse(seq, "post_processor");
  ASSERT_TRUE(s.is_ok()) << s.message();
  ids = {5};
  s.value()->process(ids, true);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 5, 2}));
}

}  // namespace
}  // namespace quiver
