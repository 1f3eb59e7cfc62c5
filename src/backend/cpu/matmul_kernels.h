// Matmul kernels, written once over a Simd vocabulary (simd_*.h) and instantiated per
// instruction set by the cpu_kernels_*.cc files. Included only by those files.
//
// Layout: y[t, r] = x[t, :] . w[r, :] — both operands are contiguous along k, so each
// output is a dot product. A micro-tile keeps R weight rows x T tokens of vector
// accumulators in registers: each weight vector is loaded and converted to f32 once and
// used T times, each activation vector is loaded once and used R times. Accumulation
// is f32 throughout (activations are never rounded to 16 bits). An int8 weight is widened
// exactly to f32; a weight with row scales (int8, or FP8 values held in bf16) has its row's
// scale multiply the finished sum.
#pragma once

#include <cstdint>
#include <type_traits>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/tiling.h"

namespace quiver::cpu {
namespace {

template <int E>
using WElem = std::conditional_t<E == kElemF32, float, std::conditional_t<E == kElemI8, int8_t, uint16_t>>;

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// Computes R rows x T tokens starting at (r0, t0); U vectors per row in flight per step.
// kPrefetchNext: while streaming these rows, prefetch the next R rows into L2, so their
// page-by-page DRAM fetch overlaps this tile's compute (the hardware prefetchers stop at
// each 4 KiB page; measured +6-20% on Zen4 for GEMV and small batches).
template <class S, int E, int R, int T, int U, bool kPrefetchNext = false>
inline void mm_tile(const MatmulArgs& a, int64_t r0, int64_t t0) {
  using V = typename S::V;
  using W = WElem<E>;
  constexpr int L = S::kW;
  const int64_t k = a.k;
  const W* w[R];
  const float* x[T];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) w[r] = static_cast<const W*>(a.w) + (r0 + r) * a.ldw;
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) x[t] = a.x + (t0 + t) * a.ldx;

  V acc[R][T][U];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t)
#pragma GCC unroll 8
      for (int u = 0; u < U; ++u) acc[r][t][u] = S::zero();

  int64_t i = 0;
  for (; i + U * L <= k; i += U * L) {
    if constexpr (kPrefetchNext) {
      constexpr int kStepBytes = U * L * static_cast<int>(sizeof(W));
      if (kStepBytes >= 64 || (i * static_cast<int64_t>(sizeof(W))) % 64 == 0) {
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const char* next = reinterpret_cast<const char*>(w[r] + R * a.ldw + i);
          for (int b = 0; b < kStepBytes; b += 64) S::prefetch_l2(next + b);
        }
      }
    }
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) {
      V xv[T];
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) xv[t] = S::load(x[t] + i + u * L);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        V wv = S::template load_w<E>(w[r] + i + u * L);
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) acc[r][t][u] = S::fma(wv, xv[t], acc[r][t][u]);
      }
    }
  }
  if constexpr (U > 1) {
    for (; i + L <= k; i += L) {
      V xv[T];
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) xv[t] = S::load(x[t] + i);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        V wv = S::template load_w<E>(w[r] + i);
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) acc[r][t][0] = S::fma(wv, xv[t], acc[r][t][0]);
      }
    }
  }
  if (i < k) {  // masked tail
    const int n = static_cast<int>(k - i);
    V xv[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) xv[t] = S::load_n(x[t] + i, n);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      V wv = S::template load_w_n<E>(w[r] + i, n);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) acc[r][t][0] = S::fma(wv, xv[t], acc[r][t][0]);
    }
  }

#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    float* yr = a.y + (t0 + t) * a.ldy + r0;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      V s = acc[r][t][0];
#pragma GCC unroll 8
      for (int u = 1; u < U; ++u) s = S::add(s, acc[r][t][u]);
      float v = S::reduce_add(s);
      if (a.w_scale) v *= a.w_scale[r0 + r];
      if (a.bias) v += a.bias[r0 + r];
      yr[r] = a.accumulate ? yr[r] + v : v;
    }
  }
}

template <class S, int E>
void matmul_kernel(const MatmulArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  if (t1 - t0 == 1) {  // GEMV: bandwidth bound, several rows streamed at once
    constexpr int R = S::kGemvR, U = S::kGemvU;
    int64_t r = r0;
    for (; r + R <= r1; r += R) mm_tile<S, E, R, 1, U, true>(a, r, t0);
    if constexpr (R > 4)
      for (; r + 4 <= r1; r += 4) mm_tile<S, E, 4, 1, U>(a, r, t0);
    if constexpr (R > 2)
      for (; r + 2 <= r1; r += 2) mm_tile<S, E, 2, 1, U>(a, r, t0);
    for (; r < r1; ++r) mm_tile<S, E, 1, 1, U>(a, r, t0);
    return;
  }
  constexpr int R = S::kTileR, T = S::kTileT;
  l2_token_blocks<T>(t0, t1, a.k * 4, [&](int64_t tb, int64_t te) {
    int64_t r = r0;
    for (; r + R <= r1; r += R) {
      // The first token tile streams the rows from memory; later tiles find them in cache.
      exact_tile<T>(min64(T, te - tb), [&]<int N>() { mm_tile<S, E, R, N, 1, true>(a, r, tb); });
      for (int64_t t = tb + T; t < te; t += T)
        exact_tile<T>(min64(T, te - t), [&]<int N>() { mm_tile<S, E, R, N, 1>(a, r, t); });
    }
    if constexpr (R > 4)
      for (; r + 4 <= r1; r += 4)
        for (int64_t t = tb; t < te; t += T)
          exact_tile<T>(min64(T, te - t), [&]<int N>() { mm_tile<S, E, 4, N, 1>(a, r, t); });
    if constexpr (R > 2)
      for (; r + 2 <= r1; r += 2)
        for (int64_t t = tb; t < te; t += T)
          exact_tile<T>(min64(T, te - t), [&]<int N>() { mm_tile<S, E, 2, N, 1>(a, r, t); });
    for (; r < r1; ++r)
      for (int64_t t = tb; t < te; t += T)
        exact_tile<T>(min64(T, te - t), [&]<int N>() { mm_tile<S, E, 1, N, 1>(a, r, t); });
  });
}

}  // namespace
}  // namespace quiver::cpu
