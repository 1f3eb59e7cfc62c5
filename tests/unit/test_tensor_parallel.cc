// link: qv_engine
// Tensor parallelism on the CPU (parallel/tensor_shard.h), tested against the unsharded
// model through the in-process LocalCommunicator:
// - the slicing: every rank's spans tile the model (KV heads replicated where there are
//   fewer than ranks, the vocabulary padded), loaded weight shards and LoRA A/B slices put
//   back together are the checkpoint's and the adapter's;
// - the collectives: sums in rank order (every rank the same bits), gathers in rank order;
// - whole steps: ranks on their own threads, each with its backend, weight / KV / LoRA
//   shards and runner, against one runner of the whole model, with adapters swapped between
//   steps, with every LoRA expand deferred to the next op (as CUDA's decode plans do; the
//   shrink results are then all-reduced too), and with graphs whose captures record the
//   collectives (as NCCL's are captured on a stream): graph replay bitwise the eager ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/model_runner.h"
#include "io/model_config.h"
#include "io/peft_adapter.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "model/llama_weights.h"
#include "parallel/local_communicator.h"
#include "parallel/rank_threads.h"
#include "parallel/tensor_shard.h"
#include "unit/decode_steps.h"
#include "unit/recording_backend.h"
#include "unit/tensor_parallel_ranks.h"

