// LlamaWeights: the tensors of a Llama-family checkpoint (Llama, Mistral, Qwen2), as
// views the backend can use. Loaded from safetensors (validated names and shapes) or
// generated at random for `--load-format dummy` benchmarks.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "parallel/tensor_shard.h"

namespace quiver {

struct LayerWeights {
  Tensor attn_norm;            // [hidden]
  Tensor wq, wk, wv, wo;       // [q_size, hidden], [kv_size, hidden] x2, [hidden, q_size]
  Tensor bq, bk, bv;           // [q_size], [kv_size] x2 (Qwen2 / attention_bias), else empty
  Tensor mlp_norm;             // [hidden]
  Tensor w_gate, w_up, w_down; // [inter, hidden] x2, [hidden, inter]

  // q/k/v/o, gate/up/down, in that order.
  std::array<Tensor*, 7> projections() { return {&wq, &wk, &wv, &wo, &w_gate, &w_up, &w_down}; }
};

struct LlamaWeights {
  Tensor embed;       // [vocab, hidden]
  Tensor final_norm;  // [hidden]
  Tensor lm_head;     // [vocab, hidden] (== embed when tied)
  std::vector<LayerWeights> layers;
  // Projection weights quantized at load (WeightQuantization::kInt8, kFp8): the float type
  // they came from.
  DType quantized_from = DType::kF32;

  // Keeps the memory behind the views alive: the mmap'd checkpoint and/or owned buffers.
  std::shared_ptr<Checkpoint> checkpoint;
  std::vector<Buffer> owned;

  // Total bytes of the weights a forward pass reads (lm_head counted once when tied).
  size_t weight_bytes() const;
  // Points *t at `with`, whose memory is `memory` (kept here), and frees the buffer *t had
  // here (a dummy weight's): the peak is one matrix more, not the model twice. A weight of
  // the mapped checkpoint leaves its file pages to the page cache.
  void replace(Tensor* t, const Tensor& with, Buffer memory);
  // Frees the memory behind projection weight t: an owned buffer, or the backend's upload.
  void release(const Tensor& t, Backend* backend);
};

// Every tensor the config implies must be present with the right shape. `progress`, if set,
// hears (layers loaded, layers in all) after each layer. `quant`: how the projection
// weights are kept (kInt8: model/int8_weights.h, host backends only; kFp8:
// model/fp8_weights.h, every backend). `shard`: the tensor-parallel rank whose slices are
// loaded (parallel/tensor_shard.h; the weights then have shard_model_config(config)'s
// shapes and lm_head its vocabulary shard); quantization scales are then per row of the
// rank's slice.
Result<LlamaWeights> load_llama_weights(const ModelConfig& config, std::shared_ptr<Checkpoint> checkpoint,
                                        Backend* backend, WeightQuantization quant = WeightQuantization::kNone,
                                        const std::function<void(int64_t, int64_t)>& progress = {},
                                        ShardSpec shard = {});

// Random weights in `dtype` (uniform, small scale; norms near 1) for benchmarks of
// shapes without files; deterministic for a seed. kInt8 and kFp8 quantize them as a
// checkpoint's. `shard`: a rank's shapes, its shards drawn on their own (a sharded random
// model is not the unsharded one's slices).
LlamaWeights dummy_llama_weights(const ModelConfig& config, DType dtype, Backend* backend, uint64_t seed,
                                 WeightQuantization quant = WeightQuantization::kNone, ShardSpec shard = {});

}  // namespace quiver
