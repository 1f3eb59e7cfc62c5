// The per-element arithmetic of Backend::sample, shared verbatim by every backend (plain C++,
// compiled by g++ for ref/cpu and by nvcc for cuda), so that a seeded request samples the
// same token alone or batched, eagerly or from a graph, on ref, cpu and cuda.
//
// Semantics (one row of logits x[0, V), see Backend::sample in backend.h):
// - order: tokens by (x descending, index ascending): the order logprobs_for (sampler.cc)
//   ranks and reports top-K in.
// - temperature 0: the first token of that order (the host sampler's greedy choice).
// - otherwise e_i = expf((x_i - max) / T) in (0, 1] and the kept set is the longest prefix
//   of the order passing all of
//     top-k: its first top_k tokens;
//     top-p: tokens whose exclusive cumulative mass (over the top-k survivors, renormalised)
//            is < top_p — the host sampler's rule and vLLM's;
//     min-p: e_i >= min_p, i.e. probability >= min_p * the largest probability.
//   Masses for top-p are integers, e_i quantised to 2^-44 (mass_q): sums of integers do not
//   depend on the order of addition, so a GPU reduction and the scalar loop agree exactly.
// - the token is the Gumbel-max (exponential race) winner over the kept set: the largest
//   e_i / -log(u_i), ties to the lower index, u_i uniform in (0, 1) from Philox4x32-10 keyed
//   by the request's seed, counted by (i / 4, the sequence's token counter). Each token's
//   noise depends on nothing else in the batch.
// Exactness: everything above is exact integer/float work except expf and logf, whose last
//   bit may differ between glibc and CUDA's libdevice; so backends can disagree only when two
//   candidates' scores (or a top-p boundary mass) agree to about one float ulp.
#pragma once

#include <math.h>

#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace quiver::sampling {

// Most top-K logprobs the op reports per row (vLLM's default max_logprobs is 20).
inline constexpr int kMaxLogprobs = 20;

// e_i = 1 (the most likely token) is 2^44 units. With vocab < 2^19 a total fits in 63 bits.
inline constexpr int kMassBits = 44;
inline constexpr int64_t kMaxVocab = int64_t{1} << 19;

struct Philox4 {
  uint32_t v[4];
};

QV_HOST_DEVICE uint32_t mulhi32(uint32_t a, uint32_t b) {
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
}

// Philox4x32-10 (Salmon et al., SC'11, "Parallel random numbers: as easy as 1, 2, 3"),
// with the Random123 constants; checked against its known-answer vectors in the tests.
QV_HOST_DEVICE Philox4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                                     uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint32_t hi0 = mulhi32(kM0, c0), lo0 = kM0 * c0;
    const uint32_t hi1 = mulhi32(kM1, c2), lo1 = kM1 * c2;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// The four uniforms of tokens [4 * group, 4 * group + 4) at this sequence position. One
// Philox call serves four neighbouring tokens (the GPU kernel gives each thread four).
QV_HOST_DEVICE Philox4 token_noise_bits(uint64_t seed, uint32_t counter, uint32_t group) {
  return philox4x32_10(group, counter, 0u, 0u, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// 24 random bits, lowest forced to 1, times 2^-24: exact in float, never 0 or 1.
QV_HOST_DEVICE float uniform_open01(uint32_t bits) {
  return static_cast<float>((bits >> 8) | 1u) * (1.0f / 16777216.0f);
}

// The race score of a kept token: larger wins. e in [0, 1]; -logf(u) in (0, 17.4].
QV_HOST_DEVICE float race_score(float e, uint32_t bits) { return e / -logf(uniform_open01(bits)); }

// Unnormalised probability relative to the row maximum (1 for the argmax).
QV_HOST_DEVICE float rel_prob(float x, float max, float temperature) { return expf((x - max) / temperature); }

// e in [0, 1] as an integer mass, rounded down.
QV_HOST_DEVICE uint64_t mass_q(float e) {
  return static_cast<uint64_t>(static_cast<double>(e) * static_cast<double>(uint64_t{1} << kMassBits));
}

// The top-p target: keep tokens whose exclusive cumulative mass is < top_p * total, i.e.
// (for integer sums) < ceil(top_p * total). At least 1 for top_p > 0.
QV_HOST_DEVICE uint64_t top_p_target(float top_p, uint64_t total) {
  const double t = ceil(static_cast<double>(top_p) * static_cast<double>(total));
  return t < 1.0 ? 1u : static_cast<uint64_t>(t);
}

// An unsigned key with the order of the float (x + 0.0f folds -0 into +0, as == does).
QV_HOST_DEVICE uint32_t order_key(float x) {
  const float folded = x + 0.0f;
  uint32_t u;
  memcpy(&u, &folded, sizeof(u));
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The 32 noise bits of token i (one lane of its group's Philox output).
QV_HOST_DEVICE uint32_t token_bits(uint64_t seed, uint32_t counter, int64_t i) {
  return token_noise_bits(seed, counter, static_cast<uint32_t>(i >> 2)).v[i & 3];
}

// log(sum_i exp(x_i)) over n logits whose maximum is mx, summed in double: the logprob
// normaliser of the host sampler's logprobs (logprobs_for) and of the reference sampler,
// kept in one place so the two report the same logprobs. Host only.
inline double log_sum_exp(const float* x, int64_t n, float mx) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += exp(static_cast<double>(x[i]) - mx);
  return mx + log(sum);
}

// Whether a structured-output mask (SampleInputs::masks' layout: token i is bit i % 32 of
// word i / 32) allows token i.
QV_HOST_DEVICE bool mask_allows(const uint32_t* words, int64_t i) { return ((words[i >> 5] >> (i & 31)) & 1u) != 0; }

// Which parts of the op are active for a row (the op's convention for "off").
QV_HOST_DEVICE bool top_k_active(int32_t top_k, int64_t vocab) { return top_k > 0 && top_k < vocab; }
QV_HOST_DEVICE bool top_p_active(float top_p) { return top_p < 1.0f; }
QV_HOST_DEVICE bool min_p_active(float min_p) { return min_p > 0.0f; }

}  // namespace quiver::sampling
