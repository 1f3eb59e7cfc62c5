// FP8 (e4m3) projection weights: an FP8 checkpoint's (io/model_config.h, Fp8Config), or a
// float checkpoint's quantized at load (--quantization fp8: one scale per output channel,
// vLLM's per-channel scheme). Each becomes a weight the backend multiplies exactly as the
// dequantized model would, its scale the row's Tensor::row_scale, applied to each finished
// dot product:
// - on the GPU the e4m3 bytes themselves (the CUDA kernels widen them in registers, or
//   multiply them on the FP8 tensor cores: backend/cuda/gemm_fp8.cu);
// - on the host backends the e4m3 values widened to bf16 (exact: 4 significant bits and an
//   exponent range bf16 covers), which every CPU kernel multiplies.
// A checkpoint's per-block scales (block_n x block_k) change along a row, so those weights
// are dequantized at load: to float32 on the host backends, q * scale in f32, the products
// the dequantized model holds; to bf16 on the GPU (q * scale rounded once more, within the
// 16-bit bound of docs/numerics.md). A projection whose file tensor is a float one (the
// checkpoint's ignore list) is left to the float loader.
#pragma once

#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "model/llama_weights.h"

namespace quiver {

// Projection `name` (e.g. model.layers.0.self_attn.q_proj.weight) of an FP8 checkpoint, q its
// F8_E4M3 tensor [rows, k]: the weight to multiply, its memory appended to *owned; the
// scales are read from ckpt. Errors name the tensor: a missing or misshapen scale, a
// negative or non-finite scale, a NaN weight.
Result<Tensor> load_fp8_projection(const Checkpoint& ckpt, const std::string& name, const Tensor& q,
                                   const Fp8Config& fp8, Backend* backend, std::vector<Buffer>* owned);

// --quantization fp8 of projection `name`, w its float tensor in host memory (a mapped
// checkpoint's) or in the backend's (dummy weights): Backend::quantize_fp8_rows, the
// result's memory appended to *owned. The error names the tensor and row holding a NaN or
// an infinity.
Result<Tensor> quantize_fp8_projection(const Tensor& w, const std::string& name, Backend* backend,
                                       std::vector<Buffer>* owned);

// quantize_fp8_projection of every projection weight of w (random weights in the backend's
// memory), each replacing its float buffer in w (LlamaWeights::replace), so the peak is
// one matrix more, not the model twice. The error names the tensor and row.
Status quantize_projections_fp8(LlamaWeights& w, Backend* backend);

}  // namespace quiver
