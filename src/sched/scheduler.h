// Scheduler: continuous batching with chunked prefill, LoRA-aware admission, prefix
// caching and preemption by recompute. Produces one ForwardBatch per step.
//
// Step contract with the engine:
//   ScheduledBatch b = scheduler.schedule();           // may preempt running sequences
//   logits = runner.execute(b.batch);                   // rows = b.batch.logit_rows
//   for each ScheduledSeq s with s.samples: engine appends the sampled token to s.seq->tokens
//   scheduler.commit(b);    // advances num_computed_tokens, publishes full blocks to the prefix cache
//   scheduler.finish(seq)   // for sequences the engine finished (stop/length/abort); frees blocks, unpins LoRA
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "core/status.h"
#include "kv/block_pool.h"
#include "sched/forward_batch.h"
#include "sched/scheduling_policy.h"
#include "sched/sequence.h"

namespace quiver {

// Device LoRA slots as the scheduler sees them (the engine bridges to LoraSlotPool).
class LoraSlotProvider {
 public:
  virtual ~LoraSlotProvider() = default;
  virtual bool can_acquire(uint64_t uid) const = 0;
  virtual Result<int> acquire(uint64_t uid) = 0;  // pins; may load weights into a slot
  virtual void release(int slot) = 0;
};

struct SchedulerConfig {
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;  // tokens per step (prefill chunks + decodes)
  int max_loras = 1;                  // distinct adapters per step
  int max_model_len = 2048;           // prompt + output cap
  bool enable_prefix_caching = true;
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
};

struct ScheduledSeq {
  Sequence* seq = nullptr;
  int num_tokens = 0;        // tokens of this seq in the batch
  int first_logit_row = 0;   // index into batch.logit_rows / the runner's logits
  int num_logit_rows = 0;    // prompt rows (prompt_logprobs) and/or the last row
  bool samples = false;      // this step reaches the end of the known tokens: sample one
};

struct ScheduledBatch {
  ForwardBatch batch;
  std::vector<ScheduledSeq> seqs;  // in batch order
  std::vector<Sequence*> preempted;  // moved back to waiting this step
  int num_prefill_tokens = 0;
  int num_decode_tokens = 0;
  bool empty() const { return seqs.empty(); }
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, BlockPool* blocks, LoraSlotProvider* lora);

  // Rejects up front what can never run: longer than max_model_len, or needing more KV
  // blocks than the whole pool.
  Status add(Sequence* seq);
  ScheduledBatch schedule();
  void commit(const ScheduledBatch& batch);
  void finish(Sequence* seq);  // finished or aborted; safe for waiting or running seqs

  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int num_running() const { return static_cast<int>(running_.size()); }
  bool has_unfinished() const { return !waiting_.empty() || !running_.empty(); }
  int64_t num_preemptions() const { return num_preemptions_; }

 private:
  void release_resources(Sequence* seq);
  void preempt(Sequence* seq);
  // Into the waiting queue at its place: the back (fcfs) or by (priority, arrival).
  void enqueue(Sequence* seq);
  // The running sequence to preempt when blocks run out.
  Sequence* preemption_victim() const;
  bool grow_blocks(Sequence* seq, int tokens);  // blocks for `tokens` tokens; false if the pool is short

  SchedulerConfig config_;
  BlockPool* blocks_;
  LoraSlotProvider* lora_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;
  int64_t num_preemptions_ = 0;
};

}  // namespace quiver
