// FP8 checkpoints (io/model_config.h, Fp8Config) on the host backends: each e4m3 projection
// weight with its scales becomes a weight the existing kernels multiply exactly as the
// dequantized model would.
// - Per-tensor and per-channel scales: the e4m3 values widened to bf16 (exact: 4
//   significant bits and an exponent range bf16 covers) with the scale as the row's
//   Tensor::row_scale, which the kernels apply to each finished dot product.
// - Per-block scales (block_n x block_k): a row's scale changes along k, so the weight is
//   dequantized at load to float32, q * scale in f32, the products the dequantized model holds.
// A projection whose file tensor is a float one (the checkpoint's ignore list) is left to
// the float loader.
#pragma once

#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "io/model_config.h"
#include "io/safetensors.h"

namespace quiver {

// Projection `name` (e.g. model.layers.0.self_attn.q_proj.weight) of an FP8 checkpoint, q its
// F8_E4M3 tensor [rows, k]: the weight to multiply, its memory appended to *owned; the
// scales are read from ckpt. Errors name the tensor: a missing or misshapen scale, a
// negative or non-finite scale, a NaN weight.
Result<Tensor> load_fp8_projection(const Checkpoint& ckpt, const std::string& name, const Tensor& q,
                                   const Fp8Config& fp8, Backend* backend, std::vector<Buffer>* owned);

}  // namespace quiver
