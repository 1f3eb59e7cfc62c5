// CUDA vocab_logits: the base lm_head's logits widened to the logits row width, columns
// past each row's vocabulary at -inf, then the LoRA slots' own lm_head rows, then the slots'
// lm_head LoRA.
#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.h"

namespace quiver {
namespace {

constexpr int kThreads = 256;

// One block per row. base was written by lm_head, earlier in the step: plain loads.
__global__ void widen_kernel(float* __restrict__ out, const float* base, const int32_t* row_slot,
                             const int32_t* vocab_sizes, int64_t v, int64_t w) {
  cuda::pdl_enter();  // launched with pdl (cuda_common.h)
  const int64_t i = blockIdx.x;
  const int32_t s = row_slot[i];
  const int64_t size = s < 0 || vocab_sizes == nullptr ? v : vocab_sizes[s];
  float* o = out + i * w;
  const float* b = base + i * v;
  for (int64_t c = threadIdx.x; c < w; c += blockDim.x) o[c] = c < v ? b[c] : c < size ? 0.f : -INFINITY;
}

// One warp per slot row g = s * R + j (j < row_counts[s]): its dot product with every logits
// row of slot s, so the row is read from memory once per step however many rows use it.
template <typename T>
__global__ void slot_rows_kernel(float* __restrict__ out, const float* x, const int32_t* row_slot, int n,
                                 const T* rows, const int32_t* ids, const int32_t* counts, int64_t total, int64_t r,
                                 int64_t h, int64_t w) {
  cuda::pdl_enter();  // launched with pdl (cuda_common.h)
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t g = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (g >= total) return;
  const int32_t s = static_cast<int32_t>(g / r);
  if (g % r >= counts[s]) return;
  const T* row = rows + g * h;
  const int32_t id = ids[g];
  for (int i = 0; i < n; ++i) {
    if (row_slot[i] != s) continue;
    const float* xi = x + static_cast<int64_t>(i) * h;
    float acc = 0.f;
    for (int64_t k = lane; k < h; k += 32) acc += xi[k] * cuda::to_f32(row[k]);
    acc = cuda::warp_sum(acc);
    if (lane == 0) out[static_cast<int64_t>(i) * w + id] = acc;
  }
}

// lm_head LoRA shrink: one block per logits row, one warp per rank r:
// t[i, r] = head_a[s][r, :] . x[i]. Rows without an adapter or an lm_head LoRA exit at once.
template <typename T>
__global__ void head_shrink_kernel(float* __restrict__ t, const float* x, const int32_t* row_slot,
                                   const T* __restrict__ head_a, const int32_t* ranks, int64_t max_rank, int64_t h) {
  cuda::pdl_enter();  // launched with pdl (cuda_common.h)
  const int64_t i = blockIdx.x;
  const int32_t s = row_slot[i];
  if (s < 0) return;
  const int rank = ranks[2 * s + 1];
  const int lane = static_cast<int>(threadIdx.x % 32), warps = static_cast<int>(blockDim.x / 32);
  const float* xi = x + i * h;
  for (int r = static_cast<int>(threadIdx.x / 32); r < rank; r += warps) {
    const T* a = head_a + (static_cast<int64_t>(s) * max_rank + r) * h;
    float acc = 0.f;
    for (int64_t k = lane; k < h; k += 32) acc += xi[k] * cuda::to_f32(a[k]);
    acc = cuda::warp_sum(acc);
    if (lane == 0) t[i * max_rank + r] = acc;
  }
}

// lm_head LoRA expand: blocks of kThreads columns of one row: out[i, c] += head_b[s][c, :rank] . t[i].
template <typename T>
__global__ void head_expand_kernel(float* __restrict__ out, const float* __restrict__ t, const int32_t* row_slot,
                                   const T* __restrict__ head_b, const int32_t* ranks, int64_t max_rank, int64_t w) {
  cuda::pdl_enter();  // launched with pdl (cuda_common.h)
  extern __shared__ float ti[];
  const int64_t i = blockIdx.y;
  const int32_t s = row_slot[i];
  if (s < 0) return;
  const int rank = ranks[2 * s + 1];
  if (rank == 0) return;
  for (int k = threadIdx.x; k < rank; k += blockDim.x) ti[k] = t[i * max_rank + k];
  __syncthreads();
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= w) return;
  const T* b = head_b + (static_cast<int64_t>(s) * w + c) * max_rank;
  float acc = 0.f;
  for (int k = 0; k < rank; ++k) acc += cuda::to_f32(b[k]) * ti[k];
  out[i * w + c] += acc;
}

}  // namespace

