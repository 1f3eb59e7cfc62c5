// Shared by the Backend::sample tests (tests/ops/test_sampling_ops.cc on ref/cpu,
// tests/gpu/test_cuda_sampling.cc on cuda): crafted and random logits with per-row
// sampling parameters, and a runner that feeds any backend through its own memory.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/ref/ref_sampling.h"
#include "backend/sampling_math.h"

namespace quiver::test {

struct SampleCase {
  std::string name;
  int64_t vocab = 0;
  std::vector<float> logits;                 // [rows, vocab]
  std::vector<sampling::RowParams> params;   // [rows]
  int num_logprobs = 0;
  std::vector<int32_t> row_logprobs;         // [rows] or empty (every row gets K)
  // Structured-output masks: row r uses row mask_row[r] of masks ([table rows, words]), -1
  // none; empty mask_row: no row is masked.
  std::vector<int32_t> mask_row;
  std::vector<uint32_t> masks;
  int64_t rows() const { return static_cast<int64_t>(params.size()); }
  int64_t mask_words() const { return (vocab + 31) / 32; }
  bool allows(int64_t r, int64_t i) const {
    if (mask_row.empty() || mask_row[static_cast<size_t>(r)] < 0) return true;
    return sampling::mask_allows(masks.data() + mask_row[static_cast<size_t>(r)] * mask_words(), i);
  }
};

struct SampleResults {
  std::vector<int32_t> token, rank, top_ids;  // top_ids: [rows, K]
  std::vector<float> logprob, top_logprobs;
};

// A case's inputs and outputs in one backend's memory. upload() may be called again with a
// case of the same shape: the buffers (and so a captured graph's addresses) stay put.
struct SampleBuffers {
  Buffer logits, inputs, outputs, masks;
  Tensor logits_view;
  SampleInputs in;
  SampleOutputs out;
  int64_t rows = 0, k = 0;

