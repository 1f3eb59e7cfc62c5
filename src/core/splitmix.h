// splitmix64 (Steele, Lea and Flood, 2014): the seedable 64-bit generator and hash behind
// every bit of cheap, reproducible randomness in quiver (dummy weights, engine seeds,
// benchmark adapters, response ids). Not for sampling: that is Philox (backend/sampling_math.h).
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace quiver {

inline constexpr uint64_t kSplitmixGamma = 0x9e3779b97f4a7c15ull;

// The output function: a bijective 64-bit mix.
QV_HOST_DEVICE uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Advances `state` and returns the next value of the sequence.
inline uint64_t splitmix64(uint64_t& state) { return splitmix64_mix(state += kSplitmixGamma); }

// The first value of the sequence seeded with x: a stateless hash of x.
QV_HOST_DEVICE uint64_t splitmix64_hash(uint64_t x) { return splitmix64_mix(x + kSplitmixGamma); }

// Element i of a tensor of uniform values in [center - scale, center + scale) drawn from
// `seed` (dummy weights). Bitwise the same on the host and on a GPU: the device form
// rounds every step as the host does instead of fusing multiply and add.
QV_HOST_DEVICE float hash_uniform(uint64_t seed, uint64_t i, float center, float scale) {
  const float u = static_cast<float>(splitmix64_hash(seed ^ i) >> 40) * (1.0f / 16777216.0f);  // [0, 1)
#if defined(__CUDA_ARCH__)
  return __fadd_rn(center, __fmul_rn(scale, __fsub_rn(__fmul_rn(2.0f, u), 1.0f)));
#else
  return center + scale * (2.0f * u - 1.0f);
#endif
}

}  // namespace quiver
