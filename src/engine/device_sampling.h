// DeviceSampling: one step's request to sample on the device (Backend::sample, run by the
// ModelRunner right after lm_head, behind the decode graphs' replay), and what comes back:
// per logits row a token, its logprob and rank, and the top-20 — never the [rows, vocab]
// logits unless a row needs the host path.
//
// Which rows go to the device is decided per request, from its own state only, so a seeded
// request gets the same tokens alone or batched: rows whose sampling the device op reproduces
// (no presence/frequency/repetition penalty, EOS not blocked by min_tokens, logprobs <= 20)
// are always sampled by the counter-based sampler of backend/sampling_math.h; the others
// always by the host sampler (sampler.h), from host logits.
//
// A structured-output row samples on the device under its grammar's token mask. The masks
// are written after the step's forward pass is launched and before its sampling, so the
// host's mask work (deriving the mask of a grammar state reached for the first time)
// overlaps the device's forward pass instead of preceding it.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "backend/backend.h"
#include "backend/ref/ref_sampling.h"
#include "backend/sampling_math.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"

namespace quiver {

// Whether the device op samples a row of this request exactly as specified.
bool device_can_sample(const SamplingParams& p, bool block_eos);

struct DeviceSampling {
  // ---- filled by the engine: one entry per logits row of the batch ----
  std::vector<sampling::RowParams> params;
  std::vector<int32_t> num_logprobs;  // top-K the row reports (0..20)
  std::vector<uint8_t> on_device;     // 1: sampled on the device; 0: the row needs host logits
  std::vector<uint8_t> masked;        // 1: a device row whose choice write_mask restricts
  // Writes row's mask (ceil(vocab / 32) words, SampleInputs::masks' layout); false when the
  // row is not to be sampled after all (its grammar ended it). Called once per masked row
  // per step, while the device computes the forward pass.
  std::function<bool(int row, uint32_t* words)> write_mask;
  std::vector<uint8_t> dropped;       // rows write_mask ended: their samples are not used

  // ---- filled by ModelRunner::execute when it ran the device op ----
  bool sampled = false;
  std::vector<int32_t> token, rank, top_ids;  // top_ids: [rows, kMaxLogprobs]
  std::vector<float> logprob, top_logprobs;

  // Sizes the inputs for `rows` logits rows, all on the host path until marked.
  void reset(int rows);
  void set_row(int row, const sampling::RowParams& p, int num_logprobs, bool masked = false);
  int rows() const { return static_cast<int>(on_device.size()); }
  // Some row (host sampling, prompt logprobs) needs the logits on the host.
  bool needs_host_logits() const;
  bool has(int row) const { return sampled && on_device[static_cast<size_t>(row)] != 0; }
  bool was_dropped(int row) const { return dropped[static_cast<size_t>(row)] != 0; }
  int num_masked() const;
  // The row's logprobs in logprobs_for's form (top k entries; k <= num_logprobs[row]).
  TokenLogprobs logprobs(int row, int k) const;
};

// The device layout of the op's inputs and outputs for `rows` rows: inputs are
// kSampleInputWords 32-bit words per row (packed on the host with pack_sample_inputs and
// uploaded with the step's other inputs), outputs kSampleOutputWords per row.
inline constexpr int kSampleInputWords = 9;
inline constexpr int kSampleOutputWords = 3 + 2 * sampling::kMaxLogprobs;

// Writes rows [0, rows) of the inputs at dst (rows * kSampleInputWords words): rows of
// `ds` that sample on the device get their parameters, every other row (padding, host
// path, prompt-only rows) is greedy with no logprobs, the op's cheapest case.
void pack_sample_inputs(const DeviceSampling* ds, int rows, int32_t* dst);
// Views of rows [first, first + count) of the packed inputs / outputs of a `rows`-row step.
SampleInputs sample_input_views(int32_t* base, int rows, int first, int count, Device dev);
SampleOutputs sample_output_views(int32_t* base, int rows, int first, int count, Device dev);
// Copies the first ds->rows() rows of the downloaded outputs (a `rows`-row step) into ds.
void unpack_sample_outputs(const int32_t* host, int rows, DeviceSampling* ds);

}  // namespace quiver
