// CUDA multi-LoRA ops over the persistent slot stacks (DESIGN.md section 2):
//   shrink  t[i, :] = a_stack[slot_i] @ x[i, :]      expand  y[i, :] += b_stack[slot_i] @ t[i, :]
// Two kernels per op, same results:
// - BGMV (gather, decode): one block per (token, rank) for shrink and per (token, 128
//   outputs) for expand; each block reads its token's slot and exits at once on -1.
// - tiled (prefill): a block owns 16 consecutive tokens and walks the runs of equal slot
//   inside them, staging each adapter tile in shared memory once for the whole run, so
//   long same-adapter segments read the adapter once per 16 tokens instead of per token.
// Grids depend only on n and the stack shapes, never on how many tokens carry an adapter,
// so a captured graph stays right whatever the slots are at replay (rules 3 and 4).
// A slot outside the stack is treated as -1 (the device cannot report it).
#include <algorithm>
#include <type_traits>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.h"

namespace quiver {
namespace {

constexpr int kBgmvThreads = 128;
constexpr int kTileTokens = 16;
constexpr int kTileThreads = 256;
constexpr int kKc = 32;  // shrink: `in` columns per shared-memory tile
constexpr int kOc = 64;  // expand: output rows per block

__device__ __forceinline__ int read_slot(const int32_t* token_slot, int64_t i, int num_slots) {
  const int s = token_slot[i];
  return s < num_slots ? s : -1;
}

// ---- BGMV ---------------------------------------------------------------------------------
// t: [n, R] f32; x: [n, in] f32; a: [S, R, in] T. grid (n, R).
template <typename T>
__global__ void shrink_bgmv_kernel(float* __restrict__ t, const float* __restrict__ x, const T* __restrict__ a,
                                   const int32_t* __restrict__ token_slot, int num_slots, int rank, int64_t in) {
  __shared__ float red[32];
  const int64_t i = blockIdx.x;
  const int r = blockIdx.y;
  const int slot = read_slot(token_slot, i, num_slots);
  if (slot < 0) return;  // uniform over the block
  const T* arow = a + (static_cast<int64_t>(slot) * rank + r) * in;
  const float* xrow = x + i * in;
  float s = 0.f;
#pragma unroll 8
  for (int64_t k = threadIdx.x; k < in; k += kBgmvThreads) s = fmaf(cuda::to_f32(arow[k]), __ldg(xrow + k), s);
  s = cuda::block_sum(s, red);
  if (threadIdx.x == 0) t[i * rank + r] = s;
}

// y: [n, out] f32; t: [n, R] f32; b: [S, out, R] T. grid (n, ceil(out / 128)); dynamic
// shared memory: R floats (the token's t row).
template <typename T>
__global__ void expand_bgmv_kernel(float* __restrict__ y, const float* __restrict__ t, const T* __restrict__ b,
                                   const int32_t* __restrict__ token_slot, int num_slots, int rank, int64_t out) {
  extern __shared__ float trow[];
  const int64_t i = blockIdx.x;
  const int slot = read_slot(token_slot, i, num_slots);
  if (slot < 0) return;
  for (int r = threadIdx.x; r < rank; r += blockDim.x) trow[r] = t[i * rank + r];
  __syncthreads();
  const int64_t o = int64_t{blockIdx.y} * kBgmvThreads + threadIdx.x;
  if (o >= out) return;
  const T* brow = b + (static_cast<int64_t>(slot) * out + o) * rank;
  float s = 0.f;
  for (int r = 0; r < rank; ++r) s = fmaf(cuda::to_f32(brow[r]), trow[r], s);
  y[i * out + o] += s;
}

// ---- tiled --------------------------------------------------------------------------------
// Runs of equal slot among a tile's tokens: [begin, end) with one slot. Every thread walks
// them identically (from shared memory), so the barriers inside a run are uniform.
__device__ __forceinline__ int run_end(const int* slots, int begin, int count) {
  int e = begin + 1;
  while (e < count && slots[e] == slots[begin]) ++e;
  return e;
}

// t: [n, R]; x: [n, in]; a: [S, R, in]. grid (ceil(n / 16), ceil(R / BR)). A thread owns
// rank tr = tid % BR of the block's rank range and kTileTokens * BR / 256 tokens.
template <typename T, int BR>
__global__ void __launch_bounds__(kTileThreads)
shrink_tiled_kernel(float* __restrict__ t, const float* __restrict__ x, const T* __restrict__ a,
                    const int32_t* __restrict__ token_slot, int num_slots, int rank, int64_t n, int64_t in) {
  constexpr int kTpt = kTileTokens * BR / kTileThreads;  // tokens per thread
  __shared__ float xs[kTileTokens][kKc + 1];
  __shared__ float as[BR][kKc + 1];
  __shared__ int slots[kTileTokens];
  const int64_t i0 = int64_t{blockIdx.x} * kTileTokens;
  const int r0 = blockIdx.y * BR;
  const int count = static_cast<int>(min(static_cast<int64_t>(kTileTokens), n - i0));
  const int tr = threadIdx.x % BR, tg = threadIdx.x / BR;
  if (threadIdx.x < count) slots[threadIdx.x] = read_slot(token_slot, i0 + threadIdx.x, num_slots);
  __syncthreads();
  for (int begin = 0; begin < count;) {
    const int end = run_end(slots, begin, count);
    const int slot = slots[begin];
    if (slot >= 0) {
      float acc[kTpt] = {};
      const T* aslot = a + static_cast<int64_t>(slot) * rank * in;
      for (int64_t k0 = 0; k0 < in; k0 += kKc) {
        for (int idx = threadIdx.x; idx < BR * kKc; idx += kTileThreads) {
          const int rr = idx / kKc, kk = idx % kKc;
          const int64_t k = k0 + kk;
          as[rr][kk] = (r0 + rr < rank && k < in) ? cuda::to_f32(aslot[static_cast<int64_t>(r0 + rr) * in + k]) : 0.f;
        }
        for (int idx = threadIdx.x; idx < kTileTokens * kKc; idx += kTileThreads) {
          const int m = idx / kKc, kk = idx % kKc;
          const int64_t k = k0 + kk;
          xs[m][kk] = (m >= begin && m < end && k < in) ? x[(i0 + m) * in + k] : 0.f;
        }
        __syncthreads();
#pragma unroll 8
        for (int kk = 0; kk < kKc; ++kk) {
          const float av = as[tr][kk];
#pragma unroll
          for (int j = 0; j < kTpt; ++j) acc[j] = fmaf(xs[tg * kTpt + j][kk], av, acc[j]);
        }
        __syncthreads();
      }
#pragma unroll
      for (int j = 0; j < kTpt; ++j) {
        const int m = tg * kTpt + j;
        if (m >= begin && m < end && r0 + tr < rank) t[(i0 + m) * rank + r0 + tr] = acc[j];
      }
    }
    begin = end;
  }
}

// y: [n, out]; t: [n, R]; b: [S, out, R]. grid (ceil(n / 16), ceil(out / 64)). A thread
// owns output row to = tid % 64 and 4 tokens; ranks go through shared memory 64 at a time.
template <typename T>
__global__ void __launch_bounds__(kTileThreads)
expand_tiled_kernel(float* __restrict__ y, const float* __restrict__ t, const T* __restrict__ b,
                    const int32_t* __restrict__ token_slot, int num_slots, int rank, int64_t n, int64_t out) {
  constexpr int kRc = 64;
  constexpr int kTpt = kTileTokens * kOc / kTileThreads;  // 4 tokens per thread
  __shared__ float ts[kTileTokens][kRc + 1];
  __shared__ float bs[kOc][kRc + 1];
  __shared__ int slots[kTileTokens];
  const int64_t i0 = int64_t{blockIdx.x} * kTileTokens;
  const int64_t o0 = int64_t{blockIdx.y} * kOc;
  const int count = static_cast<int>(min(static_cast<int64_t>(kTileTokens), n - i0));
  const int to = threadIdx.x % kOc, tg = threadIdx.x / kOc;
  const int rc = min(rank, kRc);  // ranks staged per round
  if (threadIdx.x < count) slots[threadIdx.x] = read_slot(token_slot, i0 + threadIdx.x, num_slots);
  __syncthreads();
  for (int begin = 0; begin < count;) {
    const int end = run_end(slots, begin, count);
    const int slot = slots[begin];
    if (slot >= 0) {
      float acc[kTpt] = {};
      const T* bslot = b + static_cast<int64_t>(slot) * out * rank;
      for (int r0 = 0; r0 < rank; r0 += rc) {
        for (int idx = threadIdx.x; idx < kOc * rc; idx += kTileThreads) {
          const int oo = idx / rc, rr = idx % rc;
          bs[oo][rr] = (o0 + oo < out && r0 + rr < rank) ? cuda::to_f32(bslot[(o0 + oo) * rank + r0 + rr]) : 0.f;
        }
        for (int idx = threadIdx.x; idx < kTileTokens * rc; idx += kTileThreads) {
          const int m = idx / rc, rr = idx % rc;
          ts[m][rr] = (m >= begin && m < end && r0 + rr < rank) ? t[(i0 + m) * rank + r0 + rr] : 0.f;
        }
        __syncthreads();
        for (int rr = 0; rr < rc; ++rr) {
          const float bv = bs[to][rr];
#pragma unroll
          for (int j = 0; j < kTpt; ++j) acc[j] = fmaf(ts[tg * kTpt + j][rr], bv, acc[j]);
        }
        __syncthreads();
      }
#pragma unroll
      for (int j = 0; j < kTpt; ++j) {
        const int m = tg * kTpt + j;
        if (m >= begin && m < end && o0 + to < out) y[(i0 + m) * out + o0 + to] += acc[j];
      }
    }
    begin = end;
  }
}

void check_lora_meta(const LoraMeta& meta, int64_t n, const char* op) {
  check(meta.token_slot.dtype == DType::kI32 && meta.token_slot.numel() >= n,
        std::string(op) + ": token_slot must be i32 [n]");
}

}  // namespace

void CudaBackend::lora_shrink(Tensor t, Tensor x, Tensor a_stack, const LoraMeta& meta) {
  cuda::check_f32(t, "lora_shrink: t must be f32 on the GPU");
  cuda::check_f32(x, "lora_shrink: x must be f32 on the GPU");
  check(a_stack.ndim == 3 && x.ndim == 2, "lora_shrink: a_stack must be [S, R, in], x [n, in]");
  const int64_t n = x.dim(0), in = x.dim(1), rank = a_stack.dim(1), num_slots = a_stack.dim(0);
  check(a_stack.dim(2) == in && t.numel() == n * rank, "lora_shrink: shape mismatch");
  check(rank <= 65535, "lora_shrink: rank above 65535");
  check_lora_meta(meta, n, "lora_shrink");
  if (n == 0 || rank == 0) return;
  const int32_t* slots = meta.token_slot.ptr<int32_t>();
  cuda::dispatch_float(a_stack.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (n < options_.lora_tiled_min_n) {
      shrink_bgmv_kernel<T><<<dim3(static_cast<unsigned>(n), static_cast<unsigned>(rank)), kBgmvThreads, 0, stream_>>>(
          t.ptr<float>(), x.ptr<float>(), a_stack.ptr<T>(), slots, static_cast<int>(num_slots),
          static_cast<int>(rank), in);
    } else {
      auto launch = [&](auto br) {
        constexpr int BR = decltype(br)::value;
        const dim3 grid(static_cast<unsigned>(cuda::ceil_div(n, kTileTokens)),
                        static_cast<unsigned>(cuda::ceil_div(rank, BR)));
        shrink_tiled_kernel<T, BR><<<grid, kTileThreads, 0, stream_>>>(
            t.ptr<float>(), x.ptr<float>(), a_stack.ptr<T>(), slots, static_cast<int>(num_slots),
            static_cast<int>(rank), n, in);
      };
      if (rank <= 16) launch(std::integral_constant<int, 16>{});
      else if (rank <= 32) launch(std::integral_constant<int, 32>{});
      else launch(std::integral_constant<int, 64>{});
    }
    cuda::launch_check();
  }, "lora_shrink: a_stack must be F32, F16 or BF16");
}

