// CUDA embedding lookup: one block per token row, converting the table's dtype to f32; and
// the embed_tokens LoRA of each token's slot added on top.
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

// One block per token: the slot's embed_a row of the token (rank values, in shared memory),
// then each thread one hidden dimension d: out[i, d] += embed_b[s][d, :rank] . a. Blocks of
// tokens without an adapter, or whose adapter has no embed_tokens LoRA, exit at once.
template <typename T>
__global__ void embedding_lora_kernel(float* __restrict__ out, const int32_t* __restrict__ ids,
                                      const int32_t* __restrict__ token_slot, const T* __restrict__ embed_a,
                                      const T* __restrict__ embed_b, const int32_t* __restrict__ ranks, int64_t w,
                                      int64_t max_rank, int64_t d) {
  cuda::pdl_enter();  // launched with pdl (cuda_common.h)
  extern __shared__ float a[];
  const int64_t i = blockIdx.x;
  const int32_t s = token_slot[i];
  if (s < 0) return;
  const int rank = ranks[2 * s];
  if (rank == 0) return;
  const int32_t id = ids[i];
  float* o = out + i * d;
  if (id < 0 || id >= w) {  // cannot be reported from the device: NaN, which every later check notices
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) o[j] = NAN;
    return;
  }
  const T* row = embed_a + (static_cast<int64_t>(s) * w + id) * max_rank;
  for (int k = threadIdx.x; k < rank; k += blockDim.x) a[k] = cuda::to_f32(row[k]);
  __syncthreads();
  const T* b = embed_b + static_cast<int64_t>(s) * d * max_rank;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const T* bj = b + j * max_rank;
    float acc = 0.f;
    for (int k = 0; k < rank; ++k) acc += cuda::to_f32(bj[k]) * a[k];
    o[j] += acc;
  }
}

}  // namespace

void CudaBackend::embedding_lora(Tensor out, Tensor ids, Tensor token_slot, const VocabLora& lora) {
  cuda::check_f32(out, "embedding_lora: out must be f32 on the GPU");
  const int64_t n = out.dim(0), d = out.dim(1);
  check(ids.numel() == n && token_slot.numel() == n && ids.dtype == DType::kI32 && token_slot.dtype == DType::kI32,
        "embedding_lora: shape mismatch");
  if (lora.empty() || n == 0) return;
  check(lora.embed_b.dim(1) == d && lora.embed_a.dtype == lora.embed_b.dtype, "embedding_lora: stacks of another shape");
  const int64_t w = lora.embed_a.dim(1), r = lora.max_rank();
  cuda::dispatch_float(lora.embed_a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int threads = static_cast<int>(std::min<int64_t>(256, (d + 31) / 32 * 32));
    cuda::launch_kernel(embedding_lora_kernel<T>, static_cast<unsigned>(n), threads, sizeof(float) * r, stream_, pdl_,
                        out.ptr<float>(), ids.ptr<int32_t>(), token_slot.ptr<int32_t>(), lora.embed_a.ptr<T>(),
                        lora.embed_b.ptr<T>(), lora.ranks.ptr<int32_t>(), w, r, d);
  }, "embedding_lora: stacks must be F32, F16 or BF16");
}

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
