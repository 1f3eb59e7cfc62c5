// CUDA kv_write: scatters this step's k/v rows into the paged cache, converting to the
// cache dtype (round to nearest even, as the reference does). Grid (tokens, row chunks of
// 256 elements): one token's row spreads over several multiprocessors.
#include <algorithm>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.h"

namespace quiver {
namespace {

// k_cache, v_cache: [num_slots = num_blocks * block_size, row] T; k, v: [n, row] f32;
// slot_mapping: [n]. Slot -1 is padding and skipped; a slot past the cache cannot be
// reported from the device and is skipped too (the reference check()s it).
template <typename T>
__global__ void kv_write_kernel(T* __restrict__ k_cache, T* __restrict__ v_cache, const float* k,
                                const float* v, const int32_t* __restrict__ slot_mapping,
                                int64_t row, int64_t num_slots) {
  cuda::pdl_enter();  // launched with pdl (cuda_common.h)
  const int64_t i = blockIdx.x;
  const int64_t slot = slot_mapping[i];
  if (slot < 0 || slot >= num_slots) return;
  const int64_t j = int64_t{blockIdx.y} * blockDim.x + threadIdx.x;
  if (j < row) {
    k_cache[slot * row + j] = cuda::from_f32<T>(k[i * row + j]);
    v_cache[slot * row + j] = cuda::from_f32<T>(v[i * row + j]);
  }
}

}  // namespace

void CudaBackend::check_kv_write(Tensor k_cache, Tensor v_cache, Tensor k, Tensor v, Tensor slot_mapping) {
  cuda::check_f32(k, "kv_write: k must be f32 on the GPU");
  cuda::check_f32(v, "kv_write: v must be f32 on the GPU");
  check(k_cache.ndim == 4 && v_cache.ndim == 4 && k_cache.dtype == v_cache.dtype, "kv_write: bad caches");
  check(slot_mapping.dtype == DType::kI32, "kv_write: slot_mapping must be i32");
  const int64_t n = k.dim(0), row = k_cache.dim(2) * k_cache.dim(3);
  check(k.numel() == n * row && v.numel() == n * row && slot_mapping.numel() == n, "kv_write: shape mismatch");
  check(v_cache.numel() == k_cache.numel(), "kv_write: k and v caches differ in shape");
}

void CudaBackend::kv_write(Tensor k_cache, Tensor v_cache, Tensor k, Tensor v, Tensor slot_mapping) {
  check_kv_write(k_cache, v_cache, k, v, slot_mapping);
  const int64_t n = k.dim(0), row = k_cache.dim(2) * k_cache.dim(3);
  if (n == 0) return;
  constexpr int kThreads = 256;
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(cuda::ceil_div(row, kThreads)));
  cuda::dispatch_float(k_cache.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::launch_kernel(kv_write_kernel<T>, grid, kThreads, 0, stream_, pdl_, k_cache.ptr<T>(), v_cache.ptr<T>(),
                        k.ptr<float>(), v.ptr<float>(), slot_mapping.ptr<int32_t>(), row,
                        k_cache.dim(0) * k_cache.dim(1));
  }, "kv_write: cache must be F32, F16 or BF16");
}

}  // namespace quiver
