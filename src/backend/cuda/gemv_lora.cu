// The decode GEMV of 1 (or 2) tokens with its LoRA's shrink as extra blocks of the same launch:
//   y_g[0, :] = x[0] @ w_g^T (+ bias_g)        gemv.cuh's blocks, as the plain GEMV
//   t_g[0, :] = a_g[slot_0] @ x[0]             G x ceil(R / 4) more blocks, 4 A rows each
// and the expand, y_g += b_g[slot_0] @ t_g, left to the op that reads y next
// (ExpandKernel::kNextOp: rope_kv_write, add_rms_norm, silu_mul add it in their own
// kernel, lora_delta.cuh).
// So a batch-1 projection with an adapter is one kernel, as without: at batch 1 the LoRA's
// cost is the latency of its extra kernels on the step's chain, not its bytes. Decode
// batches of 2 tokens get the same A blocks per token beside the GEMV's 2-token blocks;
// 3..64 tokens run them alone (token_shrink), on the side stream beside the base matmul
// (lora.cu, project()).
//
// The alternatives measured (H200, 7B bf16, r=16 on all 7 projections, graphs, batch 1):
// a separate shrink, GEMV and expand take 5.38 ms a step; a small shrink kernel chained by
// PDL to a GEMV that adds B . t in its epilogue 4.42 against 4.18 for this design (base
// 3.87-3.90), the shrink still a kernel on the chain per group; one launch whose GEMV
// blocks spin on the shrink blocks 6.23 (the per-block atomics). Sums in a fixed order, so graph == eager bitwise.
// fp8 weights (with their row scales) take bf16 or f32 stacks. A token with slot
// -1 (or outside the stack) gets no t; the op after it skips it. Grids depend only on
// the shapes, the slot is read at run time (graph rules 3 and 4).
#include <type_traits>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/lora_kernels.h"
#include "backend/cuda/lora_shrink_rows.cuh"

