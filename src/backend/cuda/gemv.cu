// CUDA GEMV / skinny GEMM for decode: y[n, out] = x[n, in] @ w[out, in]^T (+ bias) for
// n <= 16 tokens, with f32 activations and f32 accumulation. Memory-bound by design: every
// weight element is read from HBM exactly once per call, with 16-byte streaming loads, and
// used against all n tokens while in registers.
//
// Work split: a block of kWarps warps owns ROWS consecutive output rows; its warps split
// the `in` dimension into chunks of 32 lanes x one 16-byte vector, so that one block's rows
// are read by all of its warps at once and every lane keeps ROWS x U vectors in flight.
// x is re-read from L1/L2 (it is small and shared by every block). Partial sums are reduced
// across lanes with shuffles and across warps through shared memory.
#include <type_traits>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.h"

namespace quiver {
namespace {

constexpr int kWarps = 4;

// VEC: in % E == 0 and w, x 16-byte aligned, so each lane loads one 16-byte vector of w
// (E elements) per chunk; otherwise one element per lane per chunk (awkward shapes).
// The members of a group (matmul_group): blocks [block_end[g-1], block_end[g]) own
// member g's rows, so one launch covers q, k and v (or gate and up).
struct GemvGroup {
  const void* w[kMaxGroup] = {};
  float* y[kMaxGroup] = {};
  const void* bias[kMaxGroup] = {};
  DType bias_type[kMaxGroup] = {};
  int out[kMaxGroup] = {};
  int block_end[kMaxGroup] = {};
};

template <typename T>
__device__ __forceinline__ T pick(int g, const T (&v)[kMaxGroup]) {
  return g == 0 ? v[0] : g == 1 ? v[1] : v[2];
}

template <typename W, int NT, int ROWS, int U, bool VEC>
__global__ void __launch_bounds__(kWarps * 32)
gemv_kernel(GemvGroup grp, const float* __restrict__ x, int n, int in) {
  constexpr int E = VEC ? cuda::Vec16<W>::E : 1;
  constexpr int kChunk = 32 * E;
  using Raw = std::conditional_t<VEC, uint4, W>;
  __shared__ float red[kWarps][ROWS * NT];

  const int block = blockIdx.x;
  const int g = block < grp.block_end[0] ? 0 : block < grp.block_end[1] ? 1 : 2;
  const int first_block = g == 0 ? 0 : pick(g - 1, grp.block_end);
  const W* __restrict__ w = static_cast<const W*>(pick(g, grp.w));
  float* __restrict__ y = pick(g, grp.y);
  const void* bias = pick(g, grp.bias);
  const DType bias_type = pick(g, grp.bias_type);
  const int out = pick(g, grp.out);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row0 = (block - first_block) * ROWS;
  const int num_chunks = (in + kChunk - 1) / kChunk;
  const W* wrow[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) wrow[r] = w + static_cast<int64_t>(min(row0 + r, out - 1)) * in;

  float acc[ROWS][NT];
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = 0.f;

  // Launched with pdl: the first round of weight loads (which no kernel writes) is issued
  // before waiting for the previous kernel, whose output x is read only after the wait.
  bool waited = false;
  for (int c0 = warp; c0 < num_chunks; c0 += kWarps * U) {
    // All weight loads of this round first: ROWS * U independent 16-byte loads in flight.
    Raw raw[U][ROWS];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k = (c0 + u * kWarps) * kChunk + lane * E;
      if (k < in) {
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
          if constexpr (VEC) raw[u][r] = cuda::load16_stream(wrow[r] + k);
          else raw[u][r] = wrow[r][k];
        }
      }
    }
    if (!waited) {
      cuda::pdl_enter();
      waited = true;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k = (c0 + u * kWarps) * kChunk + lane * E;
      if (k >= in) continue;
      float wf[ROWS][E];
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        if constexpr (VEC) cuda::Vec16<W>::unpack(raw[u][r], wf[r]);
        else wf[r][0] = cuda::to_f32(raw[u][r]);
      }
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t >= n) break;
        float xf[E];
        const float* xp = x + static_cast<int64_t>(t) * in + k;
        if constexpr (VEC) {
#pragma unroll
          for (int e = 0; e < E; e += 4) {
            const float4 v = __ldg(reinterpret_cast<const float4*>(xp + e));
            xf[e] = v.x;
            xf[e + 1] = v.y;
            xf[e + 2] = v.z;
            xf[e + 3] = v.w;
          }
        } else {
          xf[0] = __ldg(xp);
        }
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
#pragma unroll
          for (int e = 0; e < E; ++e) acc[r][t] = fmaf(wf[r][e], xf[e], acc[r][t]);
      }
    }
  }

  if (!waited) cuda::pdl_wait();  // a warp with no columns still writes y below
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t >= n) break;  // n is uniform: no divergence around the shuffles
      const float v = cuda::warp_sum(acc[r][t]);
      if (lane == 0) red[warp][r * NT + t] = v;
    }
  __syncthreads();
  for (int idx = threadIdx.x; idx < ROWS * NT; idx += blockDim.x) {
    const int r = idx / NT, t = idx % NT, row = row0 + r;
    if (row >= out || t >= n) continue;
    float s = 0.f;
#pragma unroll
    for (int wi = 0; wi < kWarps; ++wi) s += red[wi][idx];
    if (bias != nullptr) s += cuda::load_any(bias, bias_type, row);
    y[static_cast<int64_t>(t) * out + row] = s;
  }
}

