// link: qv_engine
// Device sampling through the ModelRunner on the CPU (the ref backend stands in for the GPU;
// graphs are covered by tests/gpu): rows the engine marks are sampled by Backend::sample right
// after lm_head, in prefill (chunked, unpadded) and padded decode steps; the results equal the
// reference sampler run on the logits of a runner without device sampling; logits come back
// only when some row needs them; and device_can_sample sends penalties, blocked EOS and big
// logprobs to the host.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <vector>

#include "backend/ref/ref_backend.h"
#include "engine/device_sampling.h"
#include "engine/model_runner.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "model/llama_weights.h"

namespace quiver {
namespace {

namespace fs = std::filesystem;

const fs::path kModel = fs::path(QUIVER_SOURCE_DIR) / "tests/fixtures/llama_gqa";
constexpr int kBlockSize = 4, kBlocksPerSeq = 8;

// A runner on the ref backend; device = sample_on_device. max_logit_chunk 2 so a prefill's
// rows are sampled over several lm_head chunks.
struct Runner {
  explicit Runner(bool device) {
    config = load_model_config(kModel.string()).value();
    auto ckpt = std::make_shared<Checkpoint>(Checkpoint::open(kModel.string()).value());
    model = std::make_unique<LlamaModel>(config, load_llama_weights(config, ckpt, &backend).value(), &backend,
                                         kBlockSize * kBlocksPerSeq);
    kv = std::make_unique<KvCache>(&backend, KvCacheShape{config.num_layers, config.num_kv_heads, config.head_dim,
                                                          kBlockSize, DType::kF32},
                                   4 * kBlocksPerSeq);
    RunnerLimits limits;
    limits.max_num_batched_tokens = 64;
    limits.max_num_seqs = 4;
    limits.max_blocks_per_seq = kBlocksPerSeq;
    limits.max_model_len = kBlockSize * kBlocksPerSeq;
    limits.max_logit_chunk = 2;
    limits.sample_on_device = device;
    runner = std::make_unique<ModelRunner>(model.get(), nullptr, limits);
    runner->set_kv_cache(kv.get());
  }
  RefBackend backend;
  ModelConfig config;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<KvCache> kv;
  std::unique_ptr<ModelRunner> runner;
};

// Sequence s holds `lens[s]` tokens so far and computes them from `done[s]` on.
ForwardBatch step_batch(const std::vector<std::vector<int32_t>>& tokens, const std::vector<int>& done, bool decode) {
  ForwardBatch b;
  b.query_start.push_back(0);
  b.max_blocks_per_seq = kBlocksPerSeq;
  b.decode_only = decode;
  for (size_t s = 0; s < tokens.size(); ++s) {
    for (int pos = done[s]; pos < static_cast<int>(tokens[s].size()); ++pos) {
      b.token_ids.push_back(tokens[s][static_cast<size_t>(pos)]);
      b.positions.push_back(pos);
      b.slot_mapping.push_back(static_cast<int32_t>(s * kBlocksPerSeq * kBlockSize) + pos);
      b.token_lora_slot.push_back(-1);
    }
    b.query_start.push_back(b.num_tokens());
    b.seq_lens.push_back(static_cast<int32_t>(tokens[s].size()));
    b.logit_rows.push_back(b.num_tokens() - 1);
    for (int k = 0; k < kBlocksPerSeq; ++k) b.block_tables.push_back(static_cast<int32_t>(s * kBlocksPerSeq) + k);
  }
  return b;
}

// What the device op must have produced for row r: the reference on the host logits.
void expect_row(const DeviceSampling& ds, int r, const std::vector<float>& logits, int64_t vocab) {
  const int k = ds.num_logprobs[static_cast<size_t>(r)];
  std::vector<int32_t> ids(static_cast<size_t>(k) + 1);
  std::vector<float> lps(static_cast<size_t>(k) + 1);
  const sampling::RowResult want =
      sampling::sample_row(logits.data() + r * vocab, vocab, ds.params[static_cast<size_t>(r)], k, ids.data(), lps.data());
  ASSERT_TRUE(ds.has(r)) << "row " << r;
  EXPECT_EQ(ds.token[static_cast<size_t>(r)], want.token) << "row " << r;
  const TokenLogprobs got = ds.logprobs(r, k);
  EXPECT_EQ(got.logprob, want.logprob) << "row " << r;
  EXPECT_EQ(got.rank, want.rank) << "row " << r;
  ASSERT_EQ(got.top.size(), static_cast<size_t>(k)) << "row " << r;
  for (int j = 0; j < k; ++j) {
    EXPECT_EQ(got.top[static_cast<size_t>(j)].first, ids[static_cast<size_t>(j)]);
    EXPECT_EQ(got.top[static_cast<size_t>(j)].second, lps[static_cast<size_t>(j)]);
  }
}

TEST(DeviceSampling, RunnerSamplesPrefillAndDecodeRowsLikeTheReference) {
  Runner device(true), host(false);
  const int64_t vocab = device.config.vocab_size;
  std::vector<std::vector<int32_t>> tokens = {{5, 9, 100, 7, 3}, {300}, {44, 45, 46}};
  std::vector<int> done = {0, 0, 0};
  const sampling::RowParams modes[3] = {{0.0f, 0, 1.0f, 0.0f, 0, 0}, {0.8f, 0, 0.9f, 0.0f, 7, 0},
                                        {1.2f, 20, 1.0f, 0.05f, 99, 0}};
  for (int step = 0; step < 4; ++step) {
    const ForwardBatch b = step_batch(tokens, done, step > 0);
    DeviceSampling ds;
    ds.reset(3);
    for (int r = 0; r < 3; ++r) {
      sampling::RowParams p = modes[r];
      p.counter = static_cast<uint32_t>(step);
      // Step 2 leaves row 1 to the host: its logits (and only then) come back.
      if (!(step == 2 && r == 1)) ds.set_row(r, p, r == 0 ? 5 : 2 * step);
    }
    std::vector<float> got_logits, want_logits;
    const StepPath path = device.runner->execute(b, &got_logits, &ds);
    host.runner->execute(b, &want_logits);
    EXPECT_EQ(path.path, step == 0 ? "eager" : "eager bs=4 (padded)");
    ASSERT_TRUE(ds.sampled);
    if (step == 2) {
      EXPECT_EQ(got_logits, want_logits) << "a host row needs the logits";
    } else {
      EXPECT_TRUE(got_logits.empty()) << "step " << step << ": no row needed host logits";
    }
    for (int r = 0; r < 3; ++r) {
      if (step == 2 && r == 1) {
        EXPECT_FALSE(ds.has(r));
        continue;
      }
      expect_row(ds, r, want_logits, vocab);
    }
    for (size_t s = 0; s < tokens.size(); ++s) {
      done[s] = static_cast<int>(tokens[s].size());
      tokens[s].push_back(ds.has(static_cast<int>(s)) ? ds.token[s] : 1);
    }
  }
}

TEST(DeviceSampling, PenaltiesBlockedEosAndManyLogprobsStayOnTheHost) {
  SamplingParams p;
  EXPECT_TRUE(device_can_sample(p, false));
  p.logprobs = 20;
  EXPECT_TRUE(device_can_sample(p, false));
  EXPECT_FALSE(device_can_sample(p, true)) << "min_tokens still blocks EOS";
  p.logprobs = 21;
  EXPECT_FALSE(device_can_sample(p, false));
  SamplingParams pen;
  pen.presence_penalty = 0.5f;
  EXPECT_FALSE(device_can_sample(pen, false));
  pen = SamplingParams{};
  pen.frequency_penalty = -0.1f;
  EXPECT_FALSE(device_can_sample(pen, false));
  pen = SamplingParams{};
  pen.repetition_penalty = 1.1f;
  EXPECT_FALSE(device_can_sample(pen, false));
  pen = SamplingParams{};
  pen.logit_bias = {{3, -100.0f}};
  EXPECT_FALSE(device_can_sample(pen, false));
}

TEST(DeviceSampling, PackedInputsReadBackThroughTheViews) {
  DeviceSampling ds;
  ds.reset(3);
  ds.set_row(0, sampling::RowParams{0.7f, 40, 0.9f, 0.05f, 0x123456789abcdef0ull, 17}, 4);
  ds.set_row(2, sampling::RowParams{1.0f, 0, 1.0f, 0.0f, 5, 2}, 25);
  const int rows = 4;  // one padding row
  std::vector<int32_t> packed(static_cast<size_t>(rows * kSampleInputWords));
  pack_sample_inputs(&ds, rows, packed.data());
  const SampleInputs in = sample_input_views(packed.data(), rows, 0, rows, Device::kCpu);
  EXPECT_EQ(in.temperature.ptr<float>()[0], 0.7f);
  EXPECT_EQ(in.top_k.ptr<int32_t>()[0], 40);
  EXPECT_EQ(in.top_p.ptr<float>()[0], 0.9f);
  EXPECT_EQ(in.min_p.ptr<float>()[0], 0.05f);
  EXPECT_EQ(static_cast<uint32_t>(in.seed.ptr<int32_t>()[0]), 0x9abcdef0u);
  EXPECT_EQ(static_cast<uint32_t>(in.seed.ptr<int32_t>()[1]), 0x12345678u);
  EXPECT_EQ(in.counter.ptr<int32_t>()[0], 17);
  EXPECT_EQ(in.row_logprobs.ptr<int32_t>()[0], 4);
  EXPECT_EQ(in.row_logprobs.ptr<int32_t>()[2], 20) << "clamped to the op's K";
  for (int r : {1, 3}) {  // host row and padding row: greedy, no logprobs
    EXPECT_EQ(in.temperature.ptr<float>()[r], 0.0f);
    EXPECT_EQ(in.row_logprobs.ptr<int32_t>()[r], 0);
  }
  // A chunk view starts at its first row in every region.
  const SampleInputs chunk = sample_input_views(packed.data(), rows, 2, 2, Device::kCpu);
  EXPECT_EQ(chunk.counter.ptr<int32_t>()[0], 2);
  EXPECT_EQ(chunk.seed.ptr<int32_t>()[0], 5);
}

}  // namespace
}  // namespace quiver
