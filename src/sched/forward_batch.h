// ForwardBatch: the one object that crosses scheduler -> model runner each step.
// Host-side arrays; the runner copies them into persistent device buffers.
#pragma once

#include <cstdint>
#include <vector>

namespace quiver {

struct ForwardBatch {
  // Per token (num_tokens rows, sequences laid out one after another).
  std::vector<int32_t> token_ids;
  std::vector<int32_t> positions;
  std::vector<int32_t> slot_mapping;     // KV cache slot = block * block_size + offset
  std::vector<int32_t> token_lora_slot;  // device LoRA slot, -1 = base model

  // Per sequence.
  std::vector<int32_t> query_start;   // [num_seqs + 1]
  std::vector<int32_t> seq_lens;      // [num_seqs] context length after this step
  std::vector<int32_t> block_tables;  // [num_seqs, max_blocks_per_seq], padded with 0
  int max_blocks_per_seq = 0;

  // Token rows whose next-token logits the engine needs (sampling, prompt logprobs), in order.
  std::vector<int32_t> logit_rows;

  bool decode_only = false;  // every sequence contributes exactly one token

  int num_tokens() const { return static_cast<int>(token_ids.size()); }
  int num_seqs() const { return static_cast<int>(seq_lens.size()); }
};

}  // namespace quiver
