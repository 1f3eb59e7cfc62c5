// CUDA matmul: y[n, out] = x[n, in] @ w[out, in]^T (+ bias). Few tokens (decode) go to the
// GEMV kernel (gemv.cu), which keeps x in f32; more tokens go to cuBLAS:
// - f32 weights: f32 GEMM with the pedantic compute type (no TF32), so f32 models match
//   the reference to ~1e-6;
// - bf16/f16 weights: x is converted to the weight's type (once per group) in a backend-owned scratch
//   buffer and multiplied on the tensor cores with f32 accumulation and f32 output. The
//   rounding of x costs ~2^-9 relative (bf16); with gemm_split_activations, x = hi + lo
//   is multiplied in two GEMMs (the second accumulates, beta = 1), which restores ~2^-17.
// A producer may hand over x already rounded (MatmulGroup::x16, GroupPlan::x_type): the
// conversion is then skipped, with the same bits going into the GEMM.
// Members of one shape whose weights and outputs lie at one stride each (the loader places
// q/k/v and gate/up weights back to back, the model's workspace their outputs:
// LlamaWeights place_groups, Workspace) run as one strided-batched GEMM, whose one launch
// holds all their tiles: at 256 tokens one 4096 x 4096 product is 128 tiles of 128 x 64,
// one wave on 132 SMs at 410 TFLOP/s, and three of them took 63.9 us on an H100 where one
// GEMM of their 12,288 rows took 47.8 (gate/up: 86.8 against 81.4). End to end (H100,
// Llama-2-7B, 256 requests over 64 adapters) the decode step took 21.9 against 22.5 ms
// with an fp8 cache and 28.8 against 29.6 with bf16; 32 requests 8.55 against 8.82 ms.
#include <algorithm>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.h"

namespace quiver {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t work, int num_sms) {
  return static_cast<unsigned>(std::clamp<int64_t>(cuda::ceil_div(work, kThreads), 1, int64_t{num_sms} * 16));
}

// hi[i] = T(x[i]); with lo: lo[i] = T(x[i] - hi[i]) (the rounding error, itself rounded).
template <typename T>
__global__ void convert_kernel(T* __restrict__ hi, T* __restrict__ lo, const float* __restrict__ x, int64_t count) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count; i += stride) {
    const float v = x[i];
    const T h = cuda::from_f32<T>(v);
    hi[i] = h;
    if (lo != nullptr) lo[i] = cuda::from_f32<T>(v - cuda::to_f32(h));
  }
}

// y[i, o] += bias[o]     y: [n, out] f32; bias: [out] of any float dtype
__global__ void add_bias_kernel(float* __restrict__ y, const void* __restrict__ bias, DType bias_type, int64_t out,
                                int64_t count) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count; i += stride)
    y[i] += cuda::load_any(bias, bias_type, i % out);
}

size_t matmul_scratch_bytes(int64_t n, int64_t in, bool split) {
  return static_cast<size_t>(n) * static_cast<size_t>(in) * 2 * (split ? 2 : 1);
}

// How many members from `first` on share its output width with weights and outputs each at
// one stride (*w_stride, *y_stride: elements), so that one strided-batched GEMM takes them;
// 1 where the next member does not follow that way.
int strided_members(const MatmulGroup& g, int first, int64_t n, int64_t* w_stride, int64_t* y_stride) {
  const Tensor& w0 = g.w[first];
  const int64_t out = w0.dim(0), in = w0.dim(1);
  const int64_t we = static_cast<int64_t>(dtype_size(w0.dtype));
  int count = 1;
  for (int j = first + 1; j < g.count; ++j) {
    const Tensor &w = g.w[j], &y = g.y[j], &wp = g.w[j - 1], &yp = g.y[j - 1];
    if (w.dim(0) != out || out == 0) break;
    const int64_t wd = static_cast<const char*>(w.data) - static_cast<const char*>(wp.data);
    const int64_t yd = static_cast<const char*>(y.data) - static_cast<const char*>(yp.data);
    // Strides in whole elements, past the member before (no overlap), the same for all.
    if (wd < out * in * we || wd % we != 0 || yd < n * out * 4 || yd % 4 != 0) break;
    if (count > 1 && (wd != *w_stride * we || yd != *y_stride * 4)) break;
    *w_stride = wd / we;
    *y_stride = yd / 4;
    ++count;
  }
  return count;
}

}  // namespace

