// The decode matmul of 3..16 tokens on tensor cores, with the LoRA shrink as extra blocks of
// the same launch:
//   y_g[n, :] = x16[n] @ w_g^T (+ bias_g)   16-bit weights, x's copy in their type (as cuBLAS);
//                                            fp8 weights widened exactly to f16 over 2^8 in
//                                            registers, x's f16 copy, each sum times its row's
//                                            scale and the 2^8
//   t_g[n, :] = a_g[slot_n] @ x[n]           lora_shrink_rows.cuh's blocks, f32 x (as in gemv_lora.cu)
// and the expand left to the op after it (ExpandKernel::kNextOp), so a decode projection of
// 3..16 tokens needs no side stream, fork or join (those cost 0.39 ms of a 7B batch-8 step
// on the H200).
//
// Work split: a block of kGemvWarps warps owns 16 output rows of one member; its warps take
// every kGemvWarps-th step of 64 columns. Per step a lane (q = lane / 4, c = lane % 4) loads
// 16 bytes at columns 8c and 32 + 8c of rows q and q + 8 and of tokens q (and 8 + q): words
// 2e and 2e + 1 of a load are the fragments of one m16n8k16 k-step, the same permutation of
// the columns for w and x (lora_shrink_mma.cu does the same). A warp works in rounds of U
// steps: all U steps' loads are issued before the round's products, and the first round's
// weights before the programmatic wait. The warps' sums meet in shared memory in warp order
// (gemv_store), so the result is deterministic; products of 16-bit values are exact in f32.
#include <type_traits>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/lora_shrink_rows.cuh"

namespace quiver {
namespace {

using cuda::GemvGroup;
using cuda::kGemvWarps;
using cuda::ShrinkRows;

constexpr int kTileRows = 16;
constexpr int kStepCols = 64;
// Steps a warp has in flight (U), so a lane has as many weight bytes outstanding with fp8
// weights as with 16-bit ones. 16-bit: on the H200 2 beat 3 and 4 at 8 tokens (4096 x
// 4096: 15.5 us against 16.6 and 15.6; 11008 x 4096: 31.6 against 34.5 and 33.6).
template <typename W>
constexpr int skinny_rounds() {
  return sizeof(W) == 1 ? 4 : 2;
}

// A lane's 8 weights as loaded: 16 bytes of 16-bit W, 8 of fp8.
template <typename W>
using RawW8 = std::conditional_t<sizeof(W) == 1, uint2, uint4>;

// Those 8 weights in the mma's type: 16-bit W as stored, fp8 widened to f16 over 2^8 (a
// byte permute and two logic ops a pair; the bf16 widening through the conversion
// instruction made this kernel conversion-bound: a 7B batch-8 step at 9.60 ms against 4.69
// for bf16 weights on the H200). Widened where the mma reads them, after the round's loads
// are all issued, so no widening waits on a load the next steps' loads could overlap.
template <typename W>
__device__ __forceinline__ uint4 widen_w8(const RawW8<W>& raw) {
  if constexpr (sizeof(W) == 1) return cuda::e4m3x8_to_f16x8_over256(raw);
  else return raw;
}

// One step's loads of a lane: halves h of rows q, q + 8 and of the tiles' tokens; zeros
// past `in` (in % 8 == 0: a lane's 8 columns are all in or all out) and for tokens past n.
// W: the weights' storage type.
template <typename W, int TILES>
struct SkinnyStep {
  RawW8<W> wa[2], wb[2];
  uint4 x[TILES][2];

