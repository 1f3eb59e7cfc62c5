#include "backend/ref/ref_sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "backend/ref/ref_backend.h"
#include "backend/sampling_math.h"

namespace quiver::sampling {

RowResult sample_row(const float* x, int64_t v, const RowParams& p, int k, int32_t* top_ids, float* top_logprobs,
                     const uint32_t* allowed) {
  // The order every rule below is a prefix of: logit descending, index ascending.
  std::vector<int32_t> order(static_cast<size_t>(v));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const uint32_t ka = order_key(x[a]), kb = order_key(x[b]);
    return ka > kb || (ka == kb && a < b);
  });
  const double lse = log_sum_exp(x, v, x[order[0]]);
  auto logprob = [&](int32_t i) { return static_cast<float>(x[i] - lse); };

  for (int j = 0; j < k; ++j) {
    const bool inside = j < v;
    top_ids[j] = inside ? order[static_cast<size_t>(j)] : -1;
    top_logprobs[j] = inside ? logprob(order[static_cast<size_t>(j)]) : -std::numeric_limits<float>::infinity();
  }

  // The choice: the same order, restricted to the tokens a mask allows.
  std::vector<int32_t> masked;
  if (allowed != nullptr) {
    for (int32_t i : order)
      if (mask_allows(allowed, i)) masked.push_back(i);
  }
  const std::vector<int32_t>& choice = masked.empty() ? order : masked;
  const float mx = x[choice[0]];
  size_t pick = 0;  // position in `choice` of the chosen token
  if (p.temperature != 0.0f) {
    auto e = [&](size_t j) { return rel_prob(x[choice[j]], mx, p.temperature); };
    size_t n = choice.size();
    if (top_k_active(p.top_k, v)) n = std::min(n, static_cast<size_t>(p.top_k));
    if (top_p_active(p.top_p)) {
      uint64_t total = 0;
      for (size_t j = 0; j < n; ++j) total += mass_q(e(j));
      const uint64_t target = top_p_target(p.top_p, total);
      uint64_t before = 0;  // exclusive cumulative mass
      size_t j = 0;
      while (j < n && before < target) before += mass_q(e(j++));
      n = j;
    }
    if (min_p_active(p.min_p)) {
      size_t j = 0;
      while (j < n && e(j) >= p.min_p) ++j;
      n = std::max<size_t>(j, 1);  // the op falls back to the argmax when nothing passes
    }
    float best = -1.0f;
    for (size_t j = 0; j < n; ++j) {
      const int32_t i = choice[j];
      const float score = race_score(e(j), token_bits(p.seed, p.counter, i));
      if (score > best || (score == best && i < choice[pick])) {
        best = score;
        pick = j;
      }
    }
  }
  RowResult r;
  r.token = choice[pick];
  r.logprob = logprob(r.token);
  // The rank is the token's place among all tokens, allowed or not.
  r.rank = static_cast<int32_t>(std::find(order.begin(), order.end(), r.token) - order.begin()) + 1;
  return r;
}

