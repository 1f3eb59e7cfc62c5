// CUDA GEMV / skinny GEMM for decode: y[n, out] = x[n, in] @ w[out, in]^T (+ bias) for
// n <= 16 tokens, with f32 activations and f32 accumulation; fp8 e4m3 weights are widened
// exactly in registers and each dot product scaled by its row's scale (gemv_store). Memory-bound by design: every
// weight element is read from HBM exactly once per call, with 16-byte streaming loads, and
// used against all n tokens while in registers. The work split is gemv.cuh's; with a
// batch-1 LoRA, project() runs gemv_lora.cu's kernel instead.
#include <algorithm>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gemv.cuh"

namespace quiver {
namespace {

using cuda::GemvGroup;
using cuda::kGemvWarps;

// Launch bounds keep the default shape at 1 and 2 tokens at 5 and 4 blocks per SM (96 and
// 128 registers), where the compiler would otherwise take 103 and 139.
template <typename W, int NT, int ROWS, int U, bool VEC>
__global__ void __launch_bounds__(kGemvWarps * 32, ROWS == 4 && NT == 1 ? 5 : ROWS == 4 && NT == 2 ? 4 : 1)
gemv_kernel(GemvGroup grp, const float* __restrict__ x, int n, int in) {
  __shared__ float red[kGemvWarps][ROWS * NT];
  int first_block;
  const int g = cuda::gemv_member(grp, blockIdx.x, &first_block);
  const W* __restrict__ w = static_cast<const W*>(cuda::group_pick(g, grp.w));
  const int out = cuda::group_pick(g, grp.out);
  const int row0 = (blockIdx.x - first_block) * ROWS;
  const W* wrow[ROWS];
  cuda::gemv_rows<W, ROWS>(wrow, w, row0, out, in);
  // launch_tokens sends 1 and 2 tokens to NT = 1 and 2 exactly: a constant n there lets
  // the compiler drop the token checks (at 2 tokens they spilled at the 128-register bound).
  if constexpr (NT <= 2) n = NT;
  float acc[ROWS][NT];
  cuda::gemv_dot<W, NT, ROWS, U, VEC>(wrow, x, n, in, acc);
  cuda::gemv_warp_sums<NT, ROWS>(red, acc, n);
  cuda::gemv_store<NT, ROWS>(grp, g, red, row0, n, nullptr);
}

template <typename W, int NT, int ROWS, int U, bool VEC>
void launch_config(cudaStream_t stream, bool pdl, GemvGroup grp, int count, const float* x, int n, int in) {
  const int blocks = cuda::gemv_blocks<ROWS>(grp, count);
  if (blocks == 0) return;  // every member is empty
  cuda::launch_kernel(gemv_kernel<W, NT, ROWS, U, VEC>, static_cast<unsigned>(blocks), kGemvWarps * 32, 0, stream, pdl, grp,
                      x, n, in);
}

// Rows per block (ROWS) and rounds of loads in flight (U) per token bucket: more rows reuse
// each x load more often, more rounds keep more bytes in flight; registers bound both.
// 4 rows with 4 / 2 / 1 rounds at 1-2 / 4-8 / 16 tokens; fp8 weights half as many rounds
// (gemv_rounds), as a 16-byte vector holds twice the elements and needs twice the registers
// once widened.
template <typename W, int NT, bool VEC>
void launch(cudaStream_t stream, bool pdl, const GemvGroup& grp, int count, const float* x, int n, int in) {
  launch_config<W, NT, 4, cuda::gemv_rounds<W>(NT <= 2 ? 4 : NT <= 8 ? 2 : 1), VEC>(stream, pdl, grp, count, x, n, in);
}

template <typename W, bool VEC>
void launch_tokens(cudaStream_t stream, bool pdl, const GemvGroup& grp, int count, const float* x, int n, int in) {
  if (n == 1) launch<W, 1, VEC>(stream, pdl, grp, count, x, n, in);
  else if (n == 2) launch<W, 2, VEC>(stream, pdl, grp, count, x, n, in);
  else if (n <= 4) launch<W, 4, VEC>(stream, pdl, grp, count, x, n, in);
  else if (n <= 8) launch<W, 8, VEC>(stream, pdl, grp, count, x, n, in);
  else launch<W, 16, VEC>(stream, pdl, grp, count, x, n, in);
}

}  // namespace

void CudaBackend::gemv(const MatmulGroup& g, Tensor x, bool pdl) {
  const int64_t n = x.dim(0), in = x.dim(1);
  if (n > cuda::kGemvMaxTokens) {  // one pass over the weights per 16 tokens
    for (int64_t t0 = 0; t0 < n; t0 += cuda::kGemvMaxTokens) {
      const int64_t c = std::min<int64_t>(cuda::kGemvMaxTokens, n - t0);
      MatmulGroup part = g;
      for (int i = 0; i < g.count; ++i) part.y[i] = g.y[i].rows(t0, c);
      gemv(part, x.rows(t0, c), pdl);
    }
    return;
  }
  check(n >= 1, "gemv: at least one token");
  const DType wt = g.w[0].dtype;  // check_group checked the shapes, sizes and shared dtype
  bool aligned = cuda::aligned16(x.data);
  const GemvGroup grp = cuda::gemv_group(g, &aligned);
  cuda::dispatch_kv(wt, [&](auto tag) {
    using W = typename decltype(tag)::type;
    constexpr int E = cuda::Vec16<W>::E;
    const int ni = static_cast<int>(n), ii = static_cast<int>(in);
    if (in % E == 0 && aligned) {
      launch_tokens<W, true>(stream_, pdl, grp, g.count, x.ptr<float>(), ni, ii);
    } else {
      launch_tokens<W, false>(stream_, pdl, grp, g.count, x.ptr<float>(), ni, ii);
    }
  }, "matmul: weight must be F32, F16, BF16 or F8_E4M3");
}

}  // namespace quiver
