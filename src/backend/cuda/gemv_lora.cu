// The decode GEMV with the batch's LoRA folded in: for one token, two launches compute
//   y_g[t, :] = x[t] @ w_g^T (+ bias_g) + b_g[slot_t] @ (a_g[slot_t] @ x[t])
// where project() otherwise runs a shrink on a side stream, the GEMV, and an expand after
// the join (three kernels and a fork/join per projection group: at batch 1 that latency,
// not the adapter's bytes, was the LoRA's cost).
//   shrink  a few blocks: (member g, token t, 4 ranks, 4,096 columns) each, the A rows
//           against x[t] with gemv.cuh's loop, into split partials part[g, s, t, r];
//   GEMV    gemv.cuh's blocks; each loads its rows' B entries before it waits, and adds
//           b_g[slot_t][row] . t (the partials summed in split order) to its sums.
// Both are chained by programmatic serialisation: the shrink lets the GEMV be scheduled at
// once, so the GEMV's first weight loads are in flight while the shrink runs, and the
// GEMV's wait (before it reads x) is also its wait for t. No counters, no spinning; sums
// in a fixed order, so graph == eager bitwise. (A one-launch version, shrink blocks drawn
// first by an atomic ticket and the GEMV blocks spinning until they were done, measured
// 6.23 ms per batch-1 step against 5.38 for the three kernels: the per-block atomics.)
//
// Tokens with slot -1 (or outside the stack) get no LoRA term; the grids depend only on n
// and the shapes, the slots are read at run time (graph rules 3 and 4).
#include <algorithm>
#include <type_traits>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/lora_kernels.h"

