// LoRA shrink on tensor cores for the body of prefill chunks (see lora_kernels.h): tiles of
// 16 sorted tokens that are 16 consecutive tokens under one adapter, read from the bf16 copy
// of x that the base matmul multiplies (MatmulGroup::x16), with bf16 stacks.
//   part[g, s, i, r] = sum over the columns k of split s of a_g[slot][r, k] * x16[i, k]
// The CUDA-core shrink is instruction-bound there (ncu, 2,048-token prefill: q/k/v 59 us for
// 8 us of x bytes; it reads f32 x once per 8 ranks of each member). Here one warp takes a
// tile, a split and 16 ranks of one member: per 64 columns a lane makes 16-byte loads of
// two x rows and of one A row per 8 ranks straight into mma.sync m16n8k16 fragments. The
// columns a lane loads are a permutation of the fragment's k order, the same for x and A,
// so each product pairs the right elements. Four warps of a block take four tiles and the
// same A rows (from L1 when the tiles share the adapter). The splits over `in` are chosen
// for ~16 warps per SM in all (lora_mma_shrink_split): a first version with the CUDA-core
// shrink's 4 splits gave o (512 warps, 32 serial steps each) 31 us and down 84 us at 2,048
// tokens. Products of bf16 are exact in f32, sums are f32 in a fixed order: results are
// deterministic.
#include <algorithm>

#include "backend/cuda/lora_kernels.h"

namespace quiver::cuda {
namespace {

constexpr int kTok = 16;
constexpr int kWarps = 4;     // tiles per block
constexpr int kTiles = 2;     // mma n-tiles (8 ranks each) per pass
constexpr int kPassRanks = 8 * kTiles;
constexpr int kHalves = 2;    // 16-byte loads per row and lane per step
constexpr int kStepCols = 32 * kHalves;  // columns per step: 8 per lane of a quad, twice
constexpr int kWarpsPerSm = 16;          // split target: about this many warps per SM in all

using Bf16 = __nv_bfloat16;

// One step's loads of a lane: for each half h, 8 columns of tokens q and q + 8 and of the
// A rows of the pass's n-tiles; zeros past the split or the rank.
struct StepLoads {
  uint4 x0[kHalves], x1[kHalves], a[kTiles][kHalves];

