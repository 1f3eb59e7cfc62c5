// The decode GEMV of one token with its LoRA's shrink as extra blocks of the same launch:
//   y_g[0, :] = x[0] @ w_g^T (+ bias_g)        gemv.cuh's blocks, as the plain GEMV
//   t_g[0, :] = a_g[slot_0] @ x[0]             G x ceil(R / 4) more blocks, 4 A rows each
// and the expand, y_g += b_g[slot_0] @ t_g, left to the op that reads y next (LoraDelta:
// rope_kv_write, add_rms_norm_x16, silu_mul_x16 add it in their own kernel, lora_delta.cuh).
// So a batch-1 projection with an adapter is one kernel, as without: at batch 1 the LoRA's
// cost was the latency of its extra kernels on the step's chain, not its bytes.
//
// History (H200, 7B bf16, r=16 on all 7 projections, graphs): a separate shrink, GEMV and
// expand took 5.38 ms a step; a small shrink kernel chained by PDL to a GEMV that added
// B . t in its epilogue took 4.40-4.44 (base 3.87-3.93), the shrink still a kernel on the
// chain per group; one launch whose GEMV blocks spun on the shrink blocks took 6.23 (the
// per-block atomics). Sums in a fixed order, so graph == eager bitwise. A token with slot
// -1 (or outside the stack) gets no t; the op after it skips it. Grids depend only on
// the shapes, the slot is read at run time (graph rules 3 and 4).
#include <type_traits>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/lora_kernels.h"

namespace quiver {
namespace {

using cuda::GemvGroup;
using cuda::kGemvWarps;

constexpr int kRows = 4;  // rows per block, base and A alike (gemv.cu's default shape)
constexpr int kU = 4;     // gemv.cu's rounds of loads in flight for 4 rows and 1 token

struct ShrinkRows {
  const void* a[kMaxGroup] = {};  // [S, R, in]
  float* t = nullptr;             // [G, R]: member g's t at t + g * R
  const int32_t* token_slot = nullptr;
  int rank = 0, num_slots = 0;
  int rank_blocks = 0;  // ceil(R / kRows)
  int blocks = 0;       // G * rank_blocks: the first blocks of the grid
};

// Block b < lora.blocks: member b / rank_blocks's A rows r0 .. r0 + 3 (r0 = (b %
// rank_blocks) * 4) into arow; false when the token has no adapter (nothing to compute).
template <typename T>
__device__ __forceinline__ bool shrink_rows(const ShrinkRows& lora, int b, int in, const T* (&arow)[kRows]) {
  const int slot = cuda::lora_slot_of(lora.token_slot, 0, lora.num_slots);
  if (slot < 0) return false;
  const T* a = static_cast<const T*>(cuda::gemv_pick(b / lora.rank_blocks, lora.a)) +
               static_cast<int64_t>(slot) * lora.rank * in;
  cuda::gemv_rows<T, kRows>(arow, a, (b % lora.rank_blocks) * kRows, lora.rank, in);
  return true;
}

// Block b >= lora.blocks: its GEMV rows into wrow; the member into *g, the first row *row0.
template <typename W>
__device__ __forceinline__ void base_rows(const GemvGroup& grp, const ShrinkRows& lora, int in, const W* (&wrow)[kRows],
                                          int* g, int* row0) {
  int first_block;
  const int b = blockIdx.x - lora.blocks;
  *g = cuda::gemv_member(grp, b, &first_block);
  *row0 = (b - first_block) * kRows;
  cuda::gemv_rows<W, kRows>(wrow, static_cast<const W*>(cuda::gemv_pick(*g, grp.w)), *row0,
                            cuda::gemv_pick(*g, grp.out), in);
}

// Blocks [0, lora.blocks): A rows (shrink_rows); the rest: the GEMV's blocks. Launch bounds
// as the plain GEMV's at 1 token (5 blocks per SM, 96 registers). With stacks in the
// weights' type both kinds of block share one gemv_dot, and what each stores where is
// worked out again after it, so the kernel needs no more registers than the plain GEMV
// (two inlined loops spilled 70 bytes at the bound).
template <typename W, typename T>
__global__ void __launch_bounds__(kGemvWarps * 32, 5)
gemv_shrink_kernel(GemvGroup grp, ShrinkRows lora, const float* __restrict__ x, int in) {
  __shared__ float red[kGemvWarps][kRows];
  float acc[kRows][1];
  const bool shrink = static_cast<int>(blockIdx.x) < lora.blocks;  // block-uniform
  int g = 0, row0 = 0;
  if constexpr (std::is_same_v<W, T>) {
    const W* wrow[kRows];
    if (shrink) {
      if (!shrink_rows<T>(lora, blockIdx.x, in, wrow)) {
        cuda::pdl_wait();  // the chain stays transitive (cuda_common.h)
        return;
      }
    } else {
      base_rows<W>(grp, lora, in, wrow, &g, &row0);
    }
    cuda::gemv_dot<W, 1, kRows, kU, true>(wrow, x, 1, in, acc);
  } else {  // f32 stacks beside 16-bit weights: two loops
    if (shrink) {
      const T* arow[kRows];
      if (!shrink_rows<T>(lora, blockIdx.x, in, arow)) {
        cuda::pdl_wait();
        return;
      }
      cuda::gemv_dot<T, 1, kRows, kU, true>(arow, x, 1, in, acc);
    } else {
      const W* wrow[kRows];
      base_rows<W>(grp, lora, in, wrow, &g, &row0);
      cuda::gemv_dot<W, 1, kRows, kU, true>(wrow, x, 1, in, acc);
    }
  }
  cuda::gemv_warp_sums<1, kRows>(red, acc, 1);
  if (!shrink) {
    cuda::gemv_store<1, kRows>(grp, g, red, row0, 1, nullptr);
    return;
  }
  const int r0 = (blockIdx.x % lora.rank_blocks) * kRows;
  if (threadIdx.x < kRows && r0 + static_cast<int>(threadIdx.x) < lora.rank) {
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < kGemvWarps; ++w) s += red[w][threadIdx.x];
    lora.t[(blockIdx.x / lora.rank_blocks) * lora.rank + r0 + threadIdx.x] = s;
  }
}

}  // namespace

