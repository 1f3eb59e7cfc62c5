// link: qv_tokenizer
// Streaming output: IncrementalDetokenizer over the hard corpus with real tokenizers
// (concatenated pieces == full decode, every piece valid UTF-8, with and without a prompt
// and skip_special_tokens), and StopChecker across token boundaries.
#include <gtest/gtest.h>

#include <thread>

#include "tokenizer/stop_checker.h"
#include "tokenizer/utf8.h"
#include "unit/tokenizer_test_util.h"

namespace quiver {
namespace {

// Feeds `ids` one at a time after `prompt`; returns the pieces (the last one from flush()).
std::vector<std::string> stream(const Tokenizer& t, const std::vector<int32_t>& prompt,
                                const std::vector<int32_t>& ids, bool skip) {
  IncrementalDetokenizer detok(&t, prompt, skip);
  std::vector<std::string> pieces;
  for (int32_t id : ids) {
    auto piece = detok.push(id);
    EXPECT_TRUE(piece.is_ok()) << piece.message();
    pieces.push_back(piece.value());
  }
  auto rest = detok.flush();
  EXPECT_TRUE(rest.is_ok()) << rest.message();
  pieces.push_back(rest.value());
  return pieces;
}

// spaces_between_special_tokens false (vLLM's rule, with special tokens kept): an added token
// right after a generated added token is its own text, without the space a decoder puts
// before it; here no decoder, so HF joins every token with a space.
TEST(Detokenizer, AdjacentAddedTokensWithoutSpaces) {
  nlohmann::json j = testing::sentencepiece_json({"\u2581hi"}, nlohmann::json::array());
  j["decoder"] = nullptr;
  const auto t = testing::make_tokenizer(j);
  const std::vector<int32_t> prompt = {259}, out = {1, 2, 2, 259, 2};
  auto joined = [&](bool skip, bool spaces) {
    IncrementalDetokenizer detok(t.get(), prompt, skip, spaces);
    std::string text;
    for (int32_t id : out) text += detok.push(id).value();
    return text + detok.flush().value();
  };
  EXPECT_EQ(joined(false, true), " <s> </s> </s> \u2581hi </s>");  // decode(prompt + out) past decode(prompt)
  EXPECT_EQ(joined(false, false), " <s></s></s> \u2581hi </s>");
  EXPECT_EQ(joined(true, false), joined(true, true));  // skipped special tokens: nothing to join
}

class DetokenizerOnCorpus : public ::testing::TestWithParam<std::string> {};

TEST_P(DetokenizerOnCorpus, PiecesConcatenateToFullDecode) {
  std::string dir = testing::real_tokenizer_dir(GetParam());
  if (dir.empty()) GTEST_SKIP() << GetParam() << " tokenizer absent: run tools/fetch_tokenizers.sh";
  auto loaded = Tokenizer::load(dir);
  ASSERT_TRUE(loaded.is_ok()) << loaded.message();
  const Tokenizer& t = *loaded.value();
  std::vector<std::string> texts = testing::corpus_texts();
  ASSERT_GT(texts.size(), 50u);
  for (const std::string& text : texts) {
    auto ids = t.encode(text, true);
    ASSERT_TRUE(ids.is_ok()) << ids.message();
    for (bool skip : {false, true}) {
      std::string full = t.decode(ids.value(), skip).value();
      std::string joined;
      for (const std::string& p : stream(t, {}, ids.value(), skip)) {
        EXPECT_TRUE(utf8::is_valid(p)) << "invalid UTF-8 piece for " << text;
        joined += p;
      }
      EXPECT_EQ(joined, full) << GetParam() << " skip=" << skip << " text: " << text;
    }
    // With the first third as the prompt: the pieces are what the rest adds to the text.
    const auto& all = ids.value();
    size_t cut = all.size() / 3;
    std::vector<int32_t> prompt(all.begin(), all.begin() + cut), rest(all.begin() + cut, all.end());
    std::string whole = t.decode(all, false).value();
    std::string prefix = t.decode(prompt, false).value();
    std::string joined;
    for (const std::string& p : stream(t, prompt, rest, false)) joined += p;
    if (whole.compare(0, prefix.size(), prefix) == 0 && !prefix.empty() &&
        prefix.find("\ufffd") == std::string::npos) {
      EXPECT_EQ(prefix + joined, whole) << GetParam() << " text: " << text;
    }
  }
}

TEST_P(DetokenizerOnCorpus, SplitUtf8IsHeldBack) {
  std::string dir = testing::real_tokenizer_dir(GetParam());
  if (dir.empty()) GTEST_SKIP() << GetParam() << " tokenizer absent: run tools/fetch_tokenizers.sh";
  auto t = Tokenizer::load(dir);
  ASSERT_TRUE(t.is_ok()) << t.message();
  // A rare emoji is split into byte tokens by every tokenizer here: no piece may show U+FFFD.
  auto ids = t.value()->encode("\xF0\x9F\xAB\xA0 x", false);
  ASSERT_TRUE(ids.is_ok());
  for (const std::string& p : stream(*t.value(), {}, ids.value(), false)) {
    EXPECT_EQ(p.find("\ufffd"), std::string::npos);
  }
}

INSTANTIATE_TEST_SUITE_P(Real, DetokenizerOnCorpus, ::testing::ValuesIn(testing::real_tokenizer_names()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

TEST(TokenizerThreads, ConcurrentEncodeMatchesSerial) {
  // encode() is const and shares the word cache between threads.
  auto t = Tokenizer::load(testing::real_tokenizer_dir("gpt2"));
  ASSERT_TRUE(t.is_ok()) << t.message();
  std::vector<std::string> texts = testing::corpus_texts();
  std::vector<std::vector<int32_t>> serial;
  for (const auto& text : texts) serial.push_back(t.value()->encode(text, true).value());
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int round = 0; round < 5; ++round)
        for (size_t i = w; i < texts.size() + w; ++i) {
          size_t k = i % texts.size();
          if (t.value()->encode(texts[k], true).value() != serial[k]) ++mismatches[w];
        }
    });
  }
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

// Runs the stop checker over pieces; returns (emitted text, stop found).
std::pair<std::string, std::optional<std::string>> run_stops(const std::vector<std::string>& stops,
                                                             const std::vector<std::string>& pieces,
                                                             bool include = false) {
  StopChecker checker(stops, include);
  std::string out;
  for (const std::string& p : pieces) {
    auto r = checker.push(p);
    out += r.emit;
    if (r.stopped) return {out, r.stopped};
  }
  out += checker.flush();
  return {out, std::nullopt};
}

TEST(StopChecker, FindsStopAcrossPieces) {
  auto [text, stop] = run_stops({"STOP"}, {"Hello ", "ST", "O", "P and more"});
  EXPECT_EQ(text, "Hello ");
  EXPECT_EQ(stop, "STOP");
  auto [inc, stop2] = run_stops({"STOP"}, {"a S", "TOPb"}, true);
  EXPECT_EQ(inc, "a STOP");
  EXPECT_EQ(stop2, "STOP");
}

TEST(StopChecker, HoldsBackOnlyPossiblePrefixes) {
  StopChecker checker({"\n\nUser:"}, false);
  EXPECT_EQ(checker.push("Answer.\n").emit, "Answer.");  // "\n" might start the stop
  EXPECT_EQ(checker.push("\nUs").emit, "");
  auto r = checker.push("ually fine");                    // it did not
  EXPECT_EQ(r.emit, "\n\nUsually fine");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(checker.flush(), "");
}

TEST(StopChecker, EarliestStopWinsAndFlushReleasesTail) {
  auto [text, stop] = run_stops({"world", "lo"}, {"hello world"});
  EXPECT_EQ(text, "hel");
  EXPECT_EQ(stop, "lo");
  auto [tail, none] = run_stops({"END"}, {"almost EN"});
  EXPECT_EQ(tail, "almost EN");
  EXPECT_FALSE(none);
}

TEST(StopChecker, WithDetokenizerOnRealTokens) {
  std::string dir = testing::real_tokenizer_dir("mistral");
  ASSERT_FALSE(dir.empty());
  auto t = Tokenizer::load(dir);
  ASSERT_TRUE(t.is_ok()) << t.message();
  auto ids = t.value()->encode("The answer is 42.</answer> trailing text", false).value();
  IncrementalDetokenizer detok(t.value().get(), {}, true);
  StopChecker checker({"</answer>"}, false);
  std::string out;
  bool stopped = false;
  for (int32_t id : ids) {
    auto r = checker.push(detok.push(id).value());
    out += r.emit;
    EXPECT_TRUE(utf8::is_valid(r.emit));
    if (r.stopped) {
      stopped = true;
      break;
    }
  }
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, "The answer is 42.");
}

}  // namespace
}  // namespace quiver
