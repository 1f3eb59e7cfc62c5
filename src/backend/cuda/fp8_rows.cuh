// Per-token fp8 (e4m3) quantization of f32 rows, as cuBLASLt's FP8 GEMM reads its input
// (gemm_fp8.cu): scale = max |row| / 448 (NaN when the row holds a NaN or an infinity; a
// zero row's scale is 1 for activations), code = e4m3(value / scale), nearest even,
// saturating. The standalone kernels (gemm_fp8.cu) and the ops that write a GEMM's input
// (the norms, silu_mul) use these helpers, so a code does not depend on which of them wrote it.
#pragma once

#include "backend/cuda/cuda_common.h"

namespace quiver::cuda {

inline constexpr float kE4m3Max = 448.f;

// The row scale from each thread's share of max |x| and of "not finite" (fmaxf passes NaN
// over, hence the flag): max / 448, NaN when any element was not finite, 1 for a zero row
// where `unit`. Every thread of the block calls it; thread 0 stores it in *slot.
__device__ inline float fp8_row_scale(float amax, float bad, float* __restrict__ slot, bool unit) {
  __shared__ float red[32];
  __shared__ float bad_red[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  amax = warp_max(amax);
  bad = warp_max(bad);
  if (lane == 0) {
    red[warp] = amax;
    bad_red[warp] = bad;
  }
  __syncthreads();
  amax = 0.f;
  bad = 0.f;
  for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) {
    amax = fmaxf(amax, red[w]);
    bad = fmaxf(bad, bad_red[w]);
  }
  float s = amax / kE4m3Max;
  if (unit && s == 0.f) s = 1.f;
  if (threadIdx.x == 0) *slot = bad != 0.f ? __int_as_float(0x7fc00000) : s;
  return s;
}

__device__ __forceinline__ uint32_t fp8_code(float v, float s) {
  return __nv_cvt_float_to_fp8(s > 0.f ? v / s : 0.f, __NV_SATFINITE, __NV_E4M3);
}

// The codes and scale of a row of k floats that this block has just written to global
// memory (the norms, silu_mul): a barrier, then the row read back (from L2, where it was
// just written), its scale taken, its codes stored. vec: k % 4 == 0, row 16-byte and codes
// 4-byte aligned (float4 reads, one 32-bit store per 4 codes). Activations: a zero row's
// scale is 1.
__device__ inline void fp8_quantize_written_row(const float* row, int64_t k, uint8_t* __restrict__ codes,
                                                float* __restrict__ slot, bool vec) {
  __syncthreads();  // other threads wrote the rest of the row
  float amax = 0.f, bad = 0.f;
  auto see = [&](float e) {
    if (!isfinite(e)) bad = 1.f;
    amax = fmaxf(amax, fabsf(e));
  };
  if (vec) {
    for (int64_t j = threadIdx.x; j < k / 4; j += blockDim.x) {
      const float4 v = reinterpret_cast<const float4*>(row)[j];
      see(v.x);
      see(v.y);
      see(v.z);
      see(v.w);
    }
  } else {
    for (int64_t j = threadIdx.x; j < k; j += blockDim.x) see(row[j]);
  }
  const float s = fp8_row_scale(amax, bad, slot, true);
  if (vec) {
    for (int64_t j = threadIdx.x; j < k / 4; j += blockDim.x) {
      const float4 v = reinterpret_cast<const float4*>(row)[j];
      reinterpret_cast<uint32_t*>(codes)[j] =
          fp8_code(v.x, s) | fp8_code(v.y, s) << 8 | fp8_code(v.z, s) << 16 | fp8_code(v.w, s) << 24;
    }
  } else {
    for (int64_t j = threadIdx.x; j < k; j += blockDim.x) codes[j] = static_cast<uint8_t>(fp8_code(row[j], s));
  }
}

// x [n, in] f32 -> e4m3 codes [n, in] and row scales [n] (a zero row's scale is 1 where
// `unit`) on `stream` (gemm_fp8.cu): each row's floats in registers where they fit.
void quantize_f32_rows(uint8_t* q, float* xs, const float* x, int64_t n, int64_t in, bool unit, cudaStream_t stream);

// x's fp8 copy (fp8_copy, an op's out16) from x [n, d] f32, for the ops whose kernels do not
// write it themselves.
inline void write_fp8_copy(const Tensor& x, const Tensor& copy, cudaStream_t stream) {
  const OutCopy c = out_copy(copy);
  const int64_t n = x.dim(0);
  quantize_f32_rows(c.codes, c.scales, x.ptr<float>(), n, n == 0 ? 0 : x.numel() / n, true, stream);
}

}  // namespace quiver::cuda
