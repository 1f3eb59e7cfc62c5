// Tensor parallelism over NCCL on GPUs, at the runner level (tests/unit/tensor_parallel_ranks.h)
// on the llama_gqa fixture (float32) with its eight adapters swapped between steps:
// - one rank through an NCCL communicator is bitwise the path without one (the collectives
//   of one rank are copies; lm_head's gather lays the one shard out as it was), eager and
//   with graphs;
// - two GPUs: the same logits as one GPU within float reordering, and graph replays, whose
//   captures hold the NCCL collectives, bitwise the eager ranks.
// Skips without a GPU, without NCCL in the build, and (the second) without two GPUs.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "backend/cuda/cuda_backend_factory.h"
#include "unit/tensor_parallel_ranks.h"

namespace quiver {
namespace {

namespace fs = std::filesystem;

const fs::path kModel = fs::path(QUIVER_SOURCE_DIR) / "tests/fixtures/llama_gqa";

#if defined(QUIVER_HAS_CUDA)
std::unique_ptr<Backend> gpu(int device) {
  std::string err;
  auto b = make_cuda_backend(device, &err);
  check(b != nullptr, err);
  return b;
}

std::vector<std::unique_ptr<Communicator>> nccl(const std::vector<Backend*>& backends) {
  std::string err;
  auto comms = make_nccl_communicators(backends, &err);
  check(!comms.empty(), err);
  return comms;
}

// Skips unless `gpus` GPUs and NCCL are there.
bool have(int gpus, std::string* why) {
  std::vector<std::unique_ptr<Backend>> held;
  std::vector<Backend*> backends;
  for (int d = 0; d < gpus; ++d) {
    held.push_back(make_cuda_backend(d, why));
    if (!held.back()) return false;
    backends.push_back(held.back().get());
  }
  return !make_nccl_communicators(backends, why).empty();
}
#else
// A build without CUDA has neither factory: every test skips before either is called.
std::unique_ptr<Backend> gpu(int) { return nullptr; }
std::vector<std::unique_ptr<Communicator>> nccl(const std::vector<Backend*>&) { return {}; }
bool have(int, std::string* why) {
  *why = "built without CUDA";
  return false;
}
#endif

TEST(CudaTensorParallel, OneRankThroughNcclIsBitwiseThePlainPath) {
  std::string why;
  if (!have(1, &why)) GTEST_SKIP() << why;
  for (const bool graphs : {false, true}) {
    TensorParallelRanks plain(kModel, 1, graphs, gpu, {}), through(kModel, 1, graphs, gpu, nccl);
    const auto adapters = fixture_adapters(kModel, plain.config);
    const std::string path = graphs ? "graph bs=4" : "eager bs=4 (padded)";
    drive_ranks({&plain, &through}, kMixedSeqs, adapters, 8, {0, 0}, {path, path});
  }
}

TEST(CudaTensorParallel, TwoGpusMatchOneAndGraphsMatchEager) {
  std::string why;
  if (!have(2, &why)) GTEST_SKIP() << why;
  TensorParallelRanks one(kModel, 1, false, gpu, {}), eager(kModel, 2, false, gpu, nccl),
      graph(kModel, 2, true, gpu, nccl);
  const auto adapters = fixture_adapters(kModel, one.config);
  // Float32 weights and activations: the partial sums only reorder float additions (4.1e-6
  // of the logit on the CPU).
  drive_ranks({&one, &eager, &graph}, kMixedSeqs, adapters, 8, {0, 1e-5, 1e-5},
              {"eager bs=4 (padded)", "eager bs=4 (padded)", "graph bs=4"});
  TensorParallelRanks e2(kModel, 2, false, gpu, nccl), g2(kModel, 2, true, gpu, nccl);
  drive_ranks({&e2, &g2}, kMixedSeqs, adapters, 6, {0, 0}, {"eager bs=4 (padded)", "graph bs=4"});
}

}  // namespace
}  // namespace quiver
