// TensorParallelRanks: the ranks of one model built by hand for runner-level tests of
// tensor parallelism (test_tensor_parallel.cc on the CPU, test_cuda_tensor_parallel.cc on
// GPUs): rank r with its backend, communicator, weight shard, KV shard, LoRA slot shard and
// runner, built on its own thread (bound to its device first); steps run on all ranks at
// once and rank 0's logits come back.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <vector>

#include "backend/communicator.h"
#include "engine/engine_rank.h"
#include "engine/model_runner.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "model/llama_weights.h"
#include "parallel/rank_threads.h"
#include "parallel/tensor_shard.h"
#include "unit/decode_steps.h"

namespace quiver {

struct TensorParallelRanks {
  static constexpr int kBlockSize = 4, kMaxBlocks = 16, kMaxLoras = 2;
  using BackendFactory = std::function<std::unique_ptr<Backend>(int rank)>;
  // The ranks' communicators; null: none (one rank computing the whole model).
  using CommFactory = std::function<std::vector<std::unique_ptr<Communicator>>(const std::vector<Backend*>&)>;

  TensorParallelRanks(const std::filesystem::path& model, int world, bool graphs, const BackendFactory& make_backend,
                      const CommFactory& make_comms, DType kv_dtype = DType::kF32)
      : threads(world) {
    config = load_model_config(model.string()).value();
    auto ckpt = std::make_shared<Checkpoint>(Checkpoint::open(model.string()).value());
    rank.resize(static_cast<size_t>(world));
    std::vector<Backend*> backends;
    for (int r = 0; r < world; ++r) {
      rank[static_cast<size_t>(r)].backend = make_backend(r);
      backends.push_back(rank[static_cast<size_t>(r)].backend.get());
    }
    if (make_comms) {
      auto comms = make_comms(backends);
      check(comms.size() == backends.size(), "TensorParallelRanks: no communicators");
      for (int r = 0; r < world; ++r) rank[static_cast<size_t>(r)].comm = std::move(comms[static_cast<size_t>(r)]);
    }
    threads.run([&](int r) {
      EngineRank& k = rank[static_cast<size_t>(r)];
      Backend* backend = k.backend.get();
      backend->bind_thread();
      const ShardSpec spec{r, world};
      const ModelConfig rc = shard_model_config(config, spec);
      k.model = std::make_unique<LlamaModel>(
          rc, load_llama_weights(config, ckpt, backend, WeightQuantization::kNone, {}, spec).value(), backend,
          kBlockSize * kMaxBlocks, k.comm.get());
      KvCacheShape shape{rc.num_layers, rc.num_kv_heads, rc.head_dim, kBlockSize, kv_dtype};
      k.kv = std::make_unique<KvCache>(backend, shape, 8 * 16);  // 8 blocks for each of 16 sequences
      k.slots = std::make_unique<LoraSlotPool>(backend, rc, kMaxLoras, 64, DType::kF32);
      RunnerLimits limits;
      limits.max_num_batched_tokens = 128;
      limits.max_num_seqs = 16;
      limits.max_blocks_per_seq = kMaxBlocks;
      limits.max_model_len = kBlockSize * kMaxBlocks;
      k.runner = std::make_unique<ModelRunner>(k.model.get(), k.slots.get(), limits);
      k.runner->set_kv_cache(k.kv.get());
      if (graphs) k.runner->capture_graphs();
    });
  }

  // The adapter's slot on every rank (each loading its slice), the same everywhere.
  int acquire(uint64_t uid, const LoraAdapter& adapter) {
    const int world = static_cast<int>(rank.size());
    std::vector<int> got(rank.size());
    threads.run([&](int r) {
      EngineRank& k = rank[static_cast<size_t>(r)];
      got[static_cast<size_t>(r)] = k.slots->acquire(uid, shard_lora_adapter(adapter, config, {r, world})).value();
      k.slots->release(got[static_cast<size_t>(r)]);
    });
    for (int g : got) check(g == got[0], "ranks disagree on slots");
    return got[0];
  }

  StepPath execute(const ForwardBatch& b, std::vector<float>* logits) {
    StepPath path;
    threads.run([&](int r) {
      if (r == 0) path = rank[0].runner->execute(b, logits);
      else rank[static_cast<size_t>(r)].runner->execute(b, nullptr);
    });
    return path;
  }

  int64_t logits_width() const { return rank[0].runner->logits_width(); }

  ModelConfig config;
  RankThreads threads;
  std::vector<EngineRank> rank;
};

// One prefill of every prompt, then greedy decode steps (tokens from set 0's first runs);
// sequence 0 changes adapter after step 3. Every set of ranks must give set 0's logits
// within `tol` (relative to the logit, at least 1), bitwise where tol is 0.
inline void drive_ranks(std::vector<TensorParallelRanks*> sets, std::vector<Seq> seqs, const std::vector<LoraAdapter>& adapters, int steps,
           const std::vector<double>& tol, const std::vector<std::string>& want_paths) {
  for (int step = 0; step <= steps; ++step) {
    if (step == 4 && !adapters.empty()) seqs[0].adapter = (seqs[0].adapter + 3) % static_cast<int>(adapters.size());
    const ForwardBatch b = next_batch(seqs, step > 0, TensorParallelRanks::kBlockSize, [&](int a) {
      int slot = -1;
      for (TensorParallelRanks* set : sets) slot = set->acquire(100 + static_cast<uint64_t>(a), adapters[static_cast<size_t>(a)]);
      return slot;
    });
    std::vector<std::vector<float>> logits(sets.size());
    for (size_t i = 0; i < sets.size(); ++i) {
      const StepPath path = sets[i]->execute(b, &logits[i]);
      if (step > 0) {
        EXPECT_EQ(path.path, want_paths[i]) << "set " << i << " step " << step;
      }
      ASSERT_EQ(logits[i].size(), logits[0].size());
      if (tol[i] == 0) {
        EXPECT_EQ(logits[i], logits[0]) << "set " << i << " step " << step;
        continue;
      }
      double worst = 0;
      for (size_t j = 0; j < logits[0].size(); ++j)
        worst = std::max(worst, std::abs(double(logits[i][j]) - logits[0][j]) / std::max(1.0, std::abs(double(logits[0][j]))));
      EXPECT_LE(worst, tol[i]) << "set " << i << " step " << step;
    }
    append_greedy(seqs, logits[0], sets[0]->logits_width());
  }
}

}  // namespace quiver
