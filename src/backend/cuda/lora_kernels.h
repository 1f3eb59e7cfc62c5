// Shared by the CUDA multi-LoRA kernel sets of split partials: lora.cu (tiles of 16
// slot-sorted tokens: prefill segments and large decode batches), lora_shrink_mma.cu and
// lora_expand_mma.cu (the shrink and expand of prefill tiles on tensor cores, for bf16
// stacks). All write and read the same shrink partials, [G, splits, n, R] f32.
#pragma once

#include <cstdint>
#include <string>

#include "backend/backend.h"
#include "backend/cuda/cuda_common.h"

namespace quiver::cuda {

// The largest rank the kernels take (the engine's --max-lora-rank bound).
inline constexpr int kLoraMaxRank = 512;

// Checks a LoraMeta for n tokens: token_slot i32 [>= n], sorted_tokens empty or i32 [n].
inline void check_lora_meta(const LoraMeta& meta, int64_t n, const char* op) {
  check(meta.token_slot.dtype == DType::kI32 && meta.token_slot.numel() >= n,
        std::string(op) + ": token_slot must be i32 [n]");
  check(meta.sorted_tokens.empty() || (meta.sorted_tokens.dtype == DType::kI32 && meta.sorted_tokens.numel() == n),
        std::string(op) + ": sorted_tokens must be empty or i32 [n]");
}

struct LoraGroupArgs {
  const void* a[kMaxGroup] = {};  // [S, R, in]
  const void* b[kMaxGroup] = {};  // [S, out_g, R]
  float* y[kMaxGroup] = {};       // [n, out_g]
  int out[kMaxGroup] = {};
};

// The token at position p of the walk (sorted: LoraMeta::sorted_tokens, or null for 0..n-1).
__device__ __forceinline__ int lora_token_at(const int32_t* sorted, int p) { return sorted != nullptr ? sorted[p] : p; }

// Slot of a token; one outside the stack counts as -1 (no adapter).
__device__ __forceinline__ int lora_slot_of(const int32_t* token_slot, int tok, int num_slots) {
  const int s = token_slot[tok];
  return s < num_slots ? s : -1;
}

// t[tok, r] of one member: its split partials part_g[s, tok, r] ([splits, n, R]) summed in
// split order, the one fixed order every expand uses (so graph == eager, bitwise).
__device__ __forceinline__ float lora_part_sum(const float* part_g, int splits, int n, int rank, int tok, int r) {
  float s = 0.f;
  for (int sp = 0; sp < splits; ++sp) s += part_g[(static_cast<int64_t>(sp) * n + tok) * rank + r];
  return s;
}

// Threads 0..15 of a block fill a tile's tokens and slots: positions p0 .. p0 + 15 of the
// walk, slot -1 (and token 0) past n. The caller synchronises before reading them.
__device__ __forceinline__ void lora_load_tile(int* tok, int* slot, const int32_t* sorted, const int32_t* token_slot,
                                               int p0, int n, int num_slots) {
  if (threadIdx.x < 16) {
    const int p = p0 + threadIdx.x;
    const int t = p < n ? lora_token_at(sorted, p) : 0;
    tok[threadIdx.x] = t;
    slot[threadIdx.x] = p < n ? lora_slot_of(token_slot, t, num_slots) : -1;
  }
}

// Whether a tile of 16 sorted positions (tok, slot: the tile's tokens and their slots, -1
// past n) is one run of 16 consecutive tokens under one adapter: a prefill chunk's body.
// Those tiles take the tensor-core expand when it runs (lora_expand_mma.cu), and the
// CUDA-core expand then skips them; both decide with this one predicate.
__device__ __forceinline__ bool lora_tile_is_run(const int* tok, const int* slot) {
  bool run = slot[0] >= 0;
#pragma unroll
  for (int m = 1; m < 16; ++m) run &= slot[m] == slot[0] && tok[m] == tok[0] + m;
  return run;
}

// lora_tile_is_run for a whole warp (all 32 lanes call it): the tile at sorted positions
// p0 .. p0 + 15, lanes 0..15 reading one position each. *tok0 and *slot0 get the tile's
// first token and its slot. The shrink kernels decide with it which of them takes a tile.
__device__ __forceinline__ bool lora_warp_tile_is_run(const int32_t* sorted, const int32_t* token_slot, int p0, int n,
                                                      int num_slots, int* tok0, int* slot0) {
  const int lane = threadIdx.x & 31;
  int t = 0, s = -1;
  if (lane < 16 && p0 + lane < n) {
    t = lora_token_at(sorted, p0 + lane);
    s = lora_slot_of(token_slot, t, num_slots);
  }
  *tok0 = __shfl_sync(0xffffffffu, t, 0);
  *slot0 = __shfl_sync(0xffffffffu, s, 0);
  return __all_sync(0xffffffffu, lane >= 16 || (*slot0 >= 0 && s == *slot0 && t == *tok0 + lane));
}

// Eight consecutive stack elements kept in their own type (half the registers of floats
// for 16-bit stacks). load: 16-byte loads when vec (aligned rows) and all 8 are in range,
// else element loads with zeros past `valid`.
template <typename T>
struct alignas(16) Row8 {
  T v[8];
  __device__ __forceinline__ void load(const T* p, int valid, bool vec) {
    if (vec && valid >= 8) {
      constexpr int kVecs = static_cast<int>(sizeof(T)) * 8 / 16;
#pragma unroll
      for (int i = 0; i < kVecs; ++i) reinterpret_cast<uint4*>(v)[i] = load16(p + i * (16 / sizeof(T)));
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = e < valid ? p[e] : from_f32<T>(0.f);
    }
  }
  __device__ __forceinline__ void to_f32(float (&f)[8]) const {
#pragma unroll
    for (int e = 0; e < 8; ++e) f[e] = quiver::cuda::to_f32(v[e]);
  }
  __device__ __forceinline__ float dot(const float (&x)[8], float acc) const {
#pragma unroll
    for (int e = 0; e < 8; ++e) acc = fmaf(quiver::cuda::to_f32(v[e]), x[e], acc);
    return acc;
  }
};

// lora_shrink_mma.cu: whether it takes these operands (bf16 stacks and a bf16 x16 [n, in],
// in a multiple of 8, 16-byte aligned rows), and the shrink of the one-run tiles from x16
// (the rest is left to the CUDA-core shrink, called with skip_runs and the same split_cols
// and splits, so both write the same partials).
bool lora_mma_shrink_fits(DType stack_type, const LoraGroupArgs& args, int members, const Tensor& x16, int64_t n,
                          int64_t in);
// Columns per split (a multiple of align) that give the tensor-core shrink enough warps.
int lora_mma_shrink_split(int64_t n, int64_t in, int members, int rank, int num_sms, int align);
void lora_mma_shrink(float* part, const void* x16, const LoraGroupArgs& args, int members, const int32_t* token_slot,
                     const int32_t* sorted, int n, int in, int rank, int num_slots, int split_cols, int splits,
                     cudaStream_t stream);

// lora_expand_mma.cu: whether it takes these operands (bf16 stacks, rank and every out a
// multiple of 16, 32-byte aligned y and b), and the expand of the one-run tiles (the rest
// is left to the CUDA-core expand, called with skip_runs).
bool lora_mma_expand_fits(DType stack_type, const LoraGroupArgs& args, int members, int rank);
void lora_mma_expand(const LoraGroupArgs& args, int members, int max_out, const float* part, int splits,
                     const int32_t* token_slot, const int32_t* sorted, int n, int rank, int num_slots,
                     cudaStream_t stream);

}  // namespace quiver::cuda