namespace quiver {
namespace {

using cuda::GemvGroup;
using cuda::kGemvWarps;
using cuda::kRows;
using cuda::kU;
using cuda::ShrinkRows;
using cuda::shrink_rows;
using cuda::store_t;

// Block b >= lora.blocks: its GEMV rows into wrow; the member into *g, the first row *row0.
template <typename W>
__device__ __forceinline__ void base_rows(const GemvGroup& grp, const ShrinkRows& lora, int in, const W* (&wrow)[kRows],
                                          int* g, int* row0) {
  int first_block;
  const int b = blockIdx.x - lora.blocks;
  *g = cuda::gemv_member(grp, b, &first_block);
  *row0 = (b - first_block) * kRows;
  cuda::gemv_rows<W, kRows>(wrow, static_cast<const W*>(cuda::group_pick(*g, grp.w)), *row0,
                            cuda::group_pick(*g, grp.out), in);
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
      if (!shrink_rows<T>(lora, blockIdx.x / lora.rank_blocks, (blockIdx.x % lora.rank_blocks) * kRows, 0, in,
                          wrow)) {
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
      if (!shrink_rows<T>(lora, blockIdx.x / lora.rank_blocks, (blockIdx.x % lora.rank_blocks) * kRows, 0, in,
                          arow)) {
        cuda::pdl_wait();
        return;
      }
      cuda::gemv_dot<T, 1, kRows, kU, true>(arow, x, 1, in, acc);
    } else {
      const W* wrow[kRows];
      base_rows<W>(grp, lora, in, wrow, &g, &row0);
      cuda::gemv_dot<W, 1, kRows, cuda::gemv_rounds<W>(kU), true>(wrow, x, 1, in, acc);
    }
  }
  cuda::gemv_warp_sums<1, kRows>(red, acc, 1);
  if (!shrink) {
    cuda::gemv_store<1, kRows>(grp, g, red, row0, 1, nullptr);
    return;
  }
  store_t(red, lora.t + (blockIdx.x / lora.rank_blocks) * lora.rank, (blockIdx.x % lora.rank_blocks) * kRows,
          lora.rank);
}

// Two tokens: the plain GEMV's 2-token blocks (4 blocks per SM, 128 registers, as
// gemv.cu's) after A blocks per (member, token, rank block).
template <typename W, typename T>
__global__ void __launch_bounds__(kGemvWarps * 32, 4)
gemv2_shrink_kernel(GemvGroup grp, ShrinkRows lora, const float* __restrict__ x, int in) {
  constexpr int kN = 2;
  if (static_cast<int>(blockIdx.x) < lora.blocks) {  // block-uniform
    __shared__ float red1[kGemvWarps][kRows];
    const int b = blockIdx.x, g = b / (kN * lora.rank_blocks), tok = (b / lora.rank_blocks) % kN;
    const int r0 = (b % lora.rank_blocks) * kRows;
    const T* arow[kRows];
    if (!shrink_rows<T>(lora, g, r0, tok, in, arow)) {
      cuda::pdl_wait();  // the chain stays transitive (cuda_common.h)
      return;
    }
    float acc[kRows][1];
    cuda::gemv_dot<T, 1, kRows, kU, true>(arow, x + static_cast<int64_t>(tok) * in, 1, in, acc);
    cuda::gemv_warp_sums<1, kRows>(red1, acc, 1);
    store_t(red1, lora.t + (g * kN + tok) * lora.rank, r0, lora.rank);
    return;
  }
  __shared__ float red[kGemvWarps][kRows * kN];
  int g, row0;
  const W* wrow[kRows];
  base_rows<W>(grp, lora, in, wrow, &g, &row0);
  float acc[kRows][kN];
  cuda::gemv_dot<W, kN, kRows, cuda::gemv_rounds<W>(kU), true>(wrow, x, kN, in, acc);
  cuda::gemv_warp_sums<kN, kRows>(red, acc, kN);
  cuda::gemv_store<kN, kRows>(grp, g, red, row0, kN, nullptr);
}

// The shrink alone for n tokens, t [G, n, R]: block (g, tok, rank block) as the A blocks
// above, one token each. Runs on the side stream beside the base matmul (project()), so
// it is launched without programmatic serialisation (gemv_dot's wait is then a no-op).
template <typename T>
__global__ void __launch_bounds__(kGemvWarps * 32)
token_shrink_kernel(ShrinkRows lora, const float* __restrict__ x, int n, int in) {
  cuda::token_shrink_block<T>(lora, x, n, in, blockIdx.x);
}

}  // namespace

namespace cuda {

// *args for a LoRA group on x [n, in], all but t; false when the kernels here do not take
// the operands (rank, `in` not a multiple of 8, stack types, alignment). Checks the
// stacks' shapes.
bool shrink_rows_args(const GroupLora& lora, Tensor x, ShrinkRows* out) {
  ShrinkRows& args = *out;
  const int64_t n = x.dim(0), in = x.dim(1);
  const Tensor& a0 = lora.a_stack[0];
  const DType st = a0.dtype;
  if (a0.ndim != 3 || (st != DType::kF32 && st != DType::kF16 && st != DType::kBF16)) return false;
  const int64_t num_slots = a0.dim(0), rank = a0.dim(1);
  if (rank < 1 || rank > cuda::kLoraMaxRank || in < 8 || in % 8 != 0 || !cuda::aligned16(x.data)) return false;
  for (int i = 0; i < lora.count; ++i) {
    const Tensor &a = lora.a_stack[i], &b = lora.b_stack[i];
    check(a.ndim == 3 && a.dim(0) == num_slots && a.dim(1) == rank && a.dim(2) == in && a.dtype == st,
          "lora: a_stacks of a group must share [S, R, in] and dtype");
    check(b.ndim == 3 && b.dim(0) == num_slots && b.dim(1) == lora.y[i].dim(1) && b.dim(2) == rank && b.dtype == st,
          "lora: b_stack must be [S, out, R] with its group's R and dtype");
    if (!cuda::aligned16(a.data)) return false;
    args.a[i] = a.data;
  }
  check_lora_meta(lora.meta, n, "lora");
  args.token_slot = lora.meta.token_slot.ptr<int32_t>();
  args.rank = static_cast<int>(rank);
  args.num_slots = static_cast<int>(num_slots);
  args.rank_blocks = static_cast<int>(cuda::ceil_div(rank, kRows));
  return true;
}

}  // namespace cuda