  __device__ __forceinline__ void load_w(const char* wa_row, const char* wb_row, int k, int in) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int kh = k + 32 * h;
      const bool ok = kh < in;
      const char *pa = wa_row + int64_t{kh} * sizeof(W), *pb = wb_row + int64_t{kh} * sizeof(W);
      if constexpr (sizeof(W) == 1) {
        wa[h] = ok ? cuda::load8_stream(pa) : make_uint2(0, 0);
        wb[h] = ok ? cuda::load8_stream(pb) : make_uint2(0, 0);
      } else {
        wa[h] = ok ? cuda::load16_stream(pa) : make_uint4(0, 0, 0, 0);
        wb[h] = ok ? cuda::load16_stream(pb) : make_uint4(0, 0, 0, 0);
      }
    }
  }
  __device__ __forceinline__ void load_x(const char* const (&xrow)[TILES], const bool (&tok_ok)[TILES], int k,
                                         int in) {
#pragma unroll
    for (int j = 0; j < TILES; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int kh = k + 32 * h;
        x[j][h] = tok_ok[j] && kh < in ? cuda::load16_fresh(xrow[j] + int64_t{kh} * 2) : make_uint4(0, 0, 0, 0);
      }
  }
  template <typename M>
  __device__ __forceinline__ void mma(float (&acc)[TILES][4]) const {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint4 va = widen_w8<W>(wa[h]), vb = widen_w8<W>(wb[h]);
      const uint32_t ra[4] = {va.x, va.y, va.z, va.w}, rb[4] = {vb.x, vb.y, vb.z, vb.w};
#pragma unroll
      for (int j = 0; j < TILES; ++j) {
        const uint32_t xv[4] = {x[j][h].x, x[j][h].y, x[j][h].z, x[j][h].w};
#pragma unroll
        for (int e = 0; e < 2; ++e)  // fragments: row q, row q + 8, the same at k + 8; x
          cuda::mma16<M>(acc[j], ra[2 * e], rb[2 * e], ra[2 * e + 1], rb[2 * e + 1], xv[2 * e], xv[2 * e + 1]);
      }
    }
  }
};

// Blocks [0, lora.blocks): the shrink (token_shrink_block); the rest: 16 rows of the group
// each. NT: 8 or 16 tokens (one or two n-tiles); U: steps a warp has in flight. W: the
// weights' storage type; M: the tensor cores' input type (x16's), W's own for 16-bit
// weights and f16 for fp8 ones; S: the LoRA stacks' type.
template <typename W, typename M, typename S, int NT, int U>
__global__ void __launch_bounds__(kGemvWarps * 32)
    skinny_kernel(GemvGroup grp, ShrinkRows lora, const M* __restrict__ x16,
                  const float* __restrict__ x, int n, int in) {
  constexpr int kTiles = NT / 8;
  if (static_cast<int>(blockIdx.x) < lora.blocks) {  // block-uniform
    cuda::token_shrink_block<S>(lora, x, n, in, blockIdx.x);
    return;
  }
  __shared__ float red[kGemvWarps][kTileRows * NT];
  int first_block;
  const int b = blockIdx.x - lora.blocks;
  const int g = cuda::gemv_member(grp, b, &first_block);
  const int row0 = (b - first_block) * kTileRows, out = cuda::group_pick(g, grp.out);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, q = lane >> 2, c = lane & 3;
  const char* w = static_cast<const char*>(cuda::group_pick(g, grp.w));
  // Rows past out repeat the last (computed, never stored).
  const char* wa_row = w + (int64_t{min(row0 + q, out - 1)} * in + 8 * c) * sizeof(W);
  const char* wb_row = w + (int64_t{min(row0 + q + 8, out - 1)} * in + 8 * c) * sizeof(W);
  const char* xrow[kTiles];
  bool tok_ok[kTiles];
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    const int tok = 8 * j + q;
    tok_ok[j] = tok < n;
    xrow[j] = reinterpret_cast<const char*>(x16) + (int64_t{min(tok, n - 1)} * in + 8 * c) * 2;
  }
  float acc[kTiles][4] = {};
  const int steps = (in + kStepCols - 1) / kStepCols;
  // Rounds of U steps a warp (steps s0 + u * kGemvWarps): all U steps' weight loads are in
  // flight before the first product of the round (4 * U loads a lane: 64 * U bytes of 16-bit
  // weights, 32 * U of fp8).
  bool waited = false;
  for (int s0 = warp; s0 < steps; s0 += kGemvWarps * U) {
    SkinnyStep<W, kTiles> st[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int su = s0 + u * kGemvWarps;
      if (su < steps) st[u].load_w(wa_row, wb_row, su * kStepCols, in - 8 * c);
    }
    if (!waited) {
      cuda::pdl_enter();  // launched with pdl (cuda_common.h); x is the previous kernel's output
      waited = true;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int su = s0 + u * kGemvWarps;
      if (su < steps) st[u].load_x(xrow, tok_ok, su * kStepCols, in - 8 * c);
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (s0 + u * kGemvWarps < steps) st[u].template mma<M>(acc);
  }
  if (!waited) cuda::pdl_wait();  // a warp without steps: the block still writes after the wait
  // acc[j]: rows q (0, 1) and q + 8 (2, 3), tokens 8j + 2c (+1).
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = q + (i >= 2 ? 8 : 0), t = 8 * j + 2 * c + (i & 1);
      red[warp][r * NT + t] = acc[j][i];
    }
  __syncthreads();
  cuda::gemv_store<NT, kTileRows>(grp, g, red, row0, n, nullptr);
}

}  // namespace

