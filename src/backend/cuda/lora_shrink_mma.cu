// LoRA shrink on tensor cores for bf16 slot stacks, from 16 tokens up (see lora_kernels.h):
//   part[g, s, i, r] = a_g[slot_i][r, split s] . x[i, split s]
// A block takes 16 slot-sorted tokens, one column split of `in` and 32 ranks of one member.
// Per run of equal slots in the tile it stages the run's x rows (others zero) in shared
// memory 256 columns at a time, as two bf16 terms hi + lo (hi = bf16(x), lo = bf16(x - hi):
// |x - hi - lo| <= 2^-18 |x|, so the products keep about float precision), and its four
// warps each take every fourth 16-column step: acc += X_hi . A^T + X_lo . A^T with A's rows
// read straight from the stack as the col-major B operand. Zero rows make a run add only to
// its own tokens, so one accumulator serves every run of the tile. The warps' sums meet in
// shared memory and are added in a fixed order: results are deterministic.
// The tiled CUDA-core shrink read x once per 8 ranks and member from L2 and A once per 4
// tokens; here x is read once per 32 ranks and A once per run (ncu, 2,048-token prefill:
// 60 us per q/k/v group before).
#include <mma.h>

#include "backend/cuda/lora_kernels.h"

namespace quiver::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kTok = 16;                    // sorted tokens per block
constexpr int kWarps = 4;
constexpr int kCols = 256;                  // x columns staged at a time
constexpr int kSteps = kCols / 16 / kWarps;  // 16-column steps per warp and stage
constexpr int kRankTiles = 2;               // 16-rank tiles per block
constexpr int kPad = 8;                     // bf16 row padding of the staged x
constexpr int kRedPad = 4;

using Bf16 = __nv_bfloat16;
using FragX = wmma::fragment<wmma::matrix_a, 16, 16, 16, Bf16, wmma::row_major>;
using FragA = wmma::fragment<wmma::matrix_b, 16, 16, 16, Bf16, wmma::col_major>;
using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// grid (ceil(n / 16), splits, G * rank_groups), 128 threads.
__global__ void __launch_bounds__(kWarps * 32)
mma_shrink_kernel(float* __restrict__ part, const float* __restrict__ x, LoraGroupArgs args,
                  const int32_t* __restrict__ token_slot, const int32_t* __restrict__ sorted, int n, int in, int rank,
                  int num_slots, int split_cols, int rank_groups) {
  __shared__ __align__(32) Bf16 xh[kTok][kCols + kPad];
  __shared__ __align__(32) Bf16 xl[kTok][kCols + kPad];
  __shared__ __align__(32) float red[kWarps][kTok][kRankTiles * 16 + kRedPad];
  __shared__ int tok[kTok], slot[kTok];
  const int warp = threadIdx.x >> 5;
  const int split = blockIdx.y, g = blockIdx.z / rank_groups, r0 = (blockIdx.z % rank_groups) * kRankTiles * 16;
  const int tiles = min(kRankTiles, (rank - r0) / 16);
  const int p0 = blockIdx.x * kTok;
  if (threadIdx.x < kTok) {
    const int p = p0 + threadIdx.x;
    const int t = p < n ? lora_token_at(sorted, p) : 0;
    tok[threadIdx.x] = t;
    slot[threadIdx.x] = p < n ? lora_slot_of(token_slot, t, num_slots) : -1;
  }
  __syncthreads();
  bool any = false;
#pragma unroll
  for (int m = 0; m < kTok; ++m) any |= slot[m] >= 0;
  if (!any) return;  // uniform
  const Bf16* a = static_cast<const Bf16*>(args.a[g]);
  const int k0 = split * split_cols, k1 = min(in, k0 + split_cols);
  FragAcc acc[kRankTiles];
#pragma unroll
  for (int rt = 0; rt < kRankTiles; ++rt) wmma::fill_fragment(acc[rt], 0.f);

  for (int m = 0; m < kTok;) {  // runs of equal slots (uniform over the block)
    const int s = slot[m];
    int e = m + 1;
    while (e < kTok && slot[e] == s) ++e;
    if (s < 0) {
      m = e;
      continue;
    }
    const Bf16* as = a + (static_cast<int64_t>(s) * rank + r0) * in;
    for (int kc = k0; kc < k1; kc += kCols) {
      const int width = min(kCols, k1 - kc);
      // This warp's A tiles of the stage first: they need nothing from shared memory.
      FragA fa[kSteps][kRankTiles];
#pragma unroll
      for (int st = 0; st < kSteps; ++st) {
        const int ks = (st * kWarps + warp) * 16;
#pragma unroll
        for (int rt = 0; rt < kRankTiles; ++rt)
          if (ks < width && rt < tiles) wmma::load_matrix_sync(fa[st][rt], as + static_cast<int64_t>(rt) * 16 * in + kc + ks, in);
      }
      constexpr int kPer = kTok * kCols / 4 / (kWarps * 32);  // float4s per thread
      float4 v[kPer];
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int idx = i * kWarps * 32 + threadIdx.x, row = idx / (kCols / 4), c = (idx % (kCols / 4)) * 4;
        v[i] = row >= m && row < e && c < width
                   ? __ldg(reinterpret_cast<const float4*>(x + static_cast<int64_t>(tok[row]) * in + kc + c))
                   : make_float4(0.f, 0.f, 0.f, 0.f);
      }
      __syncthreads();  // the previous stage's readers are done
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int idx = i * kWarps * 32 + threadIdx.x, row = idx / (kCols / 4), c = (idx % (kCols / 4)) * 4;
        const float f[4] = {v[i].x, v[i].y, v[i].z, v[i].w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const Bf16 hi = __float2bfloat16_rn(f[j]);
          xh[row][c + j] = hi;
          xl[row][c + j] = __float2bfloat16_rn(f[j] - __bfloat162float(hi));
        }
      }
      __syncthreads();
#pragma unroll
      for (int st = 0; st < kSteps; ++st) {
        const int ks = (st * kWarps + warp) * 16;
        if (ks >= width) break;  // warp-uniform
        FragX fh, fl;
        wmma::load_matrix_sync(fh, &xh[0][ks], kCols + kPad);
        wmma::load_matrix_sync(fl, &xl[0][ks], kCols + kPad);
#pragma unroll
        for (int rt = 0; rt < kRankTiles; ++rt) {
          if (rt >= tiles) break;
          wmma::mma_sync(acc[rt], fh, fa[st][rt], acc[rt]);
          wmma::mma_sync(acc[rt], fl, fa[st][rt], acc[rt]);
        }
      }
    }
    m = e;
  }
