// The GEMV's building blocks, shared by the plain kernel (gemv.cu) and the one whose extra
// blocks compute a batch-1 LoRA's shrink (gemv_lora.cu): y[n, out] = x[n, in] @ w[out, in]^T
// for n <= 16 tokens, f32 activations, f32 accumulation.
//
// Work split: a block of kGemvWarps warps owns ROWS consecutive output rows; its warps
// split the `in` dimension into chunks of 32 lanes x one 16-byte vector, so that one
// block's rows are read by all of its warps at once and every lane keeps ROWS x U vectors
// in flight. x is re-read from L1/L2 (it is small and shared by every block). Partial sums
// are reduced across lanes with shuffles and across warps through shared memory.
#pragma once

#include <type_traits>

#include "backend/backend.h"
#include "backend/cuda/cuda_common.h"

namespace quiver::cuda {

inline constexpr int kGemvWarps = 4;

// Rounds of 16-byte loads in flight per lane for weights of type W, given the rounds 16-bit
// weights take: half for fp8 (each vector widens to 16 floats, twice a 16-bit one's),
// which still keeps 80 KB in flight per SM at 5 blocks of 4 rows and 1 token.
template <typename W>
constexpr int gemv_rounds(int rounds16) {
  return sizeof(W) == 1 ? (rounds16 > 1 ? rounds16 / 2 : 1) : rounds16;
}

// The members of a group (a matmul group): blocks [block_end[g-1], block_end[g]) own
// member g's rows, so one launch covers q, k and v (or gate and up). scale: the weight's
// Tensor::row_scale (fp8 weights), applied to each finished dot product, or null.
struct GemvGroup {
  const void* w[kMaxGroup] = {};
  const float* scale[kMaxGroup] = {};
  float* y[kMaxGroup] = {};
  const void* bias[kMaxGroup] = {};
  DType bias_type[kMaxGroup] = {};
  int out[kMaxGroup] = {};
  int block_end[kMaxGroup] = {};
};

static_assert(kMaxGroup == 3, "group_pick (cuda_common.h) picks among 3 members");

// The member that block b (0-based among the base blocks) works for, and its first block.
__device__ __forceinline__ int gemv_member(const GemvGroup& grp, int b, int* first_block) {
  const int g = b < grp.block_end[0] ? 0 : b < grp.block_end[1] ? 1 : 2;
  *first_block = g == 0 ? 0 : group_pick(g - 1, grp.block_end);
  return g;
}

// acc[r][t] += this lane's share of wrow[r] . x[t] over `in` (tokens t < n of x [n, in]).
// VEC: in % E == 0 and the rows and x 16-byte aligned, so each lane loads one 16-byte
// vector of w (E elements) per chunk; otherwise one element per lane per chunk. Opens the
// kernel's programmatic serialisation (pdl_enter): the first round of weight loads, which
// no kernel writes, is issued before waiting for the previous kernel, whose output x is
// read only after the wait. Every warp passes the wait, with or without columns, and then
// calls after_wait() once: loads of other kernels' outputs issued there are in flight
// while the weights stream.
template <typename W, int NT, int ROWS, int U, bool VEC, typename AfterWait>
__device__ __forceinline__ void gemv_dot(const W* const (&wrow)[ROWS], const float* __restrict__ x, int n, int in,
                                         float (&acc)[ROWS][NT], AfterWait&& after_wait) {
  constexpr int E = VEC ? Vec16<W>::E : 1;
  constexpr int kChunk = 32 * E;
  using Raw = std::conditional_t<VEC, uint4, W>;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int num_chunks = (in + kChunk - 1) / kChunk;
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = 0.f;

  bool waited = false;
  for (int c0 = warp; c0 < num_chunks; c0 += kGemvWarps * U) {
    // All weight loads of this round first: ROWS * U independent 16-byte loads in flight.
    Raw raw[U][ROWS];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k = (c0 + u * kGemvWarps) * kChunk + lane * E;
      if (k < in) {
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
          if constexpr (VEC) raw[u][r] = load16_stream(wrow[r] + k);
          else raw[u][r] = wrow[r][k];
        }
      }
    }
    if (!waited) {
      pdl_enter();
      after_wait();
      waited = true;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k = (c0 + u * kGemvWarps) * kChunk + lane * E;
      if (k >= in) continue;
      float wf[ROWS][E];
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        if constexpr (VEC && sizeof(W) == 1) unpack_e4m3_over256(raw[u][r], wf[r]);  // gemv_store scales back
        else if constexpr (VEC) Vec16<W>::unpack(raw[u][r], wf[r]);
        else if constexpr (sizeof(W) == 1) wf[r][0] = to_f32(raw[u][r]) * (1.f / kE4m3Over256);  // exact
        else wf[r][0] = to_f32(raw[u][r]);
      }
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t >= n) break;
        float xf[E];
        const float* xp = x + static_cast<int64_t>(t) * in + k;
        if constexpr (VEC) {
#pragma unroll
          for (int e = 0; e < E; e += 4) {
            const float4 v = load_f4_fresh(xp + e);  // the previous kernel's output
            xf[e] = v.x;
            xf[e + 1] = v.y;
            xf[e + 2] = v.z;
            xf[e + 3] = v.w;
          }
        } else {
          xf[0] = load_f32_fresh(xp);
        }
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
#pragma unroll
          for (int e = 0; e < E; ++e) acc[r][t] = fmaf(wf[r][e], xf[e], acc[r][t]);
      }
    }
  }
  if (!waited) {  // a warp without columns: the block still writes after the wait
    pdl_wait();
    after_wait();
  }
}

