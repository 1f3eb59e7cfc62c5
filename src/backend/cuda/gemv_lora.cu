// The decode GEMV with the batch's LoRA folded in: one launch computes, for n <= 4 tokens,
//   y_g[t, :] = x[t] @ w_g^T (+ bias_g) + b_g[slot_t] @ (a_g[slot_t] @ x[t])
// where project() otherwise runs a shrink on a side stream, the GEMV, and an expand after
// the join (three kernels and a fork/join per projection group: at batch 1 that latency,
// not the adapter's bytes, was the LoRA's cost).
//
// Blocks take their role from a ticket drawn at start (an atomic counter), not from
// blockIdx: the first tickets are shrink blocks (member g, token t, 4 ranks: the four A
// rows against x[t], written to t_buf[g, t, r]), the rest the GEMV's blocks of gemv.cuh.
// A GEMV block, once its sums are in, waits until every shrink block has signalled, then
// adds its rows' B . t. The wait cannot deadlock: a block with a ticket is running, so
// every shrink block it waits for is already resident and waits for nothing. The last
// block to finish resets the counters for the next launch of this call site (each launch
// gets its own counter set from a ring, CudaBackend::gemv_lora).
//
// Tokens with slot -1 (or outside the stack) get no LoRA term; the grid depends only on n
// and the shapes, the slots are read at run time (graph rules 3 and 4). Sums run in a
// fixed order, so graph == eager bitwise.
#include <algorithm>
#include <type_traits>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/lora_kernels.h"

