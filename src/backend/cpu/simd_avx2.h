// The vector vocabulary kernels_impl.h is written in, for AVX2 + FMA + F16C: 8 float
// lanes, 16 registers (hence smaller tiles). Only included by cpu_kernels_avx2.cc.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/cpu_kernels.h"

namespace quiver::cpu::avx2 {
namespace {

struct Simd {
  static constexpr const char* kName = "avx2";
  using V = __m256;
  static constexpr int kW = 8;
  static constexpr int kTileR = 3;  // 12 accumulators + 4 activations + 1 weight in flight
  static constexpr int kTileT = 4;
  static constexpr int kGemvR = 8;
  static constexpr int kGemvU = 1;

  static __m256i mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }

  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float f) { return _mm256_set1_ps(f); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V load_n(const float* p, int n) { return _mm256_maskload_ps(p, mask(n)); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static void store_n(float* p, V v, int n) { _mm256_maskstore_ps(p, mask(n), v); }

  static void prefetch_l2(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1); }

  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V fnma(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
  static float reduce_add(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float reduce_max(V v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static V first_n(V v, int n, float fill) { return _mm256_blendv_ps(set1(fill), v, _mm256_castsi256_ps(mask(n))); }

  // ---- weights / caches of element type E --------------------------------------------
  template <int E>
  static V from_16bit(__m128i h) {
    if constexpr (E == kElemF16) return _mm256_cvtph_ps(h);
    else return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  template <int E, class T>
  static V load_w(const T* p) {
    if constexpr (E == kElemF32) return _mm256_loadu_ps(p);
    else if constexpr (E == kElemI8) return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
    else return from_16bit<E>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  template <int E, class T>
  static V load_w_n(const T* p, int n) {
    if constexpr (E == kElemF32) {
      return _mm256_maskload_ps(p, mask(n));
    } else if constexpr (E == kElemI8) {
      alignas(16) int8_t tmp[16] = {};
      for (int i = 0; i < n; ++i) tmp[i] = p[i];
      return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(tmp))));
    } else {
      alignas(16) uint16_t tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int i = 0; i < n; ++i) tmp[i] = p[i];
      return from_16bit<E>(_mm_load_si128(reinterpret_cast<const __m128i*>(tmp)));
    }
  }
  template <int E>
  static __m128i to_16bit(V v) {
    if constexpr (E == kElemF16) {
      return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
      __m256i bits = _mm256_castps_si256(v);
      __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
      __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
      __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
      __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff)),
                                       _mm256_set1_epi32(0x7f800000));
      __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);
      // Values are < 2^16: pack with unsigned saturation, then gather the two low quads.
      return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08));
    }
  }
  template <int E, class T>
  static void store_w(T* p, V v) {
    if constexpr (E == kElemF32) _mm256_storeu_ps(p, v);
    else _mm_storeu_si128(reinterpret_cast<__m128i*>(p), to_16bit<E>(v));
  }
  template <int E, class T>
  static void store_w_n(T* p, V v, int n) {
    if constexpr (E == kElemF32) {
      _mm256_maskstore_ps(p, mask(n), v);
    } else {
      alignas(16) uint16_t tmp[8];
      _mm_store_si128(reinterpret_cast<__m128i*>(tmp), to_16bit<E>(v));
      for (int i = 0; i < n; ++i) p[i] = tmp[i];
    }
  }

  // out[i] = horizontal sum of a[i] for 8 vectors (transpose-and-add tree).
  static V reduce_lanes(const V* a) {
    V b[4];
    for (int i = 0; i < 4; ++i) {  // b[i] = [a[2i] folded to 4 | a[2i+1] folded to 4]
      b[i] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * i], a[2 * i + 1], 0x20),
                           _mm256_permute2f128_ps(a[2 * i], a[2 * i + 1], 0x31));
    }
    // In-lane 4x4 transpose-add: r[4h + i] = sum of b[i] half h = sum of a[2i + h].
    V s01 = _mm256_add_ps(_mm256_unpacklo_ps(b[0], b[1]), _mm256_unpackhi_ps(b[0], b[1]));
    V s23 = _mm256_add_ps(_mm256_unpacklo_ps(b[2], b[3]), _mm256_unpackhi_ps(b[2], b[3]));
    V r = _mm256_add_ps(_mm256_shuffle_ps(s01, s23, 0x44), _mm256_shuffle_ps(s01, s23, 0xEE));
    return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  }

  static V exp(V x) {
    x = _mm256_max_ps(x, set1(-87.3f));
    x = _mm256_min_ps(x, set1(88.3f));
    V n = _mm256_round_ps(_mm256_mul_ps(x, set1(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm256_fnmadd_ps(n, set1(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, set1(-2.12194440e-4f), r);
    V p = set1(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, set1(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, set1(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, set1(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, set1(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, set1(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, set1(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  }
};

}  // namespace
}  // namespace quiver::cpu::avx2
