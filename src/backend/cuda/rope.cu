// CUDA rotate-half RoPE (HF convention), in place on q and k: one thread per (token, head,
// pair) with pairs (j, j + head_dim/2); grid (tokens, pair chunks of 128), so a decode step
// of one token still spreads over many multiprocessors.
#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.h"

namespace quiver {
namespace {

// q: [n, num_heads, hd]; k: [n, num_kv, hd]; positions: [n]; cos_sin: [max_pos, hd] with
// row p = cos(p*f_0..f_{h-1}), sin(p*f_0..f_{h-1}), h = hd/2. A position outside the table
// cannot be reported from the device: its rows become NaN.
__global__ void rope_kernel(float* __restrict__ q, float* __restrict__ k, const int32_t* __restrict__ positions,
                            const float* __restrict__ cos_sin, int num_heads, int num_kv, int hd, int max_pos) {
  cuda::pdl_enter();  // launched with pdl (cuda_common.h)
  const int64_t i = blockIdx.x;
  const int half = hd / 2;
  const int pos = positions[i];
  const bool valid = pos >= 0 && pos < max_pos;
  const float* cs = cos_sin + static_cast<int64_t>(valid ? pos : 0) * hd;
  const int pairs = (num_heads + num_kv) * half;
  const int p = blockIdx.y * blockDim.x + threadIdx.x;
  if (p < pairs) {
    const int head = p / half, j = p - head * half;
    float* v = head < num_heads ? q + (i * num_heads + head) * hd : k + (i * num_kv + head - num_heads) * hd;
    if (!valid) {
      v[j] = NAN;
      v[j + half] = NAN;
      return;
    }
    const float c = cs[j], s = cs[half + j];
    const float a = v[j], b = v[j + half];
    v[j] = a * c - b * s;
    v[j + half] = b * c + a * s;
  }
}

}  // namespace

void CudaBackend::rope(Tensor q, Tensor k, Tensor positions, Tensor cos_sin) {
  cuda::check_f32(q, "rope: q must be f32 on the GPU");
  cuda::check_f32(k, "rope: k must be f32 on the GPU");
  cuda::check_f32(cos_sin, "rope: cos_sin must be f32 on the GPU");
  check(q.ndim == 3 && k.ndim == 3 && positions.dtype == DType::kI32, "rope: bad operand types");
  const int64_t n = q.dim(0), hd = q.dim(2);
  check(k.dim(0) == n && k.dim(2) == hd && positions.numel() == n && hd % 2 == 0 && cos_sin.dim(1) == hd,
        "rope: shape mismatch");
  if (n == 0) return;
  const int64_t pairs = (q.dim(1) + k.dim(1)) * (hd / 2);
  constexpr int kThreads = 128;
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(cuda::ceil_div(pairs, kThreads)));
  cuda::launch_kernel(rope_kernel, grid, kThreads, 0, stream_, pdl_, q.ptr<float>(), k.ptr<float>(),
                      positions.ptr<int32_t>(), cos_sin.ptr<float>(), static_cast<int>(q.dim(1)),
                      static_cast<int>(k.dim(1)), static_cast<int>(hd), static_cast<int>(cos_sin.dim(0)));
}

}  // namespace quiver
