// LlamaModel: the Llama-family forward pass (Llama, Mistral, Qwen2), written once
// against the Backend interface, with per-token multi-LoRA on all seven projections.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "io/model_config.h"
#include "lora/slot_pool.h"
#include "model/llama_weights.h"

namespace quiver {

// One step's inputs, already on the device (the runner owns the buffers).
struct StepTensors {
  Tensor token_ids;    // [num_tokens] i32
  Tensor positions;    // [num_tokens] i32
  Tensor slot_mapping; // [num_tokens] i32
  AttentionMeta attn;
  LoraMeta lora;
  Tensor logit_rows;   // [num_logit_rows] i32
  int num_tokens = 0;
  int num_logit_rows = 0;
  // Whether LoRA kernels run this step. Eager steps skip them when no token has an
  // adapter; a captured graph must decide this at capture (it is part of the graph key).
  bool lora_active = false;
};

// Activation buffers for up to max_tokens tokens per step, allocated once. linear_dtype:
// the projections' weight type; when the backend multiplies such weights by a 16-bit copy
// of x (Backend::gemm_input_type), normed16 and gate16 hold the copies the norms and
// silu_mul write beside their f32 outputs.
struct Workspace {
  Workspace(Backend* backend, const ModelConfig& c, DType linear_dtype, int max_tokens, int max_lora_rank);
  int max_tokens;
  Buffer hidden, residual, normed;  // [T, hidden]
  Buffer q, k, v, attn_out;         // [T, q_size], [T, kv_size] x2, [T, q_size]
  Buffer gate, up;                  // [T, intermediate]
  Buffer normed16, gate16;          // [T, hidden], [T, intermediate] 16-bit, or none
  Buffer lora_tmp;                  // [T, max_lora_rank]
  Buffer selected;                  // [T, hidden] rows whose logits are wanted
};

struct KvCacheView {
  std::vector<Tensor> k, v;  // per layer: [num_blocks, block_size, num_kv_heads, head_dim]
};

class LlamaModel {
 public:
  LlamaModel(ModelConfig config, LlamaWeights weights, Backend* backend, int64_t max_positions);

  const ModelConfig& config() const { return config_; }
  const LlamaWeights& weights() const { return weights_; }
  // The projections' weight type (every layer's q/k/v/o/gate/up/down share it).
  DType linear_dtype() const { return weights_.layers.empty() ? DType::kF32 : weights_.layers[0].wq.dtype; }
  Backend* backend() const { return backend_; }

  // Runs the layers over step.num_tokens tokens, writing K/V into the cache, and leaves
  // the final-normed hidden states of step.logit_rows in ws.selected ([num_logit_rows, hidden]).
  void forward(const StepTensors& step, Workspace& ws, const KvCacheView& kv, const LoraSlotPool* lora) const;

  // logits: [rows, vocab] f32 = selected rows @ lm_head^T, for rows [row_begin, row_begin + rows).
  void lm_head(Tensor logits, const Workspace& ws, int row_begin, int rows) const;

 private:
  // g's matmuls, then (when the step runs LoRA) their adapters; targets[i] names member i.
  // The backend may leave the adapters' expand in *pending, for the op that reads g's
  // outputs next (Backend::project); pending->count is 0 otherwise.
  void project(const MatmulGroup& g, const LoraTarget* targets, Tensor x, int layer, const StepTensors& step,
               Workspace& ws, const LoraSlotPool* lora, LoraDelta* pending) const;

  ModelConfig config_;
  LlamaWeights weights_;
  Backend* backend_;
  Buffer rope_table_;  // [max_positions, head_dim] f32
  Tensor cos_sin_;
};

}  // namespace quiver
