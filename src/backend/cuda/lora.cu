// CUDA multi-LoRA over the persistent slot stacks (DESIGN.md section 2), and project(), which
// runs a projection group with the kernels of its plan (step_plan.h). The tiled kernels here
// (ShrinkKernel / ExpandKernel::kTiled) take a group of up to three projections of one
// input (q/k/v, gate/up) in two launches whatever the batch:
//   shrink  part[g, s, i, :] = a_g[slot_i][:, split s] @ x[i, split s]   (split over `in`)
//   expand  y_g[i, :] += b_g[slot_i] @ sum_s part[g, s, i, :]
// Both take the tokens 16 at a time in LoraMeta::sorted_tokens order, so a tile holds runs
// of tokens that share an adapter: one request's prefill chunk is one long run (segments),
// a large decode batch mostly short runs. An adapter's weights are loaded once per run of a
// warp's tokens and used for each token of the run from registers.
//   shrink: a warp owns 4 tokens x 8 ranks (32 accumulators per lane) over the block's
//           column split, 8 columns per lane per step with 16-byte loads; the lanes' sums
//           are added through shared memory. grid (tiles, splits, G x rank blocks).
//           Under kTiledMma (prefill sizes, bf16 stacks, x's bf16 copy), tiles that are
//           one run are lora_shrink_mma.cu's, on tensor cores, and this kernel skips them.
//   expand: a lane owns 4 output rows for 4 of the tile's tokens, the y loads and the first
//           run's B loads of a step in flight at once; the tile's t rows (the split
//           partials summed in a fixed order) sit in shared memory. Under kTiledMma,
//           tiles that are one run of consecutive tokens (prefill) are
//           lora_expand_mma.cu's, on tensor cores, and this kernel skips them.
// Results are deterministic (fixed summation order): graph == eager, bitwise. Grids depend
// only on n and the stack shapes, never on which tokens carry an adapter, so a captured
// graph stays right whatever the slots are at replay (rules 3 and 4); tokens without an
// adapter are skipped, and a tile without any returns at once. A slot outside the stack
// is treated as -1. lora_shrink / lora_expand run the same kernels (shrink adds a reduction
// into t; expand reads t as a one-split partial). Where the host counted every tile as a
// run (LoraMeta::run_tokens), the CUDA-core kernels beside the tensor-core ones are not
// launched at all.
#include <algorithm>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/lora_kernels.h"

namespace quiver {
namespace {

constexpr int kTileTokens = 16;                          // sorted tokens per block
constexpr int kWarpTokens = 4;                           // shrink: tokens per warp
constexpr int kShrinkWarps = kTileTokens / kWarpTokens;  // 4
constexpr int kRankBlock = 8;                            // shrink: ranks per block
constexpr int kLaneCols = 8;                             // shrink: columns per lane per step
constexpr int kSplitAlign = 32 * kLaneCols;              // split widths are multiples of 256
constexpr int kExpandWarps = kTileTokens / kWarpTokens;  // expand: 4 tokens per warp
constexpr int kExpandRows = 4;                           // expand: output rows per lane and step
constexpr int64_t kExpandBlocks = 1024;                  // expand: target grid size

using GroupArgs = cuda::LoraGroupArgs;
using cuda::lora_slot_of;
using cuda::lora_tile_is_run;
using cuda::lora_token_at;
using cuda::lora_warp_tile_is_run;
using cuda::Row8;

// x[0..8) of an f32 row, zeros past `valid`.
__device__ __forceinline__ void load_x8(float (&f)[8], const float* p, int valid, bool vec) {
  if (vec && valid >= 8) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(p)), b = __ldg(reinterpret_cast<const float4*>(p) + 1);
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) f[e] = e < valid ? __ldg(p + e) : 0.f;
  }
}

template <typename V>
__device__ __forceinline__ V pick4(int j, const V (&v)[kWarpTokens]) {
  return j == 0 ? v[0] : j == 1 ? v[1] : j == 2 ? v[2] : v[3];
}