bool CudaBackend::gemv_lora(const MatmulGroup& g, const GroupLora& lora, Tensor x) {
  const DType wt = g.w[0].dtype, st = lora.a_stack[0].dtype;
  const int64_t n = x.dim(0);
  if (n < 1 || n > 2) return false;
  // Stacks in the weights' type or f32; beside fp8 weights, bf16 stacks (the model's type).
  const bool fp8_bf16 = wt == DType::kF8E4M3 && st == DType::kBF16;
  if ((st != wt && st != DType::kF32 && !fp8_bf16) || !cuda::lora_matches_outputs(g, lora)) return false;
  bool aligned = true;
  GemvGroup grp = cuda::gemv_group(g, &aligned);
  ShrinkRows args;
  if (!aligned || !shrink_args(lora, x, &args)) return false;
  const int blocks = cuda::gemv_blocks<kRows>(grp, g.count) + args.blocks;
  const float* xp = x.ptr<float>();
  const int ii = static_cast<int>(x.dim(1));
  cuda::dispatch_kv(wt, [&](auto wtag) {
    using W = typename decltype(wtag)::type;
    if (st == DType::kF32) {
      cuda::launch_kernel(n == 1 ? gemv_shrink_kernel<W, float> : gemv2_shrink_kernel<W, float>,
                          static_cast<unsigned>(blocks), kGemvWarps * 32, 0, stream_, pdl_, grp, args, xp, ii);
    } else if constexpr (std::is_same_v<W, __nv_fp8_e4m3>) {
      cuda::launch_kernel(n == 1 ? gemv_shrink_kernel<W, __nv_bfloat16> : gemv2_shrink_kernel<W, __nv_bfloat16>,
                          static_cast<unsigned>(blocks), kGemvWarps * 32, 0, stream_, pdl_, grp, args, xp, ii);
    } else if constexpr (!std::is_same_v<W, float>) {
      cuda::launch_kernel(n == 1 ? gemv_shrink_kernel<W, W> : gemv2_shrink_kernel<W, W>, static_cast<unsigned>(blocks),
                          kGemvWarps * 32, 0, stream_, pdl_, grp, args, xp, ii);
    }
  }, "matmul: weight must be F32, F16, BF16 or F8_E4M3");
  return true;
}

bool CudaBackend::token_shrink(const GroupLora& lora, Tensor x, cudaStream_t stream) {
  ShrinkRows args;
  if (!shrink_args(lora, x, &args)) return false;
  const auto blocks = static_cast<unsigned>(args.blocks);
  const int ni = static_cast<int>(x.dim(0)), ii = static_cast<int>(x.dim(1));
  cuda::dispatch_float(lora.a_stack[0].dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::launch_kernel(token_shrink_kernel<T>, blocks, kGemvWarps * 32, 0, stream, false, args, x.ptr<float>(), ni,
                        ii);
  }, "lora: a_stack must be F32, F16 or BF16");
  return true;
}

bool CudaBackend::shrink_args(const GroupLora& lora, Tensor x, ShrinkRows* args) {
  if (!cuda::shrink_rows_args(lora, x, args)) return false;
  const int64_t n = x.dim(0);
  const Tensor& t = lora.t;
  check(t.dtype == DType::kF32 && t.device == Device::kCuda && t.ndim == 3 && t.dim(0) >= lora.count &&
            t.dim(1) == n && t.dim(2) == args->rank,
        "lora: t must be f32 [members, n, max_rank] on the GPU");
  args->t = t.ptr<float>();
  args->blocks = lora.count * static_cast<int>(n) * args->rank_blocks;
  return true;
}

}  // namespace quiver