void CudaBackend::vocab_logits(Tensor out, Tensor base, Tensor x, Tensor row_slot, const VocabTables& t) {
  cuda::check_f32(out, "vocab_logits: out must be f32 on the GPU");
  cuda::check_f32(base, "vocab_logits: base must be f32 on the GPU");
  cuda::check_f32(x, "vocab_logits: x must be f32 on the GPU");
  const int64_t n = out.dim(0), h = x.dim(1), r = t.rows_per_slot;
  check(out.dim(1) == t.width && base.dim(0) == n && base.dim(1) == t.base_vocab && x.dim(0) == n &&
            row_slot.numel() == n && row_slot.dtype == DType::kI32, "vocab_logits: shape mismatch");
  if (n == 0) return;
  const int32_t* sizes = r > 0 ? t.vocab_sizes.ptr<int32_t>() : nullptr;
  cuda::launch_kernel(widen_kernel, static_cast<unsigned>(n), kThreads, 0, stream_, pdl_, out.ptr<float>(),
                      base.ptr<float>(), row_slot.ptr<int32_t>(), sizes, t.base_vocab, t.width);
  if (r > 0) slot_rows(out, x, row_slot, t);
  if (t.lora.empty()) return;
  const VocabLora& l = t.lora;
  const int64_t rank = l.max_rank();
  check(l.head_a.dim(2) == h && l.head_b.dim(1) == t.width && l.head_a.dtype == l.head_b.dtype,
        "vocab_logits: lm_head LoRA stacks of another shape");
  auto* lt = static_cast<float*>(scratch(vocab_lora_scratch_, sizeof(float) * n * rank, "vocab_logits LoRA"));
  cuda::dispatch_float(l.head_a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::launch_kernel(head_shrink_kernel<T>, static_cast<unsigned>(n), kThreads, 0, stream_, pdl_, lt, x.ptr<float>(),
                        row_slot.ptr<int32_t>(), l.head_a.ptr<T>(), l.ranks.ptr<int32_t>(), rank, h);
    const dim3 grid(static_cast<unsigned>(cuda::ceil_div(t.width, kThreads)), static_cast<unsigned>(n));
    cuda::launch_kernel(head_expand_kernel<T>, grid, kThreads, sizeof(float) * rank, stream_, pdl_, out.ptr<float>(), lt,
                        row_slot.ptr<int32_t>(), l.head_b.ptr<T>(), l.ranks.ptr<int32_t>(), rank, t.width);
  }, "vocab_logits: LoRA stacks must be F32, F16 or BF16");
}

void CudaBackend::slot_rows(Tensor out, Tensor x, Tensor row_slot, const VocabTables& t) {
  const int64_t n = out.dim(0), h = x.dim(1), r = t.rows_per_slot;
  const int64_t total = t.lm_head_rows.dim(0);
  check(total % r == 0 && t.lm_head_rows.dim(1) == h && t.lm_head_ids.numel() == total, "vocab_logits: bad tables");
  const auto blocks = static_cast<unsigned>(cuda::ceil_div(total, kThreads / 32));
  cuda::dispatch_float(t.lm_head_rows.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::launch_kernel(slot_rows_kernel<T>, blocks, kThreads, 0, stream_, pdl_, out.ptr<float>(), x.ptr<float>(),
                        row_slot.ptr<int32_t>(), static_cast<int>(n), t.lm_head_rows.ptr<T>(),
                        t.lm_head_ids.ptr<int32_t>(), t.row_counts.ptr<int32_t>(), total, r, h, t.width);
  }, "vocab_logits: lm_head rows must be F32, F16 or BF16");
}

}  // namespace quiver
