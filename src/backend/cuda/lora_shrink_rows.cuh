// The decode LoRA shrink's blocks, t_g[tok, :] = a_g[slot_tok] @ x[tok] over f32 x, shared
// by the launches that carry them: gemv_lora.cu's GEMV of 1-2 tokens (its first blocks),
// its token shrink on the side stream, and gemm_skinny.cu's tensor-core GEMM of 3-16
// tokens (its first blocks). A block takes kRows A rows of one member and one token; a
// token with slot -1 (or outside the stack) gets no t, and the op after it skips it.
#pragma once

#include "backend/cuda/gemv.cuh"
#include "backend/cuda/lora_kernels.h"

namespace quiver::cuda {

inline constexpr int kRows = 4;  // rows per block, base and A alike (gemv.cu's default shape)
inline constexpr int kU = 4;     // gemv.cu's rounds of loads in flight for 4 rows and 1 token

struct ShrinkRows {
  const void* a[kMaxGroup] = {};  // [S, R, in]
  float* t = nullptr;             // [G, n, R]: member g's t at t + g * n * R
  const int32_t* token_slot = nullptr;
  int rank = 0, num_slots = 0;
  int rank_blocks = 0;  // ceil(R / kRows)
  int blocks = 0;       // G * n * rank_blocks: the first blocks of the grid (gemv*_shrink_kernel)
};

// Member g's A rows r0 .. r0 + 3 for token tok into arow; false when the token has no
// adapter (nothing to compute).
template <typename T>
__device__ __forceinline__ bool shrink_rows(const ShrinkRows& lora, int g, int r0, int tok, int in,
                                            const T* (&arow)[kRows]) {
  const int slot = lora_slot_of(lora.token_slot, tok, lora.num_slots);
  if (slot < 0) return false;
  const T* a = static_cast<const T*>(group_pick(g, lora.a)) + static_cast<int64_t>(slot) * lora.rank * in;
  gemv_rows<T, kRows>(arow, a, r0, lora.rank, in);
  return true;
}

// The warps' sums of an A block's 4 rows into t from r0 (rows past the rank are not stored).
__device__ __forceinline__ void store_t(const float (&red)[kGemvWarps][kRows], float* t, int r0, int rank) {
  if (threadIdx.x < kRows && r0 + static_cast<int>(threadIdx.x) < rank) {
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < kGemvWarps; ++w) s += red[w][threadIdx.x];
    t[r0 + threadIdx.x] = s;
  }
}

// Block b of the shrink of n tokens, b < lora.blocks: member b / (n * rank_blocks), token
// (b / rank_blocks) % n, rank block b % rank_blocks. Passes the kernel's programmatic
// wait (gemv_dot) in every case, so the chain stays transitive (cuda_common.h).
template <typename T>
__device__ __forceinline__ void token_shrink_block(const ShrinkRows& lora, const float* __restrict__ x, int n, int in,
                                                   int b) {
  __shared__ float red[kGemvWarps][kRows];
  const int g = b / (n * lora.rank_blocks), tok = (b / lora.rank_blocks) % n;
  const int r0 = (b % lora.rank_blocks) * kRows;
  const T* arow[kRows];
  if (!shrink_rows<T>(lora, g, r0, tok, in, arow)) {
    pdl_wait();
    return;
  }
  float acc[kRows][1];
  gemv_dot<T, 1, kRows, kU, true>(arow, x + static_cast<int64_t>(tok) * in, 1, in, acc);
  gemv_warp_sums<1, kRows>(red, acc, 1);
  store_t(red, lora.t + (static_cast<int64_t>(g) * n + tok) * lora.rank, r0, lora.rank);
}

// *out for a LoRA group on x [n, in], all but t and blocks; false when these kernels do not
// take the operands (rank, `in` not a multiple of 8, stack types, alignment). Checks the
// stacks' shapes (gemv_lora.cu).
bool shrink_rows_args(const GroupLora& lora, Tensor x, ShrinkRows* out);

// Whether lora adds into the outputs of g member for member, as a launch that computes both
// needs (gemv_lora.cu, gemm_skinny.cu).
inline bool lora_matches_outputs(const MatmulGroup& g, const GroupLora& lora) {
  if (lora.count != g.count) return false;
  for (int i = 0; i < g.count; ++i)
    if (lora.y[i].data != g.y[i].data) return false;
  return true;
}


}  // namespace quiver::cuda