namespace quiver {
namespace {

using cuda::GemvGroup;
using cuda::kGemvWarps;

constexpr int kRows = kGemvWarps;  // rows per block: one warp per (row, token) item group
constexpr int kMaxTokens = 4;

struct LoraArgs {
  const void* a[kMaxGroup] = {};  // [S, R, in]
  const void* b[kMaxGroup] = {};  // [S, out_g, R]
  const int32_t* token_slot = nullptr;
  float* t = nullptr;          // [G, n, R]
  unsigned* sync = nullptr;    // [0] tickets drawn, [1] shrink blocks done, [2] blocks finished
  int rank = 0, num_slots = 0;
  int rank_blocks = 0;         // ceil(R / kRows)
  int shrink_blocks = 0;       // G * n * rank_blocks
};

// Shrink block sb: member g, token tok, ranks r0 .. r0 + 3.
template <typename T, int U>
__device__ __forceinline__ void shrink_block(const LoraArgs& lora, const float* x, int n, int in, int sb) {
  __shared__ float red[kGemvWarps][kRows];
  const int g = sb / (n * lora.rank_blocks), tok = (sb / lora.rank_blocks) % n;
  const int r0 = (sb % lora.rank_blocks) * kRows;
  const int slot = cuda::lora_slot_of(lora.token_slot, tok, lora.num_slots);
  if (slot < 0) {
    cuda::pdl_enter();
  } else {
    const T* a = static_cast<const T*>(cuda::gemv_pick(g, lora.a));
    const T* arow[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      arow[r] = a + (static_cast<int64_t>(slot) * lora.rank + min(r0 + r, lora.rank - 1)) * in;
    float acc[kRows][1];
    cuda::gemv_dot<T, 1, kRows, U, true>(arow, x + static_cast<int64_t>(tok) * in, 1, in, acc);
    cuda::gemv_warp_sums<1, kRows>(red, acc, 1);
    if (threadIdx.x < kRows && r0 + static_cast<int>(threadIdx.x) < lora.rank) {
      float s = 0.f;
#pragma unroll
      for (int w = 0; w < kGemvWarps; ++w) s += red[w][threadIdx.x];
      lora.t[(static_cast<int64_t>(g) * n + tok) * lora.rank + r0 + threadIdx.x] = s;
      __threadfence();  // t before the signal below, for every block that reads it
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) atomicAdd(&lora.sync[1], 1u);
}

template <typename W, typename T, int NT, int U>
__global__ void __launch_bounds__(kGemvWarps * 32)
gemv_lora_kernel(GemvGroup grp, LoraArgs lora, const float* __restrict__ x, int n, int in) {
  __shared__ float red[kGemvWarps][kRows * NT];
  __shared__ float delta[kRows * NT];
  __shared__ int ticket;
  if (threadIdx.x == 0) ticket = static_cast<int>(atomicAdd(&lora.sync[0], 1u));
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (ticket < lora.shrink_blocks) {
    shrink_block<T, U>(lora, x, n, in, ticket);
  } else {
    const int block = ticket - lora.shrink_blocks;
    int first_block;
    const int g = cuda::gemv_member(grp, block, &first_block);
    const W* __restrict__ w = static_cast<const W*>(cuda::gemv_pick(g, grp.w));
    const T* __restrict__ b = static_cast<const T*>(cuda::gemv_pick(g, lora.b));
    const int out = cuda::gemv_pick(g, grp.out);
    const int row0 = (block - first_block) * kRows;
    // This warp's items (row r, token t) = item warp + 4j: their B rows' first 32 ranks
    // are loaded now, behind the weights; the slots never come from the previous kernel.
    const T* brow[NT];
    float bv[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int item = warp + kGemvWarps * j, r = item / NT, t = item % NT, row = row0 + r;
      const int slot = t < n && row < out ? cuda::lora_slot_of(lora.token_slot, t, lora.num_slots) : -1;
      brow[j] = slot < 0 ? nullptr : b + (static_cast<int64_t>(slot) * out + row) * lora.rank;
      bv[j] = brow[j] != nullptr && lane < lora.rank ? cuda::to_f32(brow[j][lane]) : 0.f;
    }
    const W* wrow[kRows];
    cuda::gemv_rows<W, kRows>(wrow, w, row0, out, in);
    float acc[kRows][NT];
    cuda::gemv_dot<W, NT, kRows, U, true>(wrow, x, n, in, acc);
    cuda::gemv_warp_sums<NT, kRows>(red, acc, n);
    if (threadIdx.x == 0) {
      const volatile unsigned* done = &lora.sync[1];
      while (*done < static_cast<unsigned>(lora.shrink_blocks)) __nanosleep(64);
      __threadfence();
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int item = warp + kGemvWarps * j, t = item % NT;
      float p = 0.f;
      if (brow[j] != nullptr) {  // warp-uniform
        const float* tv = lora.t + (static_cast<int64_t>(g) * n + t) * lora.rank;
        if (lane < lora.rank) p = bv[j] * __ldcg(tv + lane);
        for (int r = lane + 32; r < lora.rank; r += 32) p = fmaf(cuda::to_f32(brow[j][r]), __ldcg(tv + r), p);
      }
      p = cuda::warp_sum(p);
      if (lane == 0) delta[item] = p;
    }
    __syncthreads();
    cuda::gemv_store<NT, kRows>(grp, g, red, row0, n, delta);
  }
  if (threadIdx.x == 0 && atomicAdd(&lora.sync[2], 1u) == gridDim.x - 1) {
    lora.sync[0] = 0;  // every block has drawn its ticket and passed its wait
    lora.sync[1] = 0;
    lora.sync[2] = 0;
  }
}

template <typename W, typename T, int NT>
void launch(cudaStream_t stream, bool pdl, GemvGroup grp, const LoraArgs& lora, int count, const float* x, int n,
            int in) {
  constexpr int U = NT <= 2 ? 4 : 2;  // gemv.cu's rounds in flight for 4 rows
  const int blocks = cuda::gemv_blocks<kRows>(grp, count) + lora.shrink_blocks;
  cuda::launch_kernel(gemv_lora_kernel<W, T, NT, U>, static_cast<unsigned>(blocks), kGemvWarps * 32, 0, stream, pdl,
                      grp, lora, x, n, in);
}

template <typename W, typename T>
void launch_tokens(cudaStream_t stream, bool pdl, const GemvGroup& grp, const LoraArgs& lora, int count,
                   const float* x, int n, int in) {
  if (n == 1) launch<W, T, 1>(stream, pdl, grp, lora, count, x, n, in);
  else if (n == 2) launch<W, T, 2>(stream, pdl, grp, lora, count, x, n, in);
  else launch<W, T, 4>(stream, pdl, grp, lora, count, x, n, in);
}

}  // namespace

bool CudaBackend::gemv_lora(const MatmulGroup& g, const LoraGroup& lora, Tensor x, const LoraMeta& meta) {
  check_group(g, x);
  const int64_t n = x.dim(0), in = x.dim(1);
  const DType wt = g.w[0].dtype, st = lora.a_stack[0].dtype;
  const Tensor& a0 = lora.a_stack[0];
  if (n < 1 || n > std::min(options_.gemv_max_n, kMaxTokens) || options_.gemv_variant != 0) return false;
  if (lora.count != g.count || (st != wt && st != DType::kF32) || a0.ndim != 3) return false;
  const int64_t num_slots = a0.dim(0), rank = a0.dim(1);
  if (rank < 1 || rank > 512 || in < 8 || in % 8 != 0) return false;
  bool aligned = cuda::aligned16(x.data);
  GemvGroup grp = cuda::gemv_group(g, &aligned);
  LoraArgs args;
  for (int i = 0; i < g.count; ++i) {
    const Tensor &a = lora.a_stack[i], &b = lora.b_stack[i];
    if (lora.y[i].data != g.y[i].data) return false;
    check(a.ndim == 3 && a.dim(0) == num_slots && a.dim(1) == rank && a.dim(2) == in && a.dtype == st,
          "lora: a_stacks of a group must share [S, R, in] and dtype");
    check(b.ndim == 3 && b.dim(0) == num_slots && b.dim(1) == g.w[i].dim(0) && b.dim(2) == rank && b.dtype == st,
          "lora: b_stack must be [S, out, R] with its group's R and dtype");
    aligned &= cuda::aligned16(a.data);
    args.a[i] = a.data;
    args.b[i] = b.data;
  }
  if (!aligned) return false;
  check(meta.token_slot.dtype == DType::kI32 && meta.token_slot.numel() >= n, "lora: token_slot must be i32 [n]");
  args.token_slot = meta.token_slot.ptr<int32_t>();
  args.rank = static_cast<int>(rank);
  args.num_slots = static_cast<int>(num_slots);
  args.rank_blocks = static_cast<int>(cuda::ceil_div(rank, kRows));
  args.shrink_blocks = g.count * static_cast<int>(n) * args.rank_blocks;
  args.t = static_cast<float*>(scratch(lora_scratch_, sizeof(float) * g.count * n * rank, "lora"));
  args.sync = gemv_sync_ + kGemvSyncStride * gemv_sync_next_;
  gemv_sync_next_ = (gemv_sync_next_ + 1) % kGemvSyncSets;
  const int ni = static_cast<int>(n), ii = static_cast<int>(in);
  cuda::dispatch_float(wt, [&](auto wtag) {
    using W = typename decltype(wtag)::type;
    if (st == DType::kF32) {
      launch_tokens<W, float>(stream_, pdl_, grp, args, g.count, x.ptr<float>(), ni, ii);
    } else if constexpr (!std::is_same_v<W, float>) {
      launch_tokens<W, W>(stream_, pdl_, grp, args, g.count, x.ptr<float>(), ni, ii);
    }
  }, "matmul: weight must be F32, F16 or BF16");
  return true;
}

}  // namespace quiver
