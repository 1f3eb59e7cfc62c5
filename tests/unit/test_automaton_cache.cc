// link: qv_structured
// AutomatonCache, the server's constraint compiler on its HTTP threads: one automaton per
// distinct spec, shared by every caller and thread; refusals kept with their message; the
// least recently used evicted. GrammarCache takes an automaton that arrives with the spec
// as it is, without compiling the spec again.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "structured/automaton_cache.h"
#include "structured/grammar_cache.h"

namespace quiver::structured {
namespace {

StructuredOutputSpec regex_spec(const std::string& regex) {
  StructuredOutputSpec s;
  s.kind = StructuredOutputSpec::Kind::kRegex;
  s.regex = regex;
  return s;
}

TEST(AutomatonCache, EqualSpecsShareOneAutomaton) {
  AutomatonCache cache;
  auto a = cache.get(regex_spec("[a-c]+x"));
  ASSERT_TRUE(a.is_ok()) << a.message();
  EXPECT_TRUE(a.value()->matches("abcx"));
  EXPECT_FALSE(a.value()->matches("abc"));
  auto b = cache.get(regex_spec("[a-c]+x"));
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(a.value().get(), b.value().get());
  StructuredOutputSpec choice;
  choice.kind = StructuredOutputSpec::Kind::kChoice;
  choice.choice = {"[a-c]+x"};  // the same text as a choice is another constraint
  auto c = cache.get(choice);
  ASSERT_TRUE(c.is_ok());
  EXPECT_NE(c.value().get(), a.value().get());
  EXPECT_TRUE(c.value()->matches("[a-c]+x"));
  EXPECT_EQ(cache.size(), 2u);
}

TEST(AutomatonCache, RefusalsAreKeptWithTheirMessage) {
  AutomatonCache cache;
  auto first = cache.get(regex_spec("(ab"));
  ASSERT_FALSE(first.is_ok());
  EXPECT_FALSE(first.message().empty());
  auto again = cache.get(regex_spec("(ab"));
  ASSERT_FALSE(again.is_ok());
  EXPECT_EQ(again.message(), first.message());
  EXPECT_EQ(cache.size(), 1u);
  // Beyond the construction's work bound: refused, naming it, and kept like any refusal.
  auto heavy = cache.get(regex_spec("(.*a){1000}"));
  ASSERT_FALSE(heavy.is_ok());
  EXPECT_NE(heavy.message().find("too complex"), std::string::npos) << heavy.message();
  EXPECT_EQ(cache.size(), 2u);
}

TEST(AutomatonCache, LeastRecentlyUsedIsEvicted) {
  AutomatonCache cache(2);
  auto a = cache.get(regex_spec("a"));
  cache.get(regex_spec("b"));
  EXPECT_EQ(cache.get(regex_spec("a")).value().get(), a.value().get());  // "a" used last
  cache.get(regex_spec("c"));                                             // evicts "b"
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.get(regex_spec("a")).value().get(), a.value().get());
}

TEST(AutomatonCache, ThreadsGetTheSameAutomaton) {
  AutomatonCache cache;
  constexpr int kThreads = 8;
  std::vector<const Dfa*> got(kThreads, nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        auto own = cache.get(regex_spec("t" + std::to_string(t) + "-[0-9]{" + std::to_string(i % 4 + 1) + "}"));
        ASSERT_TRUE(own.is_ok());
      }
      auto shared = cache.get(regex_spec("[0-9]{1,3}(,[0-9]{3})*"));
      ASSERT_TRUE(shared.is_ok());
      got[static_cast<size_t>(t)] = shared.value().get();
    });
  for (auto& th : threads) th.join();
  for (const Dfa* d : got) EXPECT_EQ(d, got[0]);
  EXPECT_TRUE(got[0]->matches("12,345"));
}

// The engine's cache uses the automaton that came with the spec as it is: compiled once,
// on the thread that compiled it. (A mismatched one, as here, only a caller's bug could send.)
TEST(AutomatonCache, GrammarCacheTakesAnAutomatonThatArrivesCompiled) {
  std::vector<std::string> bytes = {""};  // id 0: EOS
  for (int b = 1; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  GrammarCache grammars(std::make_shared<TokenVocab>(TokenVocab::from_bytes(bytes, {0})));
  AutomatonCache automata;
  StructuredOutputSpec spec = regex_spec("a");
  spec.compiled = automata.get(regex_spec("b")).value();
  auto g = grammars.get(spec);
  ASSERT_TRUE(g.is_ok());
  EXPECT_EQ(&g.value()->dfa(), spec.compiled.get());
  const TokenMask& m = g.value()->mask(g.value()->start());
  EXPECT_TRUE(m.allows('b'));
  EXPECT_FALSE(m.allows('a'));
}

}  // namespace
}  // namespace quiver::structured
