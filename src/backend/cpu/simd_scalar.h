// The vector vocabulary kernels_impl.h is written in, as plain C++ over 8-float arrays:
// the portable fallback (no intrinsics; the compiler may still vectorise it with SSE2).
// Only included by cpu_kernels_scalar.cc.
#pragma once

#include <cmath>
#include <cstdint>

#include "backend/cpu/cpu_kernels.h"
#include "core/dtype.h"

namespace quiver::cpu::scalar {
namespace {

struct Simd {
  static constexpr const char* kName = "scalar";
  static constexpr int kW = 8;
  struct V {
    float v[kW];
  };
  static constexpr int kTileR = 4;
  static constexpr int kTileT = 2;
  static constexpr int kGemvR = 4;
  static constexpr int kGemvU = 1;

  static V zero() { return set1(0.f); }
  static V set1(float f) {
    V r;
    for (int i = 0; i < kW; ++i) r.v[i] = f;
    return r;
  }
  static V load(const float* p) { return load_n(p, kW); }
  static V load_n(const float* p, int n) {
    V r = zero();
    for (int i = 0; i < n; ++i) r.v[i] = p[i];
    return r;
  }
  static void store(float* p, V v) { store_n(p, v, kW); }
  static void store_n(float* p, V v, int n) {
    for (int i = 0; i < n; ++i) p[i] = v.v[i];
  }

  static void prefetch_l2(const void* p) { __builtin_prefetch(p, 0, 2); }

  template <class F>
  static V map2(V a, V b, F f) {
    V r;
    for (int i = 0; i < kW; ++i) r.v[i] = f(a.v[i], b.v[i]);
    return r;
  }
  static V add(V a, V b) { return map2(a, b, [](float x, float y) { return x + y; }); }
  static V sub(V a, V b) { return map2(a, b, [](float x, float y) { return x - y; }); }
  static V mul(V a, V b) { return map2(a, b, [](float x, float y) { return x * y; }); }
  static V div(V a, V b) { return map2(a, b, [](float x, float y) { return x / y; }); }
  static V max(V a, V b) { return map2(a, b, [](float x, float y) { return x > y ? x : y; }); }
  static V fma(V a, V b, V c) {
    for (int i = 0; i < kW; ++i) c.v[i] += a.v[i] * b.v[i];
    return c;
  }
  static V fnma(V a, V b, V c) {
    for (int i = 0; i < kW; ++i) c.v[i] -= a.v[i] * b.v[i];
    return c;
  }
  static float reduce_add(V v) {
    float s = 0;
    for (int i = 0; i < kW; ++i) s += v.v[i];
    return s;
  }
  static float reduce_max(V v) {
    float m = v.v[0];
    for (int i = 1; i < kW; ++i) m = v.v[i] > m ? v.v[i] : m;
    return m;
  }
  static V first_n(V v, int n, float fill) {
    for (int i = n; i < kW; ++i) v.v[i] = fill;
    return v;
  }

  template <int E, class T>
  static float load1(const T* p) {
    if constexpr (E == kElemF32) return *p;
    else if constexpr (E == kElemI8) return static_cast<float>(*p);
    else if constexpr (E == kElemF16) return f16_to_f32(*p);
    else return bf16_to_f32(*p);
  }
  template <int E, class T>
  static V load_w(const T* p) { return load_w_n<E>(p, kW); }
  template <int E, class T>
  static V load_w_n(const T* p, int n) {
    V r = zero();
    for (int i = 0; i < n; ++i) r.v[i] = load1<E>(p + i);
    return r;
  }
  template <int E, class T>
  static void store_w(T* p, V v) { store_w_n<E>(p, v, kW); }
  template <int E, class T>
  static void store_w_n(T* p, V v, int n) {
    for (int i = 0; i < n; ++i) {
      if constexpr (E == kElemF32) p[i] = v.v[i];
      else if constexpr (E == kElemF16) p[i] = f32_to_f16(v.v[i]);
      else p[i] = f32_to_bf16(v.v[i]);
    }
  }

  static V reduce_lanes(const V* a) {
    V r;
    for (int i = 0; i < kW; ++i) r.v[i] = reduce_add(a[i]);
    return r;
  }
  static V exp(V x) {
    for (int i = 0; i < kW; ++i) x.v[i] = std::exp(x.v[i]);
    return x;
  }
};

}  // namespace
}  // namespace quiver::cpu::scalar
