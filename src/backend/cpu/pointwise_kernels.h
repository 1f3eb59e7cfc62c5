// Row-wise and element-wise kernels (conversions, norms, activations, RoPE), written once
// over a Simd vocabulary (simd_*.h). Included only by the cpu_kernels_*.cc files.
#pragma once

#include <cstdint>

#include "backend/cpu/matmul_kernels.h"

namespace quiver::cpu {
namespace {

template <class S, int E>
void to_f32_kernel(float* dst, const void* src, int64_t n) {
  const WElem<E>* s = static_cast<const WElem<E>*>(src);
  int64_t i = 0;
  for (; i + S::kW <= n; i += S::kW) S::store(dst + i, S::template load_w<E>(s + i));
  if (i < n) S::store_n(dst + i, S::template load_w_n<E>(s + i, static_cast<int>(n - i)), static_cast<int>(n - i));
}

template <class S, int E>
void from_f32_kernel(void* dst, const float* src, int64_t n) {
  WElem<E>* d = static_cast<WElem<E>*>(dst);
  int64_t i = 0;
  for (; i + S::kW <= n; i += S::kW) S::template store_w<E>(d + i, S::load(src + i));
  if (i < n) S::template store_w_n<E>(d + i, S::load_n(src + i, static_cast<int>(n - i)), static_cast<int>(n - i));
}

// The sum of x in four vector accumulators: one load and one add per vector, so a thread
// streams memory as fast as its loads go (Backend::measure_read_gbs).
template <class S>
float stream_sum_kernel(const float* x, int64_t n) {
  typename S::V a0 = S::zero(), a1 = S::zero(), a2 = S::zero(), a3 = S::zero();
  int64_t i = 0;
  for (; i + 4 * S::kW <= n; i += 4 * S::kW) {
    a0 = S::add(a0, S::load(x + i));
    a1 = S::add(a1, S::load(x + i + S::kW));
    a2 = S::add(a2, S::load(x + i + 2 * S::kW));
    a3 = S::add(a3, S::load(x + i + 3 * S::kW));
  }
  for (; i < n; i += S::kW) a0 = S::add(a0, S::load_n(x + i, static_cast<int>(min64(S::kW, n - i))));
  return S::reduce_add(S::add(S::add(a0, a1), S::add(a2, a3)));
}

// f32 vector partial sums over short blocks, blocks summed in double: close to the
// reference's double accumulation at f32 speed.
template <class S>
double sum_squares_kernel(const float* x, int64_t n) {
  constexpr int64_t kBlock = 256;
  double total = 0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = min64(n, b + kBlock);
    typename S::V acc0 = S::zero(), acc1 = S::zero();
    int64_t i = b;
    for (; i + 2 * S::kW <= e; i += 2 * S::kW) {
      typename S::V v0 = S::load(x + i), v1 = S::load(x + i + S::kW);
      acc0 = S::fma(v0, v0, acc0);
      acc1 = S::fma(v1, v1, acc1);
    }
    for (; i < e; i += S::kW) {
      typename S::V v = S::load_n(x + i, static_cast<int>(min64(S::kW, e - i)));
      acc0 = S::fma(v, v, acc0);
    }
    total += static_cast<double>(S::reduce_add(S::add(acc0, acc1)));
  }
  return total;
}

template <class S>
void scale_mul_kernel(float* out, const float* x, float s, const float* w, int64_t n) {
  const typename S::V sv = S::set1(s);
  int64_t i = 0;
  for (; i + S::kW <= n; i += S::kW) S::store(out + i, S::mul(S::load(w + i), S::mul(S::load(x + i), sv)));
  if (i < n) {
    const int m = static_cast<int>(n - i);
    S::store_n(out + i, S::mul(S::load_n(w + i, m), S::mul(S::load_n(x + i, m), sv)), m);
  }
}

template <class S>
void add_kernel(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + S::kW <= n; i += S::kW) S::store(y + i, S::add(S::load(y + i), S::load(x + i)));
  if (i < n) {
    const int m = static_cast<int>(n - i);
    S::store_n(y + i, S::add(S::load_n(y + i, m), S::load_n(x + i, m)), m);
  }
}

template <class S>
typename S::V silu_mul_vec(typename S::V g, typename S::V u) {
  const typename S::V one = S::set1(1.0f);
  typename S::V e = S::exp(S::sub(S::zero(), g));
  return S::mul(S::div(g, S::add(one, e)), u);
}

template <class S>
void silu_mul_kernel(float* out, const float* gate, const float* up, int64_t n) {
  int64_t i = 0;
  for (; i + S::kW <= n; i += S::kW) S::store(out + i, silu_mul_vec<S>(S::load(gate + i), S::load(up + i)));
  if (i < n) {
    const int m = static_cast<int>(n - i);
    S::store_n(out + i, silu_mul_vec<S>(S::load_n(gate + i, m), S::load_n(up + i, m)), m);
  }
}

template <class S>
void rope_kernel(float* v, const float* cos, const float* sin, int64_t half) {
  int64_t j = 0;
  auto step = [&](int m) {
    typename S::V a = S::load_n(v + j, m), b = S::load_n(v + half + j, m);
    typename S::V c = S::load_n(cos + j, m), s = S::load_n(sin + j, m);
    S::store_n(v + j, S::sub(S::mul(a, c), S::mul(b, s)), m);
    S::store_n(v + half + j, S::add(S::mul(b, c), S::mul(a, s)), m);
  };
  for (; j + S::kW <= half; j += S::kW) step(S::kW);
  if (j < half) step(static_cast<int>(half - j));
}

}  // namespace
}  // namespace quiver::cpu
