// Prefill attention on tensor cores, for 16-bit and fp8 caches with head_dim a multiple of
// 16 up to 128: the variable-length causal attention of attention_prefill.cu, with q K^T
// and P V on mma.sync m16n8k16 (FlashAttention-2's work split). A layer of Llama-2-7B's
// 2,048-token prefill (bench_cuda_attention, H100): 16 prompts of 128 in 73 us against the
// CUDA-core kernel's 167, one prompt of 2,048 in 472 us against 1,771 (73 TFLOP/s).
//
// Numerics: the products take 16-bit inputs, accumulate in f32, and the softmax runs in
// f32. K and V are the cache's values exactly (an e4m3 value widens exactly to bf16); q,
// scaled, and P are rounded to the cache's 16-bit type (bf16 for fp8 caches, for q's range),
// at most 2^-8 relative in bf16 and 2^-11 in f16: what HF's 16-bit attention rounds too. The row
// sums are taken over the rounded P, so the weights the output averages with add up to 1.
// f32 caches, and --matmul-precision highest, keep the CUDA-core kernel.
//
// A block owns (sequence, query head, 64 consecutive queries): 4 warps of 16 query rows,
// q's fragments in registers for the whole walk. Tiles of 64 keys are gathered through the
// block table into shared memory, K as rows and V transposed ([dim][key]), so both mma
// operands are read as 32-bit pairs; rows padded by 16 bytes, which puts the 8 rows a
// fragment read touches 4 banks apart (conflict-free). Tile edges sit at multiples of 64
// in the sequence, whatever the chunking, and each output row depends on its own query
// only, so a query's result does not depend on the batch around it.
#include <type_traits>

#include "backend/cuda/attention.h"

namespace quiver::cuda {
namespace {

constexpr int kRows = 16;                // query rows per warp: one mma row tile
constexpr int kWarps = 4;
constexpr int kBq = kRows * kWarps;      // queries per block
constexpr int kBk = 64;                  // keys per tile
constexpr int kThreads = 32 * kWarps;
constexpr float kNoMax = -1e30f;         // running-max start: finite, so exp2(kNoMax - kNoMax) = 1
constexpr float kLog2e = 1.4426950408889634f;  // q is scaled by it: the softmax runs in base 2

// The mma inputs' type: the cache's for 16-bit caches; bf16 for e4m3, whose every value it
// holds exactly, and whose range holds any scaled q.
template <typename T>
struct MmaInput {
  using type = T;
};
template <>
struct MmaInput<__nv_fp8_e4m3> {
  using type = __nv_bfloat16;
};

template <typename M>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<M, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

template <typename M>
__device__ __forceinline__ float2 unpack2(uint32_t bits) {
  if constexpr (std::is_same_v<M, __nv_bfloat16>) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits));
  } else {
    return __half22float2(*reinterpret_cast<const __half2*>(&bits));
  }
}

// The E elements of one 16-byte cache vector as M's bits: copied for 16-bit caches, widened
// for e4m3.
template <typename T, typename M>
__device__ __forceinline__ void vector_bits(const uint4& raw, uint16_t (&bits)[Vec16<T>::E]) {
  if constexpr (std::is_same_v<T, M>) {
    static_assert(Vec16<T>::E == 8);
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      bits[2 * i] = static_cast<uint16_t>(w[i] & 0xffffu);
      bits[2 * i + 1] = static_cast<uint16_t>(w[i] >> 16);
    }
  } else {
    float f[Vec16<T>::E];
    Vec16<T>::unpack(raw, f);
#pragma unroll
    for (int e = 0; e < Vec16<T>::E; e += 2) {
      const uint32_t two = pack2<M>(f[e], f[e + 1]);
      bits[e] = static_cast<uint16_t>(two & 0xffffu);
      bits[e + 1] = static_cast<uint16_t>(two >> 16);
    }
  }
}

