// Test harness for the scheduler: a FakeLora slot provider and a fake engine that plays
// the engine's part of the step contract (scheduler.h) while checking every batch against
// a shadow KV store, so any wrong position, token, slot or block-table entry shows up.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "kv/block_pool.h"
#include "sched/scheduler.h"

namespace quiver::sched_test {

// Device LoRA slots: `num_slots` slots, pin counts, LRU eviction of unpinned slots.
class FakeLora : public LoraSlotProvider {
 public:
  explicit FakeLora(int num_slots) : uid_(num_slots, 0), pins_(num_slots, 0), used_(num_slots, 0) {}

  bool can_acquire(uint64_t uid) const override { return slot_of(uid) >= 0 || victim() >= 0; }
  Result<int> acquire(uint64_t uid) override {
    int s = slot_of(uid);
    if (s < 0) {
      s = victim();
      if (s < 0) return Status::error("all LoRA slots are pinned");
      uid_[s] = uid;
      ++num_loads_;
    }
    ++pins_[s];
    used_[s] = ++clock_;
    return s;
  }
  void release(int slot) override {
    ASSERT_TRUE(slot >= 0 && slot < num_slots() && pins_[slot] > 0) << "release of unpinned slot " << slot;
    --pins_[slot];
  }

  int num_slots() const { return static_cast<int>(uid_.size()); }
  int slot_of(uint64_t uid) const {
    for (int s = 0; s < num_slots(); ++s)
      if (uid_[s] == uid && uid != 0) return s;
    return -1;
  }
  uint64_t uid_in(int slot) const { return uid_[slot]; }
  int pins(int slot) const { return pins_[slot]; }
  int total_pins() const {
    int n = 0;
    for (int p : pins_) n += p;
    return n;
  }
  int num_loads() const { return num_loads_; }

 private:
  int victim() const {  // least recently used unpinned slot (empty slots first)
    int best = -1;
    for (int s = 0; s < num_slots(); ++s)
      if (pins_[s] == 0 && (best < 0 || used_[s] < used_[best])) best = s;
    return best;
  }
  std::vector<uint64_t> uid_;
  std::vector<int> pins_;
  std::vector<int64_t> used_;
  int64_t clock_ = 0;
  int num_loads_ = 0;
};

// The next token of a sequence depends only on its own history, so batching, chunking,
// prefix sharing and preemption must never change it.
inline int32_t next_token(const std::vector<int32_t>& history) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : history) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ull;
  return static_cast<int32_t>(h % 1000);
}

// What a sequence must end up with when nothing goes wrong.
inline std::vector<int32_t> expected_tokens(std::vector<int32_t> prompt, int max_tokens) {
  for (int i = 0; i < max_tokens; ++i) prompt.push_back(next_token(prompt));
  return prompt;
}

struct HarnessConfig {
  int num_blocks = 64;
  int block_size = 4;
  int num_lora_slots = 4;
  SchedulerConfig sched;
};

// One KV slot of the shadow store: who wrote it and what.
struct KvEntry {
  int64_t seq_id = -1;
  uint64_t lora_uid = 0;
  int pos = -1;
  int32_t token = 0;
};

// Everything a test may want to look at after a step.
struct StepRecord {
  ScheduledBatch batch;
  std::vector<int> begin;     // num_computed_tokens of each scheduled seq before the step
  std::vector<int64_t> ids;   // seq_id of each scheduled seq
  std::set<uint64_t> loras;   // distinct adapters in the step
};

class Harness {
 public:
  explicit Harness(HarnessConfig c)
      : config_(c),
        pool_(c.num_blocks, c.block_size, c.sched.enable_prefix_caching),
        lora_(c.num_lora_slots),
        sched_(c.sched, &pool_, &lora_),
        kv_(static_cast<size_t>(c.num_blocks) * c.block_size) {}

