// Helpers shared by the CUDA op files (included only from src/backend/cuda/*.cu):
// error checks for CUDA and cuBLAS calls, element conversions, 16-byte vector loads,
// warp reductions and the dtype dispatch that turns a runtime DType into a C++ type.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <source_location>
#include <string>
#include <type_traits>
#include <utility>

#include "core/check.h"
#include "core/tensor.h"

namespace quiver::cuda {

// ---- error checks (host) -----------------------------------------------------------------
// Every CUDA call in the backend goes through these: a failure is a programmer bug (bad
// pointer, launch configuration) or a dead device, never something a user caused.
inline void cuda_check(cudaError_t e, const std::source_location where = std::source_location::current()) {
  if (e != cudaSuccess) [[unlikely]]
    check_failed(std::string("CUDA error: ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e), where);
}

inline void cublas_check(cublasStatus_t s, const std::source_location where = std::source_location::current()) {
  if (s != CUBLAS_STATUS_SUCCESS) [[unlikely]]
    check_failed(std::string("cuBLAS error: ") + cublasGetStatusName(s) + ": " + cublasGetStatusString(s), where);
}

// After each <<<>>> launch: reports bad launch configurations at the call that made them.
inline void launch_check(const std::source_location where = std::source_location::current()) {
  cuda_check(cudaGetLastError(), where);
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

__host__ __device__ inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Checks that a tensor is a float32 tensor on the GPU (activations).
inline void check_f32(const Tensor& t, const char* what,
                      const std::source_location where = std::source_location::current()) {
  check(t.dtype == DType::kF32 && t.device == Device::kCuda, what, where);
}

// ---- element conversions (device) --------------------------------------------------------
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f32(__nv_fp8_e4m3 v) { return static_cast<float>(v); }

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
// Nearest even, saturating at +-448 (the host's f32_to_e4m3).
template <>
__device__ __forceinline__ __nv_fp8_e4m3 from_f32<__nv_fp8_e4m3>(float v) {
  __nv_fp8_e4m3 r;
  r.__x = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  return r;
}

// A 16-bit copy of an f32 activation (MatmulGroup::x16): p[i] = v rounded to nearest even,
// bf16 when bf16, else f16; nothing when p is null. The same rounding as the conversion
// before cuBLAS (gemm.cu), so a GEMM on the copy is bitwise the GEMM on the conversion.
__device__ __forceinline__ void store_x16(void* p, int64_t i, float v, bool bf16) {
  if (p == nullptr) return;
  if (bf16) {
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  } else {
    static_cast<__half*>(p)[i] = __float2half_rn(v);
  }
}

// Checks an op's optional copy of `out` for the next matmul (out16): empty, bf16/f16, or
// e4m3 codes with their row scales (fp8_copy), on the GPU with out's shape.
inline void check_x16(const Tensor& out16, const Tensor& out, const char* what) {
  if (out16.empty()) return;
  const bool fp8 = out16.dtype == DType::kF8E4M3 && out16.row_scale != nullptr;
  check((is_16bit_float(out16.dtype) || fp8) && out16.device == Device::kCuda && out16.numel() == out.numel(), what);
}

// out16 as the kernels take it: a 16-bit copy (x16, bf16: its type) or an fp8 copy (codes
// and one scale per row, fp8_rows.cuh); null where it is not that kind, or empty.
struct OutCopy {
  void* x16 = nullptr;
  bool bf16 = false;
  uint8_t* codes = nullptr;
  float* scales = nullptr;
};
inline OutCopy out_copy(const Tensor& out16) {
  OutCopy c;
  if (out16.empty()) return c;
  if (out16.dtype == DType::kF8E4M3) {
    c.codes = static_cast<uint8_t*>(out16.data);
    c.scales = const_cast<float*>(out16.row_scale);  // the op writes them: it owns the copy
  } else {
    c.x16 = out16.data;
    c.bf16 = out16.dtype == DType::kBF16;
  }
  return c;
}

// A 16-byte vector of T, unpacked to floats. E = elements per vector.
template <typename T>
struct Vec16 {
  static constexpr int E = 16 / static_cast<int>(sizeof(T));
  __device__ __forceinline__ static void unpack(const uint4& raw, float (&f)[E]);
};
template <>
__device__ __forceinline__ void Vec16<float>::unpack(const uint4& raw, float (&f)[4]) {
  f[0] = __uint_as_float(raw.x);
  f[1] = __uint_as_float(raw.y);
  f[2] = __uint_as_float(raw.z);
  f[3] = __uint_as_float(raw.w);
}
template <>
__device__ __forceinline__ void Vec16<__nv_bfloat16>::unpack(const uint4& raw, float (&f)[8]) {
  // bf16 -> f32 is a 16-bit shift: cheaper than the intrinsic conversions.
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
template <>
__device__ __forceinline__ void Vec16<__half>::unpack(const uint4& raw, float (&f)[8]) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    __half2 h = *reinterpret_cast<const __half2*>(&w[i]);
    float2 v = __half22float2(h);
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}

template <>
__device__ __forceinline__ void Vec16<__nv_fp8_e4m3>::unpack(const uint4& raw, float (&f)[16]) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __half2_raw pair =
          __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w[i] >> (16 * h)), __NV_E4M3);
      const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&pair));
      f[4 * i + 2 * h] = v.x;
      f[4 * i + 2 * h + 1] = v.y;
    }
  }
}

