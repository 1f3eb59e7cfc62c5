// link: qv_engine
// BeamSearch on hand-made candidates: each live beam grows by its step's top tokens and
// the sampled one, beams reaching EOS end (unless ignore_eos), the beam_width best go on
// by vLLM's score (cumulative logprob over the length, prompt included and a final EOS not,
// to the power length_penalty), and best() ranks the ended and the live together.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/beam_search.h"

namespace quiver {
namespace {

constexpr int32_t kEos = 2;

TokenLogprobs cands(int32_t sampled, std::vector<std::pair<int32_t, float>> top) {
  TokenLogprobs t;
  t.token = sampled;
  t.top = top;
  t.rank = 1;
  for (const auto& [id, lp] : top)
    if (id == sampled) t.logprob = lp;
  if (t.token == 99) t.logprob = -9.0f, t.rank = 50;  // sampled from outside the top
  return t;
}

BeamSearchParams params(int width, int max_tokens, bool ignore_eos = false, float length_penalty = 1.0f) {
  BeamSearchParams p;
  p.beam_width = width;
  p.max_tokens = max_tokens;
  p.ignore_eos = ignore_eos;
  p.length_penalty = length_penalty;
  return p;
}

std::vector<int32_t> tail(const Beam& b, size_t prompt) { return {b.tokens.begin() + prompt, b.tokens.end()}; }

TEST(BeamSearch, KeepsTheBestAndEndsBeamsAtEos) {
  BeamSearch s({7, 8}, params(2, 3), {kEos});
  ASSERT_EQ(s.live().size(), 1u);
  // Step 1: EOS is the likeliest; it ends a beam, the next two go on.
  s.advance({cands(kEos, {{kEos, -0.1f}, {10, -1.0f}, {11, -2.0f}, {12, -3.0f}})});
  ASSERT_EQ(s.live().size(), 2u);
  EXPECT_EQ(tail(s.live()[0], 2), (std::vector<int32_t>{10}));
  EXPECT_EQ(tail(s.live()[1], 2), (std::vector<int32_t>{11}));
  // Step 2: both of [10]'s candidates (-1.5, -1.6) beat [11]'s best (-2.1).
  s.advance({cands(20, {{20, -0.5f}, {21, -0.6f}}), cands(30, {{30, -0.1f}, {31, -4.0f}})});
  ASSERT_EQ(s.live().size(), 2u);
  EXPECT_EQ(tail(s.live()[0], 2), (std::vector<int32_t>{10, 20}));
  EXPECT_EQ(tail(s.live()[1], 2), (std::vector<int32_t>{10, 21}));
  EXPECT_FALSE(s.done());
  s.advance({cands(40, {{40, -0.1f}}), cands(41, {{41, -0.1f}})});
  EXPECT_TRUE(s.done());
  const std::vector<Beam> best = s.best();
  ASSERT_EQ(best.size(), 2u);
  // The EOS beam: -0.1 over 2 tokens (the EOS not counted) beats -1.6 over 5.
  EXPECT_EQ(tail(best[0], 2), (std::vector<int32_t>{kEos}));
  EXPECT_TRUE(best[0].at_eos);
  EXPECT_NEAR(beam_score(best[0], std::vector<int64_t>{kEos}, 1.0f), -0.1 / 2, 1e-6);
  EXPECT_EQ(tail(best[1], 2), (std::vector<int32_t>{10, 20, 40}));
  EXPECT_NEAR(best[1].cum_logprob, -1.6, 1e-6);
  EXPECT_EQ(best[1].logprobs.size(), 3u);
  EXPECT_EQ(best[1].logprobs[0].token, 10);
  EXPECT_EQ(best[1].logprobs[0].rank, 2);
}

TEST(BeamSearch, TheSampledTokenIsACandidateEvenOutsideTheTop) {
  BeamSearch s({7}, params(5, 1), {kEos});
  s.advance({cands(99, {{30, -0.1f}, {31, -4.0f}})});
  ASSERT_EQ(s.live().size(), 3u);
  EXPECT_EQ(tail(s.live()[2], 1), (std::vector<int32_t>{99}));
  EXPECT_EQ(s.live()[2].logprobs[0].rank, 50);
  EXPECT_TRUE(s.done());
}

TEST(BeamSearch, IgnoreEosKeepsEosBeamsLive) {
  BeamSearch s({7}, params(1, 2, /*ignore_eos=*/true), {kEos});
  s.advance({cands(kEos, {{kEos, -0.1f}, {10, -1.0f}})});
  ASSERT_EQ(s.live().size(), 1u);
  EXPECT_EQ(tail(s.live()[0], 1), (std::vector<int32_t>{kEos}));
  EXPECT_FALSE(s.live()[0].at_eos);
}

TEST(BeamSearch, LengthPenaltyWeighsLengths) {
  Beam short_beam{{1, 2, 3}, {}, -3.0, false}, long_beam{{1, 2, 3, 4, 5, 6}, {}, -4.0, false};
  const std::vector<int64_t> eos = {kEos};
  // Per token: -1 against -0.67: the longer wins at length_penalty 1, the shorter at 0.
  EXPECT_GT(beam_score(long_beam, eos, 1.0f), beam_score(short_beam, eos, 1.0f));
  EXPECT_LT(beam_score(long_beam, eos, 0.0f), beam_score(short_beam, eos, 0.0f));
  EXPECT_NEAR(beam_score(long_beam, eos, 2.0f), -4.0 / 36.0, 1e-9);
}

TEST(BeamSearch, ParamsAreCheckedAgainstTheEnginesLogprobs) {
  EXPECT_TRUE(params(10, 4).validate(20).is_ok());
  Status wide = params(11, 4).validate(20);
  ASSERT_FALSE(wide.is_ok());
  EXPECT_NE(wide.message().find("max_logprobs"), std::string::npos) << wide.message();
  EXPECT_FALSE(params(0, 4).validate(20).is_ok());
  EXPECT_FALSE(params(1, 0).validate(20).is_ok());
  BeamSearchParams hot = params(1, 1);
  hot.temperature = -1;
  EXPECT_FALSE(hot.validate(20).is_ok());
}

}  // namespace
}  // namespace quiver