// part: [G, splits, n, R] f32. grid (ceil(n / 16), splits, G * rank_blocks), 4 warps.
// skip_runs: tiles that are one run are lora_shrink_mma.cu's, and left alone here.
// Warp w takes sorted positions 16 * blockIdx.x + 4w .. +3 and ranks r0 .. r0 + 7 over the
// columns [k0, k0 + split_cols): each lane walks 8 columns at a time, loads x for its 4
// tokens, and A's 8 rows once per run of equal slots among them. Lanes' sums meet in a
// 32 x 32 shared table that each lane reads back one row of.
template <typename T>
__global__ void __launch_bounds__(kShrinkWarps * 32)
shrink_kernel(float* __restrict__ part, const float* __restrict__ x, GroupArgs args,
              const int32_t* __restrict__ token_slot, const int32_t* __restrict__ sorted, int n, int in, int rank,
              int num_slots, int split_cols, int rank_blocks, bool skip_runs) {
  __shared__ float red[kShrinkWarps][kWarpTokens * kRankBlock][33];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int split = blockIdx.y, g = blockIdx.z / rank_blocks, r0 = (blockIdx.z % rank_blocks) * kRankBlock;
  int tok0, slot0;
  if (skip_runs && lora_warp_tile_is_run(sorted, token_slot, blockIdx.x * kTileTokens, n, num_slots, &tok0, &slot0))
    return;  // warp-uniform: lora_shrink_mma.cu's tile
  const int p0 = blockIdx.x * kTileTokens + warp * kWarpTokens;
  int tok[kWarpTokens], slot[kWarpTokens];
  bool any = false;
#pragma unroll
  for (int j = 0; j < kWarpTokens; ++j) {
    const int p = p0 + j;
    tok[j] = p < n ? lora_token_at(sorted, p) : 0;
    slot[j] = p < n ? lora_slot_of(token_slot, tok[j], num_slots) : -1;
    any |= slot[j] >= 0;
  }
  if (!any) return;  // warp-uniform, and no block barrier follows
  const T* a = static_cast<const T*>(args.a[g]);
  const bool avec = (static_cast<int64_t>(in) * sizeof(T)) % 16 == 0 && cuda::aligned16(a);
  const bool xvec = in % 4 == 0 && cuda::aligned16(x);
  const int k0 = split * split_cols, k1 = min(in, k0 + split_cols);
  const bool uniform = slot[0] >= 0 && slot[1] == slot[0] && slot[2] == slot[0] && slot[3] == slot[0];
  float acc[kWarpTokens][kRankBlock];
#pragma unroll
  for (int j = 0; j < kWarpTokens; ++j)
#pragma unroll
    for (int r = 0; r < kRankBlock; ++r) acc[j][r] = 0.f;

  for (int k = k0 + lane * kLaneCols; k < k1; k += 32 * kLaneCols) {
    const int valid = k1 - k;
    float xv[kWarpTokens][8];
#pragma unroll
    for (int j = 0; j < kWarpTokens; ++j) {
      if (slot[j] >= 0) {
        load_x8(xv[j], x + static_cast<int64_t>(tok[j]) * in + k, valid, xvec);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) xv[j][e] = 0.f;
      }
    }
    Row8<T> ar[kRankBlock];
    auto load_a = [&](int s) {  // this slot's 8 rows at column k, all loads in flight
      const T* arow = a + (static_cast<int64_t>(s) * rank + r0) * in + k;
#pragma unroll
      for (int r = 0; r < kRankBlock; ++r) ar[r].load(arow + static_cast<int64_t>(r) * in, r0 + r < rank ? valid : 0, avec);
    };
    if (uniform) {  // one run of 4 (prefill): each A element converted once, used 4 times
      load_a(slot[0]);
#pragma unroll
      for (int r = 0; r < kRankBlock; ++r) {
        float af[8];
        ar[r].to_f32(af);
#pragma unroll
        for (int j = 0; j < kWarpTokens; ++j)
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[j][r] = fmaf(af[e], xv[j][e], acc[j][r]);
      }
      continue;
    }
#pragma unroll
    for (int j = 0; j < kWarpTokens; ++j) {
      if (slot[j] < 0) continue;  // uniform
      if (j == 0 || slot[j] != slot[j - 1]) load_a(slot[j]);  // a new run
#pragma unroll
      for (int r = 0; r < kRankBlock; ++r) acc[j][r] = ar[r].dot(xv[j], acc[j][r]);
    }
  }

  float(*tab)[33] = red[warp];
#pragma unroll
  for (int j = 0; j < kWarpTokens; ++j)
#pragma unroll
    for (int r = 0; r < kRankBlock; ++r) tab[j * kRankBlock + r][lane] = acc[j][r];
  __syncwarp();
  float* part_s = part + (static_cast<int64_t>(g) * gridDim.y + split) * n * rank;
