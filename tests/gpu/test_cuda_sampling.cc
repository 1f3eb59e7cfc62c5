// link: qv_backend
// CUDA Backend::sample vs the scalar reference: the crafted cases of tests/ops, language-
// model-like rows at vocab 32000 and 151936 with 1, 3, 13 and 64 rows and every parameter
// mix, a counter sweep (thousands of seeded draws), and a graph replay that must equal the
// eager op bit for bit. Tokens, ranks and top-K ids must be equal; logprobs agree to 2e-5
// (the reference sums exp in double, the GPU sums expf in double). Skips without a GPU.
#include <cstdio>

#include "gpu/cuda_test_util.h"
#include "ops/sampling_cases.h"

namespace quiver::test {
namespace {

class CudaSampling : public CudaTest {
 protected:
  // Prints one line per case and checks every field.
  void expect_matches(const SampleCase& c, const SampleResults& got, const SampleResults& want) {
    size_t token_diff = 0, rank_diff = 0, top_diff = 0;
    double lp_err = 0;
    auto lp_close = [&](float a, float b) {
      if (std::isinf(a) && std::isinf(b) && a == b) return true;
      if (!std::isfinite(a) || !std::isfinite(b)) return false;
      lp_err = std::max(lp_err, static_cast<double>(std::fabs(a - b)));
      return std::fabs(a - b) <= 2e-5f;
    };
    size_t lp_bad = 0;
    for (size_t r = 0; r < want.token.size(); ++r) {
      if (got.token[r] != want.token[r]) {
        ++token_diff;
        ADD_FAILURE() << c.name << " row " << r << ": token " << got.token[r] << " want " << want.token[r]
                      << " (temperature " << c.params[r].temperature << ", top_k " << c.params[r].top_k << ", top_p "
                      << c.params[r].top_p << ", min_p " << c.params[r].min_p << ")";
        continue;  // rank and logprob belong to different tokens
      }
      rank_diff += got.rank[r] != want.rank[r];
      lp_bad += !lp_close(got.logprob[r], want.logprob[r]);
    }
    for (size_t i = 0; i < want.top_ids.size(); ++i) {
      top_diff += got.top_ids[i] != want.top_ids[i];
      lp_bad += !lp_close(got.top_logprobs[i], want.top_logprobs[i]);
    }
    std::printf("  %-52s rows=%-3zu tokens differ %zu, ranks %zu, top ids %zu, logprobs off %zu (max err %.2e) %s\n",
                c.name.c_str(), want.token.size(), token_diff, rank_diff, top_diff, lp_bad, lp_err,
                token_diff + rank_diff + top_diff + lp_bad == 0 ? "ok" : "FAIL");
    EXPECT_EQ(rank_diff, 0u) << c.name;
    EXPECT_EQ(top_diff, 0u) << c.name;
    EXPECT_EQ(lp_bad, 0u) << c.name;
  }

  void check_case(const SampleCase& c) { expect_matches(c, run_sample(gpu_.get(), c), run_sample(&ref_, c)); }
};

TEST_F(CudaSampling, CraftedCases) {
  for (const SampleCase& c : crafted_cases()) check_case(c);
}

TEST_F(CudaSampling, SmallAndOddVocabularies) {
  for (int64_t vocab : {17, 1000, 1023, 1025, 4099})
    for (int k : {0, 1, 20}) check_case(random_case(rng_, vocab, 13, k, static_cast<uint64_t>(vocab * 31 + k)));
}

TEST_F(CudaSampling, LanguageModelVocabularies) {
  for (int64_t vocab : {32000, 151936})
    for (int64_t rows : {1, 3, 13, 64})
      for (int k : {0, 20}) check_case(random_case(rng_, vocab, rows, k, static_cast<uint64_t>(rows * 1000 + k)));
}

TEST_F(CudaSampling, StructuredOutputMasks) {
  for (int64_t vocab : {1000, 32000, 151936})
    for (int64_t rows : {1, 6, 30}) check_case(masked_case(rng_, vocab, rows, 20, static_cast<uint64_t>(vocab + rows)));
}

// Ties everywhere: few distinct values over a big vocabulary, so top-k, top-p and top-K
// boundaries fall inside runs of equal logits (the index-ordered tie scan).
TEST_F(CudaSampling, TiesStraddlingBoundaries) {
  SampleCase c = random_case(rng_, 32000, 21, 20, 5);
  c.name = "quantised logits vocab=32000";
  for (float& x : c.logits) x = std::round(x);
  for (int64_t r = 0; r < c.rows(); ++r) {
    const uint32_t counter = static_cast<uint32_t>(r);
    const sampling::RowParams modes[7] = {greedy(),
                                          sampled(1.0f, 5, 1.0f, 0.0f, 9, counter),
                                          sampled(1.0f, 100, 1.0f, 0.0f, 9, counter),
                                          sampled(1.0f, 0, 0.3f, 0.0f, 9, counter),
                                          sampled(0.5f, 0, 0.9f, 0.0f, 9, counter),
                                          sampled(1.0f, 1000, 0.5f, 0.0f, 9, counter),
                                          sampled(1.0f, 0, 1.0f, 0.2f, 9, counter)};
    c.params[static_cast<size_t>(r)] = modes[r % 7];
  }
  check_case(c);
}

TEST_F(CudaSampling, CounterSweepEqualsReference) {
  const std::vector<double> probs = {0.3, 0.2, 0.15, 0.1, 0.1, 0.08, 0.05, 0.02};
  check_case(counter_sweep(probs, sampled(1.0f, 0, 1.0f, 0.0f, 77, 0), 5000));
  check_case(counter_sweep(probs, sampled(1.0f, 5, 0.8f, 0.0f, 78, 0), 5000));
  check_case(counter_sweep(probs, sampled(2.0f, 6, 0.9f, 0.3f, 79, 0), 5000));
}

// Captured once, replayed with new counters and logits in the same buffers: equal to the
// eager op on those inputs, bit for bit.
TEST_F(CudaSampling, GraphReplayEqualsEager) {
  SampleCase c = random_case(rng_, 32000, 13, 20, 3);
  SampleBuffers graph_buffers;
  graph_buffers.upload(gpu_.get(), c);
  graph_buffers.run(gpu_.get());  // warm-up outside the capture
  gpu_->synchronize();
  gpu_->begin_capture();
  graph_buffers.run(gpu_.get());
  const int graph = gpu_->end_capture();
  for (int round = 0; round < 3; ++round) {
    SampleCase next = random_case(rng_, 32000, 13, 20, 100 + round);
    graph_buffers.upload(gpu_.get(), next);
    gpu_->replay(graph);
    const SampleResults replayed = graph_buffers.download(gpu_.get());
    const SampleResults eager = run_sample(gpu_.get(), next);
    EXPECT_EQ(replayed.token, eager.token) << round;
    EXPECT_EQ(replayed.rank, eager.rank) << round;
    EXPECT_EQ(replayed.top_ids, eager.top_ids) << round;
    EXPECT_EQ(0, std::memcmp(replayed.logprob.data(), eager.logprob.data(), eager.logprob.size() * 4)) << round;
    EXPECT_EQ(0, std::memcmp(replayed.top_logprobs.data(), eager.top_logprobs.data(), eager.top_logprobs.size() * 4))
        << round;
    expect_matches(next, replayed, run_sample(&ref_, next));
  }
}

}  // namespace
}  // namespace quiver::test
