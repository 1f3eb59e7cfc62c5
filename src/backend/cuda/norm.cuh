// The row helpers that the plain norm (norm.cu) and the norms with a pending LoRA term
// (norm_lora.cu) share, and the latter's launch.
#pragma once

#include "backend/backend.h"
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/lora_delta.cuh"

namespace quiver::cuda {

// The weights of row element group j (4 elements from 4j), as floats.
template <typename W>
__device__ __forceinline__ float4 load_w4(const W* __restrict__ w, int64_t j) {
  const int64_t e = 4 * j;
  return make_float4(cuda::to_f32(w[e]), cuda::to_f32(w[e + 1]), cuda::to_f32(w[e + 2]), cuda::to_f32(w[e + 3]));
}

// out row element group j = wv * (a * inv), and its 16-bit copy; wv: load_w4(w, j).
__device__ __forceinline__ void store_normed4(float* __restrict__ o, void* __restrict__ out16, bool bf16, float4 wv,
                                              int64_t row, int64_t d, int64_t j, float4 a, float inv) {
  const int64_t e = 4 * j;
  const float4 r = make_float4(wv.x * (a.x * inv), wv.y * (a.y * inv), wv.z * (a.z * inv), wv.w * (a.w * inv));
  reinterpret_cast<float4*>(o)[j] = r;
  cuda::store_x16(out16, row * d + e, r.x, bf16);
  cuda::store_x16(out16, row * d + e + 1, r.y, bf16);
  cuda::store_x16(out16, row * d + e + 2, r.z, bf16);
  cuda::store_x16(out16, row * d + e + 3, r.w, bf16);
}

// add_rms_norm with da's term added to x first (da.count > 0, d % 4 == 0 and aligned
// rows; the caller checked the shapes): the shared-memory kernel for 1-2 rows whose slab
// fits in smem_max bytes, the cluster kernel where `clusters` (sm_90+), else one block a
// row (norm_lora.cu).
void launch_add_rms_norm_delta(cudaStream_t stream, bool pdl, bool clusters, int64_t smem_max, Tensor out,
                               Tensor out16, Tensor residual, Tensor x, Tensor w, float eps, const LoraDeltaArgs& da);

// Allows the shared-memory kernel its slab, up to the device's opt-in limit per block;
// returns the bytes allowed (smem_max above). Once per backend.
int64_t set_norm_delta_smem(int64_t optin_bytes);

}  // namespace quiver::cuda