#pragma unroll
  for (int row = lane; row < kWarpTokens * kRankBlock; row += 32) {
    const int j = row / kRankBlock, rr = r0 + row % kRankBlock;
    float s = 0.f;
#pragma unroll 8
    for (int l = 0; l < 32; ++l) s += tab[row][l];
    if (pick4(j, slot) >= 0 && rr < rank) part_s[static_cast<int64_t>(pick4(j, tok)) * rank + rr] = s;
  }
}

// y_g[i, o] += b_g[slot_i][o, :] . t_i with t_i = sum over splits of part[g, s, i, :].
// grid (ceil(n / 16), walkers, G), 4 warps. A block takes 16 sorted tokens; warp w takes
// positions 4w .. 4w + 3 of them, and lane l the kExpandRows output rows o0 + l + 32 i, where
// o0 walks the rows 128 at a time from 128 * blockIdx.y in steps of 128 * gridDim.y (the
// tile's setup, its tokens and t rows, is paid once for all of a block's rows). Per step a
// lane issues the y loads of its tokens for its 4 rows, and the B loads of the first run
// among the tokens, before using any: a decode tile whose 4 tokens share an adapter costs
// one memory round trip per 128 rows, 24 loads in flight per lane. Each further run costs a
// round of B loads. Prefill tiles (one run; the 4 warps read the same B rows, from L1) and
// ranks above 16 loop the same way. The t rows (stride rs = R rounded up to 16, zero
// padded) sit in shared memory.
template <typename T>
__global__ void __launch_bounds__(kExpandWarps * 32, 4)  // 4 blocks per SM: at most 128 registers
expand_kernel(GroupArgs args, const float* __restrict__ part, int splits, const int32_t* __restrict__ token_slot,
              const int32_t* __restrict__ sorted, int n, int rank, int num_slots, bool skip_runs) {
  extern __shared__ __align__(16) float ts[];  // [16][rs]
  __shared__ int tok[kTileTokens], slot[kTileTokens];
  constexpr int kStep = 32 * kExpandRows;  // rows per block step
  const int g = blockIdx.z, out = args.out[g];
  if (blockIdx.y * kStep >= out) return;  // uniform: this member has fewer outputs than the largest
  cuda::lora_load_tile(tok, slot, sorted, token_slot, blockIdx.x * kTileTokens, n, num_slots);
  __syncthreads();
  bool any = false;
#pragma unroll
  for (int m = 0; m < kTileTokens; ++m) any |= slot[m] >= 0;
  if (!any || (skip_runs && lora_tile_is_run(tok, slot))) return;  // uniform; runs: lora_expand_mma.cu's
  const int rs = (rank + 15) / 16 * 16;
  const float* part_g = part + static_cast<int64_t>(g) * splits * n * rank;
  for (int idx = threadIdx.x; idx < kTileTokens * rs; idx += kExpandWarps * 32) {
    const int m = idx / rs, r = idx % rs;
    ts[idx] = slot[m] >= 0 && r < rank ? cuda::lora_part_sum(part_g, splits, n, rank, tok[m], r) : 0.f;
  }
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, m0 = warp * kWarpTokens;
  // Per token of the warp: its token, slot, and the position of its run's first token.
  int wtok[kWarpTokens], wslot[kWarpTokens], run_of[kWarpTokens];
  bool live = false;
#pragma unroll
  for (int j = 0; j < kWarpTokens; ++j) {
    wtok[j] = tok[m0 + j];
    wslot[j] = slot[m0 + j];
    run_of[j] = j > 0 && wslot[j] == wslot[j - 1] ? run_of[j - 1] : j;
    live |= wslot[j] >= 0;
  }
  if (!live) return;  // warp-uniform, and no block barrier follows
  const T* b = static_cast<const T*>(args.b[g]);
  const bool vec = (static_cast<int64_t>(rank) * sizeof(T)) % 16 == 0 && cuda::aligned16(b);
  float* y = args.y[g];
  for (int o0 = blockIdx.y * kStep; o0 < out; o0 += gridDim.y * kStep) {
    const int ol = o0 + lane;  // row i of the lane: ol + 32 i
    float* yrow[kWarpTokens];  // y[tok_j, ol]; row i at + 32 i
#pragma unroll
    for (int j = 0; j < kWarpTokens; ++j) yrow[j] = y + static_cast<int64_t>(wtok[j]) * out + ol;
    float acc[kWarpTokens][kExpandRows];
#pragma unroll
    for (int j = 0; j < kWarpTokens; ++j)
#pragma unroll
      for (int i = 0; i < kExpandRows; ++i) acc[j][i] = wslot[j] >= 0 && ol + 32 * i < out ? yrow[j][32 * i] : 0.f;
#pragma unroll
    for (int j = 0; j < kWarpTokens; ++j) {
      if (wslot[j] < 0 || run_of[j] != j) continue;  // warp-uniform: not the start of a run
      const T* b_run = b + static_cast<int64_t>(wslot[j]) * out * rank;
      for (int rb = 0; rb < rank; rb += 16) {
        Row8<T> br[kExpandRows][2];
        const T* brow = b_run + static_cast<int64_t>(ol) * rank + rb;
#pragma unroll
        for (int i = 0; i < kExpandRows; ++i) {
          const int valid = ol + 32 * i < out ? rank - rb : 0;
          br[i][0].load(brow + 32 * i * rank, valid, vec);
          br[i][1].load(brow + 32 * i * rank + 8, valid - 8, vec);
        }
#pragma unroll
        for (int m = j; m < kWarpTokens; ++m) {
          if (wslot[m] < 0 || run_of[m] != j) continue;  // warp-uniform: m is not in this run
          const float* t = ts + (m0 + m) * rs + rb;
#pragma unroll
          for (int h = 0; h < 2; ++h) {  // ranks rb + 8h .. + 7
            const float4 t0 = *reinterpret_cast<const float4*>(t + 8 * h);
            const float4 t1 = *reinterpret_cast<const float4*>(t + 8 * h + 4);
            const float tv[8] = {t0.x, t0.y, t0.z, t0.w, t1.x, t1.y, t1.z, t1.w};
#pragma unroll
            for (int i = 0; i < kExpandRows; ++i) acc[m][i] = br[i][h].dot(tv, acc[m][i]);
          }
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kWarpTokens; ++j)
#pragma unroll
      for (int i = 0; i < kExpandRows; ++i)
        if (wslot[j] >= 0 && ol + 32 * i < out) yrow[j][32 * i] = acc[j][i];
  }
}

const int32_t* sorted_ptr(const LoraMeta& meta) {
  return meta.sorted_tokens.empty() ? nullptr : meta.sorted_tokens.ptr<int32_t>();
}

// Columns per split: splits enough for ~16 blocks' worth of parallelism per member at decode
// sizes (few tokens), fewer and longer at prefill sizes, where the tiles give the blocks.
int split_columns(int64_t n, int64_t in) {
  const int64_t target = n <= 64 ? 16 : n <= 512 ? 8 : 4;
  return static_cast<int>(cuda::ceil_div(cuda::ceil_div(in, target), kSplitAlign) * kSplitAlign);
}

}  // namespace

float* CudaBackend::lora_shrink_parts(const GroupLora& g, Tensor x, const Tensor& x16, bool mma, int* chunks,
                                     cudaStream_t stream) {
  cuda::check_f32(x, "lora: x must be f32 on the GPU");
  check(x.ndim == 2, "lora: x must be [n, in]");
  const int64_t n = x.dim(0), in = x.dim(1);
  const Tensor& a0 = g.a_stack[0];
  check(a0.ndim == 3, "lora: a_stack must be [S, R, in]");
  const int64_t num_slots = a0.dim(0), rank = a0.dim(1);
  GroupArgs args;
  for (int i = 0; i < g.count; ++i) {
    const Tensor& a = g.a_stack[i];
    check(a.ndim == 3 && a.dim(0) == num_slots && a.dim(1) == rank && a.dim(2) == in && a.dtype == a0.dtype,
          "lora: a_stacks of a group must share [S, R, in] and dtype");
    args.a[i] = a.data;
  }
  check(n < (int64_t{1} << 31) && in < (int64_t{1} << 31), "lora: dimensions out of range");
  check(rank <= cuda::kLoraMaxRank, "lora: rank above 512");
  const LoraMeta& meta = g.meta;
  cuda::check_lora_meta(meta, n, "lora");
  // The one-run tiles on tensor cores, with splits of their own (the CUDA-core shrink of the
  // other tiles takes the same).
  check(!mma || cuda::lora_mma_shrink_fits(a0.dtype, args, g.count, x16, n, in),
        "lora: the operands do not fit the plan's tensor-core shrink (bf16 stacks and x16, aligned rows)");
  const int split_cols = mma ? cuda::lora_mma_shrink_split(n, in, g.count, static_cast<int>(rank), num_sms_,
                                                           kSplitAlign)
                             : split_columns(n, in);
  *chunks = static_cast<int>(cuda::ceil_div(in, split_cols));
  const size_t bytes = sizeof(float) * static_cast<size_t>(g.count * *chunks) * n * rank;  // [G, splits, n, R]
  float* part = static_cast<float*>(scratch(lora_scratch_, bytes, "lora"));
  if (mma)
    cuda::lora_mma_shrink(part, x16.data, args, g.count, meta.token_slot.ptr<int32_t>(), sorted_ptr(meta),
                          static_cast<int>(n), static_cast<int>(in), static_cast<int>(rank),
                          static_cast<int>(num_slots), split_cols, *chunks, stream);
  // Every tile one run: the tensor-core shrink took them all. Launched anyway, this kernel's
  // blocks only find that out: 17 us beside a q/k/v group of 2,048 tokens on one adapter
  // (H100, ncu); the group with rope_kv_write 454 against 466 us without the launch.
  if (mma && meta.run_tokens == n) return part;
  const int rank_blocks = static_cast<int>(cuda::ceil_div(rank, kRankBlock));
  const dim3 grid(static_cast<unsigned>(cuda::ceil_div(n, kTileTokens)), static_cast<unsigned>(*chunks),
                  static_cast<unsigned>(g.count * rank_blocks));
  cuda::dispatch_float(a0.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    shrink_kernel<T><<<grid, kShrinkWarps * 32, 0, stream>>>(
        part, x.ptr<float>(), args, meta.token_slot.ptr<int32_t>(), sorted_ptr(meta), static_cast<int>(n),
        static_cast<int>(in), static_cast<int>(rank), static_cast<int>(num_slots), split_cols, rank_blocks, mma);
    cuda::launch_check();
  }, "lora: a_stack must be F32, F16 or BF16");
  return part;
}