#pragma unroll
  for (int rt = 0; rt < kRankTiles; ++rt)
    if (rt < tiles) wmma::store_matrix_sync(&red[warp][0][rt * 16], acc[rt], kRankTiles * 16 + kRedPad, wmma::mem_row_major);
  __syncthreads();
  float* part_s = part + (static_cast<int64_t>(g) * gridDim.y + split) * n * rank;
  const int cols = tiles * 16;
  for (int idx = threadIdx.x; idx < kTok * cols; idx += kWarps * 32) {
    const int row = idx / cols, c = idx % cols;
    if (slot[row] < 0) continue;
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += red[w][row][c];
    part_s[static_cast<int64_t>(tok[row]) * rank + r0 + c] = sum;
  }
}

bool aligned32(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 31u) == 0; }

}  // namespace

bool lora_mma_shrink_fits(DType stack_type, const LoraGroupArgs& args, int members, const float* x, int in, int rank,
                          int split_cols) {
  if (stack_type != DType::kBF16 || rank % 16 != 0 || in % 16 != 0 || split_cols % kCols != 0 || !aligned16(x))
    return false;
  for (int i = 0; i < members; ++i)
    if (!aligned32(args.a[i])) return false;
  return true;
}

void lora_mma_shrink(float* part, const float* x, const LoraGroupArgs& args, int members, const int32_t* token_slot,
                     const int32_t* sorted, int n, int in, int rank, int num_slots, int split_cols, cudaStream_t stream) {
  const int rank_groups = static_cast<int>(ceil_div(rank, kRankTiles * 16));
  const dim3 grid(static_cast<unsigned>(ceil_div(n, kTok)), static_cast<unsigned>(ceil_div(in, split_cols)),
                  static_cast<unsigned>(members * rank_groups));
  mma_shrink_kernel<<<grid, kWarps * 32, 0, stream>>>(part, x, args, token_slot, sorted, n, in, rank, num_slots,
                                                      split_cols, rank_groups);
  launch_check();
}

}  // namespace quiver::cuda