namespace quiver {
namespace {

namespace fs = std::filesystem;

const fs::path kModel = fs::path(QUIVER_SOURCE_DIR) / "tests/fixtures/llama_gqa";

ModelConfig config_of(int64_t heads, int64_t kv, int64_t inter, int64_t vocab) {
  ModelConfig c;
  c.hidden_size = 64;
  c.head_dim = 8;
  c.num_heads = heads;
  c.num_kv_heads = kv;
  c.intermediate_size = inter;
  c.vocab_size = vocab;
  c.num_layers = 1;
  return c;
}

TEST(ModelShard, SpansTileTheModel) {
  for (const ModelConfig& c : {config_of(8, 2, 176, 510), config_of(8, 8, 64, 512), config_of(4, 1, 160, 7)}) {
    for (const int world : {1, 2, 4}) {
      ASSERT_TRUE(check_tensor_parallel(c, world).is_ok());
      int64_t q_next = 0, inter_next = 0, vocab_next = 0;
      for (int r = 0; r < world; ++r) {
        const ModelShard s = model_shard(c, {r, world});
        EXPECT_EQ(s.q.begin, q_next);
        EXPECT_EQ(s.inter.begin, inter_next);
        EXPECT_EQ(s.vocab.begin, vocab_next);
        q_next += s.q.count;
        inter_next += s.inter.count;
        vocab_next += s.vocab.count;
        EXPECT_EQ(s.vocab_rows, (c.vocab_size + world - 1) / world);
        EXPECT_LE(s.vocab.count, s.vocab_rows);
        // Each of the rank's query heads reads a KV head the rank holds.
        const int64_t group = c.num_heads / c.num_kv_heads;
        for (int64_t h = s.q.begin / c.head_dim; h < (s.q.begin + s.q.count) / c.head_dim; ++h) {
          const int64_t kv_head = h / group;
          EXPECT_GE(kv_head, s.kv.begin / c.head_dim);
          EXPECT_LT(kv_head, (s.kv.begin + s.kv.count) / c.head_dim);
        }
        // Local query head j reads local KV head j / (local heads / local KV heads), as the
        // attention kernels assume.
        const ModelConfig rc = shard_model_config(c, {r, world});
        EXPECT_EQ(rc.num_heads * c.head_dim, s.q.count);
        EXPECT_EQ(rc.num_kv_heads * c.head_dim, s.kv.count);
        EXPECT_EQ(rc.num_heads % rc.num_kv_heads, 0);
        for (int64_t j = 0; j < rc.num_heads; ++j)
          EXPECT_EQ(s.kv.begin / c.head_dim + j / (rc.num_heads / rc.num_kv_heads),
                    (s.q.begin / c.head_dim + j) / group);
      }
      EXPECT_EQ(q_next, c.q_size());
      EXPECT_EQ(inter_next, c.intermediate_size);
      EXPECT_EQ(vocab_next, c.vocab_size);
      // KV heads: split when there are enough, else each replicated world / kv times.
      if (c.num_kv_heads >= world) {
        EXPECT_EQ(model_shard(c, {world - 1, world}).kv.begin + model_shard(c, {0, world}).kv.count, c.kv_size());
      }
    }
  }
}

TEST(ModelShard, RefusesSplitsThatDoNotDivide) {
  const auto message = [](const ModelConfig& c, int w) { return check_tensor_parallel(c, w).message(); };
  EXPECT_NE(message(config_of(6, 2, 96, 512), 4).find("6 attention heads"), std::string::npos);
  EXPECT_NE(message(config_of(8, 2, 100, 512), 8).find("intermediate_size 100"), std::string::npos);
  EXPECT_NE(message(config_of(12, 3, 96, 512), 4).find("3 KV heads"), std::string::npos);
  EXPECT_NE(message(config_of(8, 2, 96, 512), 0).find("at least 1"), std::string::npos);
  EXPECT_TRUE(check_tensor_parallel(config_of(6, 3, 100, 512), 1).is_ok());
}

TEST(ShardLoraAdapter, SlicesPutBackTogetherAreTheAdapter) {
  const ModelConfig c = load_model_config(kModel.string()).value();
  const auto adapters = fixture_adapters(kModel, c);
  for (const int world : {2, 4}) {
    for (const LoraAdapter& full : adapters) {
      std::vector<LoraAdapter> parts;
      for (int r = 0; r < world; ++r) parts.push_back(shard_lora_adapter(full, c, {r, world}));
      for (size_t l = 0; l < full.layers.size(); ++l) {
        for (int t = 0; t < kNumLoraTargets; ++t) {
          const auto& m = full.layers[l][static_cast<size_t>(t)];
          const LoraTarget target = static_cast<LoraTarget>(t);
          if (!m) {
            for (const auto& p : parts) EXPECT_FALSE(p.layers[l][static_cast<size_t>(t)].has_value());
            continue;
          }
          const bool row_parallel = target == LoraTarget::kO || target == LoraTarget::kDown;
          const int64_t in = lora_target_in(c, target), rank = m->rank;
          std::vector<float> a, b;  // put back together
          if (row_parallel) a.assign(m->a.size(), 0.f);
          int64_t col = 0;
          for (int r = 0; r < world; ++r) {
            const LoraModule& p = *parts[static_cast<size_t>(r)].layers[l][static_cast<size_t>(t)];
            EXPECT_EQ(p.rank, m->rank);
            if (row_parallel) {
              EXPECT_EQ(p.b, m->b);  // B whole on every rank
              const int64_t w = static_cast<int64_t>(p.a.size()) / rank;
              for (int64_t i = 0; i < rank; ++i)
                std::copy_n(p.a.begin() + i * w, w, a.begin() + i * in + col);
              col += w;
            } else {
              EXPECT_EQ(p.a, m->a);  // A whole on every rank
              const bool kv = target == LoraTarget::kK || target == LoraTarget::kV;
              if (kv && c.num_kv_heads < world) continue;  // replicated: checked by the model test
              b.insert(b.end(), p.b.begin(), p.b.end());
            }
          }
          if (row_parallel) {
            EXPECT_EQ(col, in);
            EXPECT_EQ(a, m->a) << full.name << " layer " << l << " " << lora_target_name(target);
          } else if (!b.empty()) {
            EXPECT_EQ(b, m->b) << full.name << " layer " << l << " " << lora_target_name(target);
          }
        }
      }
      EXPECT_EQ(parts[0].vocab.new_tokens, full.vocab.new_tokens);
    }
  }
}

// The values of a host tensor, as float.
std::vector<float> values(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = load_as_f32(t.data, t.dtype, static_cast<int64_t>(i));
  return v;
}

// Columns [begin, begin + count) of a [rows, cols] matrix.
std::vector<float> columns(const std::vector<float>& m, int64_t cols, int64_t begin, int64_t count) {
  std::vector<float> out;
  for (size_t r = 0; r < m.size() / static_cast<size_t>(cols); ++r)
    out.insert(out.end(), m.begin() + static_cast<int64_t>(r) * cols + begin,
               m.begin() + static_cast<int64_t>(r) * cols + begin + count);
  return out;
}

std::vector<float> rows_of(const std::vector<float>& m, int64_t cols, int64_t begin, int64_t count) {
  return std::vector<float>(m.begin() + begin * cols, m.begin() + (begin + count) * cols);
}

// llama_gqa with its vocabulary cut to 510 rows: 4 ranks then hold 128, 128, 128 and 126
// of them (the last shard padded).
fs::path short_vocab_model() {
  const fs::path dir = fs::temp_directory_path() / ("quiver_tp_vocab510_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const Checkpoint ckpt = Checkpoint::open(kModel.string()).value();
  std::vector<SafetensorsEntry> entries;
  for (const std::string& name : ckpt.names()) {
    std::vector<int64_t> shape = *ckpt.shape_of(name);
    const Tensor t = ckpt.get(name, shape).value();
    std::vector<float> v = values(t);
    if (name == "model.embed_tokens.weight" || name == "lm_head.weight") {
      v.resize(static_cast<size_t>(510 * shape[1]));
      shape[0] = 510;
    }
    entries.push_back(make_safetensors_entry(name, DType::kF32, shape, v));
  }
  EXPECT_TRUE(write_safetensors((dir / "model.safetensors").string(), entries).is_ok());
  nlohmann::json config = nlohmann::json::parse(std::ifstream(kModel / "config.json"));
  config["vocab_size"] = 510;
  std::ofstream(dir / "config.json") << config.dump();
  return dir;
}

TEST(ShardWeights, RanksSlicesPutBackTogetherAreTheCheckpoint) {
  for (const fs::path& model : {kModel, short_vocab_model()}) {
    const ModelConfig c = load_model_config(model.string()).value();
    auto ckpt = std::make_shared<Checkpoint>(Checkpoint::open(model.string()).value());
    RefBackend backend;
    const LlamaWeights full = load_llama_weights(c, ckpt, &backend).value();
    const int64_t h = c.hidden_size;
    for (const int world : {2, 4}) {
      std::vector<float> head;
      for (int r = 0; r < world; ++r) {
        const ShardSpec spec{r, world};
        const ModelShard s = model_shard(c, spec);
        const LlamaWeights w = load_llama_weights(c, ckpt, &backend, WeightQuantization::kNone, {}, spec).value();
        EXPECT_EQ(values(w.embed), values(full.embed));
        ASSERT_EQ(w.lm_head.dim(0), s.vocab_rows);
        const std::vector<float> part = values(w.lm_head);
        head.insert(head.end(), part.begin(), part.begin() + s.vocab.count * h);
        for (size_t i = static_cast<size_t>(s.vocab.count * h); i < part.size(); ++i) ASSERT_EQ(part[i], 0.f);
        for (size_t l = 0; l < full.layers.size(); ++l) {
          const LayerWeights &f = full.layers[l], &x = w.layers[l];
          EXPECT_EQ(values(x.attn_norm), values(f.attn_norm));
          EXPECT_EQ(values(x.wq), rows_of(values(f.wq), h, s.q.begin, s.q.count));
          EXPECT_EQ(values(x.wk), rows_of(values(f.wk), h, s.kv.begin, s.kv.count));
          EXPECT_EQ(values(x.wv), rows_of(values(f.wv), h, s.kv.begin, s.kv.count));
          EXPECT_EQ(values(x.wo), columns(values(f.wo), c.q_size(), s.q.begin, s.q.count));
          EXPECT_EQ(values(x.w_gate), rows_of(values(f.w_gate), h, s.inter.begin, s.inter.count));
          EXPECT_EQ(values(x.w_up), rows_of(values(f.w_up), h, s.inter.begin, s.inter.count));
          EXPECT_EQ(values(x.w_down), columns(values(f.w_down), c.intermediate_size, s.inter.begin, s.inter.count));
        }
      }
      EXPECT_EQ(head, values(full.lm_head)) << model << ", " << world << " ranks";
    }
  }
}

TEST(LocalCommunicator, SumsInRankOrderAndGathers) {
  constexpr int kWorld = 3;
  auto comms = LocalCommunicator::make_group(kWorld);
  RankThreads threads(kWorld);
  // Values whose float sum depends on the order: rank order gives (1e8 + 1) - 1e8 = 0 on
  // every rank.
  const float first[kWorld] = {1e8f, 1.f, -1e8f};
  std::vector<std::vector<float>> x(kWorld), t(kWorld), gathered(kWorld, std::vector<float>(kWorld * 2));
  threads.run([&](int r) {
    x[r] = {first[r], static_cast<float>(r)};
    t[r] = {static_cast<float>(10 * r)};
    comms[r]->all_reduce_sum({Tensor(x[r].data(), DType::kF32, {2}), Tensor(t[r].data(), DType::kF32, {1})});
    std::vector<float> mine = {static_cast<float>(r), static_cast<float>(-r)};
    comms[r]->all_gather(Tensor(gathered[r].data(), DType::kF32, {kWorld, 2}), Tensor(mine.data(), DType::kF32, {2}));
  });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(x[r], (std::vector<float>{(1e8f + 1.f) + -1e8f, 3.f}));
    EXPECT_EQ(t[r], (std::vector<float>{30.f}));
    EXPECT_EQ(gathered[r], (std::vector<float>{0, 0, 1, -1, 2, -2}));
  }
}

TEST(RankThreads, RunsEveryRankOnItsOwnThreadAndRethrows) {
  RankThreads threads(4);
  std::vector<std::thread::id> ids(4);
  for (int round = 0; round < 3; ++round) {
    std::vector<std::thread::id> now(4);
    threads.run([&](int r) { now[static_cast<size_t>(r)] = std::this_thread::get_id(); });
    EXPECT_EQ(now[0], std::this_thread::get_id());
    if (round > 0) {
      EXPECT_EQ(now, ids);  // the same thread each time
    }
    ids = now;
  }
  std::atomic<int> ran{0};
  EXPECT_THROW(threads.run([&](int r) {
    ++ran;
    if (r == 2) throw std::runtime_error("rank 2");
  }), std::runtime_error);
  EXPECT_EQ(ran.load(), 4);  // the others ran to the end
}

// A LocalCommunicator whose calls a RecordingBackend captures into its graphs, as a GPU
// stream captures NCCL collectives.
class CapturedComm final : public Communicator {
 public:
  CapturedComm(std::unique_ptr<Communicator> comm, RecordingBackend* backend)
      : comm_(std::move(comm)), backend_(backend) {}
  int rank() const override { return comm_->rank(); }
  int world() const override { return comm_->world(); }
  void all_reduce_sum(std::initializer_list<Tensor> tensors) override {
    std::vector<Tensor> ts(tensors);
    backend_->run_or_record([this, ts] {
      if (ts.size() == 1) comm_->all_reduce_sum({ts[0]});
      else comm_->all_reduce_sum({ts[0], ts[1]});
    });
  }
  void all_gather(Tensor out, Tensor in) override {
    backend_->run_or_record([this, out, in] { comm_->all_gather(out, in); });
  }

