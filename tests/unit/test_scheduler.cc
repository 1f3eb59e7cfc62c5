// link: qv_sched qv_kv
// Scheduler with a fake engine (unit/sched_harness.h): chunked prefill batches exactly,
// budgets and limits, LoRA-aware admission, preemption by recompute, add() rejections,
// and finish()/abort. Every step is also checked against a shadow KV store.
#include <gtest/gtest.h>

#include <algorithm>

#include "unit/sched_harness.h"

namespace quiver::sched_test {
namespace {

std::vector<int32_t> toks(int n, int seed) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = static_cast<int32_t>((seed * 131 + i * 17 + 3) % 997);
  return t;
}

HarnessConfig small_config(int budget, bool caching) {
  HarnessConfig c;
  c.num_blocks = 64;
  c.block_size = 4;
  c.sched.max_num_batched_tokens = budget;
  c.sched.max_num_seqs = 16;
  c.sched.max_loras = 2;
  c.sched.max_model_len = 256;
  c.sched.enable_prefix_caching = caching;
  return c;
}

// Every non-aborted sequence finished with exactly the tokens it would get alone, and
// nothing is held any more.
void expect_all_done(Harness& h) {
  for (const auto& s : h.seqs()) {
    EXPECT_EQ(s->status, SeqStatus::kFinished) << "seq " << s->seq_id;
    if (!h.aborted(s.get())) {
      EXPECT_EQ(s->tokens, expected_tokens(h.prompt_of(s.get()), s->max_tokens)) << "seq " << s->seq_id;
    }
  }
  EXPECT_FALSE(h.sched().has_unfinished());
  EXPECT_EQ(h.pool().num_free(), h.pool().num_blocks());
  EXPECT_EQ(h.lora().total_pins(), 0);
}

std::vector<int32_t> batch_positions(const StepRecord& r) { return r.batch.batch.positions; }

class SchedulerCaching : public ::testing::TestWithParam<bool> {};

TEST_P(SchedulerCaching, AllFinishAndEveryBlockReturns) {
  Harness h(small_config(32, GetParam()));
  for (int i = 0; i < 10; ++i) h.add(toks(3 + 5 * i % 23, i % 4), 1 + i % 7, i % 3 == 0 ? 0 : 1 + i % 2);
  h.add(toks(3 + 5 % 23, 1), 4);  // a repeated prompt, to exercise sharing when caching is on
  h.run();
  expect_all_done(h);
}

TEST_P(SchedulerCaching, PreemptionUnderATinyPoolKeepsEveryResult) {
  HarnessConfig c = small_config(64, GetParam());
  c.num_blocks = 10;  // 40 token slots for 8 sequences of up to 32 tokens each
  c.num_lora_slots = 2;
  Harness h(c);
  for (int i = 0; i < 8; ++i) h.add(toks(5 + i, i), 12 + i, static_cast<uint64_t>(i % 3));
  h.run();
  expect_all_done(h);
  EXPECT_GT(h.sched().num_preemptions(), 0);
  EXPECT_EQ(h.num_preempted_seen(), h.sched().num_preemptions());
  int64_t per_seq = 0;
  for (const auto& s : h.seqs()) per_seq += s->num_preemptions;
  EXPECT_EQ(per_seq, h.sched().num_preemptions());

  // The same requests without memory pressure give the same tokens.
  Harness big(small_config(64, GetParam()));
  for (int i = 0; i < 8; ++i) big.add(toks(5 + i, i), 12 + i, static_cast<uint64_t>(i % 3));
  big.run();
  EXPECT_EQ(big.sched().num_preemptions(), 0);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(h.seqs()[i]->tokens, big.seqs()[i]->tokens);
}

INSTANTIATE_TEST_SUITE_P(PrefixCaching, SchedulerCaching, ::testing::Bool());

TEST(Scheduler, ChunkedPrefillProducesExactBatches) {
  Harness h(small_config(8, false));
  Sequence* s = h.add(toks(21, 7), 3);
  const std::vector<int32_t> prompt = s->tokens;
  auto expect_chunk = [&](const StepRecord& r, int from, int to, bool samples) {
    const ForwardBatch& fb = r.batch.batch;
    ASSERT_EQ(r.batch.seqs.size(), 1u);
    ASSERT_EQ(fb.num_tokens(), to - from);
    for (int p = from; p < to; ++p) {
      EXPECT_EQ(fb.positions[p - from], p);
      EXPECT_EQ(fb.token_ids[p - from], prompt[p]);
      EXPECT_EQ(fb.slot_mapping[p - from], s->block_table[p / 4] * 4 + p % 4);
    }
    EXPECT_EQ(fb.seq_lens, std::vector<int32_t>{to});
    EXPECT_EQ(fb.query_start, (std::vector<int32_t>{0, to - from}));
    EXPECT_EQ(r.batch.seqs[0].samples, samples);
    EXPECT_EQ(r.batch.num_prefill_tokens, to - from);
    EXPECT_FALSE(fb.decode_only);
  };
  expect_chunk(h.step(), 0, 8, false);
  EXPECT_EQ(s->block_table.size(), 2u);
  expect_chunk(h.step(), 8, 16, false);
  EXPECT_EQ(s->block_table.size(), 4u);
  StepRecord last = h.step();
  expect_chunk(last, 16, 21, true);
  EXPECT_EQ(last.batch.batch.logit_rows, std::vector<int32_t>{4});
  EXPECT_EQ(s->num_tokens(), 22);
  StepRecord d = h.step();
  EXPECT_EQ(batch_positions(d), std::vector<int32_t>{21});
  EXPECT_TRUE(d.batch.batch.decode_only);
  EXPECT_EQ(d.batch.num_decode_tokens, 1);
  h.run();
  expect_all_done(h);
}

TEST(Scheduler, MixedDecodeAndPrefillInOneStep) {
  Harness h(small_config(8, false));
  Sequence* a = h.add(toks(3, 1), 4);
  Sequence* b = h.add(toks(12, 2), 2);
  StepRecord r1 = h.step();  // a: 3 prompt tokens, b: first 5
  ASSERT_EQ(r1.batch.seqs.size(), 2u);
  EXPECT_EQ(r1.batch.seqs[0].seq, a);
  EXPECT_EQ(r1.batch.seqs[1].num_tokens, 5);
  EXPECT_TRUE(r1.batch.seqs[0].samples);
  EXPECT_FALSE(r1.batch.seqs[1].samples);
  StepRecord r2 = h.step();  // a decodes while b finishes its prompt
  ASSERT_EQ(r2.batch.seqs.size(), 2u);
  EXPECT_EQ(r2.batch.num_decode_tokens, 1);
  EXPECT_EQ(r2.batch.num_prefill_tokens, 7);
  EXPECT_FALSE(r2.batch.batch.decode_only);
  EXPECT_EQ(r2.batch.batch.query_start, (std::vector<int32_t>{0, 1, 8}));
  EXPECT_EQ(r2.batch.batch.positions[0], 3);
  EXPECT_EQ(r2.batch.batch.positions[1], 5);
  EXPECT_EQ(r2.batch.batch.logit_rows, (std::vector<int32_t>{0, 7}));
  StepRecord r3 = h.step();
  EXPECT_TRUE(r3.batch.batch.decode_only);
  EXPECT_EQ(r3.batch.num_decode_tokens, 2);
  EXPECT_EQ(b->status, SeqStatus::kFinished);  // max_tokens 2 reached
  h.run();
  expect_all_done(h);
}

TEST(Scheduler, MaxNumSeqsAndTokenBudgetRespected) {
  HarnessConfig c = small_config(16, false);
  c.sched.max_num_seqs = 3;
  Harness h(c);
  for (int i = 0; i < 12; ++i) h.add(toks(2 + 3 * i, i), 3 + i % 4);
  int full_steps = 0;
  while (h.sched().has_unfinished() && !::testing::Test::HasFailure()) {
    StepRecord r = h.step();  // the harness checks both limits on every step
    full_steps += r.batch.batch.num_tokens() == 16;
    ASSERT_LT(h.num_steps(), 1000);
  }
  EXPECT_EQ(h.max_running_seen(), 3);
  EXPECT_GT(full_steps, 0);  // the budget is used, not just respected
  expect_all_done(h);
}

TEST(Scheduler, MoreAdaptersThanMaxLorasAllFinish) {
  HarnessConfig c = small_config(64, false);
  c.sched.max_loras = 2;
  c.num_lora_slots = 4;  // more slots than max_loras: the scheduler's limit is what holds
  Harness h(c);
  for (int i = 0; i < 15; ++i) h.add(toks(4 + i % 5, i), 2 + i % 6, static_cast<uint64_t>(i % 6));  // adapters 1..5 + base
  std::set<uint64_t> seen;
  while (h.sched().has_unfinished() && !::testing::Test::HasFailure()) {
    StepRecord r = h.step();  // at most max_loras adapters per step is checked by the harness
    seen.insert(r.loras.begin(), r.loras.end());
    ASSERT_LT(h.num_steps(), 1000);
  }
  EXPECT_EQ(seen, (std::set<uint64_t>{1, 2, 3, 4, 5}));
  EXPECT_GE(h.lora().num_loads(), 5);
  expect_all_done(h);
}

TEST(Scheduler, AdapterBlockedSequenceDoesNotBlockOthersBehindIt) {
  HarnessConfig c = small_config(64, false);
  c.sched.max_loras = 1;
  c.num_lora_slots = 1;
  Harness h(c);
  Sequence* a = h.add(toks(4, 1), 10, /*lora_uid=*/1);
  Sequence* b = h.add(toks(4, 2), 2, /*lora_uid=*/2);  // must wait for adapter 1 to go
  Sequence* base = h.add(toks(4, 3), 2);
  Sequence* same = h.add(toks(4, 4), 2, /*lora_uid=*/1);  // shares a's adapter: may run
  StepRecord r = h.step();
  EXPECT_EQ(r.ids, (std::vector<int64_t>{a->seq_id, base->seq_id, same->seq_id}));
  EXPECT_EQ(b->status, SeqStatus::kWaiting);
  EXPECT_EQ(h.sched().num_waiting(), 1);
  while (a->status != SeqStatus::kFinished && !::testing::Test::HasFailure()) {
    h.step();
    if (a->status == SeqStatus::kRunning) {
      EXPECT_EQ(b->status, SeqStatus::kWaiting);
    }
  }
  h.run();
  expect_all_done(h);
}

TEST(Scheduler, AddRejectsWhatCanNeverRun) {
  HarnessConfig c = small_config(64, false);
  c.num_blocks = 4;  // 16 token slots
  c.sched.max_model_len = 64;
  Harness h(c);
  Status st;
  EXPECT_EQ(h.add(toks(10, 1), 7, 0, false, &st), nullptr);  // 17 tokens > 16 slots
  EXPECT_NE(st.message().find("KV blocks"), std::string::npos) << st.message();
  EXPECT_NE(h.add(toks(10, 1), 6, 0, false, &st), nullptr);  // exactly 16 fits
  EXPECT_EQ(h.add({}, 4, 0, false, &st), nullptr);
  EXPECT_NE(st.message().find("empty"), std::string::npos) << st.message();

  HarnessConfig big = small_config(64, false);
  big.sched.max_model_len = 64;
  Harness h2(big);
  EXPECT_EQ(h2.add(toks(60, 1), 5, 0, false, &st), nullptr);
  EXPECT_NE(st.message().find("maximum context length"), std::string::npos) << st.message();
  EXPECT_NE(h2.add(toks(60, 1), 4, 0, false, &st), nullptr);
  EXPECT_EQ(h2.sched().num_waiting(), 1);

  HarnessConfig no_lora = small_config(64, false);
  no_lora.sched.max_loras = 0;
  Harness h3(no_lora);
  EXPECT_EQ(h3.add(toks(4, 1), 4, /*lora_uid=*/7, false, &st), nullptr);
  EXPECT_NE(st.message().find("LoRA"), std::string::npos) << st.message();

  EXPECT_EQ(h.sched().num_waiting(), 1);
  h.run();
  h2.run();
  expect_all_done(h);
  expect_all_done(h2);
}

TEST(Scheduler, FinishOfWaitingAndRunningSequencesFreesEverything) {
  HarnessConfig c = small_config(8, true);
  c.sched.max_num_seqs = 1;
  Harness h(c);
  Sequence* running = h.add(toks(20, 1), 5, /*lora_uid=*/1);
  Sequence* waiting = h.add(toks(6, 2), 5, /*lora_uid=*/2);
  h.step();
  ASSERT_EQ(running->status, SeqStatus::kRunning);
  ASSERT_EQ(waiting->status, SeqStatus::kWaiting);
  EXPECT_EQ(h.lora().total_pins(), 1);
  h.abort(waiting);
  EXPECT_EQ(h.sched().num_waiting(), 0);
  h.step();  // mid-prefill
  h.abort(running);
  h.abort(running);  // a second finish is a no-op
  h.check_invariants();
  EXPECT_EQ(h.sched().num_running(), 0);
  expect_all_done(h);
}

TEST(Scheduler, FinishBetweenScheduleAndCommitIsSafe) {
  // The engine finishes a sequence (stop token, abort) before it calls commit().
  HarnessConfig c = small_config(64, true);
  Harness h(c);
  Sequence* a = h.add(toks(9, 1), 5, 1);
  Sequence* b = h.add(toks(9, 2), 5);
  ScheduledBatch sb = h.sched().schedule();
  ASSERT_EQ(sb.seqs.size(), 2u);
  h.execute(sb);
  h.abort(a);
  h.sched().commit(sb);
  EXPECT_EQ(a->num_computed_tokens, 0);  // untouched by commit once finished
  EXPECT_EQ(b->num_computed_tokens, 9);
  h.check_invariants();
  h.run();
  expect_all_done(h);
}

// The order in which sequences are first scheduled.
std::vector<Sequence*> admission_order(Harness& h) {
  std::vector<Sequence*> order;
  while (h.sched().has_unfinished()) {
    for (const ScheduledSeq& ss : h.step().batch.seqs)
      if (std::find(order.begin(), order.end(), ss.seq) == order.end()) order.push_back(ss.seq);
  }
  return order;
}

TEST(SchedulerPriority, WaitingSequencesRunByPriorityThenArrival) {
  for (SchedulingPolicy policy : {SchedulingPolicy::kFcfs, SchedulingPolicy::kPriority}) {
    HarnessConfig c = small_config(64, false);
    c.sched.max_num_seqs = 1;
    c.sched.policy = policy;
    Harness h(c);
    std::vector<Sequence*> s;
    for (int priority : {5, 0, 3, 0, -1}) s.push_back(h.add(toks(3, priority + 2), 2, 0, false, nullptr, priority));
    const std::vector<Sequence*> want = policy == SchedulingPolicy::kFcfs
                                            ? s
                                            : std::vector<Sequence*>{s[4], s[1], s[3], s[2], s[0]};
    EXPECT_EQ(admission_order(h), want) << (policy == SchedulingPolicy::kFcfs ? "fcfs" : "priority");
    expect_all_done(h);
  }
}

// Runs until a step preempts; that step's record.
StepRecord until_preemption(Harness& h) {
  for (int i = 0; i < 100 && h.sched().has_unfinished(); ++i) {
    StepRecord r = h.step();
    if (!r.batch.preempted.empty()) return r;
  }
  ADD_FAILURE() << "no step preempted";
  return {};
}

HarnessConfig tiny_pool(SchedulingPolicy policy) {
  HarnessConfig c = small_config(64, false);
  c.num_blocks = 4;  // 16 token slots
  c.sched.policy = policy;
  return c;
}

// A (priority 5) runs before B (priority 0) arrives; the two fill the pool, and B is the
// first to need another block. fcfs preempts B itself, the newest; the priority policy
// preempts A, which was already chosen for that step: it leaves the batch and B runs.
TEST(SchedulerPriority, PreemptsTheLowestPriorityEvenIfAlreadyChosen) {
  for (SchedulingPolicy policy : {SchedulingPolicy::kFcfs, SchedulingPolicy::kPriority}) {
    Harness h(tiny_pool(policy));
    Sequence* a = h.add(toks(4, 1), 8, 0, false, nullptr, 5);
    h.step();
    Sequence* b = h.add(toks(6, 2), 6, 0, false, nullptr, 0);
    const StepRecord r = until_preemption(h);
    Sequence* victim = policy == SchedulingPolicy::kFcfs ? b : a;
    Sequence* runs = policy == SchedulingPolicy::kFcfs ? a : b;
    EXPECT_EQ(r.batch.preempted, std::vector<Sequence*>{victim});
    ASSERT_EQ(r.batch.seqs.size(), 1u);
    EXPECT_EQ(r.batch.seqs[0].seq, runs);
    EXPECT_EQ(victim->status, SeqStatus::kWaiting);
    h.run();
    expect_all_done(h);
  }
}

// Three running sequences, admitted A, B, C; A is the first to need another block. fcfs
// preempts the newest (C), the priority policy the one of lowest priority (B), which comes
// after A in the step, as C does.
TEST(SchedulerPriority, PreemptsByPriorityNotArrival) {
  for (SchedulingPolicy policy : {SchedulingPolicy::kFcfs, SchedulingPolicy::kPriority}) {
    HarnessConfig c = tiny_pool(policy);
    c.num_blocks = 7;
    Harness h(c);
    Sequence* a = h.add(toks(8, 1), 8, 0, false, nullptr, 0);
    Sequence* b = h.add(toks(3, 2), 6, 0, false, nullptr, 7);
    h.step();
    Sequence* cseq = h.add(toks(4, 3), 5, 0, false, nullptr, 1);
    const StepRecord r = until_preemption(h);
    Sequence* victim = policy == SchedulingPolicy::kFcfs ? cseq : b;
    EXPECT_EQ(r.batch.preempted, std::vector<Sequence*>{victim});
    ASSERT_EQ(r.batch.seqs.size(), 2u);
    EXPECT_EQ(r.batch.seqs[0].seq, a);
    EXPECT_EQ(r.batch.seqs[1].seq, victim == b ? cseq : b);
    h.run();
    expect_all_done(h);
  }
}

}  // namespace
}  // namespace quiver::sched_test
