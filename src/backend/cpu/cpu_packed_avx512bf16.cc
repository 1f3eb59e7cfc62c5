// The bf16 matmul on packed weights (packed_weights.h): y[t, r] = x16[t, :] . w[r, :] with
// vdpbf16ps, weights in WeightLayout::kBlock16 order, activations rounded to bf16
// (MatmulArgs::x16). Compiled with -mavx512bf16 -mavx512vbmi by CMake and called only when
// the CPU has both (CpuBackend). int8 weights (with row scales) take the same products on
// their values widened exactly to bf16.
//
// Every output is one f32 lane that adds its pairs in order from zero, in the GEMV and in
// every tile shape, for bf16 and int8 weights alike, so a token's outputs do not depend on
// how many tokens share the step.
//
// GCC 12's AVX-512 intrinsics trip -Wuninitialized (see cpu_kernels_avx512.cc).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <bit>
#include <cstdint>
#include <type_traits>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/packed_weights.h"
#include "backend/cpu/tiling.h"

namespace quiver::cpu {
namespace {

typedef int32_t __attribute__((may_alias)) PairBits;  // two bf16 of x read as one lane

// Tile: kNB blocks (48 rows) x kT tokens = 24 of 32 zmm accumulators; per pair step 3
// weight loads and 8 broadcasts feed 24 vdpbf16ps.
constexpr int kNB = 3, kT = 8;
// Blocks of a one-token step: kGemvNB sequential streams a thread. 4 against 8, a batch-1
// TinyLlama step in 6 alternating rounds: min 28.2-28.4 ms against 29.5-30.1 (and 42 ms in
// three rounds where 4 stayed at 28.3); 2 streams and 4 fetched 32 groups ahead: 29.1-29.7.
constexpr int kGemvNB = 4;
// Prefetch distances within a block's stream, in bytes (16 and 64 bf16 groups).
constexpr int kGemvAhead = 1024, kTileAhead = 4096;

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// Byte `byte` (0: low, 1: high) of the bf16 bit patterns of the magnitudes 0..127: the int8
// groups' lookup tables (vpermi2b indexes 128 bytes by an index byte's low 7 bits and
// ignores the 8th, where packing stores the sign).
template <int kByte>
struct alignas(64) MagnitudeBytes {
  uint8_t v[128];
  constexpr MagnitudeBytes() : v() {
    for (int m = 0; m < 128; ++m)
      v[m] = static_cast<uint8_t>(std::bit_cast<uint32_t>(static_cast<float>(m)) >> (16 + 8 * kByte));
  }
};
constexpr MagnitudeBytes<0> kMagnitudeLo;
constexpr MagnitudeBytes<1> kMagnitudeHi;

struct MagnitudeTables {
  __m512i lo0 = _mm512_load_si512(kMagnitudeLo.v), lo1 = _mm512_load_si512(kMagnitudeLo.v + 64);
  __m512i hi0 = _mm512_load_si512(kMagnitudeHi.v), hi1 = _mm512_load_si512(kMagnitudeHi.v + 64);
};

inline __m512bh load_group(const uint16_t* p) { return reinterpret_cast<__m512bh>(_mm512_loadu_si512(p)); }

// Two packed int8 groups (64 bytes, sign and magnitude), as the bf16 groups of the same
// values: two table lookups give each byte's low and high bf16 byte, the sign goes into the
// high byte, and the in-lane interleave of the two yields group p (bytes 0-7 of each
// 128-bit lane) and group p + 1 (bytes 8-15) in order. 5 instructions for 64 weights,
// against 5 for each group of 32 through f32 (vpmovsxbd x2, vcvtdq2ps x2, vcvtne2ps2bf16).
// On 2 Zen 4 cores the one-token GEMV of a weight in L2 (bench_cpu_matmul, cached:1) runs
// at 69-87 GB/s against 44-49 through f32, which capped it below the memory's read rate
// (42-55 GB/s when the host is quiet).
inline void load_group_pair(const int8_t* p, const MagnitudeTables& tab, __m512bh* g0, __m512bh* g1) {
  const __m512i v = _mm512_loadu_si512(p);
  const __m512i lo = _mm512_permutex2var_epi8(tab.lo0, v, tab.lo1);
  const __m512i hi =
      _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(tab.hi0, v, tab.hi1), v, _mm512_set1_epi8(-128), 0xF8);
  *g0 = reinterpret_cast<__m512bh>(_mm512_unpacklo_epi8(lo, hi));
  *g1 = reinterpret_cast<__m512bh>(_mm512_unpackhi_epi8(lo, hi));
}

// The last group of an odd number (32 bytes in order, sign and magnitude): int8 -> int32 ->
// f32 -> bf16 is exact for |q| <= 127 (vcvtne2ps2bf16 puts its second operand in lanes 0-15).
inline __m512bh load_group(const int8_t* p) {
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i q = _mm256_sign_epi8(_mm256_and_si256(b, _mm256_set1_epi8(0x7f)), b);
  const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q)));
  const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1)));
  return _mm512_cvtne2ps_pbh(hi, lo);
}

inline __m512bh broadcast_pair(const uint16_t* x, int64_t p) {
  return reinterpret_cast<__m512bh>(_mm512_set1_epi32(reinterpret_cast<const PairBits*>(x)[p]));
}