  __device__ __forceinline__ void load(const Bf16* x0p, const Bf16* x1p, const Bf16* const (&ap)[kTiles], int k,
                                       int k1, const bool (&row_ok)[kTiles]) {
    const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
      const int kh = k + 32 * h;
      const bool in_range = kh < k1;  // in % 8 == 0: a lane's 8 columns are all in or all out
      x0[h] = in_range ? load16(x0p + kh) : zero;
      x1[h] = in_range ? load16(x1p + kh) : zero;
#pragma unroll
      for (int j = 0; j < kTiles; ++j) a[j][h] = in_range && row_ok[j] ? load16(ap[j] + kh) : zero;
    }
  }
};

// grid (G * passes, ceil(tiles / 4), splits), 4 warps; warp w takes tile 4 * blockIdx.y + w.
// Members and passes vary fastest, so the blocks that read the same x16 rows run together
// and all but the first read them from L2 (a 16,384-token x16 is 134 MB, beyond L2).
// Lane (q = lane / 4, c = lane % 4) loads, per 64-column step at kb, columns kb + 8c .. + 7
// and kb + 32 + 8c .. + 7 of tokens q and q + 8 (the A operand's rows) and of A rows
// r0 + 8j + q (the B operand's column q of n-tile j). Words 2i and 2i + 1 of each load are
// the fragment registers of one k-step: x16 and A go through the same permutation of the
// columns. The next step's loads are issued before this step's products, so two steps of
// loads are in flight.
__global__ void __launch_bounds__(kWarps * 32)
mma_shrink_kernel(float* __restrict__ part, const Bf16* __restrict__ x, LoraGroupArgs args,
                  const int32_t* __restrict__ token_slot, const int32_t* __restrict__ sorted, int n, int in, int rank,
                  int num_slots, int split_cols, int passes) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int p0 = (blockIdx.y * kWarps + warp) * kTok;
  if (p0 + kTok > n) return;  // partial tiles are the CUDA-core kernel's
  int tok0 = 0, slot = -1;
  if (!lora_warp_tile_is_run(sorted, token_slot, p0, n, num_slots, &tok0, &slot)) return;  // warp-uniform
  const int g = blockIdx.x / passes, r0 = (blockIdx.x % passes) * kPassRanks;
  const int q = lane >> 2, c = lane & 3;
  const int k0 = blockIdx.z * split_cols, k1 = min(in, k0 + split_cols);
  const Bf16* x0 = x + static_cast<int64_t>(tok0 + q) * in;
  const Bf16* x1 = x0 + static_cast<int64_t>(8) * in;
  const Bf16* a = static_cast<const Bf16*>(args.a[g]) + static_cast<int64_t>(slot) * rank * in;
  const Bf16* arow[kTiles];
  bool row_ok[kTiles];
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    const int r = r0 + 8 * j + q;
    row_ok[j] = r < rank;
    arow[j] = a + static_cast<int64_t>(row_ok[j] ? r : 0) * in;
  }
  float acc[kTiles][4] = {};
  StepLoads cur, next;
  cur.load(x0, x1, arow, k0 + 8 * c, k1, row_ok);
  for (int kb = k0; kb < k1; kb += kStepCols) {
    if (kb + kStepCols < k1) next.load(x0, x1, arow, kb + kStepCols + 8 * c, k1, row_ok);
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      if (r0 + 8 * j >= rank) break;  // uniform: past the rank
#pragma unroll
      for (int h = 0; h < kHalves; ++h) {
        cuda::mma16<Bf16>(acc[j], cur.x0[h].x, cur.x1[h].x, cur.x0[h].y, cur.x1[h].y, cur.a[j][h].x, cur.a[j][h].y);
        cuda::mma16<Bf16>(acc[j], cur.x0[h].z, cur.x1[h].z, cur.x0[h].w, cur.x1[h].w, cur.a[j][h].z, cur.a[j][h].w);
      }
    }
    cur = next;
  }
  // acc[j]: tokens q (0, 1) and q + 8 (2, 3), ranks r0 + 8j + 2c + (0, 1).
  float* out = part + (static_cast<int64_t>(g) * gridDim.z + blockIdx.z) * n * rank;
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

int lora_mma_shrink_split(int64_t n, int64_t in, int members, int rank, int num_sms, int align) {
  const int64_t passes = ceil_div(rank, kPassRanks), tiles = ceil_div(n, kTok);
  const int64_t splits =
      std::clamp<int64_t>(ceil_div(int64_t{kWarpsPerSm} * num_sms, tiles * members * passes), 1, ceil_div(in, align));
  return static_cast<int>(ceil_div(ceil_div(in, splits), align) * align);
}

void lora_mma_shrink(float* part, const void* x16, const LoraGroupArgs& args, int members, const int32_t* token_slot,
                     const int32_t* sorted, int n, int in, int rank, int num_slots, int split_cols, int splits,
                     cudaStream_t stream) {
  const int passes = static_cast<int>(ceil_div(rank, kPassRanks));
  const dim3 grid(static_cast<unsigned>(members * passes), static_cast<unsigned>(ceil_div(ceil_div(n, kTok), kWarps)),
                  static_cast<unsigned>(splits));
  mma_shrink_kernel<<<grid, kWarps * 32, 0, stream>>>(part, static_cast<const Bf16*>(x16), args, token_slot, sorted,
                                                      n, in, rank, num_slots, split_cols, passes);
  launch_check();
}

}  // namespace quiver::cuda
