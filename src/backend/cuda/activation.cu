// CUDA element-wise ops: silu_mul (SwiGLU), add (residual), gather_rows (pick the rows
// whose logits are needed). Grids are sized from the element count only.
#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/fp8_rows.cuh"
#include "backend/cuda/lora_delta.cuh"

namespace quiver {
namespace {

constexpr int kThreads = 256;

// Grid for a grid-stride loop over `work` items: enough blocks to fill the GPU, no more.
unsigned grid_for(int64_t work, int num_sms) {
  return static_cast<unsigned>(std::clamp<int64_t>(cuda::ceil_div(work, kThreads), 1, int64_t{num_sms} * 16));
}

__device__ __forceinline__ float silu_mul1(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// out = silu(gate) * up over `count` elements; vec: float4 over count / 4 groups. out16 (or
// null): out again, rounded (store_x16).
__global__ void silu_mul_kernel(float* out, void* __restrict__ out16, bool bf16, const float* gate, const float* up,
                                int64_t count, bool vec) {
  cuda::pdl_enter();  // launched with pdl (cuda_common.h)
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t start = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (vec) {
    for (int64_t i = start; i < count / 4; i += stride) {
      const float4 g = reinterpret_cast<const float4*>(gate)[i];
      const float4 u = reinterpret_cast<const float4*>(up)[i];
      const float4 r = make_float4(silu_mul1(g.x, u.x), silu_mul1(g.y, u.y), silu_mul1(g.z, u.z), silu_mul1(g.w, u.w));
      reinterpret_cast<float4*>(out)[i] = r;
      cuda::store_x16(out16, 4 * i, r.x, bf16);
      cuda::store_x16(out16, 4 * i + 1, r.y, bf16);
      cuda::store_x16(out16, 4 * i + 2, r.z, bf16);
      cuda::store_x16(out16, 4 * i + 3, r.w, bf16);
    }
  } else {
    for (int64_t i = start; i < count; i += stride) {
      out[i] = silu_mul1(gate[i], up[i]);
      cuda::store_x16(out16, i, out[i], bf16);
    }
  }
}

// silu_mul with an fp8 copy (fp8_rows.cuh): one block per row of f elements, the row
// written, then read back for its scale and codes. out may be gate (in place).
__global__ void silu_mul_fp8_kernel(float* out, cuda::OutCopy copy, const float* gate, const float* up, int64_t f,
                                    bool vec) {
  cuda::pdl_enter();  // launched with pdl (cuda_common.h)
  const int64_t r = blockIdx.x;
  float* o = out + r * f;
  const float *g = gate + r * f, *u = up + r * f;
  if (vec) {
    for (int64_t j = threadIdx.x; j < f / 4; j += blockDim.x) {
      const float4 a = reinterpret_cast<const float4*>(g)[j];
      const float4 b = reinterpret_cast<const float4*>(u)[j];
      reinterpret_cast<float4*>(o)[j] =
          make_float4(silu_mul1(a.x, b.x), silu_mul1(a.y, b.y), silu_mul1(a.z, b.z), silu_mul1(a.w, b.w));
    }
  } else {
    for (int64_t j = threadIdx.x; j < f; j += blockDim.x) o[j] = silu_mul1(g[j], u[j]);
  }
  cuda::fp8_quantize_written_row(o, f, copy.codes + r * f, copy.scales + r, vec);
}

// silu_mul with a pending LoRA term on gate (member 0) and up (member 1), rows of f
// elements: one element per thread per step, the first step's B rows loaded before the
// wait; gate and up hold their terms afterwards (lora_delta.cuh).
__global__ void silu_mul_delta_kernel(float* out, void* __restrict__ out16, bool bf16, float* gate, float* up,
                                      int64_t count, int64_t f, cuda::LoraDeltaArgs delta) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t start = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  cuda::LoraDeltaRow dg, du;
  if (start < count) {
    dg.load(delta, 0, static_cast<int>(start / f), static_cast<int>(start % f));
    du.load(delta, 1, static_cast<int>(start / f), static_cast<int>(start % f));
  }
  cuda::pdl_enter();  // launched with pdl (cuda_common.h)
  for (int64_t i = start; i < count; i += stride) {
    if (i != start) {
      dg.load(delta, 0, static_cast<int>(i / f), static_cast<int>(i % f));
      du.load(delta, 1, static_cast<int>(i / f), static_cast<int>(i % f));
    }
    const float g = dg.apply(delta, 0, static_cast<int>(i / f), gate[i]);
    const float u = du.apply(delta, 1, static_cast<int>(i / f), up[i]);
    gate[i] = g;
    up[i] = u;
    out[i] = silu_mul1(g, u);
    cuda::store_x16(out16, i, out[i], bf16);
  }
}

// out[i, :] = x[rows[i], :]; a row index outside x becomes a NaN row (it cannot be
// reported from the device).
__global__ void gather_rows_kernel(float* __restrict__ out, const float* x,
                                   const int32_t* __restrict__ rows, int64_t num_rows, int64_t d) {
  cuda::pdl_enter();  // launched with pdl (cuda_common.h)
  const int64_t i = blockIdx.x;
  const int64_t r = rows[i];
  float* o = out + i * d;
  if (r < 0 || r >= num_rows) {
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) o[j] = NAN;
    return;
  }
  const float* src = x + r * d;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) o[j] = src[j];
}

}  // namespace