bool CudaBackend::gemv_lora(const MatmulGroup& g, const LoraGroup& lora, Tensor x, const LoraMeta& meta,
                            LoraDelta* defer) {
  check_group(g, x);
  const int64_t n = x.dim(0), in = x.dim(1);
  const DType wt = g.w[0].dtype, st = lora.a_stack[0].dtype;
  const Tensor& a0 = lora.a_stack[0];
  if (defer == nullptr || n != 1 || options_.gemv_max_n < 1 || options_.gemv_variant != 0) return false;
  if (lora.count != g.count || (st != wt && st != DType::kF32) || a0.ndim != 3) return false;
  const int64_t num_slots = a0.dim(0), rank = a0.dim(1);
  if (rank < 1 || rank > cuda::kLoraMaxRank || in < 8 || in % 8 != 0) return false;
  bool aligned = cuda::aligned16(x.data);
  GemvGroup grp = cuda::gemv_group(g, &aligned);
  ShrinkRows args;
  for (int i = 0; i < g.count; ++i) {
    const Tensor &a = lora.a_stack[i], &b = lora.b_stack[i];
    if (lora.y[i].data != g.y[i].data) return false;
    check(a.ndim == 3 && a.dim(0) == num_slots && a.dim(1) == rank && a.dim(2) == in && a.dtype == st,
          "lora: a_stacks of a group must share [S, R, in] and dtype");
    check(b.ndim == 3 && b.dim(0) == num_slots && b.dim(1) == g.w[i].dim(0) && b.dim(2) == rank && b.dtype == st,
          "lora: b_stack must be [S, out, R] with its group's R and dtype");
    aligned &= cuda::aligned16(a.data);
    args.a[i] = a.data;
  }
  if (!aligned) return false;
  cuda::check_lora_meta(meta, n, "lora");
  args.token_slot = meta.token_slot.ptr<int32_t>();
  args.rank = static_cast<int>(rank);
  args.num_slots = static_cast<int>(num_slots);
  args.rank_blocks = static_cast<int>(cuda::ceil_div(rank, kRows));
  args.blocks = g.count * args.rank_blocks;
  args.t = static_cast<float*>(scratch(lora_scratch_, sizeof(float) * g.count * rank, "lora"));  // [G, 1, R]
  const int blocks = cuda::gemv_blocks<kRows>(grp, g.count) + args.blocks;
  const float* xp = x.ptr<float>();
  const int ii = static_cast<int>(in);
  cuda::dispatch_float(wt, [&](auto wtag) {
    using W = typename decltype(wtag)::type;
    if (st == DType::kF32) {
      cuda::launch_kernel(gemv_shrink_kernel<W, float>, static_cast<unsigned>(blocks), kGemvWarps * 32, 0, stream_,
                          pdl_, grp, args, xp, ii);
    } else if constexpr (!std::is_same_v<W, float>) {
      cuda::launch_kernel(gemv_shrink_kernel<W, W>, static_cast<unsigned>(blocks), kGemvWarps * 32, 0, stream_, pdl_,
                          grp, args, xp, ii);
    }
  }, "matmul: weight must be F32, F16 or BF16");
  defer->count = g.count;
  defer->meta = meta;
  for (int i = 0; i < g.count; ++i) {
    defer->y[i] = g.y[i];
    defer->b_stack[i] = lora.b_stack[i];
    defer->t[i] = Tensor(args.t + i * rank, DType::kF32, {1, rank}, Device::kCuda);
  }
  return true;
}

}  // namespace quiver