namespace quiver {
namespace {

using cuda::GemvGroup;
using cuda::kGemvWarps;

constexpr int kRows = kGemvWarps;  // rows per block: the GEMV's item groups are per warp
// Tokens the fold takes; more go to the GEMV + gather kernels. H200, 7B bf16 step with LoRA:
// at 2 tokens the fold took 5.46 ms against 5.17 (session 10); at 1 it wins (4.44 against 4.58).
constexpr int kMaxTokens = 1;     // launch() is instantiated for exactly this many
constexpr int kSplitCols = 4096;  // shrink: columns per block (a multiple of 256)
constexpr int kEarlySplits = 3;   // GEMV: t partials loaded right after the wait

struct LoraArgs {
  const void* a[kMaxGroup] = {};  // [S, R, in]
  const void* b[kMaxGroup] = {};  // [S, out_g, R]
  const int32_t* token_slot = nullptr;
  float* part = nullptr;       // [G, splits, n, R]
  int rank = 0, num_slots = 0;
  int rank_blocks = 0;         // ceil(R / kRows)
  int splits = 0;              // ceil(in / kSplitCols)
};

// grid (G * n * rank_blocks, splits): member g, token tok, ranks r0 .. r0 + 3, columns
// [k0, k0 + kSplitCols).
template <typename T>
__global__ void __launch_bounds__(kGemvWarps * 32)
gemv_lora_shrink_kernel(LoraArgs lora, const float* __restrict__ x, int n, int in) {
  cuda::pdl_trigger();  // the GEMV may start streaming its weights now
  __shared__ float red[kGemvWarps][kRows];
  const int b = blockIdx.x, split = blockIdx.y;
  const int g = b / (n * lora.rank_blocks), tok = (b / lora.rank_blocks) % n;
  const int r0 = (b % lora.rank_blocks) * kRows, k0 = split * kSplitCols;
  const int slot = cuda::lora_slot_of(lora.token_slot, tok, lora.num_slots);
  if (slot < 0) {
    cuda::pdl_wait();  // the chain stays transitive (cuda_common.h)
    return;
  }
  const T* a = static_cast<const T*>(cuda::gemv_pick(g, lora.a));
  const T* arow[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
    arow[r] = a + (static_cast<int64_t>(slot) * lora.rank + min(r0 + r, lora.rank - 1)) * in + k0;
  float acc[kRows][1];
  cuda::gemv_dot<T, 1, kRows, 2, true>(arow, x + static_cast<int64_t>(tok) * in + k0, 1, min(kSplitCols, in - k0),
                                       acc);
  cuda::gemv_warp_sums<1, kRows>(red, acc, 1);
  if (threadIdx.x < kRows && r0 + static_cast<int>(threadIdx.x) < lora.rank) {
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < kGemvWarps; ++w) s += red[w][threadIdx.x];
    lora.part[((static_cast<int64_t>(g) * lora.splits + split) * n + tok) * lora.rank + r0 + threadIdx.x] = s;
  }
}

template <typename W, typename T, int NT, int U>
__global__ void __launch_bounds__(kGemvWarps * 32, NT == 1 ? 5 : 1)
gemv_lora_kernel(GemvGroup grp, LoraArgs lora, const float* __restrict__ x, int n, int in) {
  __shared__ float red[kGemvWarps][kRows * NT];
  __shared__ float delta[kRows * NT];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int first_block;
  const int g = cuda::gemv_member(grp, blockIdx.x, &first_block);
  const W* __restrict__ w = static_cast<const W*>(cuda::gemv_pick(g, grp.w));
  const T* __restrict__ b = static_cast<const T*>(cuda::gemv_pick(g, lora.b));
  const int out = cuda::gemv_pick(g, grp.out);
  const int row0 = (blockIdx.x - first_block) * kRows;
  // This warp's items (row r, token t) = item warp + 4j, all of one token t (kRows is the
  // warp count): their B rows' first 32 ranks are loaded now, beside the weights (the
  // slots never come from the previous kernels), and right after the wait t's first 32
  // entries, the shrink's split partials summed in split order, for the epilogue.
  const int t = warp % NT;
  const int slot = t < n ? cuda::lora_slot_of(lora.token_slot, t, lora.num_slots) : -1;
  const float* part = lora.part + (static_cast<int64_t>(g) * lora.splits * n + t) * lora.rank;
  const int64_t stride = static_cast<int64_t>(n) * lora.rank;  // between splits
  const T* bslot = slot < 0 ? nullptr : b + static_cast<int64_t>(slot) * out * lora.rank;  // [out, R]
  float bv[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int row = row0 + (warp + kGemvWarps * j) / NT;
    bv[j] = bslot != nullptr && row < out && lane < lora.rank ? cuda::to_f32(bslot[row * lora.rank + lane]) : 0.f;
  }
  float tp[kEarlySplits];  // loaded after the wait, first used in the epilogue
#pragma unroll
  for (int s = 0; s < kEarlySplits; ++s) tp[s] = 0.f;
  const W* wrow[kRows];
  cuda::gemv_rows<W, kRows>(wrow, w, row0, out, in);
  float acc[kRows][NT];
  cuda::gemv_dot<W, NT, kRows, U, true>(wrow, x, n, in, acc, [&] {
    if (slot >= 0 && lane < lora.rank) {
#pragma unroll
      for (int s = 0; s < kEarlySplits; ++s)
        if (s < lora.splits) tp[s] = __ldcg(part + s * stride + lane);
    }
  });
  cuda::gemv_warp_sums<NT, kRows>(red, acc, n);
  float tv = 0.f;  // t[lane], its partials in split order
#pragma unroll
  for (int s = 0; s < kEarlySplits; ++s) tv += tp[s];
  if (slot >= 0 && lane < lora.rank)
    for (int s = kEarlySplits; s < lora.splits; ++s) tv += __ldcg(part + s * stride + lane);
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int row = row0 + (warp + kGemvWarps * j) / NT;
    float p = bv[j] * tv;
    if (bslot != nullptr && row < out)  // warp-uniform; ranks past 32 (rare) are loaded here
      for (int r = lane + 32; r < lora.rank; r += 32) {
        float tr = 0.f;
        for (int s = 0; s < lora.splits; ++s) tr += __ldcg(part + s * stride + r);
        p = fmaf(cuda::to_f32(bslot[static_cast<int64_t>(row) * lora.rank + r]), tr, p);
      }
    p = cuda::warp_sum(p);
    if (lane == 0) delta[warp + kGemvWarps * j] = p;
  }
  __syncthreads();
  cuda::gemv_store<NT, kRows>(grp, g, red, row0, n, delta);
}

template <typename W, typename T, int NT>
void launch(cudaStream_t stream, bool pdl, GemvGroup grp, const LoraArgs& lora, int count, const float* x, int n,
            int in) {
  constexpr int U = 4;  // gemv.cu's rounds in flight for 4 rows and 1 token
  const dim3 shrink_grid(static_cast<unsigned>(count * n * lora.rank_blocks), static_cast<unsigned>(lora.splits));
  cuda::launch_kernel(gemv_lora_shrink_kernel<T>, shrink_grid, kGemvWarps * 32, 0, stream, pdl, lora, x, n, in);
  const int blocks = cuda::gemv_blocks<kRows>(grp, count);
  if (blocks == 0) return;  // every member is empty
  cuda::launch_kernel(gemv_lora_kernel<W, T, NT, U>, static_cast<unsigned>(blocks), kGemvWarps * 32, 0, stream, pdl,
                      grp, lora, x, n, in);
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
  if (rank < 1 || rank > cuda::kLoraMaxRank || in < 8 || in % 8 != 0) return false;
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
  cuda::check_lora_meta(meta, n, "lora");
  args.token_slot = meta.token_slot.ptr<int32_t>();
  args.rank = static_cast<int>(rank);
  args.num_slots = static_cast<int>(num_slots);
  args.rank_blocks = static_cast<int>(cuda::ceil_div(rank, kRows));
  args.splits = static_cast<int>(cuda::ceil_div(in, kSplitCols));
  args.part = static_cast<float*>(
      scratch(lora_scratch_, sizeof(float) * g.count * args.splits * n * rank, "lora"));  // [G, splits, n, R]
  const int ni = static_cast<int>(n), ii = static_cast<int>(in);
  cuda::dispatch_float(wt, [&](auto wtag) {
    using W = typename decltype(wtag)::type;
    if (st == DType::kF32) {
      launch<W, float, kMaxTokens>(stream_, pdl_, grp, args, g.count, x.ptr<float>(), ni, ii);
    } else if constexpr (!std::is_same_v<W, float>) {
      launch<W, W, kMaxTokens>(stream_, pdl_, grp, args, g.count, x.ptr<float>(), ni, ii);
    }
  }, "matmul: weight must be F32, F16 or BF16");
  return true;
}

}  // namespace quiver
