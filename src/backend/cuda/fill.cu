// Dummy weights filled on the GPU (`--load-format dummy`): t[i] = hash_uniform(seed, i, ...)
// computed in place, so a 7B benchmark model costs no host fill and no upload, and is
// bitwise the model a host backend would generate from the same seed.
#include <algorithm>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.h"
#include "core/splitmix.h"

namespace quiver {
namespace {

template <typename T>
__global__ void fill_uniform_kernel(T* __restrict__ out, int64_t n, float center, float scale, uint64_t seed) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = cuda::from_f32<T>(hash_uniform(seed, static_cast<uint64_t>(i), center, scale));
}

}  // namespace

void CudaBackend::fill_uniform(Tensor t, float center, float scale, uint64_t seed) {
  check(t.device == Device::kCuda, "fill_uniform: tensor must be on the GPU");
  const int64_t n = t.numel();
  if (n == 0) return;
  constexpr int kThreads = 256;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(cuda::ceil_div(n, kThreads), int64_t{num_sms_} * 32));
  cuda::dispatch_float(t.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    fill_uniform_kernel<T><<<blocks, kThreads, 0, stream_>>>(static_cast<T*>(t.data), n, center, scale, seed);
    cuda::launch_check();
  }, "fill_uniform: float tensors only");
}

}  // namespace quiver
