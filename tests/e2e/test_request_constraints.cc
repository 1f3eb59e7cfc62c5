// link: qv_engine
// vLLM's per-request controls beside the sampling knobs, through the engine on the demo
// model: allowed_token_ids (every token in the set; with a grammar, the intersection;
// batch-mates untouched), bad_words (against the same request without them: the outputs
// part exactly where the unconstrained one completed a bad word, and no bad word's tokens
// appear), truncate_prompt_tokens (the same answer as the truncated prompt sent as is),
// priority scheduling (the order requests start in) and cache_salt (prefix-cache blocks
// shared only within a salt, outputs unchanged).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "e2e/run_all.h"
#include "engine/llm_engine.h"
#include "tokenizer/tokenizer.h"

namespace quiver {
namespace {

namespace fs = std::filesystem;
const fs::path kModel = fs::path(QUIVER_SOURCE_DIR) / "models/demo/base";

std::unique_ptr<LLMEngine> make_engine(const std::string& policy = "fcfs", int max_num_seqs = 256) {
  EngineArgs a;
  a.model = kModel.string();
  a.scheduling_policy = policy;
  a.max_num_seqs = max_num_seqs;
  auto e = LLMEngine::create(a);
  EXPECT_TRUE(e.is_ok()) << e.message();
  return std::move(e).value();
}

using testing::run_all;

PromptInput text(const std::string& t) {
  PromptInput p;
  p.text = t;
  return p;
}

SamplingParams sampled(uint64_t seed, int max_tokens = 40) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = seed;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

SamplingParams greedy(int max_tokens = 40) {
  SamplingParams p = sampled(0, max_tokens);
  p.temperature = 0;
  return p;
}

TEST(RequestConstraints, AllowedTokenIdsBoundEveryTokenAndNotTheBatchMates) {
  auto alone = make_engine();
  ASSERT_TRUE(alone->add_request("free", text("Once upon a time"), sampled(7)).is_ok());
  const std::vector<int32_t> free_alone = run_all(*alone)["free"].outputs[0].token_ids;

  auto e = make_engine();
  // Ten ids the model does emit here, so that the set is not far out of its distribution.
  std::vector<int32_t> allowed;
  for (int32_t t : free_alone)
    if (allowed.size() < 10 && std::find(allowed.begin(), allowed.end(), t) == allowed.end()) allowed.push_back(t);
  ASSERT_EQ(allowed.size(), 10u);
  for (int i = 0; i < 4; ++i) {
    SamplingParams p = sampled(100 + i);
    p.allowed_token_ids = allowed;
    ASSERT_TRUE(e->add_request("allowed" + std::to_string(i), text("Once upon a time"), p).is_ok());
  }
  ASSERT_TRUE(e->add_request("free", text("Once upon a time"), sampled(7)).is_ok());
  auto done = run_all(*e);
  EXPECT_EQ(done["free"].outputs[0].token_ids, free_alone);
  std::set<int32_t> seen;
  for (int i = 0; i < 4; ++i) {
    const RequestOutput& out = done["allowed" + std::to_string(i)];
    ASSERT_TRUE(out.error.empty()) << out.error;
    ASSERT_EQ(out.outputs[0].token_ids.size(), 40u);
    for (int32_t t : out.outputs[0].token_ids) {
      EXPECT_TRUE(std::find(allowed.begin(), allowed.end(), t) != allowed.end()) << t;
      seen.insert(t);
    }
  }
  EXPECT_GT(seen.size(), 3u) << "sampling at temperature 1 should visit several allowed ids";
}

TEST(RequestConstraints, AllowedTokenIdsMeetAGrammar) {
  auto e = make_engine();
  const Tokenizer& tok = *e->tokenizer();
  const std::vector<int32_t> yes = tok.encode("yes", false).value();
  SamplingParams p = sampled(3);
  p.ignore_eos = false;
  p.structured_outputs = StructuredOutputSpec{StructuredOutputSpec::Kind::kChoice, "", "", {"yes", "no"}, {}};
  p.allowed_token_ids = yes;
  for (int64_t eos : e->model_config().eos_token_ids) p.allowed_token_ids.push_back(static_cast<int32_t>(eos));
  ASSERT_TRUE(e->add_request("yes", text("Answer:"), p).is_ok());
  // Nothing the choice allows is in the set: the request ends with an error naming why.
  SamplingParams none = p;
  none.allowed_token_ids = {tok.encode("maybe", false).value().front()};
  ASSERT_TRUE(e->add_request("none", text("Answer:"), none).is_ok());
  auto done = run_all(*e);
  EXPECT_EQ(done["yes"].outputs[0].text, "yes");
  EXPECT_EQ(done["yes"].outputs[0].finish_reason, "stop");
  EXPECT_NE(done["none"].error.find("no token may follow"), std::string::npos) << done["none"].error;
}

bool ends_with(const std::vector<int32_t>& v, size_t end, const std::vector<int32_t>& word) {
  return end >= word.size() && std::equal(word.begin(), word.end(), v.begin() + static_cast<std::ptrdiff_t>(end - word.size()));
}

// vLLM's rule, stated again here: the word as written and after a space; the spaced form
// only when its first token differs and its length does not.
std::vector<std::vector<int32_t>> bad_word_ids(const Tokenizer& tok, const std::string& word) {
  const std::vector<int32_t> plain = tok.encode(word, false).value();
  const std::vector<int32_t> spaced = tok.encode(" " + word, false).value();
  std::vector<std::vector<int32_t>> out = {plain};
  if (spaced.front() != plain.front() && spaced.size() == plain.size()) out.push_back(spaced);
  return out;
}

TEST(RequestConstraints, BadWordsPartFromTheFreeOutputWhereAWordWouldComplete) {
  auto e = make_engine();
  const Tokenizer& tok = *e->tokenizer();
  ASSERT_TRUE(e->add_request("free", text("The history of the city"), greedy()).is_ok());
  const std::vector<int32_t> free = run_all(*e)["free"].outputs[0].token_ids;
  // Words the free output spells with the tokens a bad word's rule bans: one of two
  // tokens (banned after its first) and a one-token word (banned everywhere).
  std::vector<std::string> words;
  for (size_t len : {2u, 1u}) {
    for (size_t at = 2; at + len <= free.size() && words.size() < (len == 2 ? 1u : 2u); ++at) {
      std::string w = tok.decode(std::vector<int32_t>(free.begin() + static_cast<std::ptrdiff_t>(at),
                                                      free.begin() + static_cast<std::ptrdiff_t>(at + len)),
                                 true)
                          .value();
      w.erase(0, w.find_first_not_of(' '));
      if (w.empty()) continue;
      bool occurs = false;
      for (const auto& ids : bad_word_ids(tok, w))
        for (size_t end = 1; end <= free.size(); ++end) occurs |= ids.size() == len && ends_with(free, end, ids);
      if (occurs) words.push_back(w);
    }
  }
  ASSERT_EQ(words.size(), 2u) << "the free output has no word to ban";
  std::vector<std::vector<int32_t>> banned;
  for (const auto& w : words)
    for (auto& ids : bad_word_ids(tok, w)) banned.push_back(std::move(ids));

  SamplingParams p = greedy();
  p.bad_words = words;
  ASSERT_TRUE(e->add_request("bad", text("The history of the city"), p).is_ok());
  const RequestOutput out = run_all(*e)["bad"];
  ASSERT_TRUE(out.error.empty()) << out.error;
  const std::vector<int32_t>& w = out.outputs[0].token_ids;
  for (size_t end = 1; end <= w.size(); ++end)
    for (const auto& ids : banned) EXPECT_FALSE(ends_with(w, end, ids)) << "a bad word ends at token " << end;
  // Greedy both: the same until the free output's token would complete a bad word.
  size_t k = 0;
  while (k < w.size() && w[k] == free[k]) ++k;
  ASSERT_LT(k, w.size()) << "the bad words changed nothing";
  bool completes = false;
  for (const auto& ids : banned) completes |= ends_with(free, k + 1, ids);
  EXPECT_TRUE(completes) << "the outputs part at token " << k << ", where no bad word completes";
}

TEST(RequestConstraints, TruncatedPromptAnswersAsItsTailSentAlone) {
  auto e = make_engine();
  const std::vector<int32_t> prompt = e->tokenizer()->encode("The history of the city begins in the", true).value();
  ASSERT_GT(prompt.size(), 6u);
  SamplingParams p = greedy(12);
  p.truncate_prompt_tokens = 5;
  PromptInput ids;
  ids.token_ids = prompt;
  ASSERT_TRUE(e->add_request("cut", ids, p).is_ok());
  ids.token_ids.assign(prompt.end() - 5, prompt.end());
  ASSERT_TRUE(e->add_request("tail", ids, greedy(12)).is_ok());
  SamplingParams whole = greedy(12);
  whole.truncate_prompt_tokens = -1;  // the model's max_model_len: nothing to cut here
  ids.token_ids = prompt;
  ASSERT_TRUE(e->add_request("whole", ids, whole).is_ok());
  auto done = run_all(*e);
  EXPECT_EQ(done["cut"].prompt_token_ids, std::vector<int32_t>(prompt.end() - 5, prompt.end()));
  EXPECT_EQ(done["cut"].outputs[0].token_ids, done["tail"].outputs[0].token_ids);
  EXPECT_EQ(done["whole"].prompt_token_ids, prompt);
  SamplingParams zero = greedy();
  zero.truncate_prompt_tokens = 0;
  Status refused = e->add_request("zero", ids, zero);
  EXPECT_NE(refused.message().find("truncate_prompt_tokens"), std::string::npos) << refused.message();
}

TEST(RequestConstraints, PriorityOrdersTheQueueAndFcfsRefusesIt) {
  // One sequence at a time: requests start in the order the policy gives them.
  auto e = make_engine("priority", 1);
  const std::pair<const char*, int> requests[] = {{"late", 3}, {"first", -2}, {"second", 0}, {"third", 0}};
  for (auto [id, priority] : requests) ASSERT_TRUE(e->add_request(id, text("Hello"), greedy(3), {}, priority).is_ok());
  std::vector<std::string> started;
  while (e->has_unfinished_requests())
    for (const RequestOutput& o : e->step())
      if (std::find(started.begin(), started.end(), o.request_id) == started.end()) started.push_back(o.request_id);
  EXPECT_EQ(started, (std::vector<std::string>{"first", "second", "third", "late"}));

  auto fcfs = make_engine();
  Status refused = fcfs->add_request("x", text("Hello"), greedy(3), {}, 1);
  EXPECT_NE(refused.message().find("--scheduling-policy priority"), std::string::npos) << refused.message();
  EXPECT_TRUE(fcfs->add_request("y", text("Hello"), greedy(3), {}, 0).is_ok());
}

TEST(RequestConstraints, CacheSaltSeparatesPrefixCacheBlocks) {
  auto e = make_engine();
  const std::string prompt(200, 'x');
  auto salted = [&](std::optional<std::string> salt) {
    PromptInput p = text("Tell me about " + prompt);
    p.cache_salt = std::move(salt);
    return p;
  };
  ASSERT_TRUE(e->add_request("a1", salted("tenant-a"), greedy(6)).is_ok());
  const RequestOutput a1 = run_all(*e)["a1"];
  ASSERT_TRUE(e->add_request("b", salted("tenant-b"), greedy(6)).is_ok());
  ASSERT_TRUE(e->add_request("none", salted(std::nullopt), greedy(6)).is_ok());
  auto other = run_all(*e);
  ASSERT_TRUE(e->add_request("a2", salted("tenant-a"), greedy(6)).is_ok());
  const RequestOutput a2 = run_all(*e)["a2"];
  EXPECT_EQ(other["b"].num_cached_tokens, 0);
  EXPECT_EQ(other["none"].num_cached_tokens, 0);
  EXPECT_GT(a2.num_cached_tokens, 0);
  for (const RequestOutput& o : {other["b"], other["none"], a2})
    EXPECT_EQ(o.outputs[0].token_ids, a1.outputs[0].token_ids) << o.request_id;
  Status empty = e->add_request("empty", salted(""), greedy(6));
  EXPECT_NE(empty.message().find("cache_salt"), std::string::npos) << empty.message();
}

}  // namespace
}  // namespace quiver