void check_sample_args(const SampleOutputs& out, const Tensor& logits, const SampleInputs& in) {
  check(logits.dtype == DType::kF32 && logits.ndim == 2, "sample: logits must be [rows, vocab] f32");
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  check(vocab >= 1 && vocab < kMaxVocab, "sample: vocab out of range");
  check(in.num_logprobs >= 0 && in.num_logprobs <= kMaxLogprobs, "sample: num_logprobs must be in [0, 20]");
  auto rows_of = [rows](const Tensor& t, DType dt, int64_t cols, const char* what) {
    check(t.dtype == dt && t.numel() >= rows * cols && (rows == 0 || t.data != nullptr), what);
  };
  rows_of(in.temperature, DType::kF32, 1, "sample: temperature must be [rows] f32");
  rows_of(in.top_k, DType::kI32, 1, "sample: top_k must be [rows] i32");
  rows_of(in.top_p, DType::kF32, 1, "sample: top_p must be [rows] f32");
  rows_of(in.min_p, DType::kF32, 1, "sample: min_p must be [rows] f32");
  rows_of(in.seed, DType::kI32, 2, "sample: seed must be [rows, 2] i32");
  rows_of(in.counter, DType::kI32, 1, "sample: counter must be [rows] i32");
  rows_of(out.token, DType::kI32, 1, "sample: token must be [rows] i32");
  rows_of(out.logprob, DType::kF32, 1, "sample: logprob must be [rows] f32");
  rows_of(out.rank, DType::kI32, 1, "sample: rank must be [rows] i32");
  if (!in.row_logprobs.empty()) rows_of(in.row_logprobs, DType::kI32, 1, "sample: row_logprobs must be [rows] i32");
  if (!in.mask_row.empty()) {
    rows_of(in.mask_row, DType::kI32, 1, "sample: mask_row must be [rows] i32");
    check(in.masks.dtype == DType::kI32 && in.masks.ndim == 2 && in.masks.dim(1) == (vocab + 31) / 32 &&
              in.masks.data != nullptr,
          "sample: masks must be [table rows, ceil(vocab / 32)] i32");
  }
  if (in.num_logprobs > 0) {
    rows_of(out.top_ids, DType::kI32, in.num_logprobs, "sample: top_ids must be [rows, K] i32");
    rows_of(out.top_logprobs, DType::kF32, in.num_logprobs, "sample: top_logprobs must be [rows, K] f32");
  }
}

void sample_rows_host(const SampleOutputs& out, const Tensor& logits, const SampleInputs& in, int64_t begin,
                      int64_t end) {
  const int64_t vocab = logits.dim(1);
  const int k = in.num_logprobs;
  for (int64_t r = begin; r < end; ++r) {
    RowParams p;
    p.temperature = in.temperature.ptr<float>()[r];
    p.top_k = in.top_k.ptr<int32_t>()[r];
    p.top_p = in.top_p.ptr<float>()[r];
    p.min_p = in.min_p.ptr<float>()[r];
    const uint32_t* seed = reinterpret_cast<const uint32_t*>(in.seed.ptr<int32_t>()) + 2 * r;
    p.seed = static_cast<uint64_t>(seed[0]) | static_cast<uint64_t>(seed[1]) << 32;
    p.counter = static_cast<uint32_t>(in.counter.ptr<int32_t>()[r]);
    int32_t* top_ids = k > 0 ? out.top_ids.ptr<int32_t>() + r * k : nullptr;
    float* top_logprobs = k > 0 ? out.top_logprobs.ptr<float>() + r * k : nullptr;
    const int row_k = in.row_logprobs.empty() ? k : std::clamp(in.row_logprobs.ptr<int32_t>()[r], 0, k);
    for (int j = row_k; j < k; ++j) {
      top_ids[j] = -1;
      top_logprobs[j] = -std::numeric_limits<float>::infinity();
    }
    const int32_t mask = in.mask_row.empty() ? -1 : in.mask_row.ptr<int32_t>()[r];
    check(mask < (in.masks.empty() ? 0 : in.masks.dim(0)), "sample: mask_row past the mask table");
    const uint32_t* allowed =
        mask < 0 ? nullptr : reinterpret_cast<const uint32_t*>(in.masks.ptr<int32_t>()) + mask * in.masks.dim(1);
    const RowResult res = sample_row(logits.ptr<float>() + r * vocab, vocab, p, row_k, top_ids, top_logprobs, allowed);
    out.token.ptr<int32_t>()[r] = res.token;
    out.logprob.ptr<float>()[r] = res.logprob;
    out.rank.ptr<int32_t>()[r] = res.rank;
  }
}

}  // namespace quiver::sampling

namespace quiver {

void RefBackend::sample(const SampleOutputs& out, Tensor logits, const SampleInputs& in) {
  sampling::check_sample_args(out, logits, in);
  sampling::sample_rows_host(out, logits, in, 0, logits.dim(0));
}

}  // namespace quiver
