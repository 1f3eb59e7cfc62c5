// The scalar oracle of Backend::sample: one row at a time, written for clarity (a full sort
// per row). RefBackend runs it over all rows; CpuBackend splits the rows over threads.
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace quiver::sampling {

// One row's sampling parameters (host copies of the SampleInputs entries).
struct RowParams {
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0;
  uint32_t counter = 0;
};

struct RowResult {
  int32_t token = 0;
  float logprob = 0.0f;
  int32_t rank = 0;
};

// x: [vocab] logits. Writes k top entries (ids -1 / logprob -inf past the vocabulary).
// allowed (or null): the row's structured-output mask, SampleInputs::masks' bit layout.
RowResult sample_row(const float* x, int64_t vocab, const RowParams& p, int k, int32_t* top_ids, float* top_logprobs,
                     const uint32_t* allowed = nullptr);

// Backend::sample on host tensors, for rows [begin, end).
void sample_rows_host(const SampleOutputs& out, const Tensor& logits, const SampleInputs& in, int64_t begin,
                      int64_t end);

// Shape and dtype checks shared by every backend's sample().
void check_sample_args(const SampleOutputs& out, const Tensor& logits, const SampleInputs& in);

}  // namespace quiver::sampling
