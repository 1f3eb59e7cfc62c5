// CUDA add + RMSNorm with the LoRA expand of x's projection left to it
// (CudaBackend::add_rms_norm under ExpandKernel::kNextOp): x += B[slot] . t first, then the
// norm as in norm.cu. For 1-2 rows one block a row with the row's B rows staged in shared
// memory; on sm_90 a row split over a cluster of blocks; elsewhere (or for widths and ranks
// those do not take) one block a row.
#include <cooperative_groups.h>

#include <algorithm>

#include "backend/cuda/norm.cuh"

namespace quiver::cuda {
namespace {

// The delta kernels' step on float4 j of a row: x[j] = a (x with its term added);
// residual[j] = r + a, which it returns.
__device__ __forceinline__ float4 write_x_add_residual(float4* xr, float4* rr, int64_t j, float4 a, float4 r) {
  xr[j] = a;
  const float4 s = make_float4(r.x + a.x, r.y + a.y, r.z + a.z, r.w + a.w);
  rr[j] = s;
  return s;
}

// add_rms_norm (out16 as above) with x's pending LoRA term (lora_delta.cuh) added to x, and
// written back, before the residual add. d % 4 == 0 and aligned rows (float4 path): each
// thread's first two float4s (a 4,096-wide row at 512 threads is all of them) have their
// B rows and weights loaded before the wait, and after it t, x and the residual at once,
// as in rms_norm_kernel, and stay in registers; later float4s go one at a time.
template <typename W>
__global__ void __launch_bounds__(512)
    add_rms_norm_delta_kernel(float* __restrict__ out, void* __restrict__ out16, bool bf16,
                              float* __restrict__ residual, float* __restrict__ x, const W* __restrict__ w, int64_t d,
                              float eps, cuda::LoraDeltaArgs delta) {
  __shared__ float red[32];
  const int64_t row = blockIdx.x, d4 = d / 4;
  const int tok = static_cast<int>(row);
  const int64_t j0 = threadIdx.x, j1 = j0 + blockDim.x;
  cuda::LoraDeltaRow4 e0, e1;
  float4 w0{}, w1{};
  if (j0 < d4) e0.load(delta, 0, tok, static_cast<int>(4 * j0));
  if (j1 < d4) e1.load(delta, 0, tok, static_cast<int>(4 * j1));
  if (j0 < d4) w0 = load_w4(w, j0);
  if (j1 < d4) w1 = load_w4(w, j1);
  cuda::pdl_enter();  // launched with pdl (cuda_common.h)
  cuda::LoraDeltaT t;
  t.load(delta, 0, tok);
  float4* xr = reinterpret_cast<float4*>(x + row * d);
  float4* rr = reinterpret_cast<float4*>(residual + row * d);
  float4 a[2], r[2];
  if (j0 < d4) a[0] = xr[j0], r[0] = rr[j0];
  if (j1 < d4) a[1] = xr[j1], r[1] = rr[j1];
  float ss = 0.f;
  // x[j] += its term; residual[j] += x[j]; returns the new residual.
  auto step = [&](int64_t j, float4 a, float4 r, const cuda::LoraDeltaRow4& rows) {
    a = write_x_add_residual(xr, rr, j, rows.apply(delta, t, a), r);
    ss += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
    return a;
  };
  if (j0 < d4) a[0] = step(j0, a[0], r[0], e0);
  if (j1 < d4) a[1] = step(j1, a[1], r[1], e1);
  for (int64_t j = j1 + blockDim.x; j < d4; j += blockDim.x) {
    e0.load(delta, 0, tok, static_cast<int>(4 * j));
    step(j, xr[j], rr[j], e0);
  }
  const float total = cuda::block_sum(ss, red);
  const float inv = 1.0f / sqrtf(total / static_cast<float>(d) + eps);
  float* o = out + row * d;
  if (j0 < d4) store_normed4(o, out16, bf16, w0, row, d, j0, a[0], inv);
  if (j1 < d4) store_normed4(o, out16, bf16, w1, row, d, j1, a[1], inv);
  for (int64_t j = j1 + blockDim.x; j < d4; j += blockDim.x)
    store_normed4(o, out16, bf16, load_w4(w, j), row, d, j, rr[j], inv);
}

// add_rms_norm_delta_kernel with each row split over a cluster of C blocks (sm_90+), one
// float4 a thread: block c of row i's cluster (grid C x n) owns float4s c * blockDim.x ..
// (c + 1) * blockDim.x - 1. The blocks' sums meet through distributed shared memory; every
// block adds the C (at most 8, norm_cluster) of them in rank order, so all get the same
// total. With one block a row, a batch-1 step put a 4,096-wide row's B rows (128 KiB at
// r=16) on one SM, and that block (512 threads x 128 registers, a whole SM's registers)
// could only start on an SM the GEMV before it had left, so its loads came after the GEMV
// instead of beside it.
template <typename W>
__global__ void __launch_bounds__(256)
    add_rms_norm_delta_cluster_kernel(float* __restrict__ out, void* __restrict__ out16, bool bf16,
                                      float* __restrict__ residual, float* __restrict__ x, const W* __restrict__ w,
                                      int64_t d, float eps, cuda::LoraDeltaArgs delta) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  __shared__ float red[32];
  __shared__ float parts[8];  // the cluster's block sums, by rank
  const cg::cluster_group cluster = cg::this_cluster();
  const int64_t row = blockIdx.y;
  const int tok = static_cast<int>(row);
  const int64_t j = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;  // < d / 4: C * blockDim.x float4s a row
  // A block's shared memory may be written by the others only once it has started: this
  // phase completes when all have, and its wait comes after the block sum.
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  cuda::LoraDeltaRow4 e;
  e.load(delta, 0, tok, static_cast<int>(4 * j));
  const float4 wv = load_w4(w, j);
  cuda::pdl_enter();  // launched with pdl (cuda_common.h)
  cuda::LoraDeltaT t;
  t.load(delta, 0, tok);
  float4* xr = reinterpret_cast<float4*>(x + row * d);
  float4* rr = reinterpret_cast<float4*>(residual + row * d);
  const float4 a = write_x_add_residual(xr, rr, j, e.apply(delta, t, xr[j]), rr[j]);
  const float s = cuda::block_sum(a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w, red);
  // Each block's sum goes into every block's parts[its rank], then one barrier phase
  // (release / acquire) makes them visible; every block adds the C of them in rank order.
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");  // all blocks have started
  if (threadIdx.x == 0)
    for (unsigned q = 0; q < cluster.num_blocks(); ++q) *cluster.map_shared_rank(&parts[cluster.block_rank()], q) = s;
  cluster.sync();
  float total = 0.f;
  for (unsigned q = 0; q < cluster.num_blocks(); ++q) total += parts[q];
  const float inv = 1.0f / sqrtf(total / static_cast<float>(d) + eps);
  store_normed4(out + row * d, out16, bf16, wv, row, d, j, a, inv);
#else
  __trap();  // launched only on sm_90+ (CudaBackend::clusters_)
#endif
}

// The delta norm for decode steps of 1-2 tokens (kNormSmemMaxRows), one block a row: the
// row's B rows (d x R 16-bit entries, one contiguous slab of its slot's stack) are copied to
// shared memory by cp.async before the wait, and each thread then adds the terms of its
// two float4s from there. It needs 48 registers, so under PDL it starts beside the GEMV's
// last blocks; the cluster kernel's start and barrier cost a batch-1 step 0.04-0.08 ms
// more (H200, 7B: 3.90-3.91 ms against 3.95-3.98). 16-byte chunk i of the slab sits at chunk
// smem_swizzle(i): the 8 threads of a quarter-warp, whose rows are 4 apart, read 8
// different bank groups. Needs vec (16-bit stacks, R % 8 == 0) and d / 4 <= 1024.
constexpr int64_t kNormSmemMaxRows = 2;
constexpr int64_t kNormSmemMaxBytes = 200 * 1024;

__device__ __forceinline__ int smem_swizzle(int i) { return i ^ ((i >> 3) & 7); }

// Bytes of the slab in shared memory: whole groups of 8 chunks, so smem_swizzle stays inside.
int64_t norm_smem_bytes(int64_t d, int rank) { return (d * rank / 8 + 7) / 8 * 8 * 16; }

template <typename W>
__global__ void __launch_bounds__(512)
    add_rms_norm_delta_smem_kernel(float* __restrict__ out, void* __restrict__ out16, bool bf16,
                                   float* __restrict__ residual, float* __restrict__ x, const W* __restrict__ w,
                                   int64_t d, float eps, cuda::LoraDeltaArgs delta) {
  extern __shared__ uint4 slab_smem[];
  __shared__ float red[32];
  const int64_t row = blockIdx.x, d4 = d / 4;
  const int tok = static_cast<int>(row);
  const char* slab = cuda::lora_brow(delta, 0, tok, 0);  // B[slot][0]; null: no term (block-uniform)
  const int cpr = delta.rank / 8;                        // 16-byte chunks a B row
  if (slab != nullptr) {  // stacks: written by no kernel of the step
    const int chunks = static_cast<int>(d) * cpr;
    for (int i = threadIdx.x; i < chunks; i += blockDim.x) {
      const auto dst = static_cast<unsigned>(__cvta_generic_to_shared(slab_smem + smem_swizzle(i)));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(slab + int64_t{i} * 16) : "memory");
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  const int64_t j0 = threadIdx.x, j1 = j0 + blockDim.x;  // d4 <= 2 * blockDim.x (host)
  float4 w0{}, w1{};
  if (j0 < d4) w0 = load_w4(w, j0);
  if (j1 < d4) w1 = load_w4(w, j1);
  cuda::pdl_enter();  // launched with pdl (cuda_common.h)
  cuda::LoraDeltaT t;
  if (slab != nullptr) t.load(delta, 0, tok);
  float4* xr = reinterpret_cast<float4*>(x + row * d);
  float4* rr = reinterpret_cast<float4*>(residual + row * d);
  float4 a[2] = {}, r[2] = {};
  if (j0 < d4) a[0] = xr[j0], r[0] = rr[j0];
  if (j1 < d4) a[1] = xr[j1], r[1] = rr[j1];
  if (slab != nullptr) asm volatile("cp.async.wait_all;" ::: "memory");
  __syncthreads();
  const bool b16 = delta.type == DType::kBF16;
  // y + output o's B row . t, ranks in order (as LoraDeltaRow4::apply).
  auto term = [&](int o, float y) {
    float p = 0.f;
    for (int c = 0; c < cpr; ++c) p = cuda::lora_dot8(b16, slab_smem[smem_swizzle(o * cpr + c)], t, 8 * c, p);
    return y + p;
  };
  float ss = 0.f;
  auto step = [&](int64_t j, float4 a, float4 r) {
    if (slab != nullptr) {
      const int o = static_cast<int>(4 * j);
      a = make_float4(term(o, a.x), term(o + 1, a.y), term(o + 2, a.z), term(o + 3, a.w));
    }
    a = write_x_add_residual(xr, rr, j, a, r);
    ss += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
    return a;
  };
  if (j0 < d4) a[0] = step(j0, a[0], r[0]);
  if (j1 < d4) a[1] = step(j1, a[1], r[1]);
  const float total = cuda::block_sum(ss, red);
  const float inv = 1.0f / sqrtf(total / static_cast<float>(d) + eps);
  float* o = out + row * d;
  if (j0 < d4) store_normed4(o, out16, bf16, w0, row, d, j0, a[0], inv);
  if (j1 < d4) store_normed4(o, out16, bf16, w1, row, d, j1, a[1], inv);
}

// Blocks a row for add_rms_norm_delta_cluster_kernel: the largest C of 8, 4, 2 that splits
// a row's d / 4 float4s into C shares of whole warps, at most 256 threads; 0: none does.
int norm_cluster(int64_t d) {
  for (int c : {8, 4, 2}) {
    if (d % (4 * c) != 0) continue;
    const int64_t per = d / 4 / c;
    if (per % 32 == 0 && per <= 256) return c;
  }
  return 0;
}

}  // namespace

void launch_add_rms_norm_delta(cudaStream_t stream, bool pdl, bool clusters, int64_t smem_max, Tensor out,
                               Tensor out16, Tensor residual, Tensor x, Tensor w, float eps, const LoraDeltaArgs& da) {
  const int64_t n = x.dim(0), d = x.dim(1);
  const int cluster = clusters ? norm_cluster(d) : 0;
  const int64_t slab_bytes = norm_smem_bytes(d, da.rank);
  // The one-block kernels: two float4s a thread, whole warps.
  const int threads = static_cast<int>(std::clamp<int64_t>((d / 4 + 1) / 2, 32, 512) + 31) / 32 * 32;
  const bool bf16 = out16.dtype == DType::kBF16;
  dispatch_float(w.dtype, [&](auto tag) {
    using W = typename decltype(tag)::type;
    if (da.vec && n <= kNormSmemMaxRows && d / 4 <= 1024 && slab_bytes <= smem_max) {
      launch_kernel(add_rms_norm_delta_smem_kernel<W>, static_cast<unsigned>(n), threads,
                    static_cast<size_t>(slab_bytes), stream, pdl, out.ptr<float>(), out16.data, bf16,
                    residual.ptr<float>(), x.ptr<float>(), w.ptr<W>(), d, eps, da);
    } else if (cluster > 0) {
      launch_kernel_clusters(add_rms_norm_delta_cluster_kernel<W>, dim3(cluster, static_cast<unsigned>(n)),
                             static_cast<unsigned>(d / 4 / cluster), cluster, 0, stream, pdl, out.ptr<float>(),
                             out16.data, bf16, residual.ptr<float>(), x.ptr<float>(), w.ptr<W>(), d, eps, da);
    } else {
      launch_kernel(add_rms_norm_delta_kernel<W>, static_cast<unsigned>(n), threads, 0, stream, pdl,
                    out.ptr<float>(), out16.data, bf16, residual.ptr<float>(), x.ptr<float>(), w.ptr<W>(), d, eps,
                    da);
    }
  }, "rms_norm: weight must be F32, F16 or BF16");
}

int64_t set_norm_delta_smem(int64_t optin_bytes) {
  // add_rms_norm_delta_smem_kernel's slab is above the default 48 KiB of dynamic shared
  // memory; the device may allow less than kNormSmemMaxBytes (sm_80: 163 KiB a block).
  const int64_t allowed = std::min(kNormSmemMaxBytes, optin_bytes);
  const int bytes = static_cast<int>(allowed);
  const auto attr = cudaFuncAttributeMaxDynamicSharedMemorySize;
  cuda_check(cudaFuncSetAttribute(add_rms_norm_delta_smem_kernel<float>, attr, bytes));
  cuda_check(cudaFuncSetAttribute(add_rms_norm_delta_smem_kernel<__half>, attr, bytes));
  cuda_check(cudaFuncSetAttribute(add_rms_norm_delta_smem_kernel<__nv_bfloat16>, attr, bytes));
  return allowed;
}

}  // namespace quiver::cuda
