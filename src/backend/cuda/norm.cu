// CUDA RMSNorm and the fused residual-add + RMSNorm: one block per row, sum of squares in
// f32, then the scaled row. Same expression order as the reference: w * (x * inv_rms).
// add_rms_norm with a pending LoRA term on x has kernels of its own (norm_lora.cu), so
// the plain kernel keeps the registers of a norm without a term.
#include <algorithm>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/fp8_rows.cuh"
#include "backend/cuda/norm.cuh"

namespace quiver {
namespace {

using cuda::load_w4;
using cuda::store_normed4;

// Float4s of a row a thread keeps in registers (rows up to 4 * 4 * 512 = 8,192 wide): their
// weights are loaded before the wait, x and the residual all at once after it, before the
// first store. Loads after a store to a pointer that may alias them cannot be moved above
// it, so a loop over the row's float4s paid one round trip to memory per float4 on the
// step's chain.
constexpr int kNormVecs = 4;

// out: [n, d] f32; x: [n, d] f32; w: [d] W. ADD: residual[n, d] += x first, and the norm
// is taken of the updated residual. copy: out again, rounded to 16 bits (store_x16) or
// quantized to e4m3 per row (fp8_rows.cuh), or neither. Each thread reads back only
// elements it wrote itself (same index mapping in both passes), so no barrier is needed
// between write and read; the fp8 codes take one after the row is written.
// vec: d % 4 == 0 and every row pointer 16-byte aligned (float4 path).
template <typename W, bool ADD>
__global__ void rms_norm_kernel(float* __restrict__ out, cuda::OutCopy copy, float* residual, const float* x,
                                const W* __restrict__ w, int64_t d, float eps, bool vec) {
  __shared__ float red[32];
  const int64_t row = blockIdx.x, d4 = d / 4;
  const bool in_regs = vec && d4 <= int64_t{kNormVecs} * blockDim.x;
  float4 wv[kNormVecs];
  if (in_regs) {  // weights: written by no kernel (cuda_common.h)
#pragma unroll
    for (int u = 0; u < kNormVecs; ++u) {
      const int64_t j = threadIdx.x + int64_t{u} * blockDim.x;
      if (j >= d4) break;
      wv[u] = load_w4(w, j);
    }
  }
  cuda::pdl_enter();  // launched with pdl (cuda_common.h)
  const float* xr = x + row * d;
  float* rr = ADD ? residual + row * d : nullptr;
  const float* src = ADD ? rr : xr;
  float* o = out + row * d;
  float ss = 0.f;
  if (in_regs) {  // the row in registers, same sums in the same order
    float4 a[kNormVecs], r[kNormVecs];
#pragma unroll
    for (int u = 0; u < kNormVecs; ++u) {
      const int64_t j = threadIdx.x + int64_t{u} * blockDim.x;
      if (j >= d4) break;
      a[u] = reinterpret_cast<const float4*>(xr)[j];
      if constexpr (ADD) r[u] = reinterpret_cast<const float4*>(rr)[j];
    }
#pragma unroll
    for (int u = 0; u < kNormVecs; ++u) {
      const int64_t j = threadIdx.x + int64_t{u} * blockDim.x;
      if (j >= d4) break;
      if constexpr (ADD) {
        a[u] = make_float4(r[u].x + a[u].x, r[u].y + a[u].y, r[u].z + a[u].z, r[u].w + a[u].w);
        reinterpret_cast<float4*>(rr)[j] = a[u];
      }
      ss += a[u].x * a[u].x + a[u].y * a[u].y + a[u].z * a[u].z + a[u].w * a[u].w;
    }
    const float total = cuda::block_sum(ss, red);
    const float inv = 1.0f / sqrtf(total / static_cast<float>(d) + eps);
#pragma unroll
    for (int u = 0; u < kNormVecs; ++u) {
      const int64_t j = threadIdx.x + int64_t{u} * blockDim.x;
      if (j >= d4) break;
      store_normed4(o, copy.x16, copy.bf16, wv[u], row, d, j, a[u], inv);
    }
  } else {
    if (vec) {
      for (int64_t j = threadIdx.x; j < d4; j += blockDim.x) {
        float4 a = reinterpret_cast<const float4*>(xr)[j];
        if constexpr (ADD) {
          float4 r = reinterpret_cast<float4*>(rr)[j];
          a = make_float4(r.x + a.x, r.y + a.y, r.z + a.z, r.w + a.w);
          reinterpret_cast<float4*>(rr)[j] = a;
        }
        ss += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
      }
    } else {
      for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
        float a = xr[j];
        if constexpr (ADD) {
          a = rr[j] + a;
          rr[j] = a;
        }
        ss += a * a;
      }
    }
    const float total = cuda::block_sum(ss, red);
    const float inv = 1.0f / sqrtf(total / static_cast<float>(d) + eps);
    if (vec) {
      for (int64_t j = threadIdx.x; j < d4; j += blockDim.x)
        store_normed4(o, copy.x16, copy.bf16, load_w4(w, j), row, d, j, reinterpret_cast<const float4*>(src)[j],
                      inv);
    } else {
      for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
        o[j] = cuda::to_f32(w[j]) * (src[j] * inv);
        cuda::store_x16(copy.x16, row * d + j, o[j], copy.bf16);
      }
    }
  }
  if (copy.codes != nullptr) cuda::fp8_quantize_written_row(o, d, copy.codes + row * d, copy.scales + row, vec);
}