void CudaBackend::matmul(Tensor y, Tensor x, Tensor w, Tensor bias) {
  MatmulGroup g;
  g.count = 1;
  g.y[0] = y;
  g.w[0] = w;
  g.bias[0] = bias;
  check_group(g, x);
  const GroupPlan p =
      plan_device_matmul(options_.dispatch, x.dim(0), x.dim(1), w.dtype, options_.gemm_split_activations);
  run_matmul(p.matmul, g, x, pdl_);
}

void CudaBackend::check_group(const MatmulGroup& g, Tensor x) const {
  check(g.count >= 1 && g.count <= kMaxGroup, "matmul: 1..3 members in a group");
  cuda::check_f32(x, "matmul: x must be f32 on the GPU");
  check(x.ndim == 2, "matmul: x must be 2-d");
  const int64_t n = x.dim(0), in = x.dim(1);
  for (int i = 0; i < g.count; ++i) {
    const Tensor &y = g.y[i], &w = g.w[i], &bias = g.bias[i];
    cuda::check_f32(y, "matmul: y must be f32 on the GPU");
    check(w.ndim == 2 && y.ndim == 2, "matmul: w and y must be 2-d");
    check(w.dim(1) == in && y.dim(0) == n && y.dim(1) == w.dim(0), "matmul: shape mismatch");
    check(bias.empty() || (bias.numel() == w.dim(0) && bias.dtype != DType::kI32), "matmul: bias must be [out] float");
    check(w.dtype == g.w[0].dtype, "matmul: a group's members must share the weight dtype");
    check(w.dtype != DType::kF8E4M3 || w.row_scale != nullptr, "matmul: fp8 weights need their row scales");
    check(w.dim(0) < (int64_t{1} << 31), "matmul: dimension above 2^31");
  }
  check(n < (int64_t{1} << 31) && in < (int64_t{1} << 31), "matmul: dimension above 2^31");
}

void CudaBackend::run_matmul(MatmulKernel kernel, const MatmulGroup& g, Tensor x, bool pdl) {
  const int64_t n = x.dim(0), in = x.dim(1);
  if (n == 0) return;
  if (in == 0) {  // an empty sum: y = bias
    for (int i = 0; i < g.count; ++i) {
      if (g.y[i].numel() == 0) continue;
      fill_zero(g.y[i].data, g.y[i].bytes());
      if (!g.bias[i].empty()) add_bias(g.y[i], g.bias[i]);
    }
    return;
  }
  switch (kernel) {
    case MatmulKernel::kGemv: gemv(g, x, pdl); return;  // members without rows get no blocks
    case MatmulKernel::kSkinny:
      // The plan has checked the shapes and types; only a weight view off 16-byte
      // alignment (never an imported weight: cudaMalloc aligns to 256) is left to cuBLAS,
      // or for fp8 weights to the GEMV (which takes them up to 16 tokens).
      if (skinny_project(g, nullptr, x, pdl)) return;
      if (g.w[0].dtype == DType::kF8E4M3) gemv(g, x, pdl);
      else matmul_cublas(g, x, cublas_small_);
      return;
    case MatmulKernel::kCublasSmall: matmul_cublas(g, x, cublas_small_); return;
    case MatmulKernel::kCublasFp8: matmul_fp8(g, x, false); return;
    case MatmulKernel::kCublasFp8Outer: matmul_fp8(g, x, true); return;
    case MatmulKernel::kCublas: matmul_cublas(g, x, cublas_); return;
    case MatmulKernel::kHost: break;
  }
  check(false, "matmul: the plan names a host kernel on the cuda backend");
}

