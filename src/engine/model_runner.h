// ModelRunner: turns a ForwardBatch into device inputs, runs the model, and returns the
// logits the engine asked for. Owns the persistent step buffers (their addresses never
// change, which is what CUDA graph replay needs) and the activation workspace.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/kv_cache.h"
#include "lora/slot_pool.h"
#include "model/llama.h"
#include "sched/forward_batch.h"

namespace quiver {

struct RunnerLimits {
  int max_num_batched_tokens = 2048;  // rows per step
  int max_num_seqs = 256;
  int max_blocks_per_seq = 128;
  int max_logit_chunk = 256;          // lm_head rows computed (and downloaded) at a time
};

// Which path ran, for traces and verification.
struct StepPath {
  bool lora_active = false;
};

class ModelRunner {
 public:
  ModelRunner(const LlamaModel* model, KvCache* kv, const LoraSlotPool* lora, RunnerLimits limits);

  // logits (host) receives [batch.logit_rows.size(), vocab] float32.
  StepPath execute(const ForwardBatch& batch, std::vector<float>* logits);

  const RunnerLimits& limits() const { return limits_; }

 private:
  void upload(const Buffer& dst, const std::vector<int32_t>& src);

  const LlamaModel* model_;
  KvCache* kv_;
  const LoraSlotPool* lora_;
  RunnerLimits limits_;
  Backend* backend_;
  Workspace ws_;
  KvCacheView kv_view_;
  // Persistent device inputs, sized for the limits.
  Buffer token_ids_, positions_, slot_mapping_, token_slot_;     // [max_tokens]
  Buffer seg_start_, seg_slot_;                                  // [max_tokens + 1]
  Buffer query_start_, seq_lens_;                                // [max_seqs + 1]
  Buffer block_tables_;                                          // [max_seqs, max_blocks]
  Buffer logit_rows_;                                            // [max_tokens]
  Buffer logits_;                                                // [max_logit_chunk, vocab]
};

}  // namespace quiver
