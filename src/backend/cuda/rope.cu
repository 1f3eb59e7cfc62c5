// CUDA rope_kv_write: rotate-half RoPE (HF convention) in place on q and k, and the KV
// write into the paged cache, in one kernel: one thread per (token, head, pair) with pairs
// (j, j + head_dim/2); grid (tokens, pair chunks of 128), so a decode step of one token
// still spreads over many multiprocessors. A k pair's thread also stores its two rotated
// values into the cache (converted to the cache dtype, round to nearest even, as the
// reference), and one more thread per v pair copies v there. The LoRA expand the q/k/v
// plan leaves here (ExpandKernel::kNextOp) is added to each pair before it is rotated or
// stored (lora_delta.cuh). Without that term, head sizes by 8 take four pairs a thread in
// 16-byte accesses (rope_kv_write4_kernel).
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/lora_delta.cuh"

namespace quiver {
namespace {

// q: [n, num_heads, hd]; k, v: [n, num_kv, hd]; positions: [n]; cos_sin: [max_pos, hd] with
// row p = cos(p*f_0..f_{h-1}), sin(p*f_0..f_{h-1}), h = hd/2. A position outside the table
// cannot be reported from the device: its rows become NaN. Per token, units [0, H*half) are
// q pairs, [H*half, (H+KV)*half) k pairs, rotated in place and stored at their slot, and
// units up to (H+2KV)*half store v's pairs. Caches [slots, KV * hd]; slot -1 (padding) or
// past the cache (which the device cannot report; the reference check()s it): no store.
// fp8 caches store value / scale (the reference divides too, so the bytes agree).
// DELTA: a pending LoRA term is given (its B rows, 20 registers a thread, are loaded before
// the wait); without one the kernel keeps its 26 registers, which a
// 256-token step's 12,288 blocks need (at 56, 9 blocks fit an SM instead of 16, and
// 256-token decode steps over 64 adapters take 0.45 ms longer).
template <typename T>
__device__ __forceinline__ T to_cache(float x, float scale) {
  if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) return cuda::from_f32<T>(x / scale);
  else return cuda::from_f32<T>(x);
}

// The token's slot, and for q and k (g != 2) its row of the table: null where its position
// is outside it. Read before the kernels' wait: the step's inputs (cuda_common.h).
__device__ __forceinline__ const float* token_inputs(const int32_t* slot_mapping, const int32_t* positions,
                                                     const float* cos_sin, int64_t i, int g, int hd, int max_pos,
                                                     int64_t* slot) {
  *slot = slot_mapping[i];
  if (g == 2) return nullptr;
  const int pos = positions[i];
  return pos >= 0 && pos < max_pos ? cos_sin + static_cast<int64_t>(pos) * hd : nullptr;
}

// The pair (a, b) rotated by (c, s), one expression for both kernels, so that they round alike.
__device__ __forceinline__ void rotate(float a, float b, float c, float s, float* lo, float* hi) {
  *lo = a * c - b * s;
  *hi = b * c + a * s;
}

// Four consecutive values into the cache as one store (8, 16, 4 or 16 bytes by T).
template <typename T>
__device__ __forceinline__ void store4(T* dst, float4 v, float scale) {
  if constexpr (std::is_same_v<T, float>) {
    *reinterpret_cast<float4*>(dst) = v;
  } else {
    union {
      T e[4];
      uint8_t bytes[4 * sizeof(T)];
    } u;
    u.e[0] = to_cache<T>(v.x, scale);
    u.e[1] = to_cache<T>(v.y, scale);
    u.e[2] = to_cache<T>(v.z, scale);
    u.e[3] = to_cache<T>(v.w, scale);
    if constexpr (sizeof(T) == 2) *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(u.bytes);
    else *reinterpret_cast<uint32_t*>(dst) = *reinterpret_cast<const uint32_t*>(u.bytes);
  }
}

template <typename T, bool DELTA>
__global__ void rope_kv_write_kernel(float* __restrict__ q, float* __restrict__ k, float* __restrict__ v,
                                     const int32_t* __restrict__ positions, const float* __restrict__ cos_sin,
                                     T* __restrict__ k_cache, T* __restrict__ v_cache,
                                     const int32_t* __restrict__ slot_mapping, int num_heads, int num_kv, int hd,
                                     int max_pos, int64_t num_slots, float k_scale, float v_scale,
                                     cuda::LoraDeltaArgs delta) {
  const int64_t i = blockIdx.x;
  const int half = hd / 2;
  const int p = blockIdx.y * blockDim.x + threadIdx.x;
  const bool live = p < (num_heads + 2 * num_kv) * half;
  // A head's member: 0 q, 1 k, 2 v.
  auto member_of = [&](int head) { return head < num_heads ? 0 : head < num_heads + num_kv ? 1 : 2; };
  const int head = p / half, j = p - head * half;
  const int g = member_of(head);
  // Before the wait: the B rows, and what the step's inputs give (cuda_common.h: no kernel
  // of the step writes them): the slot, the position and its cos / sin.
  cuda::LoraDeltaRow dlo, dhi;  // brow null: no term
  int64_t slot = -1;
  bool valid = false;
  float c = 0.f, s = 0.f;
  if (live) {
    if constexpr (DELTA) {
      const int row = (g == 0 ? head : g == 1 ? head - num_heads : head - num_heads - num_kv) * hd + j;
      dlo.load(delta, g, static_cast<int>(i), row);
      dhi.load(delta, g, static_cast<int>(i), row + half);
    }
    const float* cs = token_inputs(slot_mapping, positions, cos_sin, i, g, hd, max_pos, &slot);
    valid = cs != nullptr;
    if (valid) {
      c = cs[j];
      s = cs[half + j];
    }
  }
  cuda::pdl_enter();  // launched with pdl (cuda_common.h)
  if (!live) return;
  const bool store = slot >= 0 && slot < num_slots;
  const int64_t row = static_cast<int64_t>(num_kv) * hd;
  cuda::LoraDeltaT t;  // one load for both rows' terms
  if (dlo.brow != nullptr) t.load(delta, g, static_cast<int>(i));
  if (g == 2) {  // a v pair: stored as it is
    const int kvh = head - num_heads - num_kv;
    float* src = v + i * row + kvh * hd;
    const float a = dlo.apply(delta, t, src[j]);
    const float b = dhi.apply(delta, t, src[j + half]);
    if (dlo.brow != nullptr) {  // v holds its term too, as after the default ops
      src[j] = a;
      src[j + half] = b;
    }
    if (!store) return;
    v_cache[slot * row + kvh * hd + j] = to_cache<T>(a, v_scale);
    v_cache[slot * row + kvh * hd + j + half] = to_cache<T>(b, v_scale);
    return;
  }
  float* x = g == 0 ? q + (i * num_heads + head) * hd : k + (i * num_kv + head - num_heads) * hd;
  float lo = NAN, hi = NAN;  // a position outside the table: NaN rows
  if (valid) rotate(dlo.apply(delta, t, x[j]), dhi.apply(delta, t, x[j + half]), c, s, &lo, &hi);
  x[j] = lo;
  x[j + half] = hi;
  if (g == 1 && store) {
    const int64_t at = slot * row + static_cast<int64_t>(head - num_heads) * hd;
    k_cache[at + j] = to_cache<T>(lo, k_scale);
    k_cache[at + j + half] = to_cache<T>(hi, k_scale);
  }
}

// rope_kv_write_kernel without a LoRA term, four pairs a thread: (j .. j + 3, j + half .. +
// 3) as two 16-byte loads and stores, the cache's as one store each, where half % 4 == 0
// and the operands are 16-byte aligned. A thread per pair left a 256-token decode step
// (Llama-2-7B) with 12,288 blocks of one load round each: 18.8 us a layer for its 8.4 MB
// (H100, ncu), a tenth of the copy rate; here a quarter of the blocks and four times the
// bytes in flight a thread: 5.4 against 16.2 us at 256 tokens, 563 against 948 at 16,384
// (bench_cuda_ops, H100). Same arithmetic per element (rotate, to_cache).
template <typename T>
__global__ void rope_kv_write4_kernel(float* __restrict__ q, float* __restrict__ k, float* __restrict__ v,
                                      const int32_t* __restrict__ positions, const float* __restrict__ cos_sin,
                                      T* __restrict__ k_cache, T* __restrict__ v_cache,
                                      const int32_t* __restrict__ slot_mapping, int num_heads, int num_kv, int hd,
                                      int max_pos, int64_t num_slots, float k_scale, float v_scale) {
  const int64_t i = blockIdx.x;
  const int half = hd / 2, quads = half / 4;
  const int p = blockIdx.y * blockDim.x + threadIdx.x;
  const bool live = p < (num_heads + 2 * num_kv) * quads;
  const int head = p / quads, j = (p - head * quads) * 4;
  const int g = head < num_heads ? 0 : head < num_heads + num_kv ? 1 : 2;  // q, k, v
  int64_t slot = -1;
  bool valid = false;
  float4 c = {}, s = {};
  if (live) {
    const float* cs = token_inputs(slot_mapping, positions, cos_sin, i, g, hd, max_pos, &slot);
    valid = cs != nullptr;
    if (valid) {
      c = *reinterpret_cast<const float4*>(cs + j);
      s = *reinterpret_cast<const float4*>(cs + half + j);
    }
  }
  cuda::pdl_enter();  // launched with pdl (cuda_common.h)
  if (!live) return;
  const bool store = slot >= 0 && slot < num_slots;
  const int64_t row = static_cast<int64_t>(num_kv) * hd;
  if (g == 2) {  // a v quad: stored as it is
    const int kvh = head - num_heads - num_kv;
    const float* src = v + i * row + kvh * hd;
    if (!store) return;
    store4(v_cache + slot * row + kvh * hd + j, *reinterpret_cast<const float4*>(src + j), v_scale);
    store4(v_cache + slot * row + kvh * hd + j + half, *reinterpret_cast<const float4*>(src + j + half), v_scale);
    return;
  }
  float* x = g == 0 ? q + (i * num_heads + head) * hd : k + (i * num_kv + head - num_heads) * hd;
  float4 lo = make_float4(NAN, NAN, NAN, NAN), hi = lo;  // a position outside the table: NaN rows
  if (valid) {
    const float4 a = *reinterpret_cast<const float4*>(x + j), b = *reinterpret_cast<const float4*>(x + j + half);
    rotate(a.x, b.x, c.x, s.x, &lo.x, &hi.x);
    rotate(a.y, b.y, c.y, s.y, &lo.y, &hi.y);
    rotate(a.z, b.z, c.z, s.z, &lo.z, &hi.z);
    rotate(a.w, b.w, c.w, s.w, &lo.w, &hi.w);
  }
  *reinterpret_cast<float4*>(x + j) = lo;
  *reinterpret_cast<float4*>(x + j + half) = hi;
  if (g == 1 && store) {
    const int64_t at = slot * row + static_cast<int64_t>(head - num_heads) * hd;
    store4(k_cache + at + j, lo, k_scale);
    store4(k_cache + at + j + half, hi, k_scale);
  }
}

// rope_kv_write's operand checks of q, k and the table.
void check_rope(Tensor q, Tensor k, Tensor positions, Tensor cos_sin) {
  cuda::check_f32(q, "rope: q must be f32 on the GPU");
  cuda::check_f32(k, "rope: k must be f32 on the GPU");
  cuda::check_f32(cos_sin, "rope: cos_sin must be f32 on the GPU");
  check(q.ndim == 3 && k.ndim == 3 && positions.dtype == DType::kI32, "rope: bad operand types");
  const int64_t n = q.dim(0), hd = q.dim(2);
  check(k.dim(0) == n && k.dim(2) == hd && positions.numel() == n && hd % 2 == 0 && cos_sin.dim(1) == hd,
        "rope: shape mismatch");
}

// One thread per q, k and v pair, or four without a LoRA term where the operands allow.
template <typename T>
void launch_rope(cudaStream_t stream, bool pdl, Tensor q, Tensor k, float* v, Tensor positions, Tensor cos_sin,
                 T* k_cache, T* v_cache, const int32_t* slot_mapping, int64_t num_slots, float k_scale,
                 float v_scale, const cuda::LoraDeltaArgs& delta) {
  const int64_t n = q.dim(0), hd = q.dim(2), num_kv = k.dim(1);
  if (n == 0) return;
  constexpr int kThreads = 128;
  const bool quads = delta.count == 0 && hd % 8 == 0 && cuda::aligned16(q.data) && cuda::aligned16(k.data) &&
                     cuda::aligned16(v) && cuda::aligned16(cos_sin.data) && cuda::aligned16(k_cache) &&
                     cuda::aligned16(v_cache);
  const int64_t pairs_per_thread = quads ? 4 : 1;
  const int64_t units = (q.dim(1) + 2 * num_kv) * (hd / (2 * pairs_per_thread));
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(cuda::ceil_div(units, kThreads)));
  if (quads) {
    cuda::launch_kernel(rope_kv_write4_kernel<T>, grid, kThreads, 0, stream, pdl, q.ptr<float>(), k.ptr<float>(), v,
                        positions.ptr<int32_t>(), cos_sin.ptr<float>(), k_cache, v_cache, slot_mapping,
                        static_cast<int>(q.dim(1)), static_cast<int>(num_kv), static_cast<int>(hd),
                        static_cast<int>(cos_sin.dim(0)), num_slots, k_scale, v_scale);
    return;
  }
  cuda::launch_kernel(delta.count > 0 ? rope_kv_write_kernel<T, true> : rope_kv_write_kernel<T, false>, grid, kThreads,
                      0, stream, pdl, q.ptr<float>(), k.ptr<float>(), v,
                      positions.ptr<int32_t>(), cos_sin.ptr<float>(), k_cache, v_cache, slot_mapping,
                      static_cast<int>(q.dim(1)), static_cast<int>(num_kv), static_cast<int>(hd),
                      static_cast<int>(cos_sin.dim(0)), num_slots, k_scale, v_scale, delta);
}

