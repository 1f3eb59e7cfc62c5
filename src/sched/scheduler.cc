#include "sched/scheduler.h"

#include <algorithm>
#include <set>

namespace quiver {

namespace {
int blocks_for(int tokens, int block_size) { return (tokens + block_size - 1) / block_size; }
}  // namespace

Scheduler::Scheduler(SchedulerConfig config, BlockPool* blocks, LoraSlotProvider* lora)
    : config_(config), blocks_(blocks), lora_(lora) {}

Status Scheduler::add(Sequence* seq) {
  if (seq->num_tokens() == 0) return Status::error("the prompt is empty");
  const int64_t total = static_cast<int64_t>(seq->num_tokens()) + seq->max_tokens;
  if (total > config_.max_model_len)
    return Status::error("prompt (" + std::to_string(seq->num_tokens()) + " tokens) + max_tokens (" +
                         std::to_string(seq->max_tokens) + ") exceeds the maximum context length " +
                         std::to_string(config_.max_model_len));
  const int need = blocks_for(static_cast<int>(total), blocks_->block_size());
  if (need > blocks_->num_blocks())
    return Status::error("request needs " + std::to_string(need) + " KV blocks but the whole cache has " +
                         std::to_string(blocks_->num_blocks()) + " (raise --num-kv-blocks / --kv-cache-memory)");
  if (seq->lora_uid != 0 && config_.max_loras < 1) return Status::error("LoRA is not enabled");
  seq->status = SeqStatus::kWaiting;
  enqueue(seq);
  return Status::ok();
}

namespace {
bool served_before(const Sequence* a, const Sequence* b) {
  return a->priority != b->priority ? a->priority < b->priority : a->seq_id < b->seq_id;
}
}  // namespace

void Scheduler::enqueue(Sequence* seq) {
  if (config_.policy == SchedulingPolicy::kFcfs) {
    waiting_.push_back(seq);
    return;
  }
  waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), seq, served_before), seq);
}

Sequence* Scheduler::preemption_victim() const {
  if (config_.policy == SchedulingPolicy::kFcfs) return running_.back();
  return *std::max_element(running_.begin(), running_.end(), served_before);
}

// Frees a sequence's KV blocks (tail first, so the tail is evicted first) and LoRA pin.
void Scheduler::release_resources(Sequence* seq) {
  for (auto it = seq->block_table.rbegin(); it != seq->block_table.rend(); ++it) blocks_->free(*it);
  seq->block_table.clear();
  seq->block_hashes.clear();
  if (seq->lora_slot >= 0) {
    lora_->release(seq->lora_slot);
    seq->lora_slot = -1;
  }
}

void Scheduler::preempt(Sequence* seq) {
  release_resources(seq);
  seq->num_computed_tokens = 0;
  seq->status = SeqStatus::kWaiting;
  ++seq->num_preemptions;
  ++num_preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  // fcfs: first in line again, ahead of the sequences that arrived after it.
  if (config_.policy == SchedulingPolicy::kFcfs)
    waiting_.push_front(seq);
  else
    enqueue(seq);
}

bool Scheduler::grow_blocks(Sequence* seq, int tokens) {
  const int need = blocks_for(tokens, blocks_->block_size()) - static_cast<int>(seq->block_table.size());
  if (need <= 0) return true;
  if (blocks_->num_free() < need) return false;
  for (int i = 0; i < need; ++i) seq->block_table.push_back(*blocks_->allocate());
  return true;
}

