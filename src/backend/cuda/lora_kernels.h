// Shared by the CUDA multi-LoRA kernel sets: lora.cu (tiles of 16 slot-sorted tokens,
// used from 16 tokens up: prefill segments and large decode batches), lora_expand_mma.cu
// (the expand of prefill tiles on tensor cores, for bf16 stacks) and lora_gather.cu (one
// token per block, used below 16 tokens: small decode batches, where latency rules). All
// write and read the same shrink partials, [G, splits, n, R] f32.
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "backend/cuda/cuda_common.h"

namespace quiver::cuda {

// Below this many tokens the gather kernels run.
inline constexpr int kLoraGatherMaxN = 15;
// Columns per shrink split of the gather kernels.
inline constexpr int kLoraGatherSplit = 64;

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

// lora_gather.cu. part: [G, ceil(in / kLoraGatherSplit), n, R].
void lora_gather_shrink(float* part, const float* x, const LoraGroupArgs& args, int members,
                        const int32_t* token_slot, const int32_t* sorted, int n, int in, int rank, int num_slots,
                        DType stack_type, cudaStream_t stream);
// y_g[i] += b_g[slot_i] . sum_c part[g, c, i, :], one token per block (partials summed there).
void lora_gather_expand(const LoraGroupArgs& args, int members, int max_out, const float* part, int chunks,
                        const int32_t* token_slot, const int32_t* sorted, int n, int rank, int num_slots,
                        DType stack_type, cudaStream_t stream);

// lora_expand_mma.cu: whether it takes these operands (bf16 stacks, rank and every out a
// multiple of 16, 32-byte aligned y and b), and the expand of the one-run tiles (the rest
// is left to the CUDA-core expand, called with skip_runs).
bool lora_mma_expand_fits(DType stack_type, const LoraGroupArgs& args, int members, int rank);
void lora_mma_expand(const LoraGroupArgs& args, int members, int max_out, const float* part, int splits,
                     const int32_t* token_slot, const int32_t* sorted, int n, int rank, int num_slots,
                     cudaStream_t stream);

}  // namespace quiver::cuda
