#include "engine/device_sampling.h"

#include <algorithm>
#include <cstring>

namespace quiver {

namespace {

constexpr int kK = sampling::kMaxLogprobs;

// Input regions, in rows: temperature, top_k, top_p, min_p, seed (2 words), counter, row K,
// mask row.
enum InputRegion { kTemperature = 0, kTopK = 1, kTopP = 2, kMinP = 3, kSeed = 4, kCounter = 6, kRowK = 7, kMaskRow = 8 };
// Output regions, in rows: token, logprob, rank, then top ids and logprobs (K per row).
enum OutputRegion { kToken = 0, kLogprob = 1, kRank = 2, kTopIds = 3 };

int32_t float_bits(float f) {
  int32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

}  // namespace

bool device_can_sample(const SamplingParams& p, bool block_eos) {
  return p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f && p.repetition_penalty == 1.0f && !block_eos &&
         p.logit_bias.empty() && p.logprobs <= kK;
}

void DeviceSampling::reset(int rows) {
  params.assign(static_cast<size_t>(rows), sampling::RowParams{});
  num_logprobs.assign(static_cast<size_t>(rows), 0);
  on_device.assign(static_cast<size_t>(rows), 0);
  masked.assign(static_cast<size_t>(rows), 0);
  dropped.assign(static_cast<size_t>(rows), 0);
  write_mask = nullptr;
  sampled = false;
}

void DeviceSampling::set_row(int row, const sampling::RowParams& p, int k, bool mask) {
  params[static_cast<size_t>(row)] = p;
  num_logprobs[static_cast<size_t>(row)] = std::clamp(k, 0, kK);
  on_device[static_cast<size_t>(row)] = 1;
  masked[static_cast<size_t>(row)] = mask ? 1 : 0;
}

int DeviceSampling::num_masked() const { return static_cast<int>(std::count(masked.begin(), masked.end(), 1)); }

bool DeviceSampling::needs_host_logits() const {
  return std::any_of(on_device.begin(), on_device.end(), [](uint8_t d) { return d == 0; });
}

TokenLogprobs DeviceSampling::logprobs(int row, int k) const {
  const size_t r = static_cast<size_t>(row);
  TokenLogprobs out;
  out.token = token[r];
  out.logprob = logprob[r];
  out.rank = rank[r];
  for (int j = 0; j < std::min(k, kK); ++j) {
    const size_t at = r * kK + static_cast<size_t>(j);
    if (top_ids[at] < 0) break;  // past the vocabulary
    out.top.emplace_back(top_ids[at], top_logprobs[at]);
  }
  return out;
}

void pack_sample_inputs(const DeviceSampling* ds, int rows, int32_t* dst) {
  auto at = [&](int region, int r) -> int32_t& { return dst[static_cast<ptrdiff_t>(region) * rows + r]; };
  int next_mask = 0;
  for (int r = 0; r < rows; ++r) {
    const bool device = ds != nullptr && r < ds->rows() && ds->on_device[static_cast<size_t>(r)];
    const sampling::RowParams p = device ? ds->params[static_cast<size_t>(r)] : sampling::RowParams{0.0f};
    at(kTemperature, r) = float_bits(p.temperature);
    at(kTopK, r) = p.top_k;
    at(kTopP, r) = float_bits(p.top_p);
    at(kMinP, r) = float_bits(p.min_p);
    dst[static_cast<ptrdiff_t>(kSeed) * rows + 2 * r] = static_cast<int32_t>(static_cast<uint32_t>(p.seed));
    dst[static_cast<ptrdiff_t>(kSeed) * rows + 2 * r + 1] = static_cast<int32_t>(static_cast<uint32_t>(p.seed >> 32));
    at(kCounter, r) = static_cast<int32_t>(p.counter);
    at(kRowK, r) = device ? ds->num_logprobs[static_cast<size_t>(r)] : 0;
    at(kMaskRow, r) = device && ds->masked[static_cast<size_t>(r)] ? next_mask++ : -1;
  }
}

SampleInputs sample_input_views(int32_t* base, int rows, int first, int count, Device dev) {
  auto region = [&](int reg, int width, DType t) {
    return Tensor(base + static_cast<ptrdiff_t>(reg) * rows + static_cast<ptrdiff_t>(first) * width, t,
                  {static_cast<int64_t>(count)}, dev);
  };
  SampleInputs in;
  in.temperature = region(kTemperature, 1, DType::kF32);
  in.top_k = region(kTopK, 1, DType::kI32);
  in.top_p = region(kTopP, 1, DType::kF32);
  in.min_p = region(kMinP, 1, DType::kF32);
  in.seed = Tensor(base + static_cast<ptrdiff_t>(kSeed) * rows + 2 * static_cast<ptrdiff_t>(first), DType::kI32,
                   {static_cast<int64_t>(count), 2}, dev);
  in.counter = region(kCounter, 1, DType::kI32);
  in.row_logprobs = region(kRowK, 1, DType::kI32);
  in.mask_row = region(kMaskRow, 1, DType::kI32);
  in.num_logprobs = kK;
  return in;
}

SampleOutputs sample_output_views(int32_t* base, int rows, int first, int count, Device dev) {
  const int64_t n = count;
  auto region = [&](int reg, DType t) { return Tensor(base + static_cast<ptrdiff_t>(reg) * rows + first, t, {n}, dev); };
  SampleOutputs out;
  out.token = region(kToken, DType::kI32);
  out.logprob = region(kLogprob, DType::kF32);
  out.rank = region(kRank, DType::kI32);
  int32_t* top = base + static_cast<ptrdiff_t>(kTopIds) * rows;
  out.top_ids = Tensor(top + static_cast<ptrdiff_t>(first) * kK, DType::kI32, {n, kK}, dev);
  out.top_logprobs = Tensor(top + static_cast<ptrdiff_t>(rows + first) * kK, DType::kF32, {n, kK}, dev);
  return out;
}

void unpack_sample_outputs(const int32_t* host, int rows, DeviceSampling* ds) {
  const size_t n = static_cast<size_t>(ds->rows());
  auto ints = [&](const int32_t* from, size_t count, std::vector<int32_t>* to) { to->assign(from, from + count); };
  auto floats = [&](const int32_t* from, size_t count, std::vector<float>* to) {
    to->resize(count);
    std::memcpy(to->data(), from, count * 4);
  };
  ints(host + static_cast<ptrdiff_t>(kToken) * rows, n, &ds->token);
  floats(host + static_cast<ptrdiff_t>(kLogprob) * rows, n, &ds->logprob);
  ints(host + static_cast<ptrdiff_t>(kRank) * rows, n, &ds->rank);
  const int32_t* top = host + static_cast<ptrdiff_t>(kTopIds) * rows;
  ints(top, n * kK, &ds->top_ids);
  floats(top + static_cast<ptrdiff_t>(rows) * kK, n * kK, &ds->top_logprobs);
  ds->sampled = true;
}

}  // namespace quiver
