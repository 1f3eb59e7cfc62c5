// How the GPU benchmarks time a call (bench_cuda_ops, bench_cuda_attention): `calls` calls
// enqueued back to back, then one synchronize, the host clock around both, so a per-call
// time includes the launch gaps a CUDA graph would remove (~1-2 us a kernel).
#pragma once

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstddef>

#include "backend/backend.h"

namespace quiver {

// Each benchmark's MinTime. Google Benchmark counts the iteration time, which is one call's
// here, so its default 0.5 s ran 0.5 s worth of calls `calls` times over: 25 s of wall time
// for a 100-us call at 50 calls a round. 0.01 s of call time is 5,000 such calls, 500 of 1 ms.
inline constexpr double kMinCallSeconds = 0.01;

// Runs `call(i)` `calls` times per benchmark iteration (after as many unmeasured ones: module
// load, cuBLAS heuristics) and reports the mean time of one call as the iteration time.
// Returns the seconds per call over all iterations.
template <typename Fn>
double timed_rounds(benchmark::State& state, Backend* gpu, int calls, Fn&& call) {
  for (int i = 0; i < calls; ++i) call(static_cast<size_t>(i));
  gpu->synchronize();
  double total = 0;
  size_t k = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) call(k++);
    gpu->synchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(s / calls);
    total += s;
  }
  return total / (static_cast<double>(state.iterations()) * calls);
}

}  // namespace quiver
