// CUDA embedding lookup: one block per token row, converting the table's dtype to f32.
#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.h"

namespace quiver {
namespace {

// out: [n, d] f32; table: [vocab, d] T; extra: [rows, d] E (a LoRA slot's rows, read for
// ids from vocab on); ids: [n] i32. An id outside both cannot be reported from the device,
// so its row becomes NaN, which every later check notices.
template <typename T, typename E>
__global__ void embedding_kernel(float* __restrict__ out, const T* __restrict__ table, const E* __restrict__ extra,
                                 const int32_t* __restrict__ ids, int64_t vocab, int64_t rows, int64_t d) {
  cuda::pdl_enter();  // launched with pdl (cuda_common.h)
  const int64_t i = blockIdx.x;
  const int32_t id = ids[i];
  float* o = out + i * d;
  if (id < 0 || id >= vocab + rows) {
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) o[j] = NAN;
    return;
  }
  if (id < vocab) {
    const T* row = table + static_cast<int64_t>(id) * d;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) o[j] = cuda::to_f32(row[j]);
  } else {
    const E* row = extra + (static_cast<int64_t>(id) - vocab) * d;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) o[j] = cuda::to_f32(row[j]);
  }
}

}  // namespace

void CudaBackend::embedding(Tensor out, Tensor table, Tensor extra, Tensor ids) {
  cuda::check_f32(out, "embedding: out must be f32 on the GPU");
  check(ids.dtype == DType::kI32 && table.ndim == 2 && out.ndim == 2, "embedding: bad operand types");
  const int64_t n = out.dim(0), d = out.dim(1);
  check(ids.numel() == n && table.dim(1) == d, "embedding: shape mismatch");
  check(extra.empty() || (extra.ndim == 2 && extra.dim(1) == d), "embedding: extra rows of another width");
  if (n == 0 || d == 0) return;
  const int64_t rows = extra.empty() ? 0 : extra.dim(0);
  const DType extra_type = extra.empty() ? table.dtype : extra.dtype;
  cuda::dispatch_float(table.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::dispatch_float(extra_type, [&](auto etag) {
      using E = typename decltype(etag)::type;
      const int threads = static_cast<int>(std::min<int64_t>(256, (d + 31) / 32 * 32));
      cuda::launch_kernel(embedding_kernel<T, E>, static_cast<unsigned>(n), threads, 0, stream_, pdl_,
                          out.ptr<float>(), table.ptr<T>(), static_cast<const E*>(extra.data), ids.ptr<int32_t>(),
                          table.dim(0), rows, d);
    }, "embedding: extra rows must be F32, F16 or BF16");
  }, "embedding: table must be F32, F16 or BF16");
}

}  // namespace quiver
