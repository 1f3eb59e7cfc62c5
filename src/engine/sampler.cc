#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

#include "backend/sampling_math.h"

namespace quiver {

TokenLogprobs logprobs_for(std::span<const float> logits, int32_t token, int top_k) {
  const size_t v = logits.size();
  float mx = -std::numeric_limits<float>::infinity();
  for (float x : logits) mx = std::max(mx, x);
  const double lse = sampling::log_sum_exp(logits.data(), static_cast<int64_t>(v), mx);
  auto lp = [&](size_t i) { return static_cast<float>(logits[i] - lse); };
  TokenLogprobs out;
  out.token = token;
  out.logprob = lp(static_cast<size_t>(token));
  int rank = 1;
  for (size_t i = 0; i < v; ++i)
    if (logits[i] > logits[token] || (logits[i] == logits[token] && static_cast<int32_t>(i) < token)) ++rank;
  out.rank = rank;
  if (top_k > 0) {
    std::vector<int32_t> idx(v);
    std::iota(idx.begin(), idx.end(), 0);
    const size_t k = std::min(static_cast<size_t>(top_k), v);
    std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (size_t i = 0; i < k; ++i) out.top.emplace_back(idx[i], lp(static_cast<size_t>(idx[i])));
  }
  return out;
}

int32_t sample_token(std::span<const float> logits_in, const SamplingParams& p, std::span<const int32_t> prompt,
                     std::span<const int32_t> output, bool block_eos, std::span<const int64_t> eos_ids, SeqRng& rng,
                     std::span<const uint64_t> allowed) {
  std::vector<float> logits(logits_in.begin(), logits_in.end());
  const int64_t v = static_cast<int64_t>(logits.size());
  if (!allowed.empty())
    for (int64_t i = 0; i < v; ++i)
      if (!((allowed[static_cast<size_t>(i) >> 6] >> (i & 63)) & 1)) logits[i] = -std::numeric_limits<float>::infinity();
  for (const auto& [t, bias] : p.logit_bias)
    if (t >= 0 && t < v) logits[t] += bias;
  // Penalties (vLLM semantics): repetition over prompt + output; presence/frequency over output.
  if (p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int> counts;
    for (int32_t t : output) ++counts[t];
    if (p.repetition_penalty != 1.0f) {
      std::vector<bool> seen(static_cast<size_t>(v), false);
      for (int32_t t : prompt) seen[t] = true;
      for (int32_t t : output) seen[t] = true;
      for (int64_t i = 0; i < v; ++i)
        if (seen[i]) logits[i] = logits[i] > 0 ? logits[i] / p.repetition_penalty : logits[i] * p.repetition_penalty;
    }
    for (auto [t, c] : counts) logits[t] -= p.frequency_penalty * static_cast<float>(c) + p.presence_penalty;
  }
  if (block_eos)
    for (int64_t e : eos_ids)
      if (e >= 0 && e < v) logits[e] = -std::numeric_limits<float>::infinity();

  if (p.temperature == 0.0f) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  // Probabilities at temperature, then top-k, top-p and min-p truncation.
  std::vector<int32_t> idx(static_cast<size_t>(v));
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  size_t keep = idx.size();
  if (p.top_k > 0) keep = std::min(keep, static_cast<size_t>(p.top_k));
  const double mx = logits[idx[0]];
  std::vector<double> prob(keep);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += (prob[i] = std::exp((logits[idx[i]] - mx) / p.temperature));
  if (p.top_p < 1.0f) {
    double cum = 0;
    size_t i = 0;
    for (; i < keep; ++i) {
      cum += prob[i] / total;
      if (cum >= p.top_p) break;
    }
    keep = std::min(keep, i + 1);
  }
  if (p.min_p > 0.0f) {
    const double floor = p.min_p * prob[0];
    size_t i = 1;
    while (i < keep && prob[i] >= floor) ++i;
    keep = i;
  }
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += prob[i];
  if (!(kept > 0) || !std::isfinite(kept)) return idx[0];
  // 53-bit uniform from the sequence's own generator.
  const double u = static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0) * kept;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += prob[i];
    if (u < acc) return idx[i];
  }
  return idx[keep - 1];
}

}  // namespace quiver