// Whether rows of width d take the float4 paths: d % 4 == 0 and every row 16-byte aligned
// (residual empty: no residual).
bool rows_vec(const Tensor& out, const Tensor& x, const Tensor& residual, int64_t d) {
  return d % 4 == 0 && cuda::aligned16(out.data) && cuda::aligned16(x.data) &&
         (residual.empty() || cuda::aligned16(residual.data));
}

template <bool ADD>
void launch_rms_norm(cudaStream_t stream, bool pdl, bool clusters, int64_t smem_max, Tensor out, Tensor out16,
                     Tensor residual, Tensor x, Tensor w, float eps, const GroupPlan& plan,
                     const GroupLora& lora) {
  cuda::check_f32(out, "rms_norm: out must be f32 on the GPU");
  cuda::check_x16(out16, out, "rms_norm: out16 must be bf16, f16 or an fp8 copy on the GPU, out's shape");
  cuda::check_f32(x, "rms_norm: x must be f32 on the GPU");
  check(x.ndim == 2 && out.ndim == 2, "rms_norm: x and out must be [n, d]");
  const int64_t n = x.dim(0), d = x.dim(1);
  check(out.dim(0) == n && out.dim(1) == d && w.numel() == d, "rms_norm: shape mismatch");
  if constexpr (ADD) {
    cuda::check_f32(residual, "add_rms_norm: residual must be f32 on the GPU");
    check(residual.numel() == n * d, "add_rms_norm: residual shape mismatch");
  }
  if (n == 0 || d == 0) return;
  const bool vec = rows_vec(out, x, ADD ? residual : Tensor(), d);
  const cuda::OutCopy c = cuda::out_copy(out16);
  const cuda::LoraDeltaArgs da = cuda::lora_delta_args(plan, lora, {x}, n, "add_rms_norm");
  if (da.count > 0) {  // its kernels write 16-bit copies; an fp8 copy in a pass after them
    const bool fp8 = c.codes != nullptr;
    cuda::launch_add_rms_norm_delta(stream, pdl, clusters, smem_max, out, fp8 ? Tensor() : out16, residual, x, w, eps,
                                    da);
    if (fp8) cuda::write_fp8_copy(out, out16, stream);
    return;
  }
  const int64_t work = vec ? d / 4 : d;
  const int threads = static_cast<int>(std::clamp<int64_t>((work + 31) / 32 * 32, 32, 512));
  cuda::dispatch_float(w.dtype, [&](auto tag) {
    using W = typename decltype(tag)::type;
    cuda::launch_kernel(rms_norm_kernel<W, ADD>, static_cast<unsigned>(n), threads, 0, stream, pdl, out.ptr<float>(), c,
                        ADD ? residual.ptr<float>() : nullptr, x.ptr<float>(), w.ptr<W>(), d,
                        eps, vec);
  }, "rms_norm: weight must be F32, F16 or BF16");
}

}  // namespace

void CudaBackend::init_norm_kernels(int64_t smem_optin_bytes) {
  norm_smem_bytes_ = cuda::set_norm_delta_smem(smem_optin_bytes);
}

void CudaBackend::rms_norm(Tensor out, Tensor out16, Tensor x, Tensor w, float eps) {
  launch_rms_norm<false>(stream_, pdl_, clusters_, norm_smem_bytes_, out, out16, Tensor(), x, w, eps, GroupPlan(),
                         GroupLora());
}

void CudaBackend::add_rms_norm(Tensor out, Tensor out16, Tensor residual, Tensor x, Tensor w, float eps,
                               const GroupPlan& plan, const GroupLora& lora) {
  if (plan.expand_in_next_op() && !(x.ndim == 2 && rows_vec(out, x, residual, x.dim(1)))) {
    // An odd width (no decode model has one): the tiled expand of t, then the plain op.
    lora_expand_parts(lora, lora.t.ptr<float>(), 1, x.dim(0), false);
    launch_rms_norm<true>(stream_, pdl_, clusters_, norm_smem_bytes_, out, out16, residual, x, w, eps, GroupPlan(),
                          GroupLora());
    return;
  }
  launch_rms_norm<true>(stream_, pdl_, clusters_, norm_smem_bytes_, out, out16, residual, x, w, eps, plan, lora);
}

}  // namespace quiver
