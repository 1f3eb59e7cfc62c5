// Block-wide building blocks of the sampling kernel (sampling.cu): deterministic reductions
// and a sort-free selection of the boundary of a prefix of the order (logit descending,
// index ascending) that holds a given weight — a count for top-k / top-K logprobs, an
// integer probability mass for top-p.
//
// Selection is an MSB-first radix select on the float's order key (12 + 10 + 10 bits, so
// three passes over the row): each pass histograms the weight of the elements that match
// the key prefix found so far and finds the bin where the cumulative weight from the top
// crosses the target. Weights are integers, so the shared-memory atomics that build the
// histograms sum to the same value in any order: the result is deterministic (graph replay
// == eager, run after run) and equal to the scalar reference's. 12 bits first spreads real
// logits (a few binary exponents) over ~100 bins instead of ~4, which keeps atomics apart.
//
// Every function here must be called by all threads of the block (they synchronise).
#pragma once

#include <cstdint>

#include "backend/sampling_math.h"

namespace quiver::cuda::select {

inline constexpr int kThreads = 1024;
inline constexpr int kWarps = kThreads / 32;
inline constexpr int kMaxBins = 4096;

// Shared memory of one block's selection work.
struct Shared {
  unsigned long long hist[kMaxBins];  // weight per digit bin of the current pass
  unsigned long long red_u64[kWarps];
  double red_f64[kWarps];
  unsigned long long found[3];        // crossing: bin, weight above it, weight in it
  int nth;                            // find_nth result
};

template <class T, class Op>
__device__ __forceinline__ T block_reduce(T v, T* scratch, Op op) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = scratch[0];
  for (int w = 1; w < kWarps; ++w) r = op(r, scratch[w]);  // fixed order: deterministic
  return r;
}

struct MaxOp {
  __device__ unsigned long long operator()(unsigned long long a, unsigned long long b) const { return a > b ? a : b; }
};
struct SumOp {
  template <class T>
  __device__ T operator()(T a, T b) const { return a + b; }
};

// (key descending, index ascending) packed so that a larger u64 comes first in the order.
__device__ __forceinline__ unsigned long long pack_first(uint32_t key, int i) {
  return (static_cast<unsigned long long>(key) << 32) | (0xffffffffu - static_cast<uint32_t>(i));
}
__device__ __forceinline__ int unpack_index(unsigned long long p) {
  return static_cast<int>(0xffffffffu - static_cast<uint32_t>(p));
}

__device__ __forceinline__ float key_to_float(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// The boundary of a weighted prefix: W(key > key) = above < target <= above + at_key.
struct Boundary {
  bool found = false;  // false when the total weight is below the target
  uint32_t key = 0;
  unsigned long long above = 0, at_key = 0;
};

// After hist[0, bins) holds this pass's weights: the highest bin whose cumulative weight
// from the top, plus `above`, reaches `target`. bins is a multiple of kThreads.
__device__ __forceinline__ bool find_crossing(Shared& sh, int bins, unsigned long long above,
                                              unsigned long long target, int* bin, unsigned long long* new_above,
                                              unsigned long long* at_bin) {
  const int per = bins / kThreads, lo = threadIdx.x * per, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  unsigned long long s = 0;
  for (int b = 0; b < per; ++b) s += sh.hist[lo + b];
  // Suffix sums: weight of the bins above this thread's range.
  unsigned long long incl = s;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned long long n = __shfl_down_sync(0xffffffffu, incl, o);
    if (lane + o < 32) incl += n;
  }
  if (threadIdx.x == 0) sh.found[0] = ~0ull;
  __syncthreads();
  if (lane == 0) sh.red_u64[warp] = incl;
  __syncthreads();
  unsigned long long base = above + (incl - s);
  for (int w = warp + 1; w < kWarps; ++w) base += sh.red_u64[w];
  if (base < target && base + s >= target) {
    for (int b = lo + per - 1; b >= lo; --b) {
      if (base + sh.hist[b] >= target) {
        sh.found[0] = static_cast<unsigned long long>(b);
        sh.found[1] = base;
        sh.found[2] = sh.hist[b];
        break;
      }
      base += sh.hist[b];
    }
  }
  __syncthreads();
  const bool ok = sh.found[0] != ~0ull;
  if (ok) {
    *bin = static_cast<int>(sh.found[0]);
    *new_above = sh.found[1];
    *at_bin = sh.found[2];
  }
  __syncthreads();  // found[] and hist[] are reused by the next pass
  return ok;
}

// weight(i, key) -> u64 (0 = not participating). Three passes over x[0, n).
template <class Weight>
__device__ Boundary select_boundary(Shared& sh, const float* __restrict__ x, int n, unsigned long long target,
                                    Weight weight) {
  constexpr int kShift[3] = {20, 10, 0}, kBits[3] = {12, 10, 10};
  Boundary r;
  uint32_t prefix = 0, mask = 0;
  unsigned long long above = 0, at_key = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const int bins = 1 << kBits[pass], shift = kShift[pass];
    for (int b = threadIdx.x; b < bins; b += kThreads) sh.hist[b] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const uint32_t key = sampling::order_key(x[i]);
      if ((key & mask) != prefix) continue;
      const unsigned long long w = weight(i, key);
      if (w) atomicAdd(&sh.hist[(key >> shift) & (bins - 1)], w);
    }
    __syncthreads();
    int bin = 0;
    if (!find_crossing(sh, bins, above, target, &bin, &above, &at_key)) return r;
    prefix |= static_cast<uint32_t>(bin) << shift;
    mask |= static_cast<uint32_t>(bins - 1) << shift;
  }
  r.found = true;
  r.key = prefix;
  r.above = above;
  r.at_key = at_key;
  return r;
}

// Index of the nth (1-based) element i of [0, n) with pred(i), in index order; n if fewer.
// One barrier per kThreads elements, then a ballot scan inside the chunk holding it.
template <class Pred>
__device__ int find_nth(Shared& sh, int n, unsigned long long nth, Pred pred) {
  unsigned long long seen = 0;
  for (int base = 0; base < n; base += kThreads) {
    const int i = base + threadIdx.x;
    const bool f = i < n && pred(i);
    const unsigned long long c = static_cast<unsigned long long>(__syncthreads_count(f));
    if (seen + c < nth) {
      seen += c;
      continue;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const unsigned ballot = __ballot_sync(0xffffffffu, f);
    if (lane == 0) sh.red_u64[warp] = static_cast<unsigned long long>(__popc(ballot));
    __syncthreads();
    unsigned long long before = seen + static_cast<unsigned long long>(__popc(ballot & ((1u << lane) - 1u)));
    for (int w = 0; w < warp; ++w) before += sh.red_u64[w];
    if (f && before + 1 == nth) sh.nth = i;
    __syncthreads();
    const int r = sh.nth;
    __syncthreads();
    return r;
  }
  return n;
}

}  // namespace quiver::cuda::select