void CudaBackend::lora_expand(Tensor y, Tensor t, Tensor b_stack, const LoraMeta& meta) {
  cuda::check_f32(y, "lora_expand: y must be f32 on the GPU");
  cuda::check_f32(t, "lora_expand: t must be f32 on the GPU");
  check(b_stack.ndim == 3 && y.ndim == 2, "lora_expand: b_stack must be [S, out, R], y [n, out]");
  const int64_t n = y.dim(0), out = y.dim(1), rank = b_stack.dim(2), num_slots = b_stack.dim(0);
  check(b_stack.dim(1) == out && t.numel() == n * rank, "lora_expand: shape mismatch");
  check(rank <= 8192, "lora_expand: rank above 8192");
  check_lora_meta(meta, n, "lora_expand");
  if (n == 0 || rank == 0 || out == 0) return;
  const int32_t* slots = meta.token_slot.ptr<int32_t>();
  cuda::dispatch_float(b_stack.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (n < options_.lora_tiled_min_n) {
      const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(cuda::ceil_div(out, kBgmvThreads)));
      expand_bgmv_kernel<T><<<grid, kBgmvThreads, rank * sizeof(float), stream_>>>(
          y.ptr<float>(), t.ptr<float>(), b_stack.ptr<T>(), slots, static_cast<int>(num_slots),
          static_cast<int>(rank), out);
    } else {
      const dim3 grid(static_cast<unsigned>(cuda::ceil_div(n, kTileTokens)),
                      static_cast<unsigned>(cuda::ceil_div(out, kOc)));
      expand_tiled_kernel<T><<<grid, kTileThreads, 0, stream_>>>(y.ptr<float>(), t.ptr<float>(), b_stack.ptr<T>(),
                                                                 slots, static_cast<int>(num_slots),
                                                                 static_cast<int>(rank), n, out);
    }
    cuda::launch_check();
  }, "lora_expand: b_stack must be F32, F16 or BF16");
}

}  // namespace quiver
