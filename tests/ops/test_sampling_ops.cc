// link: qv_engine
// Backend::sample on ref and cpu: the Philox stream against its published vectors, cpu == ref
// bit for bit, ranks / top-K / logprobs equal to the host sampler's logprobs_for, greedy ties,
// truncations to one token that must equal greedy, seeds (same token alone or batched,
// varying with the counter), empirical frequencies against the truncated distribution, and
// the set of reachable tokens against the host sampler's sample_token.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "backend/cpu/cpu_backend.h"
#include "backend/ref/ref_backend.h"
#include "backend/sampling_math.h"
#include "engine/sampler.h"
#include "ops/sampling_cases.h"

namespace quiver::test {
namespace {

std::span<const float> row_of(const SampleCase& c, int64_t r) {
  return std::span<const float>(c.logits.data() + r * c.vocab, static_cast<size_t>(c.vocab));
}

std::vector<SampleCase> all_cases() {
  std::vector<SampleCase> cases = crafted_cases();
  std::mt19937 rng(5);
  cases.push_back(random_case(rng, 1000, 13, 5, 42));
  cases.push_back(random_case(rng, 4099, 7, 20, 43));
  cases.push_back(random_case(rng, 17, 9, 0, 44));
  cases.push_back(masked_case(rng, 1000, 24, 5, 45));
  cases.push_back(masked_case(rng, 4099, 12, 20, 46));
  return cases;
}

TEST(SamplingMath, PhiloxKnownAnswers) {
  // Random123's kat_vectors for philox4x32_10.
  const auto a = sampling::philox4x32_10(0, 0, 0, 0, 0, 0);
  EXPECT_EQ(a.v[0], 0x6627e8d5u);
  EXPECT_EQ(a.v[1], 0xe169c58du);
  EXPECT_EQ(a.v[2], 0xbc57ac4cu);
  EXPECT_EQ(a.v[3], 0x9b00dbd8u);
  const uint32_t f = 0xffffffffu;
  const auto b = sampling::philox4x32_10(f, f, f, f, f, f);
  EXPECT_EQ(b.v[0], 0x408f276du);
  EXPECT_EQ(b.v[1], 0x41c83b0eu);
  EXPECT_EQ(b.v[2], 0xa20bc7c6u);
  EXPECT_EQ(b.v[3], 0x6d5451fdu);
  const auto c = sampling::philox4x32_10(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u);
  EXPECT_EQ(c.v[0], 0xd16cfe09u);
  EXPECT_EQ(c.v[1], 0x94fdccebu);
  EXPECT_EQ(c.v[2], 0x5001e420u);
  EXPECT_EQ(c.v[3], 0x24126ea1u);
}

TEST(SamplingOps, CpuMatchesRefExactly) {
  RefBackend ref;
  CpuBackend cpu(2);
  for (const SampleCase& c : all_cases()) {
    const SampleResults a = run_sample(&ref, c), b = run_sample(&cpu, c);
    EXPECT_EQ(a.token, b.token) << c.name;
    EXPECT_EQ(a.rank, b.rank) << c.name;
    EXPECT_EQ(a.top_ids, b.top_ids) << c.name;
    EXPECT_EQ(a.logprob, b.logprob) << c.name;
    EXPECT_EQ(a.top_logprobs, b.top_logprobs) << c.name;
  }
}

TEST(SamplingOps, LogprobsEqualHostSampler) {
  RefBackend ref;
  for (const SampleCase& c : all_cases()) {
    const SampleResults res = run_sample(&ref, c);
    const int k = c.num_logprobs;
    for (int64_t r = 0; r < c.rows(); ++r) {
      const std::string where = c.name + " row " + std::to_string(r);
      const int32_t token = res.token[static_cast<size_t>(r)];
      ASSERT_GE(token, 0) << where;
      ASSERT_LT(token, c.vocab) << where;
      const int row_k = c.row_logprobs.empty() ? k : c.row_logprobs[static_cast<size_t>(r)];
      const TokenLogprobs want = logprobs_for(row_of(c, r), token, std::min(row_k, k));
      EXPECT_EQ(res.rank[static_cast<size_t>(r)], want.rank) << where;
      EXPECT_EQ(res.logprob[static_cast<size_t>(r)], want.logprob) << where;
      for (int j = 0; j < k; ++j) {
        const size_t at = static_cast<size_t>(r * k + j);
        if (j < static_cast<int>(want.top.size())) {
          EXPECT_EQ(res.top_ids[at], want.top[static_cast<size_t>(j)].first) << where << " top " << j;
          EXPECT_EQ(res.top_logprobs[at], want.top[static_cast<size_t>(j)].second) << where << " top " << j;
        } else {
          EXPECT_EQ(res.top_ids[at], -1) << where << " past the vocabulary";
        }
      }
    }
  }
}

// A structured-output mask changes which token is chosen and nothing else: the chosen token
// is allowed (when any is), greedy rows take the best allowed token, and logprobs, ranks
// and top-K are those of the same rows unmasked.
TEST(SamplingOps, MasksRestrictTheChoiceOnly) {
  CpuBackend cpu(2);
  std::mt19937 rng(11);
  for (int64_t vocab : {1000, 32000}) {
    const SampleCase c = masked_case(rng, vocab, 30, 20, 7);
    SampleCase plain = c;
    plain.mask_row.clear();
    plain.masks.clear();
    const SampleResults res = run_sample(&cpu, c), raw = run_sample(&cpu, plain);
    EXPECT_EQ(res.top_ids, raw.top_ids) << c.name;
    EXPECT_EQ(res.top_logprobs, raw.top_logprobs) << c.name;
    int constrained = 0;
    for (int64_t r = 0; r < c.rows(); ++r) {
      const std::string where = c.name + " row " + std::to_string(r);
      const int32_t token = res.token[static_cast<size_t>(r)];
      const auto row = row_of(c, r);
      bool any = false;
      int32_t best = -1;
      for (int64_t i = 0; i < c.vocab; ++i) {
        if (!c.allows(r, i)) continue;
        any = true;
        if (best < 0 || row[static_cast<size_t>(i)] > row[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
      }
      if (!any) {  // a mask allowing nothing leaves the row as it is
        EXPECT_EQ(token, raw.token[static_cast<size_t>(r)]) << where;
        continue;
      }
      EXPECT_TRUE(c.allows(r, token)) << where << ": token " << token << " is masked out";
      if (c.params[static_cast<size_t>(r)].temperature == 0.0f) {
        EXPECT_EQ(token, best) << where;
      }
      const TokenLogprobs want = logprobs_for(row, token, 0);
      EXPECT_EQ(res.rank[static_cast<size_t>(r)], want.rank) << where;
      EXPECT_EQ(res.logprob[static_cast<size_t>(r)], want.logprob) << where;
      constrained += token != raw.token[static_cast<size_t>(r)];
    }
    EXPECT_GT(constrained, 0) << c.name << ": the masks changed no choice";
  }
}

TEST(SamplingOps, GreedyTakesLowestIndexOfTiedMaxima) {
  RefBackend ref;
  const SampleCase c = crafted_cases()[0];
  const SampleResults res = run_sample(&ref, c);
  EXPECT_EQ(res.token[0], 5);
  EXPECT_EQ(res.rank[0], 1);
  EXPECT_EQ(std::vector<int32_t>(res.top_ids.begin(), res.top_ids.begin() + 3), (std::vector<int32_t>{5, 9, 30}));
  EXPECT_EQ(res.token[1], 5) << "top_k 1 keeps the first of the tied maxima";
  for (int r = 2; r < 5; ++r) EXPECT_TRUE(res.token[r] == 5 || res.token[r] == 9 || res.token[r] == 30) << r;
}

TEST(SamplingOps, TruncationToOneTokenIsGreedy) {
  CpuBackend cpu(2);
  std::mt19937 rng(9);
  SampleCase c = random_case(rng, 3000, 60, 0, 0);
  for (int64_t r = 0; r < c.rows(); ++r) {
    const uint32_t counter = static_cast<uint32_t>(r);
    const sampling::RowParams modes[4] = {greedy(), sampled(1.0f, 1, 1.0f, 0.0f, 99, counter),
                                          sampled(1.5f, 0, 1e-6f, 0.0f, 99, counter),
                                          sampled(1.0f, 0, 1.0f, 1.0f, 99, counter)};
    c.params[static_cast<size_t>(r)] = modes[r % 4];
  }
  const SampleResults res = run_sample(&cpu, c);
  for (int64_t r = 0; r < c.rows(); ++r) {
    const auto row = row_of(c, r);
    const int32_t argmax = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    EXPECT_EQ(res.token[static_cast<size_t>(r)], argmax) << "row " << r << " mode " << r % 4;
  }
}

TEST(SamplingOps, SeededTokensDependOnSeedAndCounterOnly) {
  CpuBackend cpu(2);
  std::mt19937 rng(3);
  const std::vector<float> flat(64, 0.0f);
  // Alone: counters 0..63 of seed 1234.
  SampleCase alone;
  alone.vocab = 64;
  for (uint32_t t = 0; t < 64; ++t) {
    alone.logits.insert(alone.logits.end(), flat.begin(), flat.end());
    alone.params.push_back(sampled(1.0f, 0, 1.0f, 0.0f, 1234, t));
  }
  const SampleResults a = run_sample(&cpu, alone);
  std::set<int32_t> distinct(a.token.begin(), a.token.end());
  EXPECT_GE(distinct.size(), 30u) << "64 draws from 64 equal tokens should mostly differ";
  // Batched: the same rows shuffled among rows of other seeds.
  SampleCase mixed;
  mixed.vocab = 64;
  std::vector<int> where;
  for (uint32_t t = 0; t < 64; ++t) {
    for (int other = 0; other < 2; ++other) {
      mixed.logits.insert(mixed.logits.end(), flat.begin(), flat.end());
      mixed.params.push_back(sampled(1.0f, 0, 1.0f, 0.0f, rng(), rng()));
    }
    where.push_back(static_cast<int>(mixed.rows()));
    mixed.logits.insert(mixed.logits.end(), flat.begin(), flat.end());
    mixed.params.push_back(sampled(1.0f, 0, 1.0f, 0.0f, 1234, t));
  }
  const SampleResults b = run_sample(&cpu, mixed);
  for (uint32_t t = 0; t < 64; ++t) EXPECT_EQ(b.token[static_cast<size_t>(where[t])], a.token[t]) << "counter " << t;
  // Another seed gives another sequence.
  SampleCase other = alone;
  for (auto& p : other.params) p.seed = 1235;
  EXPECT_NE(run_sample(&cpu, other).token, a.token);
}

// The distribution the rules describe, computed independently in double.
std::vector<double> truncated(const std::vector<double>& probs, float t, int top_k, float top_p, float min_p) {
  std::vector<double> w(probs.size());
  for (size_t i = 0; i < probs.size(); ++i) w[i] = std::pow(probs[i], 1.0 / t);  // probs sorted descending
  size_t n = w.size();
  if (top_k > 0) n = std::min(n, static_cast<size_t>(top_k));
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += w[i];
  size_t keep = 0;
  for (double before = 0; keep < n && before < top_p * total; before += w[keep++]) {
  }
  n = keep;
  while (n > 1 && w[n - 1] < min_p * w[0]) --n;
  std::vector<double> out(w.size(), 0.0);
  double kept = 0;
  for (size_t i = 0; i < n; ++i) kept += w[i];
  for (size_t i = 0; i < n; ++i) out[i] = w[i] / kept;
  return out;
}

TEST(SamplingOps, FrequenciesMatchTruncatedDistribution) {
  CpuBackend cpu(2);
  const std::vector<double> probs = {0.3, 0.2, 0.15, 0.1, 0.1, 0.08, 0.05, 0.02};
  struct Mode {
    float t;
    int top_k;
    float top_p, min_p;
  };
  const int64_t n = 20000;
  for (const Mode m : {Mode{1.0f, 0, 1.0f, 0.0f}, Mode{0.5f, 0, 1.0f, 0.0f}, Mode{1.0f, 3, 1.0f, 0.0f},
                       Mode{1.0f, 0, 0.6f, 0.0f}, Mode{1.0f, 0, 1.0f, 0.4f}, Mode{1.0f, 5, 0.8f, 0.0f},
                       Mode{2.0f, 6, 0.9f, 0.3f}}) {
    const SampleCase c = counter_sweep(probs, sampled(m.t, m.top_k, m.top_p, m.min_p, 77, 0), n);
    const SampleResults res = run_sample(&cpu, c);
    std::vector<double> freq(probs.size(), 0.0);
    for (int32_t tok : res.token) freq[static_cast<size_t>(tok)] += 1.0 / n;
    const std::vector<double> want = truncated(probs, m.t, m.top_k, m.top_p, m.min_p);
    for (size_t i = 0; i < probs.size(); ++i) {
      // 5 standard deviations of a binomial frequency: a false alarm about once in 10^6.
      const double tol = 5.0 * std::sqrt(want[i] * (1.0 - want[i]) / n);
      if (want[i] == 0.0) {
        EXPECT_EQ(freq[i], 0.0) << "token " << i << " is outside the kept set (t " << m.t << ")";
      } else {
        EXPECT_NEAR(freq[i], want[i], tol) << "token " << i << " t " << m.t << " top_k " << m.top_k << " top_p "
                                           << m.top_p << " min_p " << m.min_p;
      }
    }
  }
}

TEST(SamplingOps, ReachableTokensMatchHostSampler) {
  CpuBackend cpu(2);
  const std::vector<float> row = {2.0f, 1.5f, 1.5f, 1.0f, 0.9f, 0.5f, 0.4f, 0.3f, 0.0f, -0.2f};
  struct Mode {
    float t;
    int top_k;
    float top_p, min_p;
  };
  for (const Mode m : {Mode{1.0f, 2, 1.0f, 0.0f}, Mode{1.0f, 3, 1.0f, 0.0f}, Mode{1.0f, 0, 0.5f, 0.0f},
                       Mode{0.7f, 0, 0.8f, 0.0f}, Mode{1.0f, 0, 1.0f, 0.3f}, Mode{1.0f, 6, 0.7f, 0.2f},
                       Mode{1.0f, 0, 1.0f, 0.0f}}) {
    SamplingParams sp;
    sp.temperature = m.t;
    sp.top_k = m.top_k;
    sp.top_p = m.top_p;
    sp.min_p = m.min_p;
    SeqRng rng(1);
    std::set<int32_t> host, device;
    for (int i = 0; i < 4000; ++i) host.insert(sample_token(row, sp, {}, {}, false, {}, rng));
    SampleCase c;
    c.vocab = static_cast<int64_t>(row.size());
    for (uint32_t t = 0; t < 4000; ++t) {
      c.logits.insert(c.logits.end(), row.begin(), row.end());
      c.params.push_back(sampled(m.t, m.top_k, m.top_p, m.min_p, 5, t));
    }
    const SampleResults res = run_sample(&cpu, c);
    device.insert(res.token.begin(), res.token.end());
    EXPECT_EQ(device, host) << "t " << m.t << " top_k " << m.top_k << " top_p " << m.top_p << " min_p " << m.min_p;
  }
}

}  // namespace
}  // namespace quiver::test
