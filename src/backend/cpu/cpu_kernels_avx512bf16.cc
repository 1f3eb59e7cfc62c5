// The bf16 dot-product matmul (AVX512-BF16 vdpbf16ps): y[t, r] = x16[t, :] . w[r, :] for
// bf16 weights and activations rounded to bf16 (MatmulArgs::x16). One instruction takes 32
// element pairs of a weight row and a token's activations, multiplies them exactly in f32
// and adds each pair's sum to one of 16 f32 lanes: twice the multiply-adds of an f32 FMA
// on bf16 weights widened first, and no widening. Compiled with -mavx512bf16 by CMake and
// called only when the CPU has it (CpuBackend). Same tiling as matmul_kernels.h.
//
// int8 weights take the same path: 32 weights widened exactly to bf16 (int8 -> int32 -> f32
// -> bf16, every step exact for |q| <= 127) feed the same vdpbf16ps. Weights with row scales
// (MatmulArgs::w_scale: int8, FP8 values held in bf16) have each finished sum multiplied by
// its row's scale.
//
// GCC 12's AVX-512 intrinsics trip -Wuninitialized (see cpu_kernels_avx512.cc).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/tiling.h"

namespace quiver::cpu {
namespace {

constexpr int kPairs = 32;  // bf16 elements per vdpbf16ps operand
// Micro-tile: kR weight rows x kT tokens of accumulators (24 of 32 zmm), kR weight
// vectors and one activation vector live besides.
constexpr int kR = 4, kT = 6;
constexpr int kGemvR = 8;  // rows of a one-token step (enough sequential streams in flight)

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

inline __m512bh load_bf16(const uint16_t* p) { return reinterpret_cast<__m512bh>(_mm512_loadu_si512(p)); }
inline __m512bh load_bf16_n(const uint16_t* p, int n) {
  const __mmask32 m = n >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << n) - 1u);
  return reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(m, p));
}

inline __m512 widen_i8(__m128i q) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)); }
// 32 int8 weights as bf16, in order (vcvtne2ps2bf16 puts its second operand in lanes 0-15).
inline __m512bh load_bf16(const int8_t* p) {
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16));
  return _mm512_cvtne2ps_pbh(widen_i8(hi), widen_i8(lo));
}
inline __m512bh load_bf16_n(const int8_t* p, int n) {
  const auto mask = [](int m) { return m >= 16 ? __mmask16{0xffff} : static_cast<__mmask16>((1u << (m < 0 ? 0 : m)) - 1u); };
  const __m128i lo = _mm_maskz_loadu_epi8(mask(n), p);
  const __m128i hi = _mm_maskz_loadu_epi8(mask(n - 16), p + 16);
  return _mm512_cvtne2ps_pbh(widen_i8(hi), widen_i8(lo));
}

// R rows x T tokens from (r0, t0). kPrefetchNext: prefetch the next R rows into L2 while
// streaming these (the hardware prefetchers stop at each 4 KiB page).
// W: uint16_t (bf16 weights) or int8_t (int8 weights with row scales).
template <class W, int R, int T, bool kPrefetchNext>
inline void dot_tile(const MatmulArgs& a, int64_t r0, int64_t t0) {
  const int64_t k = a.k;
  const W* w[R];
  const uint16_t* x[T];
  for (int r = 0; r < R; ++r) w[r] = static_cast<const W*>(a.w) + (r0 + r) * a.ldw;
  for (int t = 0; t < T; ++t) x[t] = a.x16 + (t0 + t) * a.ldx;
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + kPairs <= k; i += kPairs) {
    __m512bh wv[R];
    for (int r = 0; r < R; ++r) {
      if constexpr (kPrefetchNext) _mm_prefetch(reinterpret_cast<const char*>(w[r] + R * a.ldw + i), _MM_HINT_T1);
      wv[r] = load_bf16(w[r] + i);
    }
    for (int t = 0; t < T; ++t) {
      const __m512bh xv = load_bf16(x[t] + i);
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv[r], xv);
    }
  }
  if (i < k) {  // masked tail: zero pairs add nothing
    const int n = static_cast<int>(k - i);
    __m512bh wv[R];
    for (int r = 0; r < R; ++r) wv[r] = load_bf16_n(w[r] + i, n);
    for (int t = 0; t < T; ++t) {
      const __m512bh xv = load_bf16_n(x[t] + i, n);
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv[r], xv);
    }
  }
  for (int t = 0; t < T; ++t) {
    float* yr = a.y + (t0 + t) * a.ldy + r0;
    for (int r = 0; r < R; ++r) {
      float v = _mm512_reduce_add_ps(acc[r][t]);
      // One rounding for scale and bias in every tile shape: left to the compiler, v * s + b
      // is fused in some instantiations and not in others (a token alone then differs from
      // the same token batched).
      if (a.w_scale) {
        v = a.bias ? std::fma(v, a.w_scale[r0 + r], a.bias[r0 + r]) : v * a.w_scale[r0 + r];
      } else if (a.bias) {
        v += a.bias[r0 + r];
      }
      yr[r] = a.accumulate ? yr[r] + v : v;
    }
  }
}

template <class W>
void matmul_dot(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  if (t1 - t0 == 1) {  // GEMV: bandwidth-bound; 8 rows streamed at once, as the f32 GEMV
    int64_t r = r0;
    for (; r + kGemvR <= r1; r += kGemvR) dot_tile<W, kGemvR, 1, true>(a, r, t0);
    for (; r < r1; ++r) dot_tile<W, 1, 1, false>(a, r, t0);
    return;
  }
  l2_token_blocks<kT>(t0, t1, a.k * 2, [&](int64_t tb, int64_t te) {
    int64_t r = r0;
    for (; r + kR <= r1; r += kR) {
      // The first token tile streams the rows from memory; later tiles find them in cache.
      exact_tile<kT>(min64(kT, te - tb), [&]<int T>() { dot_tile<W, kR, T, true>(a, r, tb); });
      for (int64_t t = tb + kT; t < te; t += kT)
        exact_tile<kT>(min64(kT, te - t), [&]<int T>() { dot_tile<W, kR, T, false>(a, r, t); });
    }
    for (; r < r1; ++r)
      for (int64_t t = tb; t < te; t += kT)
        exact_tile<kT>(min64(kT, te - t), [&]<int T>() { dot_tile<W, 1, T, false>(a, r, t); });
  });
}

}  // namespace

MatmulFn avx512bf16_matmul_bf16_dot() { return &matmul_dot<uint16_t>; }
MatmulFn avx512bf16_matmul_i8_dot() { return &matmul_dot<int8_t>; }

}  // namespace quiver::cpu
