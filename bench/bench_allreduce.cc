// link: qv_parallel qv_backend
// The latency of one all-reduce between the GPUs a tensor-parallel decode step spans: the
// floor the step's 2 x num_layers all-reduces add (docs/tensor_parallel.md). For each size
// (8 KiB: one bf16 token of a 4096 hidden size; 16 KiB: the f32 one quiver sums; up to
// 4 MiB), on 1 .. N GPUs: one collective eagerly (enqueue + synchronize), and 100 of them
// captured in one CUDA graph and replayed, per collective (what a decode graph pays).
// Run: build/bench_allreduce [max_gpus]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "parallel/communicators.h"
#include "parallel/rank_threads.h"

namespace quiver {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// kReps timed rounds after kWarm untimed ones, on every rank at once; the slowest rank's
// mean is reported (a collective ends when the last rank's does).
void measure(int world, size_t bytes) {
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<Backend*> raw;
  std::string err;
  for (int d = 0; d < world; ++d) {
    BackendOptions o;
    o.kind = "cuda";
    o.cuda_device = d;
    backends.push_back(make_backend(o, &err));
    if (!backends.back()) {
      std::printf("%d GPUs: %s\n", world, err.c_str());
      return;
    }
    raw.push_back(backends.back().get());
  }
  auto comms = make_communicators(raw, &err);
  if (comms.empty()) {
    std::printf("%d GPUs: %s\n", world, err.c_str());
    return;
  }
  RankThreads threads(world);
  const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
  std::vector<Buffer> buffers(static_cast<size_t>(world));
  std::vector<int> graph(static_cast<size_t>(world));
  constexpr int kInGraph = 100, kWarm = 5, kReps = 20;
  std::vector<double> eager(static_cast<size_t>(world)), replay(static_cast<size_t>(world));
  threads.run([&](int r) {
    Backend* b = raw[static_cast<size_t>(r)];
    b->bind_thread();
    buffers[static_cast<size_t>(r)] = Buffer(b, bytes);
    b->fill_zero(buffers[static_cast<size_t>(r)].data(), bytes);
    const Tensor t = buffers[static_cast<size_t>(r)].tensor(DType::kF32, {n});
    Communicator* c = comms[static_cast<size_t>(r)].get();
    for (int i = 0; i < kWarm; ++i) c->all_reduce_sum({t});
    b->synchronize();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kReps; ++i) {
      c->all_reduce_sum({t});
      b->synchronize();
    }
    eager[static_cast<size_t>(r)] = seconds_since(t0) / kReps;
    b->begin_capture();
    for (int i = 0; i < kInGraph; ++i) c->all_reduce_sum({t});
    graph[static_cast<size_t>(r)] = b->end_capture();
    for (int i = 0; i < kWarm; ++i) b->replay(graph[static_cast<size_t>(r)]);
    b->synchronize();
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kReps; ++i) b->replay(graph[static_cast<size_t>(r)]);
    b->synchronize();
    replay[static_cast<size_t>(r)] = seconds_since(t0) / (kReps * kInGraph);
  });
  double e = 0, g = 0;
  for (int r = 0; r < world; ++r) {
    e = std::max(e, eager[static_cast<size_t>(r)]);
    g = std::max(g, replay[static_cast<size_t>(r)]);
  }
  std::printf("%d GPUs  %8zu bytes  eager %7.2f us  in a graph %7.2f us  (%.1f GB/s bus)\n", world, bytes, e * 1e6,
              g * 1e6, world > 1 ? 2.0 * (world - 1) / world * bytes / g / 1e9 : 0.0);
}

}  // namespace
}  // namespace quiver

int main(int argc, char** argv) {
  const int max_gpus = argc > 1 ? std::atoi(argv[1]) : 8;
  for (int world = 1; world <= max_gpus; world *= 2)
    for (size_t bytes : {size_t{8} << 10, size_t{16} << 10, size_t{64} << 10, size_t{1} << 20, size_t{4} << 20})
      quiver::measure(world, bytes);
}
