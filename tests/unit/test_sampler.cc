// link: qv_engine
// Sampling on crafted distributions: truncation (top-k, top-p, min-p) never emits an
// excluded token, frequencies follow the kept probabilities, seeds reproduce, greedy
// takes the lowest-index argmax, penalties and logit_bias follow vLLM's definitions, and
// logprobs are those of the raw distribution.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "engine/sampler.h"

namespace quiver {
namespace {

// logits = log(p) for p = {0.4, 0.25, 0.15, 0.1, 0.06, 0.04}
std::vector<float> crafted() {
  std::vector<float> l;
  for (double p : {0.4, 0.25, 0.15, 0.1, 0.06, 0.04}) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

std::map<int32_t, int> histogram(const SamplingParams& p, int draws, uint64_t seed) {
  SeqRng rng(seed);
  std::map<int32_t, int> h;
  const auto l = crafted();
  for (int i = 0; i < draws; ++i) ++h[sample_token(l, p, {}, {}, false, {}, rng)];
  return h;
}

SamplingParams at_temperature_one() {
  SamplingParams p;
  p.temperature = 1.0f;
  return p;
}

TEST(Sampler, TopKNeverEmitsExcludedTokens) {
  auto p = at_temperature_one();
  p.top_k = 2;
  auto h = histogram(p, 20000, 1);
  for (auto [tok, n] : h) EXPECT_LT(tok, 2) << "token " << tok << " drawn " << n << " times";
  EXPECT_NEAR(h[0] / 20000.0, 0.4 / 0.65, 0.015);
}

TEST(Sampler, TopPKeepsTheSmallestSetReachingP) {
  auto p = at_temperature_one();
  p.top_p = 0.7f;  // 0.4 + 0.25 = 0.65 < 0.7, + 0.15 = 0.8 >= 0.7: keep 3
  auto h = histogram(p, 20000, 2);
  for (auto [tok, n] : h) EXPECT_LT(tok, 3) << "token " << tok;
  EXPECT_NEAR(h[2] / 20000.0, 0.15 / 0.8, 0.015);
}

TEST(Sampler, MinPDropsTokensBelowTheFraction) {
  auto p = at_temperature_one();
  p.min_p = 0.3f;  // keep p >= 0.12: tokens 0, 1, 2
  auto h = histogram(p, 20000, 3);
  for (auto [tok, n] : h) EXPECT_LT(tok, 3) << "token " << tok;
}

TEST(Sampler, FrequenciesFollowTheDistribution) {
  auto h = histogram(at_temperature_one(), 40000, 4);
  const double want[] = {0.4, 0.25, 0.15, 0.1, 0.06, 0.04};
  for (int t = 0; t < 6; ++t) EXPECT_NEAR(h[t] / 40000.0, want[t], 0.012) << "token " << t;
}

TEST(Sampler, SameSeedSameDraws) {
  EXPECT_EQ(histogram(at_temperature_one(), 100, 9), histogram(at_temperature_one(), 100, 9));
  EXPECT_NE(histogram(at_temperature_one(), 100, 9), histogram(at_temperature_one(), 100, 10));
}

TEST(Sampler, GreedyTakesTheLowestIndexArgmax) {
  SamplingParams p;
  p.temperature = 0;
  SeqRng rng(0);
  std::vector<float> l = {0.f, 3.f, 1.f, 3.f};
  EXPECT_EQ(sample_token(l, p, {}, {}, false, {}, rng), 1);
  const std::vector<int64_t> eos = {1};
  EXPECT_EQ(sample_token(l, p, {}, {}, true, eos, rng), 3) << "min_tokens blocks EOS";
}

TEST(Sampler, PenaltiesFollowVllm) {
  SamplingParams p;
  p.temperature = 0;
  SeqRng rng(0);
  std::vector<float> l = {2.0f, 1.9f, 1.0f};
  const std::vector<int32_t> out = {0};
  p.presence_penalty = 0.2f;  // 2.0 - 0.2 = 1.8 < 1.9
  EXPECT_EQ(sample_token(l, p, {}, out, false, {}, rng), 1);
  p.presence_penalty = 0;
  p.repetition_penalty = 1.1f;  // 2.0 / 1.1 = 1.82 < 1.9 (prompt tokens count too)
  const std::vector<int32_t> prompt = {0};
  EXPECT_EQ(sample_token(l, p, prompt, {}, false, {}, rng), 1);
  p.repetition_penalty = 1.0f;
  p.frequency_penalty = 0.04f;  // two occurrences: 2.0 - 0.08 = 1.92 > 1.9
  const std::vector<int32_t> twice = {0, 0};
  EXPECT_EQ(sample_token(l, p, {}, twice, false, {}, rng), 0);
}

TEST(Sampler, LogitBiasShiftsLogitsBeforeSampling) {
  const auto l = crafted();
  SamplingParams p;
  p.temperature = 0;
  SeqRng rng(0);
  p.logit_bias = {{5, 100.0f}};  // the least likely token wins greedy
  EXPECT_EQ(sample_token(l, p, {}, {}, false, {}, rng), 5);
  p.logit_bias = {{0, -100.0f}};  // the most likely one is banned
  EXPECT_EQ(sample_token(l, p, {}, {}, false, {}, rng), 1);
  // At temperature 1, a -100 bias leaves token 0 out of 2,000 draws (p ~ e^-100).
  p = at_temperature_one();
  p.logit_bias = {{0, -100.0f}};
  const auto h = histogram(p, 2000, 11);
  EXPECT_EQ(h.count(0), 0u);
  EXPECT_GT(h.at(1), 2000 * 0.25 / 0.6 * 0.8);  // renormalised without token 0
}

TEST(Sampler, LogprobsAreOfTheRawDistribution) {
  auto l = crafted();
  TokenLogprobs lp = logprobs_for(l, 3, 2);
  EXPECT_NEAR(lp.logprob, std::log(0.1), 1e-6);
  EXPECT_EQ(lp.rank, 4);
  ASSERT_EQ(lp.top.size(), 2u);
  EXPECT_EQ(lp.top[0].first, 0);
  EXPECT_NEAR(lp.top[1].second, std::log(0.25), 1e-6);
}

}  // namespace
}  // namespace quiver