// Read-only (ld.global.nc) 16-byte load cached in L1, for data re-read by neighbours that no
// kernel of the step writes (B rows, weights); see the PDL contract below.
__device__ __forceinline__ uint4 load16(const void* p) { return __ldg(static_cast<const uint4*>(p)); }

// Loads of what an earlier kernel of the same step wrote (x, K/V rows), for kernels launched
// with pdl: coherent ld.global, asm volatile so that they stay after pdl_wait() (the PDL
// contract below says why not ld.global.nc).
__device__ __forceinline__ uint4 load16_fresh(const void* p) {
  uint4 r;
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p)
               : "memory");
  return r;
}
__device__ __forceinline__ float4 load_f4_fresh(const float* p) {
  float4 r;
  asm volatile("ld.global.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w) : "l"(p)
               : "memory");
  return r;
}
__device__ __forceinline__ float load_f32_fresh(const float* p) {
  float r;
  asm volatile("ld.global.f32 %0, [%1];" : "=f"(r) : "l"(p) : "memory");
  return r;
}

// Streaming 16-byte load that skips L1 (weights read once per call), keeping L1 for x.
__device__ __forceinline__ uint4 load16_stream(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

// load16_stream's 8-byte form (a lane's 8 fp8 weights, gemm_skinny.cu).
__device__ __forceinline__ uint2 load8_stream(const void* p) {
  uint2 r;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
  return r;
}

// Bytes 2h and 2h + 1 of w, two fp8 e4m3 values, as an f16 pair over 2^8, exactly: an e4m3
// value's bits moved into f16's places (sign to bit 15, exponent and mantissa to bits 7-13)
// are that value times 2^-8, subnormals included (f16's exponent range holds e4m3's shifted
// by 8). A byte permute puts the two bytes in the high bytes of the halves, two logic ops
// move each half's bits down one place under the sign: instead of the fp8 conversion
// instruction, whose rate kept the 7B batch-1 GEMV at 2.63 ms a step on the H200
// (conversion-bound: 1.5 conversions an element at 16 an SM a clock). The kernels multiply
// the 2^8 back with the row's scale (gemv_store).
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2_over256(uint32_t w, int h) {
  const uint32_t t = __byte_perm(w, 0, h == 0 ? 0x1404 : 0x3424);
  return (t & 0x80008000u) | ((t >> 1) & 0x3f803f80u);
}

// 16 e4m3 weights (a 16-byte vector) as floats over 2^8 (the GEMV; f16 widens exactly).
__device__ __forceinline__ void unpack_e4m3_over256(const uint4& raw, float (&f)[16]) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t bits = e4m3x2_to_f16x2_over256(w[i], h);
      const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&bits));
      f[4 * i + 2 * h] = v.x;
      f[4 * i + 2 * h + 1] = v.y;
    }
  }
}

// 8 e4m3 weights (8 bytes) as 8 f16 over 2^8 in column order (the skinny kernel's mma).
__device__ __forceinline__ uint4 e4m3x8_to_f16x8_over256(uint2 raw) {
  return make_uint4(e4m3x2_to_f16x2_over256(raw.x, 0), e4m3x2_to_f16x2_over256(raw.x, 1),
                    e4m3x2_to_f16x2_over256(raw.y, 0), e4m3x2_to_f16x2_over256(raw.y, 1));
}
inline constexpr float kE4m3Over256 = 256.f;  // what the widened e4m3 values above are multiplied by