  // Adds a sequence; returns it (owned here), or nullptr with *status set when add() refuses.
  Sequence* add(std::vector<int32_t> prompt, int max_tokens, uint64_t lora_uid = 0, bool prompt_logits = false,
                Status* status = nullptr, int priority = 0, uint64_t cache_salt = 0);
  // One engine step: schedule, check the batch, "run" it on the shadow KV store, sample,
  // commit, finish sequences that reached max_tokens, check the invariants.
  // `before_commit` runs where the engine samples and may finish sequences (stop, abort).
  StepRecord step(const std::function<void(const ScheduledBatch&)>& before_commit = nullptr);
  // Steps until nothing is left; fails the test if the scheduler stalls or max_steps pass.
  int run(int max_steps = 10000);
  // The middle of step(), for tests that act between schedule() and commit(): checks the
  // batch, writes its KV, samples (appends) for sequences that sample.
  void execute(const ScheduledBatch& b) {
    std::vector<int> begin;
    for (const ScheduledSeq& ss : b.seqs) begin.push_back(ss.seq->num_computed_tokens);
    check_batch(b, begin);
    run_batch(b);
  }
  void abort(Sequence* seq);
  void check_invariants();

  Scheduler& sched() { return sched_; }
  BlockPool& pool() { return pool_; }
  FakeLora& lora() { return lora_; }
  const std::vector<std::unique_ptr<Sequence>>& seqs() const { return seqs_; }
  std::vector<int32_t> prompt_of(const Sequence* s) const { return {s->tokens.begin(), s->tokens.begin() + s->num_prompt_tokens}; }
  bool aborted(const Sequence* s) const { return aborted_.count(s->seq_id) > 0; }
  int num_steps() const { return num_steps_; }
  int64_t num_preempted_seen() const { return preempted_seen_; }
  int max_running_seen() const { return max_running_; }
  // Prefix-cache blocks actually used by admitted sequences (what BlockPool::hits() should count).
  int64_t admitted_hit_blocks() const { return admitted_hit_blocks_; }

 private:
  void check_batch(const ScheduledBatch& b, const std::vector<int>& begin);
  void run_batch(const ScheduledBatch& b);

  HarnessConfig config_;
  BlockPool pool_;
  FakeLora lora_;
  Scheduler sched_;
  std::vector<KvEntry> kv_;  // indexed by slot
  std::vector<std::unique_ptr<Sequence>> seqs_;
  std::set<int64_t> aborted_;
  int64_t next_id_ = 1;
  int num_steps_ = 0;
  int64_t preempted_seen_ = 0;
  int max_running_ = 0;
  int64_t admitted_hit_blocks_ = 0;
};

// ---- implementation (header-only: every test file is its own binary) -------------------

inline int blocks_for(int tokens, int block_size) { return (tokens + block_size - 1) / block_size; }

inline Sequence* Harness::add(std::vector<int32_t> prompt, int max_tokens, uint64_t lora_uid, bool prompt_logits,
                              Status* status, int priority, uint64_t cache_salt) {
  auto s = std::make_unique<Sequence>();
  s->seq_id = next_id_++;
  s->num_prompt_tokens = static_cast<int>(prompt.size());
  s->tokens = std::move(prompt);
  s->max_tokens = max_tokens;
  s->lora_uid = lora_uid;
  s->needs_prompt_logits = prompt_logits;
  s->priority = priority;
  s->cache_salt = cache_salt;
  Status st = sched_.add(s.get());
  if (status != nullptr) *status = st;
  if (!st.is_ok()) return nullptr;
  seqs_.push_back(std::move(s));
  return seqs_.back().get();
}

inline void Harness::abort(Sequence* seq) {
  aborted_.insert(seq->seq_id);
  sched_.finish(seq);
  EXPECT_EQ(seq->status, SeqStatus::kFinished);
  EXPECT_TRUE(seq->block_table.empty());
  EXPECT_EQ(seq->lora_slot, -1);
}