template <typename W, int NT, int ROWS, int U, bool VEC>
void launch_config(cudaStream_t stream, bool pdl, GemvGroup grp, int count, const float* x, int n, int in) {
  int blocks = 0;
  for (int g = 0; g < count; ++g) {
    blocks += static_cast<int>(cuda::ceil_div(grp.out[g], ROWS));
    grp.block_end[g] = blocks;
  }
  for (int g = count; g < kMaxGroup; ++g) grp.block_end[g] = blocks;
  if (blocks == 0) return;  // every member is empty
  cuda::launch_kernel(gemv_kernel<W, NT, ROWS, U, VEC>, static_cast<unsigned>(blocks), kWarps * 32, 0, stream, pdl, grp,
                      x, n, in);
}

// Rows per block (ROWS) and rounds of loads in flight (U) per token bucket: more rows reuse
// each x load more often, more rounds keep more bytes in flight; registers bound both.
// Variants 1 and 2 (16-bit weights, vector path only) are tuning experiments that
// CudaBackendOptions::gemv_variant selects; 0 is the default everywhere.
template <typename W, int NT, bool VEC>
void launch(cudaStream_t stream, bool pdl, int variant, const GemvGroup& grp, int count, const float* x, int n, int in) {
  if constexpr (VEC && sizeof(W) == 2) {
    if (variant == 1) {  // 2 rows, deeper pipelining: more, smaller blocks
      launch_config<W, NT, 2, (NT <= 2 ? 8 : NT <= 8 ? 4 : 2), VEC>(stream, pdl, grp, count, x, n, in);
      return;
    }
    if (variant == 2) {  // 8 rows: x loads reused by 8 rows
      launch_config<W, NT, 8, (NT <= 2 ? 2 : 1), VEC>(stream, pdl, grp, count, x, n, in);
      return;
    }
  }
  launch_config<W, NT, 4, (NT <= 2 ? 4 : NT <= 8 ? 2 : 1), VEC>(stream, pdl, grp, count, x, n, in);
}

template <typename W, bool VEC>
void launch_tokens(cudaStream_t stream, bool pdl, int variant, const GemvGroup& grp, int count, const float* x, int n, int in) {
  if (n == 1) launch<W, 1, VEC>(stream, pdl, variant, grp, count, x, n, in);
  else if (n == 2) launch<W, 2, VEC>(stream, pdl, variant, grp, count, x, n, in);
  else if (n <= 4) launch<W, 4, VEC>(stream, pdl, variant, grp, count, x, n, in);
  else if (n <= 8) launch<W, 8, VEC>(stream, pdl, variant, grp, count, x, n, in);
  else launch<W, 16, VEC>(stream, pdl, variant, grp, count, x, n, in);
}

}  // namespace

void CudaBackend::gemv(const MatmulGroup& g, Tensor x, bool pdl) {
  const int64_t n = x.dim(0), in = x.dim(1);
  check(n >= 1 && n <= cuda::kGemvMaxTokens, "gemv: 1..16 tokens");
  const DType wt = g.w[0].dtype;  // matmul_group checked the shapes, sizes and shared dtype
  bool aligned = cuda::aligned16(x.data);
  GemvGroup grp;
  for (int i = 0; i < g.count; ++i) {
    aligned &= cuda::aligned16(g.w[i].data);
    grp.w[i] = g.w[i].data;
    grp.y[i] = g.y[i].ptr<float>();
    grp.bias[i] = g.bias[i].empty() ? nullptr : g.bias[i].data;
    grp.bias_type[i] = g.bias[i].dtype;
    grp.out[i] = static_cast<int>(g.w[i].dim(0));
  }
  cuda::dispatch_float(wt, [&](auto tag) {
    using W = typename decltype(tag)::type;
    constexpr int E = cuda::Vec16<W>::E;
    const int ni = static_cast<int>(n), ii = static_cast<int>(in);
    if (in % E == 0 && aligned) {
      launch_tokens<W, true>(stream_, pdl, options_.gemv_variant, grp, g.count, x.ptr<float>(), ni, ii);
    } else {
      launch_tokens<W, false>(stream_, pdl, options_.gemv_variant, grp, g.count, x.ptr<float>(), ni, ii);
    }
  }, "matmul: weight must be F32, F16 or BF16");
}

}  // namespace quiver