// x is converted to the weights' 16-bit type once for the whole group (unless g.x16 is that
// conversion already), then one GEMM per member on handle h (decode-sized products: the one
// without a workspace, MatmulKernel::kCublasSmall).
void CudaBackend::matmul_cublas(const MatmulGroup& g, Tensor x, cublasHandle_t h) {
  const int64_t n = x.dim(0), in = x.dim(1);
  const int n_ = static_cast<int>(n), k_ = static_cast<int>(in);
  const float one = 1.f, zero = 0.f;
  const DType wt = g.w[0].dtype;  // shared by the members (a matmul group)
  const void* xs = x.data;
  const void* lo = nullptr;
  cudaDataType_t type = CUDA_R_32F;
  if (wt != DType::kF32) {
    check(is_16bit_float(wt), "matmul: weight must be F32, F16 or BF16");
    type = wt == DType::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
  }
  // A copy in another 16-bit type than these weights' (a checkpoint mixing f16 and bf16
  // projections) is not used: x is converted as usual.
  if (wt != DType::kF32 && !g.x16.empty() && g.x16.dtype == wt && !options_.gemm_split_activations) {
    check(g.x16.device == Device::kCuda && g.x16.numel() == n * in, "matmul: x16 must be [n, in] on the GPU");
    xs = g.x16.data;
  } else if (wt != DType::kF32) {
    void* low = nullptr;
    xs = convert_for_gemm(x, wt, &low).data;
    lo = low;
  }
  const cublasComputeType_t compute = wt == DType::kF32 ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F;
  for (int i = 0; i < g.count;) {
    const Tensor &y = g.y[i], &w = g.w[i];
    const int m_ = static_cast<int>(w.dim(0));
    int64_t w_stride = 0, y_stride = 0;
    const int batch = strided_members(g, i, n, &w_stride, &y_stride);
    // A GEMM over x (beta 0), then for the split conversion one over its low terms (beta 1).
    const auto gemm = [&](const void* b, const float* beta) {
      if (m_ == 0) return;
      if (batch == 1) {
        cuda::cublas_check(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m_, n_, k_, &one, w.data, type, k_, b, type, k_,
                                        beta, y.data, CUDA_R_32F, m_, compute, CUBLAS_GEMM_DEFAULT));
      } else {
        cuda::cublas_check(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m_, n_, k_, &one, w.data, type, k_,
                                                      w_stride, b, type, k_, 0, beta, y.data, CUDA_R_32F, m_, y_stride,
                                                      batch, compute, CUBLAS_GEMM_DEFAULT));
      }
    };
    gemm(xs, &zero);
    if (lo != nullptr) gemm(lo, &one);
    for (int j = i; j < i + batch; ++j)
      if (!g.bias[j].empty()) add_bias(g.y[j], g.bias[j]);
    i += batch;
  }
}

Tensor CudaBackend::convert_for_gemm(Tensor x, DType wt, void** low) {
  const int64_t n = x.dim(0), in = x.dim(1);
  const bool split = options_.gemm_split_activations;
  char* hi = static_cast<char*>(scratch(matmul_scratch_, matmul_scratch_bytes(n, in, split), "matmul"));
  char* lo = split ? hi + static_cast<size_t>(n * in) * 2 : nullptr;
  cuda::dispatch_float(wt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    convert_kernel<T><<<grid_for(n * in, num_sms_), kThreads, 0, stream_>>>(
        reinterpret_cast<T*>(hi), reinterpret_cast<T*>(lo), x.ptr<float>(), n * in);
    cuda::launch_check();
  }, "matmul: weight must be F32, F16 or BF16");
  if (low != nullptr) *low = lo;
  return Tensor(hi, wt, {n, in}, Device::kCuda);
}

void CudaBackend::add_bias(Tensor y, Tensor bias) {
  const int64_t count = y.numel();
  add_bias_kernel<<<grid_for(count, num_sms_), kThreads, 0, stream_>>>(y.ptr<float>(), bias.data, bias.dtype,
                                                                          y.dim(1), count);
  cuda::launch_check();
}

}  // namespace quiver
