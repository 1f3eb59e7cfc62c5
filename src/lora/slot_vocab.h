// SlotVocab: what the LoRA slots hold for the vocabulary, beside the projection stacks of
// LoraSlotPool. Per slot, persistent and written only when an adapter is loaded into it
// (CUDA graphs read it after a swap):
//   - rows of embed_tokens and lm_head an adapter replaces or adds (io/adapter_vocab.h), up
//     to VocabLimits::rows of each, with the lm_head rows' ids and the slot's vocabulary size;
//   - the LoRA of embed_tokens and lm_head (LoraAdapter::embed_lora / lm_head_lora), rank-
//     padded over the widened vocabulary, and each slot's two ranks (0: none, kernels skip).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "io/model_config.h"
#include "io/peft_adapter.h"

namespace quiver {

// Vocabulary rows a slot holds, fixed at start-up like the stacks.
struct VocabLimits {
  int64_t extra_vocab = 0;  // ids an adapter may add past the base vocabulary (vLLM's lora_extra_vocab_size)
  int64_t rows = 0;         // rows an adapter may set in each of embed_tokens and lm_head
  // Error, naming the flag to raise and what a slot then costs, when `a` does not fit.
  Status check(const LoraAdapter& a, const ModelConfig& base, DType dtype) const;
  // Bytes the rows take per slot: [rows, hidden] for each of embed_tokens and lm_head, in
  // vocab_rows_dtype(dtype, base).
  int64_t slot_bytes(const ModelConfig& base, DType dtype) const;
};

// The type the slots keep vocabulary rows in, for stacks of `slot_dtype`: bfloat16 only when
// the stacks are and the base model is 16-bit too. The rows replace the base's own rows
// whole, so rounding them below the base's precision moves every logit they give: float32
// rows of a float32 model in bf16 stacks measured 0.26 logprob off HF on llama_vocab's
// emb_resized (0.16 kept in float32), past the 0.25 bound of bf16 stacks (docs/numerics.md).
DType vocab_rows_dtype(DType slot_dtype, const ModelConfig& base);

// One line on what an adapter is and what of a slot it takes, for the log when it is
// registered: "LoRA adapter 'sql': rank 16 on 224 modules, embed_tokens LoRA rank 8; vocabulary
// (added_tokens.json): 4 new tokens, 4 embed_tokens + 4 lm_head rows, 0.13 of the 8.00 MiB a
// slot holds for rows (--max-lora-vocab-rows 256)".
std::string describe_adapter(const LoraAdapter& a, const VocabLimits& limits, const ModelConfig& base, DType dtype);

// n float32 values to the device at dst, rounded to bf16 first for bf16 stacks (narrow: the
// staging, reused), and waits: the caller reuses its host buffers.
void upload_stack(Backend* backend, DType dtype, void* dst, const float* src, size_t n, std::vector<uint16_t>* narrow);

class SlotVocab {
 public:
  SlotVocab(Backend* backend, const ModelConfig& config, int max_loras, int max_rank, DType dtype, VocabLimits limits);

  // Replaces what `slot` held with `adapter`'s rows and embed_tokens / lm_head LoRA (zeros
  // and rank 0 where it has none).
  void load(int slot, const LoraAdapter& adapter);

  const VocabLimits& limits() const { return limits_; }
  int64_t width() const { return config_.vocab_size + limits_.extra_vocab; }
  VocabTables tables() const;
  // The row embedding reads for `token` in `slot`: the token itself, or, where the slot's
  // adapter replaces it, base vocabulary + the slot's row (VocabTables::embed_rows).
  int32_t embed_row(int slot, int32_t token) const;
  size_t bytes() const;

 private:
  void load_rows(int slot, const AdapterVocab& v);
  void load_lora(int slot, const LoraAdapter& a);

  Backend* backend_;
  ModelConfig config_;
  int max_loras_;
  int max_rank_;
  DType dtype_;       // the LoRA stacks'
  DType rows_dtype_;  // the rows' (vocab_rows_dtype)
  VocabLimits limits_;
  // Rows (VocabTables), allocated when limits_.rows > 0; row counts and vocabulary sizes always.
  Buffer embed_rows_, lm_head_rows_, lm_head_ids_, row_counts_, vocab_sizes_;
  // LoRA (VocabLora).
  Buffer embed_a_, embed_b_, head_a_, head_b_, ranks_;
  std::vector<std::vector<int32_t>> input_ids_;  // per slot: the adapter's embed_tokens ids (ascending)
  std::vector<float> padded_;                    // host staging of one rank-padded matrix
  std::vector<uint16_t> narrow_;                 // bf16 staging
};

}  // namespace quiver