// gemv_dot with nothing to load after the wait.
template <typename W, int NT, int ROWS, int U, bool VEC>
__device__ __forceinline__ void gemv_dot(const W* const (&wrow)[ROWS], const float* __restrict__ x, int n, int in,
                                         float (&acc)[ROWS][NT]) {
  gemv_dot<W, NT, ROWS, U, VEC>(wrow, x, n, in, acc, [] {});
}

// red[w][r * NT + t] = warp w's sum of acc[r][t] (t < n), then a block barrier.
template <int NT, int ROWS>
__device__ __forceinline__ void gemv_warp_sums(float (&red)[kGemvWarps][ROWS * NT], float (&acc)[ROWS][NT], int n) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t >= n) break;  // n is uniform: no divergence around the shuffles
      const float v = warp_sum(acc[r][t]);
      if (lane == 0) red[warp][r * NT + t] = v;
    }
  __syncthreads();
}

// Rows row0 .. row0 + ROWS - 1 of w [out, in]; rows past out repeat the last (computed,
// never stored).
template <typename W, int ROWS>
__device__ __forceinline__ void gemv_rows(const W* (&wrow)[ROWS], const W* w, int row0, int out, int in) {
#pragma unroll
  for (int r = 0; r < ROWS; ++r) wrow[r] = w + static_cast<int64_t>(min(row0 + r, out - 1)) * in;
}

// y[t, row0 + r] of member g = the warps' sums of item r * NT + t in warp order, times the
// row's scale (fp8 weights, widened over 2^8 by gemv_dot: times 2^8 too, exactly), plus the
// bias, plus extra[item] when extra is not null.
template <int NT, int ROWS>
__device__ __forceinline__ void gemv_store(const GemvGroup& grp, int g, const float (&red)[kGemvWarps][ROWS * NT],
                                           int row0, int n, const float* extra) {
  float* __restrict__ y = group_pick(g, grp.y);
  const void* bias = group_pick(g, grp.bias);
  const float* scale = group_pick(g, grp.scale);
  const DType bias_type = group_pick(g, grp.bias_type);
  const int out = group_pick(g, grp.out);
  for (int idx = threadIdx.x; idx < ROWS * NT; idx += blockDim.x) {
    const int r = idx / NT, t = idx % NT, row = row0 + r;
    if (row >= out || t >= n) continue;
    float s = 0.f;
#pragma unroll
    for (int wi = 0; wi < kGemvWarps; ++wi) s += red[wi][idx];
    if (scale != nullptr) s *= scale[row] * kE4m3Over256;  // fp8 rows come widened over 2^8 (gemv_dot)
    if (bias != nullptr) s += load_any(bias, bias_type, row);
    if (extra != nullptr) s += extra[idx];
    y[static_cast<int64_t>(t) * out + row] = s;
  }
}

// Blocks per member (ceil(out / ROWS)) into grp.block_end; the total.
template <int ROWS>
inline int gemv_blocks(GemvGroup& grp, int count) {
  int blocks = 0;
  for (int g = 0; g < count; ++g) {
    blocks += static_cast<int>(ceil_div(grp.out[g], ROWS));
    grp.block_end[g] = blocks;
  }
  for (int g = count; g < kMaxGroup; ++g) grp.block_end[g] = blocks;
  return blocks;
}

// GemvGroup of a MatmulGroup; *aligned &= every weight 16-byte aligned.
inline GemvGroup gemv_group(const MatmulGroup& g, bool* aligned) {
  GemvGroup grp;
  for (int i = 0; i < g.count; ++i) {
    *aligned &= aligned16(g.w[i].data);
    grp.w[i] = g.w[i].data;
    grp.scale[i] = g.w[i].row_scale;
    grp.y[i] = g.y[i].ptr<float>();
    grp.bias[i] = g.bias[i].empty() ? nullptr : g.bias[i].data;
    grp.bias_type[i] = g.bias[i].dtype;
    grp.out[i] = static_cast<int>(g.w[i].dim(0));
  }
  return grp;
}

}  // namespace quiver::cuda