template <typename T, int HD>
// 3 blocks an SM (168 registers at most): the other blocks' mma hide one block's gather.
__global__ void __launch_bounds__(kThreads, 3) prefill_mma_kernel(AttentionParams p) {
  using M = typename MmaInput<T>::type;
  constexpr int E = Vec16<T>::E, NV = HD / E;
  constexpr int KS = HD + 8;   // K tile row stride, elements
  constexpr int VS = kBk + 8;  // V^T tile row stride, elements
  constexpr int KT = HD / 16;  // k-steps of q K^T
  constexpr int NT = kBk / 8;  // key tiles of the scores
  constexpr int DT = HD / 8;   // head-dim tiles of the output
  static_assert(prefill_mma_takes<T, HD>, "tensor-core prefill: a cache and head size it does not take");
  __shared__ __align__(16) uint16_t k_s[kBk * KS];  // [key][dim]
  __shared__ __align__(16) uint16_t v_s[HD * VS];   // [dim][key]

  const PrefillBlock block = PrefillBlock::at<kBq>(p);
  if (block.idle(p)) return;
  const auto [s, h, kvh, q_begin, q_len, q0, ctx, last_key] = block;
  const T* k_cache = static_cast<const T*>(p.k_cache);
  const T* v_cache = static_cast<const T*>(p.v_cache);

  // Fragment coordinates (PTX's m16n8k16 layouts): lane = 4 g + c; this thread's rows are
  // g and g + 8 of its warp's 16.
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int wq = q0 + warp * kRows;  // the warp's first query
  const int row[2] = {wq + g, wq + g + 8};
  const int warp_last = ctx + min(wq + kRows, q_len) - 1;  // the last key any of its rows sees
  const bool warp_idle = wq >= q_len;

  uint32_t qf[KT][4];  // A fragments of q, scaled
  {
    const float qscale = p.scale * kLog2e;
    const float* qr[2];
#pragma unroll
    for (int r = 0; r < 2; ++r)
      qr[r] = row[r] < q_len ? p.q + (static_cast<int64_t>(q_begin + row[r]) * p.num_heads + h) * HD : nullptr;
#pragma unroll
    for (int kk = 0; kk < KT; ++kk)
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float2 v = qr[r] ? *reinterpret_cast<const float2*>(qr[r] + kk * 16 + half * 8 + 2 * c)
                                 : make_float2(0.f, 0.f);
          qf[kk][2 * half + r] = pack2<M>(v.x * qscale, v.y * qscale);
        }
  }

  float o[DT][4];