// c += A B on tensor cores (sm_80+), one m16n8k16 step with f32 accumulators: A 16 x 16
// row-major in a0..a3, B 16 x 8 column-major in b0, b1, W (bf16 or f16) the inputs' type;
// the fragment layout is PTX's for mma.sync.m16n8k16.
template <typename W>
__device__ __forceinline__ void mma16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                      uint32_t b1) {
  static_assert(std::is_same_v<W, __nv_bfloat16> || std::is_same_v<W, __half>, "mma16: bf16 or f16 inputs");
  if constexpr (std::is_same_v<W, __nv_bfloat16>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// Element i of a float buffer whose dtype is only known at run time (bias, norm weight
// reads that happen once per row, where a switch costs nothing).
__device__ __forceinline__ float load_any(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kF16: return __half2float(static_cast<const __half*>(p)[i]);
    case DType::kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default: return 0.f;
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block; every thread gets the result. `scratch` holds >= 32 floats and
// may be reused after the call returns.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, num_warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read from a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.f;
  for (int w = 0; w < num_warps; ++w) total += scratch[w];
  return total;
}

// ---- programmatic dependent launch (sm_90+) ---------------------------------------------
// A kernel launched with launch(..., pdl = true, ...) may be scheduled while the kernel
// before it in the stream is still finishing. So every block of such a kernel calls
// pdl_wait() before it reads or writes anything an earlier kernel touches (weights, which
// nothing writes, may be read before), and calls it even when it has nothing to do: the
// kernel's completion then implies its predecessor's, which keeps the chain transitive.
// The step's inputs (token ids, positions, block tables, lengths: copied in before the
// step's first kernel, which is not launched early) and the KV cache rows of earlier steps
// are not written by any kernel of the step either; decode attention of small batches
// reads those before (attention.cu, PREWAIT).
// What an earlier kernel of the step wrote is read with coherent loads (load16_fresh and
// its kin below, or plain loads through pointers that are not const __restrict__), never
// with ld.global.nc (__ldg, load16, or what the compiler makes of a const __restrict__
// pointer): ptxas takes .nc data to be unchanging for the whole kernel and may schedule
// such a load before griddepcontrol.wait. It did so in gemv_shrink_kernel<float, float>
// (x's LDG.E.128.CONSTANT ahead of ACQBULK in its SASS, the only variant that way), and
// every adapter request on float32 weights decoded wrong at batch 1.
// pdl_trigger() lets the next kernel be scheduled early. Both are no-ops below sm_90.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The usual opening of a kernel launched with pdl: wait for the predecessor, then let the
// successor be scheduled.
__device__ __forceinline__ void pdl_enter() {
  pdl_wait();
  pdl_trigger();
}

// kernel<<<grid, block, smem, stream>>>(args...) in clusters of cluster_x blocks along x
// (1: none; sm_90+ only), with programmatic stream serialisation when pdl (the kernel must
// then follow the pdl_wait() contract above).
template <typename... Params, typename... Args>
void launch_kernel_clusters(void (*kernel)(Params...), dim3 grid, dim3 block, unsigned cluster_x, size_t smem,
                            cudaStream_t stream, bool pdl, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[2];
  unsigned count = 0;
  if (pdl) {
    attribute[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[count++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster_x > 1) {
    attribute[count].id = cudaLaunchAttributeClusterDimension;
    attribute[count].val.clusterDim.x = cluster_x;
    attribute[count].val.clusterDim.y = 1;
    attribute[count++].val.clusterDim.z = 1;
  }
  config.attrs = count > 0 ? attribute : nullptr;
  config.numAttrs = count;
  cuda_check(cudaLaunchKernelEx(&config, kernel, static_cast<Params>(std::forward<Args>(args))...));
}

// The same without clusters.
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool pdl,
                   Args&&... args) {
  launch_kernel_clusters(kernel, grid, block, 1, smem, stream, pdl, std::forward<Args>(args)...);
}

// ---- dtype dispatch (host) ---------------------------------------------------------------
template <typename T>
struct TypeTag {
  using type = T;
};

// Calls fn(TypeTag<T>{}) with T = float, __half or __nv_bfloat16 for a floating DType.
template <typename Fn>
void dispatch_float(DType t, Fn&& fn, const char* what,
                    const std::source_location where = std::source_location::current()) {
  switch (t) {
    case DType::kF32: fn(TypeTag<float>{}); return;
    case DType::kF16: fn(TypeTag<__half>{}); return;
    case DType::kBF16: fn(TypeTag<__nv_bfloat16>{}); return;
    default: check(false, what, where);
  }
}

// dispatch_float's types and fp8 e4m3: the KV cache's element types and the projection
// weights' (fp8 weights carry a Tensor::row_scale).
template <typename Fn>
void dispatch_kv(DType t, Fn&& fn, const char* what, const std::source_location where = std::source_location::current()) {
  if (t == DType::kF8E4M3) {
    fn(TypeTag<__nv_fp8_e4m3>{});
    return;
  }
  dispatch_float(t, std::forward<Fn>(fn), what, where);
}

// ---- shared between the op files ---------------------------------------------------------
// v[g] of a projection group's per-member array (MatmulGroup: at most 3 members), picked
// with selects rather than an index, so kernel-parameter arrays stay out of local memory.
template <typename T>
__device__ __forceinline__ T group_pick(int g, const T (&v)[3]) {
  return g == 0 ? v[0] : g == 1 ? v[1] : v[2];
}

// Largest token count the GEMV kernel handles in one pass over the weights (gemv.cu).
inline constexpr int kGemvMaxTokens = 16;

// Raises the dynamic shared-memory limit of the attention kernels that need more than
// 48 KB (attention_prefill.cu). Called once per backend, outside any graph capture.
void configure_attention_kernels();

}  // namespace quiver::cuda