void CudaBackend::silu_mul(Tensor out, Tensor out16, Tensor gate, Tensor up, const GroupPlan& plan,
                           const GroupLora& lora) {
  cuda::check_f32(out, "silu_mul: out must be f32 on the GPU");
  cuda::check_f32(gate, "silu_mul: gate must be f32 on the GPU");
  cuda::check_f32(up, "silu_mul: up must be f32 on the GPU");
  cuda::check_x16(out16, out, "silu_mul: out16 must be bf16, f16 or an fp8 copy on the GPU, out's shape");
  const int64_t count = out.numel();
  check(gate.numel() == count && up.numel() == count, "silu_mul: shape mismatch");
  if (count == 0) return;
  const cuda::OutCopy c = cuda::out_copy(out16);
  const bool fp8 = c.codes != nullptr;
  check(!fp8 || (gate.ndim >= 1 && out16.dim(0) == gate.dim(0)), "silu_mul: an fp8 copy needs gate as [n, f]");
  if (plan.expand_in_next_op()) {
    check(gate.ndim >= 1, "silu_mul: gate must be [n, f]");
    const int64_t n = gate.dim(0), f = count / std::max<int64_t>(n, 1);
    const cuda::LoraDeltaArgs d = cuda::lora_delta_args(plan, lora, {gate, up}, n, "silu_mul");
    // Small blocks: a decode row's B rows (2 x f x R entries) spread over many SMs.
    constexpr int kDeltaThreads = 64;
    const auto blocks = static_cast<unsigned>(
        std::clamp<int64_t>(cuda::ceil_div(count, kDeltaThreads), 1, int64_t{num_sms_} * 32));
    // Its kernel writes 16-bit copies; an fp8 one in a pass after it.
    cuda::launch_kernel(silu_mul_delta_kernel, blocks, kDeltaThreads, 0, stream_, pdl_, out.ptr<float>(), c.x16, c.bf16,
                        gate.ptr<float>(), up.ptr<float>(), count, f, d);
    if (fp8) cuda::write_fp8_copy(out, out16, stream_);
    return;
  }
  const bool vec = count % 4 == 0 && cuda::aligned16(out.data) && cuda::aligned16(gate.data) &&
                   cuda::aligned16(up.data);
  if (fp8) {
    const int64_t n = gate.dim(0), f = count / n;
    cuda::launch_kernel(silu_mul_fp8_kernel, static_cast<unsigned>(n), kThreads, 0, stream_, pdl_, out.ptr<float>(), c,
                        gate.ptr<float>(), up.ptr<float>(), f, vec && f % 4 == 0);
    return;
  }
  cuda::launch_kernel(silu_mul_kernel, grid_for(vec ? count / 4 : count, num_sms_), kThreads, 0, stream_, pdl_,
                      out.ptr<float>(), c.x16, c.bf16, gate.ptr<float>(), up.ptr<float>(), count, vec);
}

void CudaBackend::gather_rows(Tensor out, Tensor x, Tensor rows) {
  cuda::check_f32(out, "gather_rows: out must be f32 on the GPU");
  cuda::check_f32(x, "gather_rows: x must be f32 on the GPU");
  check(rows.dtype == DType::kI32 && x.ndim == 2 && out.ndim == 2, "gather_rows: bad operand types");
  const int64_t m = out.dim(0), d = x.dim(1);
  check(out.dim(1) == d && rows.numel() == m, "gather_rows: shape mismatch");
  if (m == 0 || d == 0) return;
  const int threads = static_cast<int>(std::clamp<int64_t>((d + 31) / 32 * 32, 32, 512));
  cuda::launch_kernel(gather_rows_kernel, static_cast<unsigned>(m), threads, 0, stream_, pdl_, out.ptr<float>(),
                      x.ptr<float>(), rows.ptr<int32_t>(), x.dim(0), d);
}

}  // namespace quiver
