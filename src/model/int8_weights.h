// --quantization int8: projection weights (q/k/v/o, gate/up/down) quantized at load to
// symmetric int8 with one float32 scale per output channel, as vLLM's and llm-compressor's
// W8 per-channel schemes store them:
//   scale[r] = max_k |w[r, k]| / 127,   q[r, k] = round_half_even(w[r, k] / scale[r])
// so q is in [-127, 127] and row r dequantizes to q[r, :] * scale[r]. A row of zeros keeps
// scale 0. The embedding table and lm_head stay in the checkpoint's type (the logits are
// the step's most sensitive product, and vLLM leaves lm_head unquantized too).
#pragma once

#include <cstdint>

#include "core/status.h"
#include "model/llama_weights.h"

namespace quiver {

// Rows [row_begin, row_end) of w ([rows, k], F32/F16/BF16, host memory, row-major) into
// q ([rows, k]) and scale ([rows]). A row holding a NaN or an infinity is not quantizable:
// returns its index, else -1.
int64_t quantize_rows_int8(const Tensor& w, int64_t row_begin, int64_t row_end, int8_t* q, float* scale);

// Replaces every projection weight of w (host memory) by its int8 copy, owned by w, and
// frees a projection's float buffer where w owned one (dummy weights). The error names the
// tensor and row that cannot be quantized.
Status quantize_projections_int8(LlamaWeights& w, Backend* backend);

}  // namespace quiver