bool CudaBackend::skinny_project(const MatmulGroup& g, const GroupLora* lora, Tensor x, bool pdl) {
  const int64_t n = x.dim(0), in = x.dim(1);
  const DType wt = g.w[0].dtype;
  const bool fp8 = wt == DType::kF8E4M3;
  const DType mt = fp8 ? DType::kF16 : wt;  // the tensor cores' input type
  if (n < 3 || n > 16 || !is_16bit_float(mt) || in % 8 != 0 || options_.gemm_split_activations) return false;
  bool aligned = cuda::aligned16(x.data);
  // fp8 rows are read 8 bytes a lane: 8-byte alignment of each row start (in % 8 == 0) suffices.
  GemvGroup grp = cuda::gemv_group(g, &aligned);
  if (!aligned) return false;
  ShrinkRows args;
  DType st = fp8 ? DType::kBF16 : wt;  // the stacks' type (any, without LoRA)
  if (lora != nullptr) {
    st = lora->a_stack[0].dtype;
    if ((fp8 ? !is_16bit_float(st) : st != wt) || !cuda::lora_matches_outputs(g, *lora) ||
        !shrink_args(*lora, x, &args))
      return false;
  }
  const Tensor x16 = !g.x16.empty() && g.x16.dtype == mt ? g.x16 : convert_for_gemm(x, mt, nullptr);
  if (!cuda::aligned16(x16.data)) return false;
  const int blocks = cuda::gemv_blocks<kTileRows>(grp, g.count) + args.blocks;
  const int ni = static_cast<int>(n), ii = static_cast<int>(in);
  auto launch = [&](auto w_tag, auto m_tag, auto s_tag) {
    using W = typename decltype(w_tag)::type;
    using M = typename decltype(m_tag)::type;
    using S = typename decltype(s_tag)::type;
    constexpr int U = skinny_rounds<W>();
    auto kernel = n <= 8 ? skinny_kernel<W, M, S, 8, U> : skinny_kernel<W, M, S, 16, U>;
    cuda::launch_kernel(kernel, static_cast<unsigned>(blocks), kGemvWarps * 32, 0, stream_, pdl, grp, args,
                        static_cast<const M*>(x16.data), x.ptr<float>(), ni, ii);
  };
  if (fp8) {
    cuda::dispatch_float(st, [&](auto s_tag) {
      if constexpr (!std::is_same_v<typename decltype(s_tag)::type, float>)
        launch(cuda::TypeTag<__nv_fp8_e4m3>{}, cuda::TypeTag<__half>{}, s_tag);
    }, "matmul: LoRA stacks beside fp8 weights must be F16 or BF16");
  } else {
    cuda::dispatch_float(wt, [&](auto tag) {
      if constexpr (!std::is_same_v<typename decltype(tag)::type, float>) launch(tag, tag, tag);
    }, "matmul: weight must be F32, F16 or BF16");
  }
  return true;
}

}  // namespace quiver
