// LlamaModel: the Llama-family forward pass (Llama, Mistral, Qwen2), written once
// against the Backend interface, with per-token multi-LoRA on all seven projections.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "io/model_config.h"
#include "lora/slot_pool.h"
#include "model/llama_weights.h"
#include "backend/communicator.h"

namespace quiver {

// One step's inputs, already on the device (the runner owns the buffers).
struct StepTensors {
  Tensor token_ids;    // [num_tokens] i32: the rows embedding reads (slot rows where an adapter replaces a token)
  Tensor lora_ids;     // [num_tokens] i32: the tokens' own ids, which the embed_tokens LoRA reads
  Tensor positions;    // [num_tokens] i32
  Tensor slot_mapping; // [num_tokens] i32
  AttentionMeta attn;
  LoraMeta lora;
  Tensor logit_rows;   // [num_logit_rows] i32
  Tensor logit_slot;   // [num_logit_rows] i32: each logits row's LoRA slot (-1: none)
  // Rows the embedding reads for ids past the base vocabulary (VocabTables::embed_rows;
  // token_ids then hold the slot rows the host mapped them to), or empty.
  Tensor embed_extra;
  int num_tokens = 0;
  int num_logit_rows = 0;
  // Whether LoRA kernels run this step. Eager steps skip them when no token has an
  // adapter; a captured graph must decide this at capture (it is part of the graph key).
  bool lora_active = false;
  // The kernels of every projection group (Backend::plan of step_shape(num_tokens,
  // lora_active)); a graph is recorded and replayed under one plan.
  StepPlan plan;
};

// Activation buffers for up to max_tokens tokens per step, allocated once. x16: the type
// some plan multiplies x in (GroupPlan::x_type), or kF32; when not kF32, normed16 and
// gate16 hold the copies the norms and silu_mul write beside their f32 outputs (16-bit,
// or an fp8 copy: e4m3 codes and row scales, fp8_copy), sized for either.
struct Workspace {
  Workspace(Backend* backend, const ModelConfig& c, DType x16, int max_tokens, int max_lora_rank);
  size_t bytes() const;
  int max_tokens;
  int64_t q_size, kv_size, intermediate;
  Buffer hidden, residual, normed;  // [T, hidden]
  // q [T, q_size], k and v [T, kv_size] back to back, and gate and up [T, intermediate]:
  // members of one width at one stride, which the CUDA matmul runs as one batched GEMM
  // (gemm.cu), as it does their weights (LlamaWeights::place_groups).
  Buffer qkv, gate_up;
  Buffer attn_out;                  // [T, q_size]
  Tensor q(int64_t n) const { return part(qkv, 0, n, q_size); }
  Tensor k(int64_t n) const { return part(qkv, max_tokens * q_size, n, kv_size); }
  Tensor v(int64_t n) const { return part(qkv, max_tokens * (q_size + kv_size), n, kv_size); }
  Tensor gate(int64_t n) const { return part(gate_up, 0, n, intermediate); }
  Tensor up(int64_t n) const { return part(gate_up, max_tokens * intermediate, n, intermediate); }
  Buffer normed16, gate16;          // [T, hidden], [T, intermediate] copies, or none
  Buffer lora_tmp;                  // [3, T, max_lora_rank]: a group's shrink results (GroupLora::t)
  Buffer selected;                  // [T, hidden] rows whose logits are wanted
  // Tensor parallelism (LlamaModel::size_head_buffers): this rank's lm_head rows of the
  // logits, and every rank's, gathered.
  Buffer head_part, head_all;       // [rows, vocab shard], [world, rows, vocab shard]

 private:
  // [n, width] f32 from `offset` floats into b.
  static Tensor part(const Buffer& b, int64_t offset, int64_t n, int64_t width) {
    return b.tensor_at(sizeof(float) * static_cast<size_t>(offset), DType::kF32, {n, width});
  }
};

struct KvCacheView {
  std::vector<KvLayer> layers;  // per layer (KvCache::layers)
};

// A tensor-parallel rank's model (parallel/tensor_shard.h) has its shard's config and
// weights and a Communicator: after o_proj and down_proj it all-reduces the partial sums,
// and lm_head gathers the vocabulary shards. comm null: the whole model.
class LlamaModel {
 public:
  LlamaModel(ModelConfig config, LlamaWeights weights, Backend* backend, int64_t max_positions,
             Communicator* comm = nullptr);

  const ModelConfig& config() const { return config_; }
  const LlamaWeights& weights() const { return weights_; }
  // The projections' weight type (every layer's q/k/v/o/gate/up/down share it).
  DType linear_dtype() const { return weights_.layers.empty() ? DType::kF32 : weights_.layers[0].wq.dtype; }
  Backend* backend() const { return backend_; }
  // The shape a step of `tokens` tokens plans for (Backend::plan); lora: LoRA kernels run,
  // on the stacks of `pool`.
  StepShape step_shape(int64_t tokens, bool lora, const LoraSlotPool* pool) const;

  // Runs the layers over step.num_tokens tokens, writing K/V into the cache, and leaves
  // the final-normed hidden states of step.logit_rows in ws.selected ([num_logit_rows, hidden]).
  void forward(const StepTensors& step, Workspace& ws, const KvCacheView& kv, const LoraSlotPool* lora) const;

  // logits: [rows, vocab] f32 = selected rows @ lm_head^T, for rows [row_begin, row_begin + rows).
  void lm_head(Tensor logits, const Workspace& ws, int row_begin, int rows) const;
  // Gives ws the buffers lm_head gathers up to `rows` rows through (none unsharded).
  void size_head_buffers(Workspace& ws, int64_t rows) const;
  Communicator* communicator() const { return comm_; }
  // The selected rows lm_head reads for rows [row_begin, row_begin + rows).
  Tensor selected(const Workspace& ws, int row_begin, int rows) const;

 private:
  // The LoRA of projection group `g` of `layer` on outputs ys, when plan runs it (else
  // count 0).
  GroupLora group_lora(const GroupPlan& plan, ProjGroup g, std::initializer_list<Tensor> ys, int layer,
                       const StepTensors& step, Workspace& ws, const LoraSlotPool* lora) const;
  // Sums a row-parallel group's (o, down) partial outputs over the ranks; no-op unsharded.
  void all_reduce(Tensor y, const GroupPlan& plan, const GroupLora& lora) const;

  ModelConfig config_;
  LlamaWeights weights_;
  Backend* backend_;
  Communicator* comm_;
  Buffer rope_table_;  // [max_positions, head_dim] f32
  Tensor cos_sin_;
};

}  // namespace quiver
