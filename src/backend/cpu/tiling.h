// How the matmul kernels walk tokens: blocks that stay in L2, and micro-tiles of exactly
// the tokens left. Header-only and templated on the caller's own lambdas, so each kernel
// file (compiled for its instruction set) gets its own copy (see cpu_kernels.h on why
// nothing else may be shared).
#pragma once

#include <cstdint>

namespace quiver::cpu {
namespace {

// tile.template operator()<T>() with T == n, for 1 <= n <= kMax.
template <int kMax, class Tile>
inline void exact_tile(int64_t n, const Tile& tile) {
  if constexpr (kMax == 1) {
    tile.template operator()<1>();
  } else {
    if (n == kMax) tile.template operator()<kMax>();
    else exact_tile<kMax - 1>(n, tile);
  }
}

// f(tb, te) over [t0, t1) in blocks of a multiple of kT tokens whose activations
// (bytes_per_token each) fit in 256 KiB, a quarter of a Zen 4/5 core's L2: they stay
// there while a thread's weight rows stream past.
template <int kT, class F>
inline void l2_token_blocks(int64_t t0, int64_t t1, int64_t bytes_per_token, const F& f) {
  int64_t block = (256 * 1024) / (bytes_per_token + 1);
  block = block < kT ? kT : block / kT * kT;
  for (int64_t tb = t0; tb < t1; tb += block) f(tb, t1 < tb + block ? t1 : tb + block);
}

}  // namespace
}  // namespace quiver::cpu
