// LoRA expand on tensor cores for the body of prefill chunks (see lora_kernels.h): tiles of
// 16 sorted tokens that are 16 consecutive tokens under one adapter (lora_tile_is_run).
//   y_g[i, o] += b_g[slot][o, :] . t_i,  t_i = sum over splits of part[g, s, i, :]
// The CUDA-core expand is instruction-bound there (ncu, 2,048-token prefill: ~115 thread
// instructions per y element, 2.9x the y read-modify-write floor); here a warp updates a
// 16 x 16 block of y per mma: the block is loaded from y as the accumulator, t is the A
// operand (its 16 rows in shared memory as two bf16 terms hi + lo, hi = bf16(t),
// lo = bf16(t - hi), so |t - hi - lo| <= 2^-18 |t|), B's 16 rows the col-major B operand
// straight from the stack. Each warp takes two 16-column blocks of y per step, a block 128
// columns, and a block walks its columns from 128 * blockIdx.y in steps of 128 * gridDim.y.
// Summation order is fixed: results are deterministic.
#include <mma.h>

#include <algorithm>

#include "backend/cuda/lora_kernels.h"

namespace quiver::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kTok = 16;
constexpr int kWarps = 4;
constexpr int kWarpBlocks = 2;                        // 16-column blocks of y per warp and step
constexpr int kBlockCols = kWarps * kWarpBlocks * 16;  // 128
constexpr int64_t kTargetBlocks = 1024;

using Bf16 = __nv_bfloat16;
using FragT = wmma::fragment<wmma::matrix_a, 16, 16, 16, Bf16, wmma::row_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, Bf16, wmma::col_major>;
using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

bool aligned32(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 31u) == 0; }

// grid (ceil(n / 16), walkers, G), 128 threads; dynamic shared memory 2 x 16 x (R + 8) bf16.
__global__ void __launch_bounds__(kWarps * 32)
mma_expand_kernel(LoraGroupArgs args, const float* __restrict__ part, int splits,
                  const int32_t* __restrict__ token_slot, const int32_t* __restrict__ sorted, int n, int rank,
                  int num_slots) {
  extern __shared__ __align__(32) unsigned char smem[];
  __shared__ int tok[kTok], slot[kTok];
  const int g = blockIdx.z, out = args.out[g];
  const int p0 = blockIdx.x * kTok;
  if (blockIdx.y * kBlockCols >= out || p0 + kTok > n) return;  // uniform; partial tiles are the other kernel's
  lora_load_tile(tok, slot, sorted, token_slot, p0, n, num_slots);  // a full tile: p0 + 16 <= n
  __syncthreads();
  if (!lora_tile_is_run(tok, slot)) return;  // uniform
  const int rp = rank + 8;  // padded row: 16-byte multiple, as wmma wants
  Bf16* th = reinterpret_cast<Bf16*>(smem);
  Bf16* tl = th + kTok * rp;
  const float* part_g = part + static_cast<int64_t>(g) * splits * n * rank;
  for (int idx = threadIdx.x; idx < kTok * rank; idx += kWarps * 32) {
    const int m = idx / rank, r = idx % rank;
    const float s = lora_part_sum(part_g, splits, n, rank, tok[m], r);
    const Bf16 hi = __float2bfloat16_rn(s);
    th[m * rp + r] = hi;
    tl[m * rp + r] = __float2bfloat16_rn(s - __bfloat162float(hi));
  }
  __syncthreads();
  const Bf16* b = static_cast<const Bf16*>(args.b[g]) + static_cast<int64_t>(slot[0]) * out * rank;
  float* y = args.y[g] + static_cast<int64_t>(tok[0]) * out;
  const int warp = threadIdx.x >> 5;
  for (int c0 = blockIdx.y * kBlockCols + warp * kWarpBlocks * 16; c0 < out; c0 += gridDim.y * kBlockCols) {
    FragAcc acc[kWarpBlocks];
#pragma unroll
    for (int i = 0; i < kWarpBlocks; ++i)
      if (c0 + i * 16 < out) wmma::load_matrix_sync(acc[i], y + c0 + i * 16, out, wmma::mem_row_major);
    for (int k = 0; k < rank; k += 16) {
      FragB fb[kWarpBlocks];
#pragma unroll
      for (int i = 0; i < kWarpBlocks; ++i)
        if (c0 + i * 16 < out) wmma::load_matrix_sync(fb[i], b + static_cast<int64_t>(c0 + i * 16) * rank + k, rank);
      FragT fh, fl;
      wmma::load_matrix_sync(fh, th + k, rp);
      wmma::load_matrix_sync(fl, tl + k, rp);
#pragma unroll
      for (int i = 0; i < kWarpBlocks; ++i) {
        if (c0 + i * 16 >= out) continue;
        wmma::mma_sync(acc[i], fh, fb[i], acc[i]);
        wmma::mma_sync(acc[i], fl, fb[i], acc[i]);
      }
    }
#pragma unroll
    for (int i = 0; i < kWarpBlocks; ++i)
      if (c0 + i * 16 < out) wmma::store_matrix_sync(y + c0 + i * 16, acc[i], out, wmma::mem_row_major);
  }
}

}  // namespace

bool lora_mma_expand_fits(DType stack_type, const LoraGroupArgs& args, int members, int rank) {
  if (stack_type != DType::kBF16 || rank % 16 != 0) return false;
  for (int i = 0; i < members; ++i)
    if (args.out[i] % 16 != 0 || !aligned32(args.y[i]) || !aligned32(args.b[i])) return false;
  return true;
}

void lora_mma_expand(const LoraGroupArgs& args, int members, int max_out, const float* part, int splits,
                     const int32_t* token_slot, const int32_t* sorted, int n, int rank, int num_slots,
                     cudaStream_t stream) {
  const int64_t tiles = ceil_div(n, kTok), col_blocks = ceil_div(max_out, kBlockCols);
  const int64_t walkers = std::clamp<int64_t>(ceil_div(kTargetBlocks, tiles * members), 1, col_blocks);
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(walkers), static_cast<unsigned>(members));
  const size_t smem = sizeof(Bf16) * 2 * kTok * static_cast<size_t>(rank + 8);
  mma_expand_kernel<<<grid, kWarps * 32, smem, stream>>>(args, part, splits, token_slot, sorted, n, rank, num_slots);
  launch_check();
}

}  // namespace quiver::cuda