ScheduledBatch Scheduler::schedule() {
  ScheduledBatch out;
  int budget = config_.max_num_batched_tokens;
  std::set<uint64_t> loras;
  std::vector<std::pair<Sequence*, int>> chosen;

  // 1. Running sequences, oldest first; when blocks run out, preempt the policy's victim
  // (fcfs: the newest). Under the priority policy the victim may be one already chosen in
  // this step: it leaves the batch and gives its tokens back to the budget.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* seq = running_[i];
    const int n = std::min(seq->num_tokens() - seq->num_computed_tokens, budget);
    if (n <= 0) continue;
    bool fits = grow_blocks(seq, seq->num_computed_tokens + n);
    while (!fits) {
      Sequence* victim = preemption_victim();
      const size_t v = static_cast<size_t>(std::find(running_.begin(), running_.end(), victim) - running_.begin());
      if (v < i) {
        auto c = std::find_if(chosen.begin(), chosen.end(), [&](const auto& sn) { return sn.first == victim; });
        if (c != chosen.end()) {
          budget += c->second;
          chosen.erase(c);
        }
        --i;
      }
      out.preempted.push_back(victim);
      preempt(victim);
      if (victim == seq) break;
      fits = grow_blocks(seq, seq->num_computed_tokens + n);
    }
    if (!fits) break;  // seq itself was the victim: nothing after it runs either
    if (seq->lora_uid != 0) loras.insert(seq->lora_uid);
    chosen.emplace_back(seq, n);
    budget -= n;
  }

  // 2. Waiting sequences in the policy's order; none are admitted in a step that preempted.
  if (out.preempted.empty()) {
    for (auto it = waiting_.begin(); it != waiting_.end() && budget > 0;) {
      Sequence* seq = *it;
      if (static_cast<int>(running_.size()) >= config_.max_num_seqs) break;
      // LoRA: at most max_loras distinct adapters per step, and a slot must be obtainable.
      // A sequence blocked only by its adapter is skipped, keeping its place in line.
      if (seq->lora_uid != 0 && !loras.count(seq->lora_uid) &&
          (static_cast<int>(loras.size()) >= config_.max_loras || !lora_->can_acquire(seq->lora_uid))) {
        ++it;
        continue;
      }
      // Prefix cache (not for prompt_logprobs requests: they need every prompt row's logits).
      std::vector<int> cached;
      if (config_.enable_prefix_caching && !seq->needs_prompt_logits && seq->num_computed_tokens == 0)
        cached = blocks_->match_prefix(seq->tokens, seq->lora_uid, seq->cache_salt);
      // At least one token must be computed so the step produces logits.
      while (!cached.empty() && static_cast<int>(cached.size()) * blocks_->block_size() >= seq->num_tokens()) {
        blocks_->free(cached.back());
        cached.pop_back();
      }
      const int start = static_cast<int>(cached.size()) * blocks_->block_size();
      const int n = std::min(seq->num_tokens() - start, budget);
      const int need = blocks_for(start + n, blocks_->block_size()) - static_cast<int>(cached.size());
      if (blocks_->num_free() < need) {
        for (auto b = cached.rbegin(); b != cached.rend(); ++b) blocks_->free(*b);
        break;  // no room: keep FCFS order, try again next step
      }
      if (seq->lora_uid != 0) {
        auto slot = lora_->acquire(seq->lora_uid);
        if (!slot.is_ok()) {
          for (auto b = cached.rbegin(); b != cached.rend(); ++b) blocks_->free(*b);
          ++it;
          continue;
        }
        seq->lora_slot = slot.value();
        loras.insert(seq->lora_uid);
      }
      blocks_->record_hits(static_cast<int>(cached.size()));
      seq->block_table.assign(cached.begin(), cached.end());
      seq->block_hashes.clear();
      uint64_t h = seq->cache_salt;
      for (size_t k = 0; k < cached.size(); ++k) {
        h = BlockPool::hash_block(h, std::span<const int32_t>(seq->tokens).subspan(k * blocks_->block_size(), blocks_->block_size()),
                                  seq->lora_uid);
        seq->block_hashes.push_back(h);
      }
      seq->num_computed_tokens = start;
      seq->num_cached_prompt_tokens = start;
      if (seq->first_cached_tokens < 0) seq->first_cached_tokens = start;
      grow_blocks(seq, start + n);
      seq->status = SeqStatus::kRunning;
      running_.push_back(seq);
      chosen.emplace_back(seq, n);
      budget -= n;
      it = waiting_.erase(it);
    }
  }

  // 3. The ForwardBatch.
  ForwardBatch& fb = out.batch;
  const int bs = blocks_->block_size();
  int max_blocks = 0;
  for (auto& [seq, n] : chosen) max_blocks = std::max(max_blocks, static_cast<int>(seq->block_table.size()));
  fb.max_blocks_per_seq = max_blocks;
  fb.query_start.push_back(0);
  bool decode_only = true;
  for (auto& [seq, n] : chosen) {
    ScheduledSeq ss;
    ss.seq = seq;
    ss.num_tokens = n;
    const int begin = seq->num_computed_tokens;
    const int row0 = fb.num_tokens();
    for (int j = 0; j < n; ++j) {
      const int pos = begin + j;
      fb.token_ids.push_back(seq->tokens[pos]);
      fb.positions.push_back(pos);
      fb.slot_mapping.push_back(seq->block_table[pos / bs] * bs + pos % bs);
      fb.token_lora_slot.push_back(seq->lora_slot);
    }
    fb.query_start.push_back(fb.num_tokens());
    fb.seq_lens.push_back(begin + n);
    for (int k = 0; k < max_blocks; ++k)
      fb.block_tables.push_back(k < static_cast<int>(seq->block_table.size()) ? seq->block_table[k] : 0);
    ss.samples = begin + n == seq->num_tokens();
    ss.first_logit_row = static_cast<int>(fb.logit_rows.size());
    if (seq->needs_prompt_logits && begin < seq->num_prompt_tokens) {
      for (int j = 0; j < n; ++j) fb.logit_rows.push_back(row0 + j);
    } else if (ss.samples) {
      fb.logit_rows.push_back(row0 + n - 1);
    }
    ss.num_logit_rows = static_cast<int>(fb.logit_rows.size()) - ss.first_logit_row;
    const bool prefill = begin < seq->num_prompt_tokens;
    (prefill ? out.num_prefill_tokens : out.num_decode_tokens) += n;
    decode_only &= !prefill && n == 1;
    out.seqs.push_back(ss);
  }
  fb.decode_only = decode_only && !chosen.empty();
  return out;
}

void Scheduler::commit(const ScheduledBatch& batch) {
  const int bs = blocks_->block_size();
  for (const ScheduledSeq& ss : batch.seqs) {
    Sequence* seq = ss.seq;
    if (seq->status != SeqStatus::kRunning) continue;  // finished meanwhile
    seq->num_computed_tokens += ss.num_tokens;
    // Publish blocks that just became full.
    const int full = seq->num_computed_tokens / bs;
    while (static_cast<int>(seq->block_hashes.size()) < full) {
      const size_t k = seq->block_hashes.size();
      const uint64_t parent = k == 0 ? seq->cache_salt : seq->block_hashes.back();
      const uint64_t h = BlockPool::hash_block(parent, std::span<const int32_t>(seq->tokens).subspan(k * bs, bs), seq->lora_uid);
      seq->block_hashes.push_back(h);
      blocks_->publish(seq->block_table[k], h);
    }
  }
}

void Scheduler::finish(Sequence* seq) {
  if (seq->status == SeqStatus::kFinished) return;
  auto w = std::find(waiting_.begin(), waiting_.end(), seq);
  if (w != waiting_.end()) waiting_.erase(w);
  auto r = std::find(running_.begin(), running_.end(), seq);
  if (r != running_.end()) running_.erase(r);
  release_resources(seq);
  seq->status = SeqStatus::kFinished;
}

}  // namespace quiver