  void upload(Backend* b, const SampleCase& c) {
    const Device dev = b->device();
    if (logits.data() == nullptr) {
      rows = c.rows();
      k = c.num_logprobs;
      logits = Buffer(b, std::max<size_t>(c.logits.size() * 4, 4));
      inputs = Buffer(b, static_cast<size_t>(9 * rows + 1) * 4);
      outputs = Buffer(b, static_cast<size_t>(out_words()) * 4);
      masks = Buffer(b, std::max<size_t>(c.masks.size() * 4, 4));
    }
    check(rows == c.rows() && k == c.num_logprobs && logits.bytes() >= c.logits.size() * 4, "SampleBuffers: new shape");
    b->copy_from_host(logits.data(), c.logits.data(), c.logits.size() * 4);
    logits_view = Tensor(logits.data(), DType::kF32, {rows, c.vocab}, dev);
    // Inputs: temperature, top_k, top_p, min_p, seed (2 words), counter, row K, mask row;
    // 9 words per row.
    std::vector<uint32_t> w(static_cast<size_t>(9 * rows + 1));
    auto put_f = [&](int64_t at, float v) { std::memcpy(&w[static_cast<size_t>(at)], &v, 4); };
    for (int64_t r = 0; r < rows; ++r) {
      const sampling::RowParams& p = c.params[static_cast<size_t>(r)];
      put_f(r, p.temperature);
      w[static_cast<size_t>(rows + r)] = static_cast<uint32_t>(p.top_k);
      put_f(2 * rows + r, p.top_p);
      put_f(3 * rows + r, p.min_p);
      w[static_cast<size_t>(4 * rows + 2 * r)] = static_cast<uint32_t>(p.seed);
      w[static_cast<size_t>(4 * rows + 2 * r + 1)] = static_cast<uint32_t>(p.seed >> 32);
      w[static_cast<size_t>(6 * rows + r)] = p.counter;
      if (!c.row_logprobs.empty()) w[static_cast<size_t>(7 * rows + r)] = static_cast<uint32_t>(c.row_logprobs[static_cast<size_t>(r)]);
      if (!c.mask_row.empty()) w[static_cast<size_t>(8 * rows + r)] = static_cast<uint32_t>(c.mask_row[static_cast<size_t>(r)]);
    }
    if (!c.masks.empty()) b->copy_from_host(masks.data(), c.masks.data(), c.masks.size() * 4);
    b->copy_from_host(inputs.data(), w.data(), w.size() * 4);
    auto* base = static_cast<uint32_t*>(inputs.data());
    in.temperature = Tensor(base, DType::kF32, {rows}, dev);
    in.top_k = Tensor(base + rows, DType::kI32, {rows}, dev);
    in.top_p = Tensor(base + 2 * rows, DType::kF32, {rows}, dev);
    in.min_p = Tensor(base + 3 * rows, DType::kF32, {rows}, dev);
    in.seed = Tensor(base + 4 * rows, DType::kI32, {rows, 2}, dev);
    in.counter = Tensor(base + 6 * rows, DType::kI32, {rows}, dev);
    in.num_logprobs = c.num_logprobs;
    in.row_logprobs = c.row_logprobs.empty() ? Tensor() : Tensor(base + 7 * rows, DType::kI32, {rows}, dev);
    in.mask_row = c.mask_row.empty() ? Tensor() : Tensor(base + 8 * rows, DType::kI32, {rows}, dev);
    in.masks = c.mask_row.empty() ? Tensor()
                                  : Tensor(masks.data(), DType::kI32,
                                           {static_cast<int64_t>(c.masks.size()) / c.mask_words(), c.mask_words()}, dev);
    // Poisoned outputs: NaN logprobs and absurd ids unless the op writes them.
    std::vector<uint32_t> poison(static_cast<size_t>(out_words()), 0x7fc00001u);
    b->copy_from_host(outputs.data(), poison.data(), poison.size() * 4);
    auto* ob = static_cast<uint32_t*>(outputs.data());
    out.token = Tensor(ob, DType::kI32, {rows}, dev);
    out.logprob = Tensor(ob + rows, DType::kF32, {rows}, dev);
    out.rank = Tensor(ob + 2 * rows, DType::kI32, {rows}, dev);
    out.top_ids = Tensor(ob + 3 * rows, DType::kI32, {rows, std::max<int64_t>(k, 1)}, dev);
    out.top_logprobs = Tensor(ob + 3 * rows + rows * k, DType::kF32, {rows, std::max<int64_t>(k, 1)}, dev);
  }

  void run(Backend* b) { b->sample(out, logits_view, in); }

  SampleResults download(Backend* b) const {
    std::vector<uint32_t> back(static_cast<size_t>(out_words()));
    b->copy_to_host(back.data(), outputs.data(), back.size() * 4);
    auto ints = [&](int64_t at, int64_t n) {
      std::vector<int32_t> v(static_cast<size_t>(n));
      std::memcpy(v.data(), &back[static_cast<size_t>(at)], static_cast<size_t>(n) * 4);
      return v;
    };
    auto floats = [&](int64_t at, int64_t n) {
      std::vector<float> v(static_cast<size_t>(n));
      std::memcpy(v.data(), &back[static_cast<size_t>(at)], static_cast<size_t>(n) * 4);
      return v;
    };
    SampleResults res;
    res.token = ints(0, rows);
    res.logprob = floats(rows, rows);
    res.rank = ints(2 * rows, rows);
    res.top_ids = ints(3 * rows, rows * k);
    res.top_logprobs = floats(3 * rows + rows * k, rows * k);
    return res;
  }

