// link: qv_sched qv_kv
// Randomized scheduler stress: a tiny KV pool with prefix caching, many sequences with
// shared prefixes, several adapters, prompt_logprobs requests, and random aborts (between
// steps and between schedule() and commit()); under the priority policy, random
// priorities and cache salts too. The harness checks every batch and the
// block/pin invariants after every step; at the end every block is free and every
// surviving sequence has exactly the tokens it would have had alone.
#include <gtest/gtest.h>

#include <random>
#include <tuple>

#include "unit/sched_harness.h"

namespace quiver::sched_test {
namespace {

struct StressParams {
  uint32_t seed;
  int num_blocks;
  int budget;
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
};

class SchedulerStress : public ::testing::TestWithParam<StressParams> {};

TEST_P(SchedulerStress, RandomTrafficKeepsInvariantsAndResults) {
  const StressParams p = GetParam();
  std::mt19937 rng(p.seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto chance = [&](double x) { return std::uniform_real_distribution<double>(0, 1)(rng) < x; };

  HarnessConfig c;
  c.block_size = 4;
  c.num_blocks = p.num_blocks;
  c.num_lora_slots = 3;
  c.sched.max_num_batched_tokens = p.budget;
  c.sched.max_num_seqs = 6;
  c.sched.max_loras = 2;
  c.sched.max_model_len = 4 * p.num_blocks;
  c.sched.enable_prefix_caching = true;
  c.sched.policy = p.policy;
  const bool by_priority = p.policy == SchedulingPolicy::kPriority;
  Harness h(c);

  // A few shared stems so that prompts share prefixes (and hence cached blocks).
  std::vector<std::vector<int32_t>> stems(4);
  for (auto& s : stems)
    for (int i = 0; i < 24; ++i) s.push_back(uniform(0, 999));
  // (prompt, adapter, salt) for exact repeats
  std::vector<std::tuple<std::vector<int32_t>, uint64_t, uint64_t>> earlier;
  const uint64_t salts[] = {0, BlockPool::salt_root("a"), BlockPool::salt_root("b")};

  auto add_random = [&] {
    std::vector<int32_t> prompt;
    uint64_t uid = static_cast<uint64_t>(uniform(0, 4));
    uint64_t salt = by_priority ? salts[uniform(0, 2)] : 0;
    if (!earlier.empty() && chance(0.2)) {
      std::tie(prompt, uid, salt) = earlier[uniform(0, static_cast<int>(earlier.size()) - 1)];
    } else {
      const auto& stem = stems[uniform(0, 3)];
      prompt.assign(stem.begin(), stem.begin() + uniform(0, 20));
      for (int k = uniform(prompt.empty() ? 1 : 0, 6); k > 0; --k) prompt.push_back(uniform(0, 999));
    }
    const int room = c.sched.max_model_len - static_cast<int>(prompt.size());
    const int max_tokens = uniform(1, std::min(20, room));
    Status st;
    const int priority = by_priority ? uniform(-2, 2) : 0;
    if (h.add(prompt, max_tokens, uid, chance(0.1), &st, priority, salt) == nullptr) {
      ADD_FAILURE() << "add refused: " << st.message();
      return;
    }
    earlier.emplace_back(std::move(prompt), uid, salt);
  };
  auto random_live = [&]() -> Sequence* {
    std::vector<Sequence*> live;
    for (const auto& s : h.seqs())
      if (s->status != SeqStatus::kFinished) live.push_back(s.get());
    return live.empty() ? nullptr : live[uniform(0, static_cast<int>(live.size()) - 1)];
  };

  int steps = 0;
  while ((steps < 1200 || h.sched().has_unfinished()) && !::testing::Test::HasFailure()) {
    ASSERT_LT(steps, 20000) << "not draining";
    if (steps < 1200) {
      for (int k = uniform(0, 2); k > 0; --k)
        if (chance(0.3)) add_random();
      if (chance(0.03))
        if (Sequence* s = random_live()) h.abort(s);
    }
    // Now and then the engine aborts a scheduled sequence before commit().
    const bool abort_mid = steps < 1200 && chance(0.03);
    h.step([&](const ScheduledBatch& b) {
      if (abort_mid && !b.seqs.empty()) h.abort(b.seqs[uniform(0, static_cast<int>(b.seqs.size()) - 1)].seq);
    });
    ++steps;
  }

  int finished_whole = 0, aborted = 0;
  for (const auto& s : h.seqs()) {
    ASSERT_EQ(s->status, SeqStatus::kFinished) << "request lost: seq " << s->seq_id;
    if (h.aborted(s.get())) {
      ++aborted;
      continue;
    }
    ++finished_whole;
    EXPECT_EQ(s->num_generated(), s->max_tokens);
    EXPECT_EQ(s->tokens, expected_tokens(h.prompt_of(s.get()), s->max_tokens)) << "seq " << s->seq_id;
  }
  EXPECT_EQ(h.pool().num_free(), h.pool().num_blocks());
  for (int b = 0; b < h.pool().num_blocks(); ++b) EXPECT_EQ(h.pool().ref_count(b), 0);
  EXPECT_EQ(h.lora().total_pins(), 0);
  // The run must actually have exercised what it claims to.
  EXPECT_GE(h.num_steps(), 1000);
  EXPECT_GT(finished_whole, 200);
  EXPECT_GT(aborted, 10);
  EXPECT_GT(h.sched().num_preemptions(), 0);
  EXPECT_GT(h.pool().hits(), 0);
  EXPECT_EQ(h.pool().hits(), h.admitted_hit_blocks()) << "cache hits miscounted";
  std::printf("seed %u: %d steps, %d finished, %d aborted, %lld preemptions, %lld cache hits\n", p.seed,
              h.num_steps(), finished_whole, aborted, static_cast<long long>(h.sched().num_preemptions()),
              static_cast<long long>(h.pool().hits()));
}

INSTANTIATE_TEST_SUITE_P(Seeds, SchedulerStress,
                         ::testing::Values(StressParams{1, 12, 16}, StressParams{2, 12, 8}, StressParams{3, 16, 32},
                                           StressParams{4, 10, 64}, StressParams{5, 24, 12},
                                           StressParams{6, 12, 16, SchedulingPolicy::kPriority},
                                           StressParams{7, 10, 64, SchedulingPolicy::kPriority},
                                           StressParams{8, 24, 12, SchedulingPolicy::kPriority}));

}  // namespace
}  // namespace quiver::sched_test