inline StepRecord Harness::step(const std::function<void(const ScheduledBatch&)>& before_commit) {
  StepRecord r;
  std::set<const Sequence*> was_waiting;
  for (const auto& s : seqs_)
    if (s->status == SeqStatus::kWaiting) was_waiting.insert(s.get());
  r.batch = sched_.schedule();
  const ScheduledBatch& b = r.batch;
  for (const ScheduledSeq& ss : b.seqs)
    if (was_waiting.count(ss.seq)) admitted_hit_blocks_ += ss.seq->num_cached_prompt_tokens / config_.block_size;
  for (Sequence* p : b.preempted) {
    EXPECT_EQ(p->status, SeqStatus::kWaiting);
    EXPECT_TRUE(p->block_table.empty());
    EXPECT_EQ(p->lora_slot, -1) << "a preempted sequence keeps its LoRA pin";
    EXPECT_EQ(p->num_computed_tokens, 0);
  }
  preempted_seen_ += static_cast<int64_t>(b.preempted.size());
  for (const ScheduledSeq& ss : b.seqs) {
    r.begin.push_back(ss.seq->num_computed_tokens);
    r.ids.push_back(ss.seq->seq_id);
    if (ss.seq->lora_uid != 0) r.loras.insert(ss.seq->lora_uid);
  }
  check_batch(b, r.begin);
  run_batch(b);
  if (before_commit) before_commit(b);
  sched_.commit(b);
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    Sequence* seq = b.seqs[i].seq;
    if (seq->status == SeqStatus::kFinished) continue;  // finished before commit
    EXPECT_EQ(seq->num_computed_tokens, r.begin[i] + b.seqs[i].num_tokens);
    if (b.seqs[i].samples && seq->num_generated() >= seq->max_tokens) sched_.finish(seq);
  }
  check_invariants();
  ++num_steps_;
  max_running_ = std::max(max_running_, sched_.num_running());
  return r;
}

inline int Harness::run(int max_steps) {
  int empty_in_a_row = 0;
  const int start = num_steps_;
  while (sched_.has_unfinished() && !::testing::Test::HasFailure()) {
    if (num_steps_ - start >= max_steps) {
      ADD_FAILURE() << "not done after " << max_steps << " steps";
      break;
    }
    empty_in_a_row = step().batch.empty() ? empty_in_a_row + 1 : 0;
    if (empty_in_a_row > 2) {
      ADD_FAILURE() << "scheduler stalled with " << sched_.num_waiting() << " waiting, " << sched_.num_running()
                    << " running";
      break;
    }
  }
  return num_steps_ - start;
}