// The cache operands of rope_kv_write.
void check_kv_write(Tensor k_cache, Tensor v_cache, Tensor k, Tensor v, Tensor slot_mapping) {
  cuda::check_f32(k, "kv_write: k must be f32 on the GPU");
  cuda::check_f32(v, "kv_write: v must be f32 on the GPU");
  check(k_cache.ndim == 4 && v_cache.ndim == 4 && k_cache.dtype == v_cache.dtype, "kv_write: bad caches");
  check(slot_mapping.dtype == DType::kI32, "kv_write: slot_mapping must be i32");
  const int64_t n = k.dim(0), row = k_cache.dim(2) * k_cache.dim(3);
  check(k.numel() == n * row && v.numel() == n * row && slot_mapping.numel() == n, "kv_write: shape mismatch");
  check(v_cache.numel() == k_cache.numel(), "kv_write: k and v caches differ in shape");
}

}  // namespace

void CudaBackend::rope_kv_write(Tensor q, Tensor k, Tensor v, Tensor positions, Tensor cos_sin, const KvLayer& cache,
                                Tensor slot_mapping, const GroupPlan& plan, const GroupLora& lora) {
  const Tensor k_cache = cache.k, v_cache = cache.v;
  check_rope(q, k, positions, cos_sin);
  check_kv_write(k_cache, v_cache, k, v, slot_mapping);
  check(k_cache.dim(2) == k.dim(1) && k_cache.dim(3) == k.dim(2), "kv_write: shape mismatch");  // heads as k's
  const cuda::LoraDeltaArgs d = cuda::lora_delta_args(plan, lora, {q, k, v}, q.dim(0), "rope_kv_write");
  cuda::dispatch_kv(k_cache.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_rope<T>(stream_, pdl_, q, k, v.ptr<float>(), positions, cos_sin, static_cast<T*>(k_cache.data),
                   static_cast<T*>(v_cache.data), slot_mapping.ptr<int32_t>(), k_cache.dim(0) * k_cache.dim(1),
                   cache.k_scale, cache.v_scale, d);
  }, "kv_write: cache must be F32, F16, BF16 or F8_E4M3");
}

}  // namespace quiver