inline void store_block(const MatmulArgs& a, __m512 v, int64_t t, int64_t r) {
  float* y = a.y + t * a.ldy + r;
  if (a.w_scale) {  // one rounding for scale and bias, as the row-major dot kernel
    const __m512 s = _mm512_loadu_ps(a.w_scale + r);
    v = a.bias ? _mm512_fmadd_ps(v, s, _mm512_loadu_ps(a.bias + r)) : _mm512_mul_ps(v, s);
  } else if (a.bias) {
    v = _mm512_add_ps(v, _mm512_loadu_ps(a.bias + r));
  }
  if (a.accumulate) v = _mm512_add_ps(v, _mm512_loadu_ps(y));
  _mm512_storeu_ps(y, v);
}

// NB blocks from row r0 x T tokens from t0, W: uint16_t (bf16) or int8_t weights. kAhead > 0:
// this tile is the first to read the blocks, which then come from memory, kAhead bytes
// ahead; later tiles find them in L2.
template <class W, int NB, int T, int kAhead>
inline void packed_tile(const MatmulArgs& a, int64_t r0, int64_t t0) {
  const int64_t pairs = a.k / 2;
  const W* w[NB];
  const uint16_t* x[T];
  for (int b = 0; b < NB; ++b) w[b] = static_cast<const W*>(a.w) + (r0 + b * kPackRows) * a.k;
  for (int t = 0; t < T; ++t) x[t] = a.x16 + (t0 + t) * a.ldx;
  __m512 acc[NB][T];
  for (int b = 0; b < NB; ++b)
    for (int t = 0; t < T; ++t) acc[b][t] = _mm512_setzero_ps();
  int64_t p = 0;
  if constexpr (std::is_same_v<W, int8_t>) {  // two groups a step, in the order of one
    const MagnitudeTables tab;
    for (; p + 2 <= pairs; p += 2) {
      __m512bh w0[NB], w1[NB];
      for (int b = 0; b < NB; ++b) {
        if constexpr (kAhead > 0) _mm_prefetch(reinterpret_cast<const char*>(w[b] + p * 32) + kAhead, _MM_HINT_T0);
        load_group_pair(w[b] + p * 32, tab, &w0[b], &w1[b]);
      }
      for (int t = 0; t < T; ++t) {
        const __m512bh xv = broadcast_pair(x[t], p);
        for (int b = 0; b < NB; ++b) acc[b][t] = _mm512_dpbf16_ps(acc[b][t], w0[b], xv);
      }
      for (int t = 0; t < T; ++t) {
        const __m512bh xv = broadcast_pair(x[t], p + 1);
        for (int b = 0; b < NB; ++b) acc[b][t] = _mm512_dpbf16_ps(acc[b][t], w1[b], xv);
      }
    }
  }
  for (; p < pairs; ++p) {
    __m512bh wv[NB];
    for (int b = 0; b < NB; ++b) {
      if constexpr (kAhead > 0) _mm_prefetch(reinterpret_cast<const char*>(w[b] + p * 32) + kAhead, _MM_HINT_T0);
      wv[b] = load_group(w[b] + p * 32);
    }
    for (int t = 0; t < T; ++t) {
      const __m512bh xv = broadcast_pair(x[t], p);
      for (int b = 0; b < NB; ++b) acc[b][t] = _mm512_dpbf16_ps(acc[b][t], wv[b], xv);
    }
  }
  for (int t = 0; t < T; ++t)
    for (int b = 0; b < NB; ++b) store_block(a, acc[b][t], t0 + t, r0 + b * kPackRows);
}

// Rows [r0, r1) of tokens [t0, t1): r0 and r1 are multiples of kPackRows.
template <class W>
void matmul_packed(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  if (t1 - t0 == 1) {  // GEMV: bandwidth-bound, kGemvNB sequential streams at once
    int64_t r = r0;
    for (; r + kGemvNB * kPackRows <= r1; r += kGemvNB * kPackRows) packed_tile<W, kGemvNB, 1, kGemvAhead>(a, r, t0);
    for (; r + 2 * kPackRows <= r1; r += 2 * kPackRows) packed_tile<W, 2, 1, kGemvAhead>(a, r, t0);
    for (; r < r1; r += kPackRows) packed_tile<W, 1, 1, kGemvAhead>(a, r, t0);
    return;
  }
  l2_token_blocks<kT>(t0, t1, a.k * 2, [&](int64_t tb, int64_t te) {
    int64_t r = r0;
    for (; r + kNB * kPackRows <= r1; r += kNB * kPackRows) {
      exact_tile<kT>(min64(kT, te - tb), [&]<int T>() { packed_tile<W, kNB, T, kTileAhead>(a, r, tb); });
      for (int64_t t = tb + kT; t < te; t += kT)
        exact_tile<kT>(min64(kT, te - t), [&]<int T>() { packed_tile<W, kNB, T, 0>(a, r, t); });
    }
    for (; r < r1; r += kPackRows)
      for (int64_t t = tb; t < te; t += kT)
        exact_tile<kT>(min64(kT, te - t), [&]<int T>() { packed_tile<W, 1, T, 0>(a, r, t); });
  });
}

}  // namespace

MatmulFn avx512bf16_matmul_bf16_packed() { return &matmul_packed<uint16_t>; }
MatmulFn avx512bf16_matmul_i8_packed() { return &matmul_packed<int8_t>; }

}  // namespace quiver::cpu