inline void Harness::check_batch(const ScheduledBatch& b, const std::vector<int>& begin) {
  const ForwardBatch& fb = b.batch;
  const int bs = config_.block_size;
  const int ns = static_cast<int>(b.seqs.size());
  ASSERT_EQ(fb.num_seqs(), ns);
  ASSERT_EQ(static_cast<int>(fb.query_start.size()), ns + 1);
  ASSERT_EQ(static_cast<int>(fb.positions.size()), fb.num_tokens());
  ASSERT_EQ(static_cast<int>(fb.slot_mapping.size()), fb.num_tokens());
  ASSERT_EQ(static_cast<int>(fb.token_lora_slot.size()), fb.num_tokens());
  ASSERT_EQ(static_cast<int>(fb.block_tables.size()), ns * fb.max_blocks_per_seq);
  EXPECT_LE(fb.num_tokens(), config_.sched.max_num_batched_tokens) << "token budget exceeded";
  EXPECT_LE(ns, config_.sched.max_num_seqs);
  EXPECT_LE(sched_.num_running(), config_.sched.max_num_seqs);
  EXPECT_EQ(fb.query_start[0], 0);
  std::set<const Sequence*> seen;
  std::set<int> slots;
  std::set<uint64_t> loras;
  int rows = 0, prefill = 0, decode = 0;
  bool all_decode = true;
  const int mb = fb.max_blocks_per_seq;
  for (int i = 0; i < ns; ++i) {
    const ScheduledSeq& ss = b.seqs[i];
    const Sequence* seq = ss.seq;
    EXPECT_TRUE(seen.insert(seq).second) << "sequence scheduled twice";
    EXPECT_EQ(seq->status, SeqStatus::kRunning);
    EXPECT_GT(ss.num_tokens, 0);
    const int q0 = fb.query_start[i], n = ss.num_tokens;
    EXPECT_EQ(fb.query_start[i + 1] - q0, n);
    EXPECT_EQ(fb.seq_lens[i], begin[i] + n);
    ASSERT_LE(fb.seq_lens[i], seq->num_tokens());
    ASSERT_LE(static_cast<int>(seq->block_table.size()), mb);
    ASSERT_GE(static_cast<int>(seq->block_table.size()), blocks_for(fb.seq_lens[i], bs));
    for (size_t k = 0; k < seq->block_table.size(); ++k) EXPECT_EQ(fb.block_tables[i * mb + k], seq->block_table[k]);
    for (int j = 0; j < n; ++j) {
      const int row = q0 + j, pos = begin[i] + j;
      EXPECT_EQ(fb.positions[row], pos);
      EXPECT_EQ(fb.token_ids[row], seq->tokens[pos]);
      EXPECT_EQ(fb.slot_mapping[row], fb.block_tables[i * mb + pos / bs] * bs + pos % bs);
      EXPECT_EQ(fb.token_lora_slot[row], seq->lora_slot);
      EXPECT_TRUE(slots.insert(fb.slot_mapping[row]).second) << "two tokens write one KV slot";
    }
    if (seq->lora_uid != 0) {
      EXPECT_GE(seq->lora_slot, 0);
      if (seq->lora_slot >= 0) {
        EXPECT_EQ(lora_.uid_in(seq->lora_slot), seq->lora_uid);
      }
      loras.insert(seq->lora_uid);
    } else {
      EXPECT_EQ(seq->lora_slot, -1);
    }
    EXPECT_EQ(ss.samples, fb.seq_lens[i] == seq->num_tokens());
    // Logit rows: every row of a prompt chunk for prompt_logprobs, else the last row when sampling.
    std::vector<int32_t> want;
    if (seq->needs_prompt_logits && begin[i] < seq->num_prompt_tokens) {
      for (int j = 0; j < n; ++j) want.push_back(q0 + j);
    } else if (ss.samples) {
      want.push_back(q0 + n - 1);
    }
    EXPECT_EQ(ss.first_logit_row, rows);
    EXPECT_EQ(ss.num_logit_rows, static_cast<int>(want.size()));
    for (size_t k = 0; k < want.size() && rows + k < fb.logit_rows.size(); ++k)
      EXPECT_EQ(fb.logit_rows[rows + k], want[k]);
    rows += static_cast<int>(want.size());
    const bool is_prefill = begin[i] < seq->num_prompt_tokens;
    (is_prefill ? prefill : decode) += n;
    all_decode = all_decode && !is_prefill && n == 1;
  }
  EXPECT_EQ(static_cast<int>(fb.logit_rows.size()), rows);
  EXPECT_EQ(b.num_prefill_tokens, prefill);
  EXPECT_EQ(b.num_decode_tokens, decode);
  EXPECT_EQ(fb.decode_only, all_decode && ns > 0);
  EXPECT_LE(static_cast<int>(loras.size()), config_.sched.max_loras) << "too many adapters in one step";
}

// Writes every scheduled token's K/V, then reads back each sequence's whole visible
// history the way attention would (block_tables + seq_lens) and samples from it.
inline void Harness::run_batch(const ScheduledBatch& b) {
  const ForwardBatch& fb = b.batch;
  const int bs = config_.block_size, mb = fb.max_blocks_per_seq;
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    const Sequence* seq = b.seqs[i].seq;
    for (int row = fb.query_start[i]; row < fb.query_start[i + 1]; ++row) {
      const int slot = fb.slot_mapping[row];
      ASSERT_TRUE(slot >= 0 && slot < static_cast<int>(kv_.size()));
      EXPECT_EQ(pool_.ref_count(slot / bs), 1) << "writing into a shared block";
      EXPECT_EQ(pool_.published_hash(slot / bs), 0u) << "writing into a published block";
      kv_[slot] = KvEntry{seq->seq_id * 1000 + seq->num_preemptions, seq->lora_uid, fb.positions[row], fb.token_ids[row]};
    }
  }
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    Sequence* seq = b.seqs[i].seq;
    const int64_t me = seq->seq_id * 1000 + seq->num_preemptions;
    std::vector<int32_t> history;
    for (int p = 0; p < fb.seq_lens[i]; ++p) {
      const int block = fb.block_tables[i * mb + p / bs];
      const KvEntry& e = kv_[block * bs + p % bs];
      ASSERT_EQ(e.pos, p) << "seq " << seq->seq_id << " sees the wrong position";
      ASSERT_EQ(e.token, seq->tokens[p]) << "seq " << seq->seq_id << " sees a foreign token at " << p;
      ASSERT_EQ(e.lora_uid, seq->lora_uid) << "seq " << seq->seq_id << " sees another adapter's KV at " << p;
      if (p >= seq->num_cached_prompt_tokens) {
        ASSERT_EQ(e.seq_id, me) << "seq " << seq->seq_id << " reads stale or foreign KV at " << p;
      } else {
        ASSERT_NE(pool_.published_hash(block), 0u) << "prefix-hit KV in an unpublished block";
      }
      history.push_back(e.token);
    }
    if (b.seqs[i].samples) seq->tokens.push_back(next_token(history));
  }
}

