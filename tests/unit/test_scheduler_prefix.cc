// link: qv_sched qv_kv
// Scheduler prefix caching (reuse, adapter and cache-salt isolation, block-aligned
// prompts, eviction, prompt_logprobs bypass) and the logit rows the engine reads, through the fake engine of
// unit/sched_harness.h.
#include <gtest/gtest.h>

#include "unit/sched_harness.h"

namespace quiver::sched_test {
namespace {

std::vector<int32_t> toks(int n, int seed) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = static_cast<int32_t>((seed * 131 + i * 17 + 3) % 997);
  return t;
}

HarnessConfig cfg(int num_blocks = 64, int budget = 64) {
  HarnessConfig c;
  c.num_blocks = num_blocks;
  c.block_size = 4;
  c.sched.max_num_batched_tokens = budget;
  c.sched.max_num_seqs = 16;
  c.sched.max_loras = 2;
  c.sched.max_model_len = 256;
  c.sched.enable_prefix_caching = true;
  return c;
}

void expect_all_done(Harness& h) {
  for (const auto& s : h.seqs()) {
    EXPECT_EQ(s->status, SeqStatus::kFinished);
    EXPECT_EQ(s->tokens, expected_tokens(h.prompt_of(s.get()), s->max_tokens)) << "seq " << s->seq_id;
  }
  EXPECT_EQ(h.pool().num_free(), h.pool().num_blocks());
  EXPECT_EQ(h.lora().total_pins(), 0);
}

TEST(SchedulerPrefix, SecondIdenticalPromptReusesBlocks) {
  Harness h(cfg());
  Sequence* a = h.add(toks(14, 1), 3);
  h.run();
  EXPECT_EQ(h.pool().hits(), 0);
  Sequence* b = h.add(toks(14, 1), 3);
  StepRecord r = h.step();
  EXPECT_EQ(h.pool().hits(), 3);  // 14 tokens: three full blocks
  EXPECT_EQ(b->num_cached_prompt_tokens, 12);
  EXPECT_EQ(r.begin, std::vector<int>{12});
  EXPECT_EQ(r.batch.batch.positions, (std::vector<int32_t>{12, 13}));
  h.run();
  EXPECT_EQ(a->tokens, b->tokens);
  expect_all_done(h);
}

TEST(SchedulerPrefix, BlocksAreSharedOnlyWithinACacheSalt) {
  Harness h(cfg());
  const uint64_t a = BlockPool::salt_root("tenant-a"), b = BlockPool::salt_root("tenant-b");
  ASSERT_NE(a, b);
  ASSERT_NE(a, 0u);
  h.add(toks(14, 1), 3, 0, false, nullptr, 0, a);
  h.run();
  // Another salt, and no salt, find nothing; the same salt finds the three full blocks.
  for (uint64_t salt : {b, uint64_t{0}}) {
    Sequence* other = h.add(toks(14, 1), 3, 0, false, nullptr, 0, salt);
    h.run();
    EXPECT_EQ(other->first_cached_tokens, 0) << "salt " << salt;
  }
  EXPECT_EQ(h.pool().hits(), 0);
  Sequence* same = h.add(toks(14, 1), 3, 0, false, nullptr, 0, a);
  h.run();
  EXPECT_EQ(same->first_cached_tokens, 12);
  EXPECT_EQ(h.pool().hits(), 3);
  expect_all_done(h);
}

TEST(SchedulerPrefix, RunningSequenceSharesItsPublishedBlocks) {
  Harness h(cfg());
  Sequence* a = h.add(toks(10, 2), 8);
  h.step();  // a's first two blocks are published at commit
  Sequence* b = h.add(toks(10, 2), 8);
  h.step();
  EXPECT_EQ(b->num_cached_prompt_tokens, 8);
  EXPECT_EQ(a->block_table[0], b->block_table[0]);
  EXPECT_EQ(a->block_table[1], b->block_table[1]);
  EXPECT_EQ(h.pool().ref_count(a->block_table[0]), 2);
  h.run();
  EXPECT_EQ(a->tokens, b->tokens);
  expect_all_done(h);
}

TEST(SchedulerPrefix, AnotherAdapterNeverSharesBlocks) {
  Harness h(cfg());
  h.add(toks(13, 3), 4, /*lora_uid=*/1);
  h.run();
  Sequence* other = h.add(toks(13, 3), 4, /*lora_uid=*/2);
  Sequence* base = h.add(toks(13, 3), 4);
  h.step();
  EXPECT_EQ(h.pool().hits(), 0);
  EXPECT_EQ(other->num_cached_prompt_tokens, 0);
  EXPECT_EQ(base->num_cached_prompt_tokens, 0);
  h.run();
  Sequence* again = h.add(toks(13, 3), 4, /*lora_uid=*/1);
  h.step();
  EXPECT_EQ(again->num_cached_prompt_tokens, 12);
  h.run();
  EXPECT_EQ(other->tokens, base->tokens);  // the fake model ignores adapters; the cache must not
  expect_all_done(h);
}

TEST(SchedulerPrefix, FullyCachedBlockAlignedPromptStillComputesATokenToSample) {
  Harness h(cfg());
  h.add(toks(8, 4), 1);
  h.run();
  Sequence* b = h.add(toks(8, 4), 1);
  StepRecord r = h.step();
  ASSERT_EQ(r.batch.seqs.size(), 1u);
  EXPECT_GE(r.batch.seqs[0].num_tokens, 1);
  EXPECT_EQ(r.begin[0] + r.batch.seqs[0].num_tokens, 8);
  EXPECT_TRUE(r.batch.seqs[0].samples);
  EXPECT_EQ(r.batch.batch.logit_rows.size(), 1u);
  EXPECT_EQ(b->num_cached_prompt_tokens, r.begin[0]);
  EXPECT_GT(b->num_cached_prompt_tokens, 0);
  EXPECT_EQ(h.pool().hits(), b->num_cached_prompt_tokens / 4);  // the recomputed block is no hit
  h.run();
  expect_all_done(h);
}

TEST(SchedulerPrefix, CachedBlocksAreEvictedUnderPressureAndResultsStayCorrect) {
  Harness h(cfg(/*num_blocks=*/8));
  h.add(toks(16, 5), 2);
  h.run();
  EXPECT_EQ(h.pool().num_free(), 8);  // cached but unreferenced blocks count as free
  h.add(toks(28, 6), 4);              // needs all 8 blocks: evicts every cached one
  h.run();
  const int64_t hits = h.pool().hits();
  Sequence* again = h.add(toks(16, 5), 2);
  h.step();
  EXPECT_EQ(again->num_cached_prompt_tokens, 0);
  EXPECT_EQ(h.pool().hits(), hits);
  h.run();
  expect_all_done(h);
}

TEST(SchedulerPrefix, PartlyEvictedChainServesOnlyItsSurvivingHead) {
  Harness h(cfg(/*num_blocks=*/8));
  h.add(toks(16, 7), 1);  // publishes 4 blocks
  h.run();
  h.add(toks(20, 8), 1);  // 5 blocks: the 4 never-published ones, then one cached block
  h.run();
  // Blocks are freed tail first, so the chain's last block was the one evicted.
  Sequence* again = h.add(toks(16, 7), 3);
  h.step();
  EXPECT_EQ(again->num_cached_prompt_tokens, 12);
  h.run();
  expect_all_done(h);
}

TEST(SchedulerPrefix, HitsCountOnlyBlocksOfAdmittedSequences) {
  // A waiting sequence matches cached blocks in every step but cannot be admitted until
  // the pool has room; its failed attempts must not count as cache hits.
  Harness h(cfg(/*num_blocks=*/8, /*budget=*/64));
  h.add(toks(8, 12), 1);  // publishes 2 blocks
  h.run();
  Sequence* hog = h.add(toks(20, 13), 8);  // grows to 7 blocks
  for (int i = 0; i < 4; ++i) h.step();
  ASSERT_EQ(hog->status, SeqStatus::kRunning);
  std::vector<int32_t> prompt = toks(8, 12);
  for (int i = 0; i < 8; ++i) prompt.push_back(500 + i);
  Sequence* again = h.add(prompt, 2);
  int waited = 0;
  while (again->status == SeqStatus::kWaiting) {
    h.step();
    ++waited;
    ASSERT_LT(waited, 100);
  }
  EXPECT_GE(waited, 3);
  EXPECT_EQ(again->num_preemptions, 0);
  EXPECT_EQ(again->num_cached_prompt_tokens, 4);  // the hog evicted the chain's tail block
  EXPECT_EQ(h.pool().hits(), 1);
  h.run();
  expect_all_done(h);
}

TEST(SchedulerPrefix, PromptLogprobsRequestsNeverUseTheCache) {
  Harness h(cfg());
  h.add(toks(12, 9), 2);
  h.run();
  Sequence* b = h.add(toks(12, 9), 2, 0, /*prompt_logits=*/true);
  StepRecord r = h.step();
  EXPECT_EQ(h.pool().hits(), 0);
  EXPECT_EQ(b->num_cached_prompt_tokens, 0);
  EXPECT_EQ(r.batch.seqs[0].num_tokens, 12);
  EXPECT_EQ(r.batch.seqs[0].num_logit_rows, 12);
  h.run();
  expect_all_done(h);
}

TEST(SchedulerPrefix, LogitRowsAcrossChunks) {
  Harness h(cfg(64, /*budget=*/4));
  Sequence* a = h.add(toks(10, 10), 2, 0, /*prompt_logits=*/true);
  Sequence* b = h.add(toks(10, 11), 2);
  struct Want {
    std::vector<int64_t> ids;
    std::vector<int32_t> logit_rows;
    std::vector<int> first_row, num_rows;
    std::vector<bool> samples;
  };
  const std::vector<Want> want = {
      {{a->seq_id}, {0, 1, 2, 3}, {0}, {4}, {false}},                          // a 0..3
      {{a->seq_id}, {0, 1, 2, 3}, {0}, {4}, {false}},                          // a 4..7
      {{a->seq_id, b->seq_id}, {0, 1}, {0, 2}, {2, 0}, {true, false}},         // a 8..9, b 0..1
      {{a->seq_id, b->seq_id}, {0}, {0, 1}, {1, 0}, {true, false}},            // a decode, b 2..4
      {{b->seq_id}, {}, {0}, {0}, {false}},                                    // b 5..8
      {{b->seq_id}, {0}, {0}, {1}, {true}},                                    // b 9
  };
  for (size_t s = 0; s < want.size(); ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    StepRecord r = h.step();
    EXPECT_EQ(r.ids, want[s].ids);
    EXPECT_EQ(r.batch.batch.logit_rows, want[s].logit_rows);
    ASSERT_EQ(r.batch.seqs.size(), want[s].ids.size());
    for (size_t i = 0; i < r.batch.seqs.size(); ++i) {
      EXPECT_EQ(r.batch.seqs[i].first_logit_row, want[s].first_row[i]);
      EXPECT_EQ(r.batch.seqs[i].num_logit_rows, want[s].num_rows[i]);
      EXPECT_EQ(r.batch.seqs[i].samples, want[s].samples[i]);
    }
  }
  EXPECT_EQ(a->status, SeqStatus::kFinished);
  h.run();
  expect_all_done(h);
}

}  // namespace
}  // namespace quiver::sched_test
