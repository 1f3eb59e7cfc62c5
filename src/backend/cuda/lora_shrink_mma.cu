// LoRA shrink on tensor cores for the body of prefill chunks (see lora_kernels.h): tiles of
// 16 sorted tokens that are 16 consecutive tokens under one adapter, read from the bf16 copy
// of x that the base matmul multiplies (MatmulGroup::x16), with bf16 stacks.
//   part[g, s, i, r] = sum over the columns k of split s of a_g[slot][r, k] * x16[i, k]
// The CUDA-core shrink is instruction-bound there (ncu, 2,048-token prefill: q/k/v 59 us for
// 8 us of x bytes; it reads f32 x once per 8 ranks of each member). Here one warp takes a
// tile, a split and up to 32 ranks of one member: per 32 columns a lane makes 16-byte loads
// of two x rows and of one A row per 8 ranks straight into mma.sync m16n8k16 fragments. The
// columns a lane loads are a permutation of the fragment's k order, the same for x and A,
// so each product pairs the right elements. Four warps of a block take four tiles and the
// same A rows (from L1 when the tiles share the adapter). Products of bf16 are exact in f32,
// sums are f32 in a fixed order: results are deterministic.
#include "backend/cuda/lora_kernels.h"

namespace quiver::cuda {
namespace {

constexpr int kTok = 16;
constexpr int kWarps = 4;        // tiles per block
constexpr int kTiles = 4;        // mma n-tiles (8 ranks each) per pass
constexpr int kPassRanks = 8 * kTiles;
constexpr int kStepCols = 32;    // columns per step: 8 per lane of a quad

using Bf16 = __nv_bfloat16;

__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// grid (ceil(tiles / 4), splits, G * passes), 4 warps; warp w takes tile 4 * blockIdx.x + w.
// Lane (q = lane / 4, c = lane % 4) loads, per 32-column step at kb, columns kb + 8c .. + 7
// of tokens q and q + 8 (the A operand's rows) and of A rows r0 + 8j + q (the B operand's
// column q of n-tile j). Words 2h and 2h + 1 of those loads are the fragment registers of
// k-step h: x16 and A go through the same permutation of the 32 columns.
__global__ void __launch_bounds__(kWarps * 32)
mma_shrink_kernel(float* __restrict__ part, const Bf16* __restrict__ x, LoraGroupArgs args,
                  const int32_t* __restrict__ token_slot, const int32_t* __restrict__ sorted, int n, int in, int rank,
                  int num_slots, int split_cols, int passes) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int p0 = (blockIdx.x * kWarps + warp) * kTok;
  if (p0 + kTok > n) return;  // partial tiles are the CUDA-core kernel's
  int tok0 = 0, slot = -1;
  if (!lora_warp_tile_is_run(sorted, token_slot, p0, n, num_slots, &tok0, &slot)) return;  // warp-uniform
  const int g = blockIdx.z / passes, r0 = (blockIdx.z % passes) * kPassRanks;
  const int q = lane >> 2, c = lane & 3;
  const int k0 = blockIdx.y * split_cols, k1 = min(in, k0 + split_cols);
  const Bf16* x0 = x + static_cast<int64_t>(tok0 + q) * in;
  const Bf16* x1 = x0 + static_cast<int64_t>(8) * in;
  const Bf16* a = static_cast<const Bf16*>(args.a[g]) + static_cast<int64_t>(slot) * rank * in;
  float acc[kTiles][4] = {};
#pragma unroll 2
  for (int kb = k0; kb < k1; kb += kStepCols) {
    const int k = kb + 8 * c;
    const bool in_range = k < k1;  // in % 8 == 0: a lane's 8 columns are all in or all out
    const uint4 zero = make_uint4(0, 0, 0, 0);
    const uint4 xa = in_range ? load16(x0 + k) : zero, xb = in_range ? load16(x1 + k) : zero;
    uint4 w[kTiles];
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      const int r = r0 + 8 * j + q;
      w[j] = in_range && r < rank ? load16(a + static_cast<int64_t>(r) * in + k) : zero;
    }
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      if (r0 + 8 * j >= rank) break;  // uniform: past the rank
      mma_bf16(acc[j], xa.x, xb.x, xa.y, xb.y, w[j].x, w[j].y);
      mma_bf16(acc[j], xa.z, xb.z, xa.w, xb.w, w[j].z, w[j].w);
    }
  }
  // acc[j]: tokens q (0, 1) and q + 8 (2, 3), ranks r0 + 8j + 2c + (0, 1).
  float* out = part + (static_cast<int64_t>(g) * gridDim.y + blockIdx.y) * n * rank;
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = r0 + 8 * j + 2 * c + (e & 1), t = tok0 + q + (e >> 1) * 8;
      if (r < rank) out[static_cast<int64_t>(t) * rank + r] = acc[j][e];
    }
}

}  // namespace

bool lora_mma_shrink_fits(DType stack_type, const LoraGroupArgs& args, int members, const Tensor& x16, int64_t n,
                          int64_t in) {
  if (stack_type != DType::kBF16 || x16.empty() || x16.dtype != DType::kBF16 || x16.numel() != n * in ||
      x16.device != Device::kCuda || in % 8 != 0 || !aligned16(x16.data))
    return false;
  for (int i = 0; i < members; ++i)
    if (!aligned16(args.a[i])) return false;
  return true;
}

void lora_mma_shrink(float* part, const void* x16, const LoraGroupArgs& args, int members, const int32_t* token_slot,
                     const int32_t* sorted, int n, int in, int rank, int num_slots, int split_cols, int splits,
                     cudaStream_t stream) {
  const int passes = static_cast<int>(ceil_div(rank, kPassRanks));
  const dim3 grid(static_cast<unsigned>(ceil_div(ceil_div(n, kTok), kWarps)), static_cast<unsigned>(splits),
                  static_cast<unsigned>(members * passes));
  mma_shrink_kernel<<<grid, kWarps * 32, 0, stream>>>(part, static_cast<const Bf16*>(x16), args, token_slot, sorted,
                                                      n, in, rank, num_slots, split_cols, passes);
  launch_check();
}

}  // namespace quiver::cuda
