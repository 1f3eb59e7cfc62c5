// Megatron-style tensor parallelism: what rank `rank` of `world` holds of a Llama-family
// model and of its LoRA adapters.
//
//   q/k/v, gate/up   column-parallel: the rank's output rows (its heads, its slice of the
//                    MLP); a LoRA keeps A whole and takes B's rows of those outputs.
//   o, down          row-parallel: the rank's input columns; the outputs are partial sums,
//                    all-reduced. A LoRA takes A's columns of those inputs and keeps B whole:
//                    B (sum_r A_r x_r) = sum_r B A_r x_r, so the layer's all-reduce sums the
//                    LoRA term with the base one (model/llama.cc).
//   KV heads         sharded; where there are fewer KV heads than ranks each is replicated
//                    on the world / num_kv_heads ranks whose query heads read it.
//   lm_head          vocabulary-parallel: ceil(vocab / world) rows a rank (the last rank's
//                    shard padded with zero rows), the logits all-gathered for sampling.
//   embed_tokens, norms, the embedding / lm_head LoRA and adapters' vocabulary rows are
//   replicated (a 7B model's embedding is 2% of its bytes).
#pragma once

#include <cstdint>

#include "core/status.h"
#include "io/model_config.h"
#include "io/peft_adapter.h"

namespace quiver {

struct ShardSpec {
  int rank = 0;
  int world = 1;
  bool sharded() const { return world > 1; }
};

// Rows [begin, begin + count) of a dimension.
struct Span {
  int64_t begin = 0;
  int64_t count = 0;
};

// Whether `config` splits over `world` ranks: query heads and the MLP's intermediate
// size divide by it, and KV heads divide by it or it by them. The error names the sizes.
Status check_tensor_parallel(const ModelConfig& config, int world);

// The model a rank computes: its query heads, its KV heads and its slice of the MLP; the
// hidden size, the vocabulary and everything else unchanged.
ModelConfig shard_model_config(const ModelConfig& full, ShardSpec shard);

// What a rank holds, in the full model's coordinates.
struct ModelShard {
  ShardSpec spec;
  Span q;      // rows of q_proj (columns of o_proj): its query heads x head_dim
  Span kv;     // rows of k_proj and v_proj: its KV heads x head_dim
  Span inter;  // rows of gate_proj / up_proj, columns of down_proj
  Span vocab;  // rows of lm_head it multiplies (the last rank's may be short)
  int64_t vocab_rows = 0;  // ceil(vocab / world): its lm_head's rows, with zero padding
};
ModelShard model_shard(const ModelConfig& full, ShardSpec shard);

// The rank's slice of each module of `adapter` (column-parallel targets: B's rows;
// row-parallel: A's columns), its vocabulary rows and embedding / lm_head LoRA unchanged.
LoraAdapter shard_lora_adapter(const LoraAdapter& adapter, const ModelConfig& full, ShardSpec shard);

}  // namespace quiver
