// LoraSlotPool: the device level of the adapter cache (vLLM's max_loras).
// For every layer and target projection it owns two persistent stacks,
//   a: [max_loras, max_rank, in]    b: [max_loras, out, max_rank]   (scale folded in B)
// in float32 (default: exact PEFT agreement) or bfloat16 (vLLM's lora_dtype: half the bytes
// LoRA reads per step; values rounded to nearest even when loaded),
// allocated once and never reallocated (CUDA graphs capture their addresses). Loading an
// adapter into a slot zeroes the slot, then copies each module's weights rank-padded;
// modules the adapter does not target stay zero. A slot pinned by a running request is
// never evicted; unpinned resident adapters are evicted least-recently-used first.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "io/model_config.h"
#include "io/peft_adapter.h"
#include "lora/slot_vocab.h"

namespace quiver {

class LoraSlotPool {
 public:
  LoraSlotPool(Backend* backend, const ModelConfig& config, int max_loras, int max_rank,
               DType dtype = DType::kF32, VocabLimits vocab = {});  // dtype: kF32 or kBF16

  int max_loras() const { return max_loras_; }
  int max_rank() const { return max_rank_; }
  DType dtype() const { return dtype_; }

  // a_stack: [max_loras, max_rank, in(target)]; b_stack: [max_loras, out(target), max_rank]
  Tensor a_stack(int layer, LoraTarget target) const;
  Tensor b_stack(int layer, LoraTarget target) const;

  // Slot of adapter `uid`, loading it if not resident (into a free slot, else the LRU
  // unpinned one), and pins it once more. Error when every slot is pinned by others.
  Result<int> acquire(uint64_t uid, const LoraAdapter& adapter);
  void release(int slot);  // unpins once

  int slot_of(uint64_t uid) const;        // -1 when not resident
  bool can_acquire(uint64_t uid) const;   // resident, or some slot is unpinned
  int num_pinned() const;                 // slots with at least one pin
  uint64_t uid_in_slot(int slot) const;   // 0 when empty
  int64_t loads() const { return loads_; }  // adapters copied into slots so far

  // Vocabulary: logits rows are vocab_width() wide (the base vocabulary when extra_vocab is
  // 0); an adapter's new ids, replaced rows and embed_tokens / lm_head LoRA live in its slot
  // (vocab_tables(), lora/slot_vocab.h).
  const VocabLimits& vocab_limits() const { return vocab_.limits(); }
  int64_t vocab_width() const { return vocab_.width(); }
  VocabTables vocab_tables() const { return vocab_.tables(); }
  int32_t embed_row(int slot, int32_t token) const { return vocab_.embed_row(slot, token); }

  // Bytes of the slot stacks (every layer's A and B of every target, max_loras slots) and
  // of what the slots hold for the vocabulary.
  size_t bytes() const {
    size_t n = vocab_.bytes();
    for (const Buffer& b : buffers_) n += b.bytes();
    return n;
  }

 private:
  // Zeroes every stack's region of `slot`, then copies the adapter's modules rank-padded.
  void load_into(int slot, const LoraAdapter& adapter);

  struct Slot {
    uint64_t uid = 0;
    int pins = 0;
    uint64_t last_used = 0;
  };

  Backend* backend_;
  ModelConfig config_;
  int max_loras_;
  int max_rank_;
  DType dtype_;
  std::vector<Buffer> buffers_;  // [layer * 7 + target] * 2 (a, b)
  SlotVocab vocab_;
  std::vector<Slot> slots_;
  uint64_t clock_ = 0;
  int64_t loads_ = 0;
};

}  // namespace quiver
