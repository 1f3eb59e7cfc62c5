// link: qv_structured
// The regex subset against std::regex (ECMAScript) as an independent oracle: for each
// pattern, random strings over a small alphabet, strings the automaton accepts, and those
// with one character changed get the same full-match answer; malformed and unsupported
// patterns fail with messages naming what is wrong; non-ASCII classes follow UTF-8; the
// state bound and the construction's work bound give errors.
#include <gtest/gtest.h>

#include <random>
#include <regex>

#include "structured/dfa.h"
#include "structured/regex_parser.h"

namespace quiver::structured {
namespace {

Dfa compile(const std::string& pattern, int max_states = 20000) {
  auto tree = parse_regex(pattern);
  EXPECT_TRUE(tree.is_ok()) << pattern << ": " << tree.status().message();
  auto d = Dfa::compile(*tree.value(), max_states);
  EXPECT_TRUE(d.is_ok()) << pattern << ": " << d.status().message();
  return std::move(d).value();
}

TEST(StructuredRegex, AgreesWithStdRegexOnRandomStrings) {
  const std::vector<std::string> patterns = {
      "abc",          "a|b|cd",         "(ab)*c",        "a+b?c{2,3}",    "[a-c]+x",       "[^ab]c",
      "\\d{3}-\\d{4}", "(a|b)*abb",     "x(?:yz|w)*",    "a{0,2}b{1,}",   "[\\w.]+@b",     "(a*)*b",
      "((a|)b)+",     "\\.\\*\\?",      "[-a]b[a-]",     "a.c",           "\\s*x\\S",      "(?:ab|a)(?:bc|c)",
      "^ab$",                  "c{3}",          "(a|b|c){2,4}d", "[\\d\\-]+",     "\\x41\\u0042",
  };
  const std::string alphabet = "abcdxyzw0129-.*?@ _\n]";
  std::mt19937 rng(7);
  for (const std::string& p : patterns) {
    const Dfa d = compile(p);
    const std::regex re(p, std::regex::ECMAScript);
    int matched = 0;
    for (int i = 0; i < 4000; ++i) {
      std::string s;
      const int len = static_cast<int>(rng() % 9);
      for (int j = 0; j < len; ++j) s.push_back(alphabet[rng() % alphabet.size()]);
      const bool want = std::regex_match(s, re);
      matched += want;
      ASSERT_EQ(d.matches(s), want) << "pattern " << p << " on '" << s << "'";
    }
    // Strings the automaton accepts (a random walk to an accepting state), and each with
    // one character changed: std::regex must agree on both.
    for (int i = 0; i < 300; ++i) {
      std::string s;
      int32_t state = d.start();
      for (int step = 0; step < 40 && !(d.accepting(state) && (!d.has_exit(state) || rng() % 3 == 0)); ++step) {
        std::vector<uint8_t> next;
        // Printable ASCII and newline: ECMAScript's `.` also refuses \r, Python's does not.
        for (int b = '\n'; b < 127; b = b == '\n' ? ' ' : b + 1)
          if (d.step(state, static_cast<uint8_t>(b)) != kDead) next.push_back(static_cast<uint8_t>(b));
        if (next.empty()) break;
        const uint8_t b = next[rng() % next.size()];
        s.push_back(static_cast<char>(b));
        state = d.step(state, b);
      }
      if (!d.accepting(state)) continue;
      ++matched;
      ASSERT_TRUE(std::regex_match(s, re)) << "pattern " << p << " accepted '" << s << "'";
      if (s.empty()) continue;
      std::string t = s;
      t[rng() % t.size()] = alphabet[rng() % alphabet.size()];
      ASSERT_EQ(d.matches(t), std::regex_match(t, re)) << "pattern " << p << " on '" << t << "'";
    }
    EXPECT_GT(matched, 100) << p;
  }
}

TEST(StructuredRegex, EveryLivePrefixCanStillMatch) {
  // Dead-state pruning: a prefix the automaton keeps alive has a completion.
  const Dfa d = compile("ab(c|d)e|xyz");
  EXPECT_NE(d.walk(d.start(), "ab"), kDead);
  EXPECT_EQ(d.walk(d.start(), "abx"), kDead);
  EXPECT_EQ(d.walk(d.start(), "q"), kDead);
  EXPECT_TRUE(d.matches("abde"));
  EXPECT_FALSE(d.matches("abd"));
  const int32_t s = d.walk(d.start(), "xyz");
  EXPECT_TRUE(d.accepting(s));
  EXPECT_FALSE(d.has_exit(s));
}

TEST(StructuredRegex, Utf8ClassesAndLiterals) {
  const Dfa d = compile("[α-ω]+é.");
  EXPECT_TRUE(d.matches("αβγéx"));
  EXPECT_TRUE(d.matches("ωé€"));
  EXPECT_TRUE(d.matches("λé\xF0\x9F\x98\x80"));  // . takes a 4-byte character
  EXPECT_FALSE(d.matches("aéx"));
  EXPECT_FALSE(d.matches("αé\n"));
  EXPECT_FALSE(d.matches("α\xC3"));  // a lone lead byte is no character
  const Dfa neg = compile("[^a]");
  EXPECT_TRUE(neg.matches("\xE4\xB8\xAD"));  // 中
  EXPECT_FALSE(neg.matches("\xED\xA0\x80"));  // an encoded surrogate is not UTF-8
  EXPECT_FALSE(neg.matches("a"));
}

TEST(StructuredRegex, ErrorsNameTheProblem) {
  auto msg = [](const std::string& p) {
    auto t = parse_regex(p);
    return t.is_ok() ? std::string("ok") : t.status().message();
  };
  EXPECT_NE(msg("(ab").find("missing ')'"), std::string::npos);
  EXPECT_NE(msg("ab)").find("unbalanced"), std::string::npos);
  EXPECT_NE(msg("[ab").find("missing ']'"), std::string::npos);
  EXPECT_NE(msg("*a").find("nothing to repeat"), std::string::npos);
  EXPECT_NE(msg("(?=a)").find("lookaround"), std::string::npos);
  EXPECT_NE(msg("(a)\\1").find("backreference"), std::string::npos);
  EXPECT_NE(msg("a*?").find("lazy"), std::string::npos);
  EXPECT_NE(msg("a{3,1}").find("n < m"), std::string::npos);
  EXPECT_NE(msg("a{5000}").find("repetition count"), std::string::npos);
  EXPECT_NE(msg("a^b").find("anchors"), std::string::npos);
  EXPECT_EQ(msg("^a|b$"), "ok");
}

TEST(StructuredRegex, StateBoundIsAnError) {
  // (a|b)*a(a|b){12} needs 2^13 subset states: refused at a bound of 1000.
  auto tree = parse_regex("(a|b)*a(a|b){12}");
  ASSERT_TRUE(tree.is_ok());
  auto d = Dfa::compile(*tree.value(), 1000);
  ASSERT_FALSE(d.is_ok());
  EXPECT_NE(d.status().message().find("exceeds 1000 states"), std::string::npos);
  EXPECT_TRUE(Dfa::compile(*tree.value(), 20000).is_ok());
}

TEST(StructuredRegex, ConstructionWorkIsBounded) {
  // Few states, but each a set of thousands of NFA states: without the work bound these took
  // 8-38 s of the engine's thread (0.6-1.9 G steps) before an answer.
  for (const char* p : {"(\\w{0,1000}\\d{0,1000}){10}", "(.*a){1000}", "(.?){1000}.{1000}", "(\\w*\\d*\\s*.*){1000}"}) {
    auto tree = parse_regex(p);
    ASSERT_TRUE(tree.is_ok()) << p;
    auto d = Dfa::compile(*tree.value(), 20000);
    ASSERT_FALSE(d.is_ok()) << p;
    EXPECT_NE(d.status().message().find("building its automaton takes more than 8000000 steps"), std::string::npos)
        << p << ": " << d.status().message();
  }
  // Wide but plain constraints stay well inside it: 19,001 and 9,501 states.
  EXPECT_TRUE(compile(".{0,1000}").matches(std::string(1000, 'x')));
  EXPECT_TRUE(compile("[^\"]{1,500}").matches("abc"));
}

TEST(StructuredRegex, EscapeMatchesItself) {
  const std::string text = "a.b*c?(d)[e]{f}|g^h$\\i+";
  const Dfa d = compile(regex_escape(text));
  EXPECT_TRUE(d.matches(text));
  EXPECT_FALSE(d.matches("a.b*c?(d)[e]{f}|g^h$\\i"));
}

}  // namespace
}  // namespace quiver::structured