inline void Harness::check_invariants() {
  const int bs = config_.block_size, nb = config_.num_blocks;
  std::vector<int> refs(nb, 0);
  std::vector<std::vector<std::pair<const Sequence*, int>>> owners(nb);
  std::vector<int> pins(lora_.num_slots(), 0);
  int running = 0, waiting = 0;
  for (const auto& up : seqs_) {
    const Sequence* seq = up.get();
    if (seq->status != SeqStatus::kRunning) {
      EXPECT_TRUE(seq->block_table.empty()) << "seq " << seq->seq_id << " holds blocks while not running";
      EXPECT_EQ(seq->lora_slot, -1) << "seq " << seq->seq_id << " holds a LoRA pin while not running";
      if (seq->status == SeqStatus::kWaiting) {
        ++waiting;
        EXPECT_EQ(seq->num_computed_tokens, 0);
      }
      continue;
    }
    ++running;
    EXPECT_EQ(static_cast<int>(seq->block_table.size()), blocks_for(seq->num_computed_tokens, bs))
        << "seq " << seq->seq_id << ": block table does not cover exactly its computed tokens";
    EXPECT_EQ(static_cast<int>(seq->block_hashes.size()), seq->num_computed_tokens / bs);
    uint64_t h = seq->cache_salt;
    for (size_t k = 0; k < seq->block_hashes.size(); ++k) {
      h = BlockPool::hash_block(h, std::span<const int32_t>(seq->tokens).subspan(k * bs, bs), seq->lora_uid);
      EXPECT_EQ(seq->block_hashes[k], h);
    }
    if (seq->lora_uid != 0) {
      EXPECT_GE(seq->lora_slot, 0);
      if (seq->lora_slot >= 0) ++pins[seq->lora_slot];
    }
    for (size_t k = 0; k < seq->block_table.size(); ++k) {
      ++refs[seq->block_table[k]];
      owners[seq->block_table[k]].emplace_back(seq, static_cast<int>(k));
    }
  }
  EXPECT_EQ(running, sched_.num_running());
  EXPECT_EQ(waiting, sched_.num_waiting());
  int used = 0;
  for (int b = 0; b < nb; ++b) {
    EXPECT_EQ(pool_.ref_count(b), refs[b]) << "block " << b;
    used += refs[b] > 0;
    const uint64_t ph = pool_.published_hash(b);
    for (auto [seq, k] : owners[b])
      if (ph != 0) {
        ASSERT_LT(k, static_cast<int>(seq->block_hashes.size())) << "published block " << b << " not full";
        EXPECT_EQ(seq->block_hashes[k], ph) << "block " << b << " published under another chain";
      }
    if (owners[b].size() > 1) {
      EXPECT_NE(ph, 0u) << "block " << b << " shared but not a published prefix block";
      auto [s0, k0] = owners[b][0];
      for (auto [seq, k] : owners[b]) {
        EXPECT_EQ(k, k0);
        EXPECT_EQ(seq->lora_uid, s0->lora_uid) << "block " << b << " shared across adapters";
        ASSERT_GE(seq->num_tokens(), (k + 1) * bs);
        EXPECT_TRUE(std::equal(seq->tokens.begin(), seq->tokens.begin() + (k + 1) * bs, s0->tokens.begin()))
            << "block " << b << " shared by sequences with different prefixes";
      }
    }
  }
  EXPECT_EQ(pool_.num_free(), nb - used);
  EXPECT_EQ(pool_.hits(), admitted_hit_blocks_) << "prefix-cache hits counted for blocks never used";
  for (int s = 0; s < lora_.num_slots(); ++s) EXPECT_EQ(lora_.pins(s), pins[s]) << "LoRA slot " << s;
}

}  // namespace quiver::sched_test