void CudaBackend::lora_expand_parts(const GroupLora& g, const float* part, int chunks, int64_t n, bool mma) {
  const Tensor& b0 = g.b_stack[0];
  check(b0.ndim == 3, "lora: b_stack must be [S, out, R]");
  const int64_t num_slots = b0.dim(0), rank = b0.dim(2);
  GroupArgs args;
  int64_t max_out = 0;
  for (int i = 0; i < g.count; ++i) {
    const Tensor& b = g.b_stack[i];
    const Tensor& y = g.y[i];
    cuda::check_f32(y, "lora: y must be f32 on the GPU");
    check(b.ndim == 3 && b.dim(0) == num_slots && b.dim(2) == rank && b.dtype == b0.dtype,
          "lora: b_stacks of a group must share [S, *, R] and dtype");
    check(y.ndim == 2 && y.dim(0) == n && y.dim(1) == b.dim(1) && y.dim(1) < (int64_t{1} << 31),
          "lora: y must be [n, out] matching its b_stack");
    args.b[i] = b.data;
    args.y[i] = y.ptr<float>();
    args.out[i] = static_cast<int>(y.dim(1));
    max_out = std::max(max_out, y.dim(1));
  }
  check(rank <= cuda::kLoraMaxRank, "lora: rank above 512");
  const LoraMeta& meta = g.meta;
  cuda::check_lora_meta(meta, n, "lora");
  if (max_out == 0) return;
  // The one-run tiles (prefill chunks) on tensor cores first, this kernel for the rest.
  check(!mma || cuda::lora_mma_expand_fits(b0.dtype, args, g.count, static_cast<int>(rank)),
        "lora: the operands do not fit the plan's tensor-core expand (bf16 stacks, rank and outputs by 16)");
  if (mma)
    cuda::lora_mma_expand(args, g.count, static_cast<int>(max_out), part, chunks, meta.token_slot.ptr<int32_t>(),
                          sorted_ptr(meta), static_cast<int>(n), static_cast<int>(rank), static_cast<int>(num_slots),
                          stream_);
  if (mma && meta.run_tokens == n) return;  // every tile one run: the tensor cores took them all
  const size_t smem = sizeof(float) * kTileTokens * static_cast<size_t>(cuda::ceil_div(rank, 16) * 16);
  // Row walkers per tile: enough blocks for about one wave (~1,024), each walking as many
  // 128-row steps as that leaves; one step each when the tiles are few.
  const int64_t tiles = cuda::ceil_div(n, kTileTokens), row_steps = cuda::ceil_div(max_out, 32 * kExpandRows);
  const int64_t walkers = std::clamp<int64_t>(cuda::ceil_div(kExpandBlocks, tiles * g.count), 1, row_steps);
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(walkers), static_cast<unsigned>(g.count));
  cuda::dispatch_float(b0.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    expand_kernel<T><<<grid, kExpandWarps * 32, smem, stream_>>>(args, part, chunks, meta.token_slot.ptr<int32_t>(),
                                                        sorted_ptr(meta), static_cast<int>(n),
                                                        static_cast<int>(rank), static_cast<int>(num_slots), mma);
    cuda::launch_check();
  }, "lora: b_stack must be F32, F16 or BF16");
}

