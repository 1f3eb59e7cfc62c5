// The vector vocabulary kernels_impl.h is written in, for AVX-512 (F/BW/VL/DQ + F16C):
// 16 float lanes, masked loads for row tails. Only included by cpu_kernels_avx512.cc.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/cpu_kernels.h"

namespace quiver::cpu::avx512 {
namespace {

struct Simd {
  static constexpr const char* kName = "avx512";
  using V = __m512;
  static constexpr int kW = 16;
  // Matmul micro-tile: kTileR weight rows x kTileT tokens of accumulators (24 of 32
  // zmm). GEMV: kGemvR rows x kGemvU vectors per step; 8 rows at once keep enough
  // sequential streams in flight (measured on Zen4: 22 GB/s per core vs 18 with 4 rows).
  static constexpr int kTileR = 6;
  static constexpr int kTileT = 4;
  static constexpr int kGemvR = 8;
  static constexpr int kGemvU = 2;

  static __mmask16 mask(int n) { return static_cast<__mmask16>((1u << n) - 1u); }

  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float f) { return _mm512_set1_ps(f); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load_n(const float* p, int n) { return _mm512_maskz_loadu_ps(mask(n), p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void store_n(float* p, V v, int n) { _mm512_mask_storeu_ps(p, mask(n), v); }

  static void prefetch_l2(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1); }

  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }  // a * b + c
  static V fnma(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a * b
  static float reduce_add(V v) { return _mm512_reduce_add_ps(v); }
  static float reduce_max(V v) { return _mm512_reduce_max_ps(v); }
  // Lanes >= n replaced by `fill`.
  static V first_n(V v, int n, float fill) { return _mm512_mask_blend_ps(mask(n), set1(fill), v); }

  // ---- weights / caches of element type E (float or 16-bit) --------------------------
  static V bf16_bits_to_f32(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  template <int E, class T>
  static V load_w(const T* p) {
    if constexpr (E == kElemF32) {
      return _mm512_loadu_ps(p);
    } else if constexpr (E == kElemI8) {
      return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
    } else {
      __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      if constexpr (E == kElemF16) return _mm512_cvtph_ps(h);
      else return bf16_bits_to_f32(h);
    }
  }
  template <int E, class T>
  static V load_w_n(const T* p, int n) {
    if constexpr (E == kElemF32) {
      return _mm512_maskz_loadu_ps(mask(n), p);
    } else if constexpr (E == kElemI8) {
      return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask(n), p)));
    } else {
      __m256i h = _mm256_maskz_loadu_epi16(mask(n), p);
      if constexpr (E == kElemF16) return _mm512_cvtph_ps(h);
      else return bf16_bits_to_f32(h);
    }
  }
  // Round to nearest even (NaN stays NaN), as f32_to_bf16 / f32_to_f16 in core/dtype.h.
  template <int E>
  static __m256i to_16bit(V v) {
    if constexpr (E == kElemF16) {
      return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
      __m512i bits = _mm512_castps_si512(v);
      __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
      __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
      __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
      __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)),
                                              _mm512_set1_epi32(0x7f800000));
      return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
    }
  }
  template <int E, class T>
  static void store_w(T* p, V v) {
    if constexpr (E == kElemF32) _mm512_storeu_ps(p, v);
    else _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), to_16bit<E>(v));
  }
  template <int E, class T>
  static void store_w_n(T* p, V v, int n) {
    if constexpr (E == kElemF32) _mm512_mask_storeu_ps(p, mask(n), v);
    else _mm256_mask_storeu_epi16(p, mask(n), to_16bit<E>(v));
  }

  // out[i] = horizontal sum of parts[i], for kW vectors: a transpose-and-add tree that
  // costs ~3 ops per vector instead of a full horizontal reduction each.
  static V reduce_lanes(const V* a) {
    V b[8], c[4];
    for (int i = 0; i < 8; ++i) {  // 256-bit halves: b[i] = [a[2i] folded to 8 | a[2i+1] folded to 8]
      b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x44),
                           _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xEE));
    }
    for (int i = 0; i < 4; ++i) {  // 128-bit lanes: c[i] lane j = a[4i + j] folded to 4
      c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0x88),
                           _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0xDD));
    }
    // In-lane 4x4 transpose-add: r[4j + i] = sum of c[i] lane j = sum of a[4i + j].
    V s01 = _mm512_add_ps(_mm512_unpacklo_ps(c[0], c[1]), _mm512_unpackhi_ps(c[0], c[1]));
    V s23 = _mm512_add_ps(_mm512_unpacklo_ps(c[2], c[3]), _mm512_unpackhi_ps(c[2], c[3]));
    V r = _mm512_add_ps(_mm512_shuffle_ps(s01, s23, 0x44), _mm512_shuffle_ps(s01, s23, 0xEE));
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(idx, r);
  }

  // exp(x), ~1 ulp (Cephes polynomial); exp(-inf) = 0 and large inputs saturate.
  static V exp(V x) {
    x = _mm512_max_ps(x, set1(-103.0f));
    x = _mm512_min_ps(x, set1(88.7f));
    V n = _mm512_roundscale_ps(_mm512_mul_ps(x, set1(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT);
    V r = _mm512_fnmadd_ps(n, set1(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, set1(-2.12194440e-4f), r);
    V p = set1(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, set1(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, set1(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, set1(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, set1(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, set1(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, set1(1.0f)));
    return _mm512_scalef_ps(p, n);
  }
};

}  // namespace
}  // namespace quiver::cpu::avx512