#pragma unroll
  for (int d = 0; d < DT; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
  float m[2] = {kNoMax, kNoMax}, l[2] = {0.f, 0.f};  // l: this thread's columns only until the end

  for (int k0 = 0; k0 <= last_key; k0 += kBk) {
    __syncthreads();  // the previous tile is consumed
    // Consecutive threads take consecutive keys: a warp's V^T stores fill one row. A fixed
    // trip count, unrolled, so a thread's loads can all be in flight at once.
#pragma unroll
    for (int i0 = 0; i0 < kBk * NV; i0 += kThreads) {
      const int i = i0 + static_cast<int>(threadIdx.x);
      if ((kBk * NV) % kThreads != 0 && i >= kBk * NV) break;
      const int j = i % kBk, vi = i / kBk, t = k0 + j;
      uint16_t kb[E], vb[E];
      if (t <= last_key) {
        vector_bits<T, M>(load16(kv_row(k_cache, p, s, t, kvh, HD) + vi * E), kb);
        vector_bits<T, M>(load16(kv_row(v_cache, p, s, t, kvh, HD) + vi * E), vb);
      } else {  // past the block's last key: zeros, so masked products stay 0, never NaN
#pragma unroll
        for (int e = 0; e < E; ++e) kb[e] = vb[e] = 0;
      }
#pragma unroll
      for (int e = 0; e < E; e += 8) {
        uint4 w;
        w.x = kb[e] | (static_cast<uint32_t>(kb[e + 1]) << 16);
        w.y = kb[e + 2] | (static_cast<uint32_t>(kb[e + 3]) << 16);
        w.z = kb[e + 4] | (static_cast<uint32_t>(kb[e + 5]) << 16);
        w.w = kb[e + 6] | (static_cast<uint32_t>(kb[e + 7]) << 16);
        *reinterpret_cast<uint4*>(k_s + j * KS + vi * E + e) = w;
      }
#pragma unroll
      for (int e = 0; e < E; ++e) v_s[(vi * E + e) * VS + j] = vb[e];
    }
    __syncthreads();
    if (warp_idle || k0 > warp_last) continue;  // no row of the warp sees a key of this tile

    float sc[NT][4];  // scores: [key tile][row g: keys 2c, 2c+1; row g + 8: the same]
#pragma unroll
    for (int n = 0; n < NT; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < KT; ++kk)
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        const uint16_t* kr = k_s + (n * 8 + g) * KS + kk * 16 + 2 * c;
        mma16<M>(sc[n], qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3], *reinterpret_cast<const uint32_t*>(kr),
                 *reinterpret_cast<const uint32_t*>(kr + 8));
      }
    // Mask where some key of the tile is past some row's position, or rows past q_len.
    if (k0 + kBk - 1 > ctx + wq || wq + kRows > q_len) {
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = row[e >> 1], t = k0 + n * 8 + 2 * c + (e & 1);
          if (r >= q_len || t > ctx + r) sc[n][e] = -INFINITY;
        }
    }

    // Online softmax: the row maxima over the 4 threads of a row, P rounded to M.
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      mx[0] = fmaxf(mx[0], fmaxf(sc[n][0], sc[n][1]));
      mx[1] = fmaxf(mx[1], fmaxf(sc[n][2], sc[n][3]));
    }
    float alpha[2], rs[2] = {0.f, 0.f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      alpha[r] = exp2f(m[r] - mx[r]);
      m[r] = mx[r];
    }
    uint32_t pf[NT][2];  // P as M pairs: [key tile][row g, row g + 8]
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        pf[n][r] = pack2<M>(exp2f(sc[n][2 * r] - m[r]), exp2f(sc[n][2 * r + 1] - m[r]));
        const float2 pr = unpack2<M>(pf[n][r]);
        rs[r] += pr.x + pr.y;
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) l[r] = l[r] * alpha[r] + rs[r];
#pragma unroll
    for (int d = 0; d < DT; ++d) {
      o[d][0] *= alpha[0];
      o[d][1] *= alpha[0];
      o[d][2] *= alpha[1];
      o[d][3] *= alpha[1];
    }
    // P V: the score tiles 2 kc and 2 kc + 1 are the A fragment of keys [16 kc, 16 kc + 16).
#pragma unroll
    for (int kc = 0; kc < kBk / 16; ++kc)
#pragma unroll
      for (int d = 0; d < DT; ++d) {
        const uint16_t* vr = v_s + (d * 8 + g) * VS + kc * 16 + 2 * c;
        mma16<M>(o[d], pf[2 * kc][0], pf[2 * kc][1], pf[2 * kc + 1][0], pf[2 * kc + 1][1],
                 *reinterpret_cast<const uint32_t*>(vr), *reinterpret_cast<const uint32_t*>(vr + 8));
      }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row[r] >= q_len) continue;
    float* dst = p.out + (static_cast<int64_t>(q_begin + row[r]) * p.num_heads + h) * HD + 2 * c;
    const float inv = p.v_scale / l[r];  // v_scale: 1 but for fp8 caches
#pragma unroll
    for (int d = 0; d < DT; ++d)
      *reinterpret_cast<float2*>(dst + d * 8) = make_float2(o[d][2 * r] * inv, o[d][2 * r + 1] * inv);
  }
}

}  // namespace

bool attention_prefill_mma(const AttentionParams& p, DType kv_type, int head_dim, int max_query_len,
                           cudaStream_t stream) {
  if (!has_attention_head_dim(head_dim)) return false;
  const dim3 grid(static_cast<unsigned>(ceil_div(max_query_len, kBq)), static_cast<unsigned>(p.num_heads),
                  static_cast<unsigned>(p.num_seqs));
  bool launched = false;
  dispatch_kv(kv_type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_head_dim(head_dim, [&](auto hd_c) {
      constexpr int HD = decltype(hd_c)::value;
      if constexpr (prefill_mma_takes<T, HD>) {
        prefill_mma_kernel<T, HD><<<grid, kThreads, 0, stream>>>(p);
        launch_check();
        launched = true;
      }
    });
  }, "attention: cache must be F32, F16, BF16 or F8_E4M3");
  return launched;
}

}  // namespace quiver::cuda