// A projection as its plan says. With LoRA:
// - kFused: one launch, the GEMV's (1-2 tokens, gemv_lora.cu) or the skinny kernel's (3..16,
//   gemm_skinny.cu), whose extra blocks write the shrink into lora.t; the expand is the
//   next op's.
// - otherwise the shrink reads only x, so it runs on the side stream while the matmul runs
//   on the main one (a fork/join that stream capture records as graph edges): kTokenRows
//   (decode batches: t itself, no partials; the expand is the next op's, so nothing follows
//   the join) or the tiled partials, whose expand runs after the join. A matmul beside the
//   shrink is launched without programmatic serialisation: launched early, the GEMV's
//   blocks would hold the SMs (waiting for x) that the shrink needs when x is ready (batch 1
//   with an adapter measured 5.45 -> 5.77 ms with it).
void CudaBackend::project(const GroupPlan& p, const MatmulGroup& g, const GroupLora& lora, Tensor x) {
  check_group(g, x);
  const int64_t n = x.dim(0);
  if (!p.lora() || n == 0) {
    run_matmul(p.matmul, g, x, pdl_);
    return;
  }
  check(lora.count == g.count, "project: the plan runs LoRA, but the group's LoRA has another member count");
  if (lora.rank() == 0) {  // an empty stack adds nothing; a pending expand reads no t
    run_matmul(p.matmul, g, x, pdl_);
    return;
  }
  if (p.shrink == ShrinkKernel::kFused) {
    check(p.expand_in_next_op(), "project: a fused shrink leaves its expand to the next op");
    const bool done = p.matmul == MatmulKernel::kGemv     ? gemv_lora(g, lora, x)
                      : p.matmul == MatmulKernel::kSkinny ? skinny_project(g, &lora, x, pdl_)
                                                          : false;
    check(done, "project: the operands do not fit the plan's fused " + to_string(p.matmul) + " kernel");
    return;
  }
  const bool rows = p.shrink == ShrinkKernel::kTokenRows;
  check(rows == p.expand_in_next_op(), "project: a token-rows shrink goes with the next op's expand, and only it");
  check(rows || p.shrink == ShrinkKernel::kTiled || p.shrink == ShrinkKernel::kTiledMma,
        "project: the plan names a host LoRA kernel on the cuda backend");
  // The tensor-core shrink reads x's bf16 copy: made here, before the fork, where the group
  // came without it (o: the attention output; fp8 weights, whose copy is e4m3); a group
  // multiplied in bf16 takes it too.
  MatmulGroup gm = g;
  const bool mma_shrink = p.shrink == ShrinkKernel::kTiledMma;
  Tensor x_bf16 = g.x16.dtype == DType::kBF16 ? g.x16 : Tensor();
  if (mma_shrink && x_bf16.empty()) {
    x_bf16 = convert_for_gemm(x, DType::kBF16, nullptr);
    if (gm.x16.empty()) gm.x16 = x_bf16;
  }
  cuda::cuda_check(cudaEventRecord(fork_, stream_));
  cuda::cuda_check(cudaStreamWaitEvent(side_stream_, fork_, 0));
  int chunks = 0;
  const float* part = nullptr;
  if (rows) check(token_shrink(lora, x, side_stream_), "project: the operands do not fit the plan's token-rows shrink");
  else part = lora_shrink_parts(lora, x, x_bf16, mma_shrink, &chunks, side_stream_);
  cuda::cuda_check(cudaEventRecord(join_, side_stream_));
  run_matmul(p.matmul, gm, x, false);
  cuda::cuda_check(cudaStreamWaitEvent(stream_, join_, 0));
  if (!rows) lora_expand_parts(lora, part, chunks, n, p.expand == ExpandKernel::kTiledMma);
}

}  // namespace quiver
