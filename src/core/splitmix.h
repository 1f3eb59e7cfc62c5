// splitmix64 (Steele, Lea and Flood, 2014): the seedable 64-bit generator and hash behind
// every bit of cheap, reproducible randomness in quiver (dummy weights, engine seeds,
// benchmark adapters, response ids). Not for sampling: that is Philox (backend/sampling_math.h).
#pragma once

#include <cstdint>

namespace quiver {

inline constexpr uint64_t kSplitmixGamma = 0x9e3779b97f4a7c15ull;

// The output function: a bijective 64-bit mix.
inline uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Advances `state` and returns the next value of the sequence.
inline uint64_t splitmix64(uint64_t& state) { return splitmix64_mix(state += kSplitmixGamma); }

// The first value of the sequence seeded with x: a stateless hash of x.
inline uint64_t splitmix64_hash(uint64_t x) { return splitmix64_mix(x + kSplitmixGamma); }

}  // namespace quiver
