// link: qv_engine
// Decode padding and graph replay on the CPU:
// - the pure parts of graph_runner.h: buckets, bucket choice, pad_decode_batch's rows;
// - ModelRunner with a recording backend that behaves like CUDA graphs (ops between
//   begin_capture and end_capture are recorded with their arguments, not run, and replay
//   re-runs them verbatim; host copies during capture are refused). Driven through prefill
//   and decode steps on the llama_gqa fixture with adapters swapped between replays, the
//   graph runner must match the eager padded runner bitwise, and (on the ref backend, whose
//   rows are independent of the batch) an unpadded run too; so must a backend whose plan
//   leaves every LoRA expand to the op after its projection (ExpandKernel::kNextOp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <vector>

#include "unit/decode_steps.h"
#include "unit/recording_backend.h"
#include "engine/graph_runner.h"
#include "engine/model_runner.h"
#include "io/model_config.h"
#include "io/peft_adapter.h"
#include "io/safetensors.h"
#include "model/llama_weights.h"

namespace quiver {
namespace {

namespace fs = std::filesystem;

TEST(DecodeBuckets, Grid) {
  const std::vector<int> b256 = decode_buckets(256);
  std::vector<int> want = {1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64};
  for (int b = 80; b <= 256; b += 16) want.push_back(b);
  EXPECT_EQ(b256, want);
  EXPECT_EQ(decode_buckets(64), (std::vector<int>{1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64}));
  EXPECT_EQ(decode_buckets(13), (std::vector<int>{1, 2, 4, 8, 13}));
  EXPECT_EQ(decode_buckets(100), (std::vector<int>{1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 100}));
  EXPECT_EQ(decode_buckets(1), (std::vector<int>{1}));
  EXPECT_TRUE(decode_buckets(0).empty());
  EXPECT_EQ(pick_bucket(b256, 1), 1);
  EXPECT_EQ(pick_bucket(b256, 3), 4);
  EXPECT_EQ(pick_bucket(b256, 9), 16);
  EXPECT_EQ(pick_bucket(b256, 64), 64);
  EXPECT_EQ(pick_bucket(b256, 65), 80);
  EXPECT_EQ(pick_bucket(b256, 256), 256);
  EXPECT_EQ(pick_bucket(b256, 257), -1);
}

// Three decode sequences with block tables of width 2.
ForwardBatch three_decodes() {
  ForwardBatch b;
  b.token_ids = {11, 12, 13};
  b.positions = {20, 5, 31};
  b.slot_mapping = {84, 37, 95};
  b.token_lora_slot = {1, -1, 0};
  b.query_start = {0, 1, 2, 3};
  b.seq_lens = {21, 6, 32};
  b.max_blocks_per_seq = 2;
  b.block_tables = {4, 5, 2, 0, 3, 5};
  b.logit_rows = {0, 1, 2};
  b.decode_only = true;
  return b;
}

TEST(PadDecodeBatch, PaddingRows) {
  const ForwardBatch b = three_decodes();
  ASSERT_TRUE(is_paddable_decode(b));
  const ForwardBatch p = pad_decode_batch(b, 4, 5);
  EXPECT_EQ(p.token_ids, (std::vector<int32_t>{11, 12, 13, 0}));
  EXPECT_EQ(p.positions, (std::vector<int32_t>{20, 5, 31, 0}));
  EXPECT_EQ(p.slot_mapping, (std::vector<int32_t>{84, 37, 95, -1}));
  EXPECT_EQ(p.token_lora_slot, (std::vector<int32_t>{1, -1, 0, -1}));
  EXPECT_EQ(p.query_start, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(p.seq_lens, (std::vector<int32_t>{21, 6, 32, 1}));
  EXPECT_EQ(p.max_blocks_per_seq, 5);
  EXPECT_EQ(p.block_tables, (std::vector<int32_t>{4, 5, 0, 0, 0, 2, 0, 0, 0, 0, 3, 5, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(p.logit_rows, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_TRUE(p.decode_only);
  // Exactly a bucket: only the restride.
  const ForwardBatch same = pad_decode_batch(b, 3, 2);
  EXPECT_EQ(same.token_ids, b.token_ids);
  EXPECT_EQ(same.block_tables, b.block_tables);
  // An empty batch pads to all padding rows (what capture records with).
  ForwardBatch none;
  none.decode_only = true;
  const ForwardBatch all = pad_decode_batch(none, 2, 3);
  EXPECT_EQ(all.slot_mapping, (std::vector<int32_t>{-1, -1}));
  EXPECT_EQ(all.block_tables, (std::vector<int32_t>(6, 0)));
}

TEST(PadDecodeBatch, OnlyDecodeBatchesArePaddable) {
  ForwardBatch b = three_decodes();
  b.decode_only = false;
  EXPECT_FALSE(is_paddable_decode(b));
  b = three_decodes();
  b.logit_rows = {0, 2};  // a row without logits: not the decode shape
  EXPECT_FALSE(is_paddable_decode(b));
  EXPECT_FALSE(is_paddable_decode(ForwardBatch{}));
}

const fs::path kModel = fs::path(QUIVER_SOURCE_DIR) / "tests/fixtures/llama_gqa";
constexpr int kBlockSize = 4, kMaxBlocks = 16, kMaxLoras = 2;

// One model runner with its own backend, weights, KV cache and LoRA slots.
struct Rig {
  explicit Rig(bool graphs, bool graph_backend, bool defer = false, VocabLimits vocab = {}) {
    backend = graph_backend ? std::unique_ptr<Backend>(new RecordingBackend(defer)) : std::make_unique<RefBackend>();
    config = load_model_config(kModel.string()).value();
    auto ckpt = std::make_shared<Checkpoint>(Checkpoint::open(kModel.string()).value());
    model = std::make_unique<LlamaModel>(config, load_llama_weights(config, ckpt, backend.get()).value(), backend.get(),
                                         kBlockSize * kMaxBlocks);
    KvCacheShape shape{config.num_layers, config.num_kv_heads, config.head_dim, kBlockSize, DType::kF32};
    kv = std::make_unique<KvCache>(backend.get(), shape, 8 * 16);  // 8 blocks for each of 16 seqs
    pool = std::make_unique<LoraSlotPool>(backend.get(), config, kMaxLoras, 64, DType::kF32, vocab);
    RunnerLimits limits;
    limits.max_num_batched_tokens = 128;
    limits.max_num_seqs = 16;
    limits.max_blocks_per_seq = kMaxBlocks;
    limits.max_model_len = kBlockSize * kMaxBlocks;
    runner = std::make_unique<ModelRunner>(model.get(), pool.get(), limits);
    runner->set_kv_cache(kv.get());
    if (graphs) info = runner->capture_graphs();
  }
  std::unique_ptr<Backend> backend;
  ModelConfig config;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<KvCache> kv;
  std::unique_ptr<LoraSlotPool> pool;
  std::unique_ptr<ModelRunner> runner;
  GraphCaptureInfo info;
};

// Steps `seqs` (each with blocks [8 s, 8 s + 8)): first every prompt in one prefill, then
// decode with greedy tokens from `rigs[0]`; after decode step `swap_at`, sequence 0 moves
// to a new adapter (loaded into a slot another adapter held). Every rig must return the same
// logits; force_unpadded rigs get decode batches marked not decode-only.
void drive(std::vector<Rig*> rigs, std::vector<bool> force_unpadded, std::vector<Seq> seqs,
           const std::vector<LoraAdapter>& adapters, int decode_steps, int swap_at,
           const std::vector<std::string>& want_paths) {
  std::vector<uint64_t> uid_of(adapters.size());
  for (size_t a = 0; a < adapters.size(); ++a) uid_of[a] = 100 + a;
  for (int step = 0; step <= decode_steps; ++step) {
    if (step == swap_at + 1) seqs[0].adapter = (seqs[0].adapter + 3) % static_cast<int>(adapters.size());
    const ForwardBatch b = next_batch(seqs, step > 0, kBlockSize, [&](int a) {
      int slot = -1;
      for (Rig* r : rigs) {
        // Resident adapters keep their slot; others evict the least recently used.
        const int got = r->pool->acquire(uid_of[a], adapters[a]).value();
        r->pool->release(got);
        check(slot < 0 || slot == got, "rigs disagree on slots");
        slot = got;
      }
      return slot;
    });
    std::vector<std::vector<float>> logits(rigs.size());
    for (size_t r = 0; r < rigs.size(); ++r) {
      ForwardBatch br = b;
      if (force_unpadded[r]) br.decode_only = false;
      const StepPath path = rigs[r]->runner->execute(br, &logits[r]);
      if (step > 0) {
        EXPECT_EQ(path.path, want_paths[r]) << "step " << step;
      }
      EXPECT_EQ(logits[r], logits[0]) << "rig " << r << " step " << step;
    }
    append_greedy(seqs, logits[0], rigs[0]->runner->logits_width());
  }
}

TEST(GraphReplay, MatchesEagerPaddedAndUnpaddedWithAdaptersSwapped) {
  Rig graph(true, true), eager(false, true), plain(false, false);
  ASSERT_EQ(graph.info.num_graphs, 2 * 5);  // buckets 1 2 4 8 16 x lora on/off
  EXPECT_EQ(eager.info.num_graphs, 0);
  const auto adapters = fixture_adapters(kModel, graph.config);
  ASSERT_EQ(adapters.size(), 8u);
  // Three sequences (bucket 4): two adapters sharing the two slots, one base.
  const std::vector<Seq>& seqs = kMixedSeqs;
  drive({&graph, &eager, &plain}, {false, false, true}, seqs, adapters, 10, 4,
        {"graph bs=4", "eager bs=4 (padded)", "eager"});
  EXPECT_EQ(static_cast<RecordingBackend*>(graph.backend.get())->replays(), 10);
}

// Every LoRA expand deferred to the op after its projection (rope_kv_write, add_rms_norm,
// silu_mul, the final norm), with graphs and eagerly: bitwise the plain reference,
// since the shrinks read only x and the expands add the same values to the same outputs.
TEST(GraphReplay, DeferredLoraExpandsMatchThePlainReference) {
  Rig graph(true, true, true), eager(false, true, true), plain(false, false);
  const auto adapters = fixture_adapters(kModel, graph.config);
  const std::vector<Seq>& seqs = kMixedSeqs;
  drive({&plain, &graph, &eager}, {true, false, false}, seqs, adapters, 8, 3,
        {"eager", "graph bs=4", "eager bs=4 (padded)"});
}

TEST(GraphReplay, BaseOnlyBatchReplaysTheLoraOffGraph) {
  Rig graph(true, true), eager(false, true);
  const auto adapters = fixture_adapters(kModel, graph.config);
  std::vector<Seq> seqs;
  for (int s = 0; s < 5; ++s) seqs.push_back({{static_cast<int32_t>(10 * s + 1), 3}, 0, -1});
  drive({&graph, &eager}, {false, false}, seqs, adapters, 6, 100, {"graph bs=8", "eager bs=8 (padded)"});
  // And every bucket once, mixed adapters: 1, 2, 4, 8 and 16 sequences.
  for (int n : {1, 2, 7, 9}) {
    Rig g(true, true), e(false, true);
    std::vector<Seq> mixed;
    for (int s = 0; s < n; ++s) mixed.push_back({{static_cast<int32_t>(7 * s + 2)}, 0, s % 3 == 2 ? -1 : s % 2});
    const int bucket = pick_bucket(decode_buckets(16), n);
    drive({&g, &e}, {false, false}, mixed, adapters, 3, 100,
          {"graph bs=" + std::to_string(bucket), "eager bs=" + std::to_string(bucket) + " (padded)"});
  }
}

// Adapters with vocabulary rows (io/adapter_vocab.h) under graphs: the slots' rows and
// the host's token remapping are read by the replayed embedding and vocab_logits, so a
// graph must match eager runs while adapters that add tokens and replace rows are swapped.
TEST(GraphReplay, VocabularyRowsMatchEagerWithAdaptersSwapped) {
  const VocabLimits limits{4, 6};
  Rig graph(true, true, false, limits), eager(false, true, false, limits), plain(false, false, false, limits);
  ASSERT_EQ(graph.runner->logits_width(), graph.config.vocab_size + 4);
  auto adapters = fixture_adapters(kModel, graph.config);
  const int64_t v = graph.config.vocab_size, h = graph.config.hidden_size;
  auto rows = [&](int n, float scale) {
    std::vector<float> r(static_cast<size_t>(n * h));
    for (size_t i = 0; i < r.size(); ++i) r[i] = scale * static_cast<float>((i * 7919) % 23) / 23.f - scale / 2;
    return r;
  };
  // Adapter 5 adds three tokens; adapter 0 replaces two base rows in each matrix.
  AdapterVocab& added = adapters[5].vocab;
  added.new_tokens = 3;
  added.input_ids = added.output_ids = {static_cast<int32_t>(v), static_cast<int32_t>(v + 1), static_cast<int32_t>(v + 2)};
  added.input_rows = rows(3, 2.f);
  added.output_rows = rows(3, 8.f);
  AdapterVocab& replaced = adapters[0].vocab;
  replaced.input_ids = {9, 100};
  replaced.input_rows = rows(2, 1.f);
  replaced.output_ids = {7, 300};
  replaced.output_rows = rows(2, 6.f);
  const int32_t n0 = static_cast<int32_t>(v);
  std::vector<Seq> seqs = {{{5, 9, 100, 7}, 0, 0}, {{300}, 0, -1}, {{44, n0 + 1, 46, n0, 48, n0 + 2}, 0, 5}};
  drive({&graph, &eager, &plain}, {false, false, true}, seqs, adapters, 8, 4,
        {"graph bs=4", "eager bs=4 (padded)", "eager"});

  // One step by hand: the base row never sees the new ids, the adding adapter's row does.
  ForwardBatch b;
  b.query_start = {0, 1, 2};
  b.max_blocks_per_seq = 8;
  const int slot = plain.pool->acquire(105, adapters[5]).value();
  b.token_ids = {300, n0 + 1};
  b.positions = {0, 0};
  b.slot_mapping = {0, 8 * kBlockSize};
  b.token_lora_slot = {-1, slot};
  b.seq_lens = {1, 1};
  b.logit_rows = {0, 1};
  for (int s = 0; s < 2; ++s)
    for (int k = 0; k < 8; ++k) b.block_tables.push_back(8 * s + k);
  std::vector<float> logits;
  plain.runner->execute(b, &logits);
  const int64_t w = plain.runner->logits_width();
  for (int64_t c = v; c < w; ++c) EXPECT_TRUE(std::isinf(logits[static_cast<size_t>(c)])) << c;
  for (int64_t c = v; c < v + 3; ++c) EXPECT_TRUE(std::isfinite(logits[static_cast<size_t>(w + c)])) << c;
  EXPECT_TRUE(std::isinf(logits[static_cast<size_t>(w + v + 3)]));
}

}  // namespace
}  // namespace quiver