 private:
  std::unique_ptr<Communicator> comm_;
  RecordingBackend* backend_;
};

// The ranks of `model` on RecordingBackends (graphs optional, LoRA expands deferred to the
// next op or not), exchanging through CapturedComm; one rank has no communicator.
struct Ranks : TensorParallelRanks {
  Ranks(const fs::path& model, int world, bool graphs, bool defer)
      : TensorParallelRanks(
            model, world, graphs, [defer](int) { return std::make_unique<RecordingBackend>(defer); },
            world == 1 ? CommFactory() : [](const std::vector<Backend*>& backends) {
              auto group = LocalCommunicator::make_group(static_cast<int>(backends.size()));
              std::vector<std::unique_ptr<Communicator>> out;
              for (size_t r = 0; r < backends.size(); ++r)
                out.push_back(std::make_unique<CapturedComm>(std::move(group[r]),
                                                             static_cast<RecordingBackend*>(backends[r])));
              return out;
            }) {}
};

// Float sums over a rank's slice, then over the ranks, instead of one sum: measured up to
// 4.1e-6 of the logit here; 1e-5 still catches a lost or doubled term (a shrink left
// unsummed moved logits by 2.2).
constexpr double kReorderTol = 1e-5;

TEST(TensorParallelRanks, MatchOneRankWithAdaptersSwapped) {
  Ranks one(kModel, 1, false, false), two(kModel, 2, false, false), four(kModel, 4, false, false);
  const auto adapters = fixture_adapters(kModel, one.config);
  const std::vector<Seq>& seqs = kMixedSeqs;
  drive_ranks({&one, &two, &four}, seqs, adapters, 8, {0, kReorderTol, kReorderTol},
        {"eager bs=4 (padded)", "eager bs=4 (padded)", "eager bs=4 (padded)"});
}

// Every LoRA expand left to the op after its projection: for o and down each rank's shrink
// covers its input columns only, so the ranks sum the shrink with the outputs before the
// next op adds B @ t. Graphs capture the collectives; replays must equal the eager ranks.
TEST(TensorParallelRanks, DeferredExpandsAndGraphsMatch) {
  Ranks one(kModel, 1, false, false), eager(kModel, 2, false, true), graph(kModel, 2, true, true);
  const auto adapters = fixture_adapters(kModel, one.config);
  const std::vector<Seq>& seqs = kMixedSeqs;
  drive_ranks({&one, &eager, &graph}, seqs, adapters, 8, {0, kReorderTol, kReorderTol},
        {"eager bs=4 (padded)", "eager bs=4 (padded)", "graph bs=4"});
  // Graph and eager ranks: the same ops in the same order, bitwise.
  Ranks e2(kModel, 2, false, true), g2(kModel, 2, true, true);
  drive_ranks({&e2, &g2}, seqs, adapters, 6, {0, 0}, {"eager bs=4 (padded)", "graph bs=4"});
}

// A vocabulary 4 ranks do not divide (510 = 3 x 128 + 126): the gathered logits drop the
// last shard's padding.
TEST(TensorParallelRanks, PaddedVocabularyShardsGatherToTheVocabulary) {
  const fs::path model = short_vocab_model();
  Ranks one(model, 1, false, false), four(model, 4, true, false);
  ASSERT_EQ(four.logits_width(), 510);
  std::vector<Seq> seqs = {{{5, 9, 100, 7}, 0, -1}, {{300, 509}, 0, -1}};
  drive_ranks({&one, &four}, seqs, {}, 5, {0, kReorderTol}, {"eager bs=2 (padded)", "graph bs=2"});
}

}  // namespace
}  // namespace quiver