 private:
  int64_t out_words() const { return 3 * rows + 2 * rows * k + 1; }
};

// Runs backend->sample on the case through the backend's own memory.
inline SampleResults run_sample(Backend* b, const SampleCase& c) {
  SampleBuffers buffers;
  buffers.upload(b, c);
  buffers.run(b);
  return buffers.download(b);
}

inline sampling::RowParams greedy() {
  sampling::RowParams p;
  p.temperature = 0.0f;
  return p;
}

inline sampling::RowParams sampled(float t, int top_k, float top_p, float min_p, uint64_t seed, uint32_t counter) {
  return sampling::RowParams{t, top_k, top_p, min_p, seed, counter};
}

// The parameter mixes every random case cycles through (greedy, each rule alone, all).
inline sampling::RowParams param_mix(int r, uint64_t seed) {
  const uint32_t counter = static_cast<uint32_t>(r * 7 + 3);
  switch (r % 7) {
    case 0: return greedy();
    case 1: return sampled(1.0f, 0, 1.0f, 0.0f, seed, counter);
    case 2: return sampled(0.7f, 50, 1.0f, 0.0f, seed, counter);
    case 3: return sampled(0.8f, 0, 0.9f, 0.0f, seed + 1, counter);
    case 4: return sampled(1.3f, 0, 1.0f, 0.05f, seed, counter);
    case 5: return sampled(0.6f, 40, 0.8f, 0.02f, seed + 2, counter);
    default: return sampled(1.0f, 1, 1.0f, 0.0f, seed, counter);
  }
}

// Logits like a language model's: a few strong candidates over a broad normal floor.
inline SampleCase random_case(std::mt19937& rng, int64_t vocab, int64_t rows, int k, uint64_t seed) {
  SampleCase c;
  c.name = "random vocab=" + std::to_string(vocab) + " rows=" + std::to_string(rows) + " K=" + std::to_string(k);
  c.vocab = vocab;
  c.num_logprobs = k;
  std::normal_distribution<float> noise(0.0f, 2.0f);
  c.logits.resize(static_cast<size_t>(vocab * rows));
  for (float& x : c.logits) x = noise(rng);
  for (int64_t r = 0; r < rows; ++r) {
    for (int j = 0; j < 8; ++j) c.logits[static_cast<size_t>(r * vocab + rng() % vocab)] += 6.0f + 0.5f * j;
    c.params.push_back(param_mix(static_cast<int>(r), seed));
  }
  return c;
}

// One row of a distribution over `probs.size()` tokens (logits = log p), repeated over
// `rows` consecutive counters: the empirical frequencies of the sampled tokens.
inline SampleCase counter_sweep(const std::vector<double>& probs, sampling::RowParams p, int64_t rows) {
  SampleCase c;
  c.name = "counter sweep";
  c.vocab = static_cast<int64_t>(probs.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (double q : probs) c.logits.push_back(static_cast<float>(std::log(q)));
    p.counter = static_cast<uint32_t>(r);
    c.params.push_back(p);
  }
  return c;
}

// Distributions with the awkward parts: tied maxima, a flat row, vocabularies smaller than
// K, ties straddling a top-k / top-p / top-K boundary, -inf and -0 entries, huge logits.
inline std::vector<SampleCase> crafted_cases() {
  std::vector<SampleCase> out;
  const float inf = std::numeric_limits<float>::infinity();
  auto add = [&](std::string name, std::vector<float> row, std::vector<sampling::RowParams> params, int k) {
    SampleCase c;
    c.name = std::move(name);
    c.vocab = static_cast<int64_t>(row.size());
    c.num_logprobs = k;
    for (size_t r = 0; r < params.size(); ++r) c.logits.insert(c.logits.end(), row.begin(), row.end());
    c.params = std::move(params);
    out.push_back(std::move(c));
  };
  std::vector<float> ties(40, 0.0f);
  for (size_t i = 0; i < ties.size(); ++i) ties[i] = std::sin(static_cast<float>(i));
  ties[5] = ties[9] = ties[30] = 3.0f;
  add("tied maxima", ties,
      {greedy(), sampled(1.0f, 1, 1.0f, 0.0f, 7, 0), sampled(1.0f, 2, 1.0f, 0.0f, 7, 1), sampled(0.5f, 0, 0.3f, 0.0f, 7, 2),
       sampled(1.0f, 0, 1.0f, 0.9f, 7, 3)},
      4);
  add("flat", std::vector<float>(100, 0.5f),
      {greedy(), sampled(1.0f, 0, 1.0f, 0.0f, 1, 0), sampled(1.0f, 3, 1.0f, 0.0f, 1, 1), sampled(1.0f, 0, 0.05f, 0.0f, 1, 2),
       sampled(2.0f, 7, 0.5f, 0.5f, 1, 3)},
      20);
  for (int v : {1, 2, 7})
    add("vocab " + std::to_string(v), std::vector<float>(static_cast<size_t>(v), 1.0f),
        {greedy(), sampled(1.0f, 0, 1.0f, 0.0f, 3, 9), sampled(1.0f, 5, 0.5f, 0.0f, 3, 9)}, 20);
  std::vector<float> steps = {5, 4, 4, 4, 3, 3, 2, 4, 1, 0};
  add("ties at the boundary", steps,
      {greedy(), sampled(1.0f, 2, 1.0f, 0.0f, 11, 0), sampled(1.0f, 3, 1.0f, 0.0f, 11, 1), sampled(1.0f, 0, 0.5f, 0.0f, 11, 2),
       sampled(1.0f, 0, 0.75f, 0.0f, 11, 3), sampled(1.0f, 4, 0.9f, 0.0f, 11, 4), sampled(1.0f, 0, 1.0f, 0.3f, 11, 5)},
      3);
  add("-inf and signed zeros", {-inf, 0.0f, -0.0f, -inf, 0.0f, -1.0f, -0.0f},
      {greedy(), sampled(1.0f, 0, 1.0f, 0.0f, 5, 0), sampled(1.0f, 2, 1.0f, 0.0f, 5, 1), sampled(1.0f, 0, 0.4f, 0.0f, 5, 2)}, 5);
  add("huge logits, tiny temperature", {1e4f, -1e4f, 9999.5f, 3e4f, 2.9999e4f, -3e4f, 0.0f},
      {greedy(), sampled(1e-3f, 0, 1.0f, 0.0f, 2, 0), sampled(100.0f, 0, 1.0f, 0.0f, 2, 1), sampled(50.0f, 0, 0.7f, 0.1f, 2, 2)},
      7);
  // Per-row K below the op's K (graphs are captured with K = 20; rows ask for 0..K).
  SampleCase mixed_k = out[1];
  mixed_k.name = "flat, per-row K";
  mixed_k.row_logprobs = {0, 1, 20, 5, 3};
  out.push_back(std::move(mixed_k));
  return out;
}

// Structured-output masks over random language-model rows: rows allowing a random tenth
// of the vocabulary, one token, everything but the row's top tokens, no token at all (the
// choice is then unconstrained), rows sharing a table row, and unmasked rows between them.
inline SampleCase masked_case(std::mt19937& rng, int64_t vocab, int64_t rows, int k, uint64_t seed) {
  SampleCase c = random_case(rng, vocab, rows, k, seed);
  c.name = "masked " + c.name;
  const int64_t words = c.mask_words();
  const int64_t table = 5;
  c.masks.assign(static_cast<size_t>(table * words), 0u);
  auto allow = [&](int64_t t, int64_t i) { c.masks[static_cast<size_t>(t * words + i / 32)] |= 1u << (i % 32); };
  for (int64_t i = 0; i < vocab; ++i)
    if (rng() % 10 == 0) allow(0, i);
  allow(1, static_cast<int64_t>(rng() % vocab));
  // Table row 2: all but the 8 strong candidates of logits row 2 (random_case's boosts),
  // the row that uses it.
  std::vector<int64_t> top(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) top[static_cast<size_t>(i)] = i;
  const float* row2 = c.logits.data() + std::min<int64_t>(2, rows - 1) * vocab;
  std::partial_sort(top.begin(), top.begin() + std::min<int64_t>(8, vocab), top.end(),
                    [&](int64_t a, int64_t b) { return row2[a] > row2[b]; });
  for (int64_t i = 0; i < vocab; ++i)
    if (std::find(top.begin(), top.begin() + std::min<int64_t>(8, vocab), i) == top.begin() + std::min<int64_t>(8, vocab))
      allow(2, i);
  // Table row 3 stays empty; row 4: every even token.
  for (int64_t i = 0; i < vocab; i += 2) allow(4, i);
  c.mask_row.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) c.mask_row[static_cast<size_t>(r)] = r % 6 == 5 ? -1 : static_cast<int32_t>(r % 6 % table);
  return c;
}

}  // namespace quiver::test
