// link: qv_backend
// CudaBackend decode hot spots on Llama-2-7B shapes (hidden 4096, intermediate 11008,
// vocab 32000), bf16 weights:
// - matmul at n = 1 / 8 / 16 tokens on the GEMV kernel (its three launch shapes) and on
//   cuBLAS at n = 8 / 16 / 32 (x rounded to bf16),
//   reporting weight GB/s and the fraction of the H200's measured copy ceiling (4.26 TB/s,
//   DESIGN.md section 5); one prefill-sized product reports TFLOP/s;
// - LoRA of a q/k/v-shaped group (3 members, in = out = 4096, rank 16, bf16 stacks of 64
//   slots) at n = 1 / 8 / 32 / 64 / 256 / 2048 tokens, all on one adapter or token i on
//   slot i % 64 (at 256: four tokens per adapter, as in the throughput benchmark), reporting the time
//   over the byte floor (adapters + x + the f32 y read and written, at 4.26 TB/s).
//
// Every benchmark cycles through enough copies of its weights (>= 512 MiB) that they cannot
// sit in the 60 MB L2, so GB/s is HBM bandwidth. Timing: kCallsPerRound calls enqueued
// back to back, then one synchronize, host clock around both; so per-call times include
// the launch gaps a CUDA graph would remove (~1-2 us per kernel), which matters for the
// small LoRA kernels, not for the large GEMVs.
// Run:  build/bench_cuda_ops --benchmark_out=bench_cuda_ops.json --benchmark_out_format=json
//       (the JSON context records date and host; add the commit by hand).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#if defined(QUIVER_HAS_CUDA)
#include "backend/cuda/cuda_backend_factory.h"
#endif

namespace quiver {
namespace {

#if defined(QUIVER_HAS_CUDA)

constexpr size_t kMinWorkingSetBytes = size_t{512} << 20;
constexpr int kCallsPerRound = 50;
constexpr double kCeilingBytesPerSecond = 4.26e12;

// One backend per option set, created once (cuBLAS start-up is slow). nullptr: no GPU.
Backend* backend(int gemv_max_n, int gemv_variant = 0, int skinny_max_n = 0) {
  static std::map<std::tuple<int, int, int>, std::unique_ptr<Backend>> cache;
  auto key = std::make_tuple(gemv_max_n, gemv_variant, skinny_max_n);
  auto it = cache.find(key);
  if (it == cache.end()) {
    CudaBackendOptions o;
    o.gemv_max_n = gemv_max_n;
    o.gemv_variant = gemv_variant;
    o.skinny_max_n = skinny_max_n;
    std::string err;
    it = cache.emplace(key, make_cuda_backend(o, &err)).first;
  }
  return it->second.get();
}

// Device buffer filled with random values of dtype t (uniform in [-scale, scale]).
Buffer random_buffer(Backend* gpu, DType t, size_t count, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  Buffer b(gpu, count * dtype_size(t));
  if (t == DType::kF32) {
    std::vector<float> v(count);
    for (auto& x : v) x = u(rng);
    gpu->copy_from_host(b.data(), v.data(), count * 4);
  } else {
    std::vector<uint16_t> v(count);
    for (auto& x : v) x = t == DType::kBF16 ? f32_to_bf16(u(rng)) : f32_to_f16(u(rng));
    gpu->copy_from_host(b.data(), v.data(), count * 2);
  }
  return b;
}

// `copies` device copies of one random buffer (all distinct allocations).
std::vector<Buffer> rotating_copies(Backend* gpu, DType t, size_t count, float scale) {
  const size_t bytes = count * dtype_size(t);
  const size_t copies = std::max<size_t>(2, kMinWorkingSetBytes / bytes + 1);
  std::vector<Buffer> out;
  out.push_back(random_buffer(gpu, t, count, scale, 1));
  for (size_t i = 1; i < copies; ++i) {
    out.emplace_back(gpu, bytes);
    gpu->copy(out.back().data(), out.front().data(), bytes);
  }
  gpu->synchronize();
  return out;
}

// Runs `call(i)` kCallsPerRound times per benchmark iteration and reports the mean time
// of one call as the iteration time.
template <typename Fn>
double timed_rounds(benchmark::State& state, Backend* gpu, Fn&& call) {
  for (int i = 0; i < kCallsPerRound; ++i) call(i);  // warm-up (module load, cuBLAS heuristics)
  gpu->synchronize();
  double total = 0;
  size_t k = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kCallsPerRound; ++i) call(k++);
    gpu->synchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(s / kCallsPerRound);
    total += s;
  }
  return total / (static_cast<double>(state.iterations()) * kCallsPerRound);  // seconds per call
}

// Args: out, in, n, path (0, 1, 2: GEMV kernel launch-shape variant; 3: cuBLAS with bf16
// activations; 4: gemm_skinny.cu's tensor-core kernel, bf16 activations)
void BM_CudaMatmulBf16(benchmark::State& state) {
  const int64_t out = state.range(0), in = state.range(1), n = state.range(2);
  const bool cublas = state.range(3) == 3, skinny = state.range(3) == 4;
  const int variant = cublas || skinny ? 0 : static_cast<int>(state.range(3));
  Backend* gpu = skinny ? backend(0, 0, 16) : backend(cublas ? 0 : 16, variant);
  if (gpu == nullptr) {
    state.SkipWithError("no CUDA device");
    return;
  }
  std::vector<Buffer> w = rotating_copies(gpu, DType::kBF16, static_cast<size_t>(out * in), 0.05f);
  Buffer x = random_buffer(gpu, DType::kF32, static_cast<size_t>(n * in), 1.f, 2);
  Buffer y(gpu, static_cast<size_t>(n * out) * 4);
  Tensor xt = x.tensor(DType::kF32, {n, in}), yt = y.tensor(DType::kF32, {n, out});
  const double s = timed_rounds(state, gpu, [&](size_t i) {
    gpu->matmul(yt, xt, w[i % w.size()].tensor(DType::kBF16, {out, in}), Tensor());
  });
  const double weight_bytes = static_cast<double>(out * in) * 2;
  const double bytes = weight_bytes + static_cast<double>(n * (in + out)) * 4;
  state.counters["us"] = s * 1e6;
  state.counters["GB/s"] = bytes / s / 1e9;
  state.counters["frac_of_4.26TB/s"] = bytes / s / kCeilingBytesPerSecond;
  state.counters["TFLOP/s"] = 2.0 * static_cast<double>(n * in * out) / s / 1e12;
  state.SetLabel(cublas ? "cublas" : skinny ? "skinny" : "gemv v" + std::to_string(variant));
}

const int64_t kShapes[][2] = {{4096, 4096}, {11008, 4096}, {4096, 11008}, {32000, 4096}};

void matmul_args(benchmark::internal::Benchmark* b) {
  for (const auto& s : kShapes) {
    for (int64_t n : {1, 2, 4, 8, 16})
      for (int64_t variant : {0, 1, 2}) b->Args({s[0], s[1], n, variant});
    for (int64_t n : {1, 2, 4, 8, 16, 32}) b->Args({s[0], s[1], n, 3});
    for (int64_t n : {4, 8, 16}) b->Args({s[0], s[1], n, 4});
  }
  b->Args({4096, 4096, 2048, 3});  // prefill-sized: tensor-core rate, not bandwidth
}
BENCHMARK(BM_CudaMatmulBf16)->Apply(matmul_args)->UseManualTime()->Unit(benchmark::kMicrosecond)
    ->ArgNames({"out", "in", "n", "path"});

// Args: n, distinct (0: every token on slot 0; 1: token i on slot i % 64). One q/k/v-shaped
// LoRA group (Backend::lora_group: shrink + expand of 3 members, rank 16, bf16 stacks of 64
// slots), tokens walked in slot order as the engine passes them.
void BM_CudaLoraGroup(benchmark::State& state) {
  const int64_t n = state.range(0), in = 4096, out = 4096, rank = 16, slots = 64, members = 3;
  const bool distinct = state.range(1) == 1;
  Backend* gpu = backend(8);
  if (gpu == nullptr) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const size_t stack = static_cast<size_t>(slots * rank * in);  // == slots * out * rank
  std::vector<Buffer> a = rotating_copies(gpu, DType::kBF16, stack * members, 0.05f);
  std::vector<Buffer> b = rotating_copies(gpu, DType::kBF16, stack * members, 0.05f);
  Buffer x = random_buffer(gpu, DType::kF32, static_cast<size_t>(n * in), 1.f, 3);
  Buffer t(gpu, static_cast<size_t>(n * rank) * 4);
  Buffer y = random_buffer(gpu, DType::kF32, static_cast<size_t>(members * n * out), 1.f, 4);
  std::vector<int32_t> token_slot(static_cast<size_t>(n)), order;
  for (int64_t i = 0; i < n; ++i) token_slot[static_cast<size_t>(i)] = distinct ? static_cast<int32_t>(i % slots) : 0;
  lora_sorted_tokens(token_slot, &order);
  Buffer ts(gpu, token_slot.size() * 4), os(gpu, order.size() * 4);
  gpu->copy_from_host(ts.data(), token_slot.data(), token_slot.size() * 4);
  gpu->copy_from_host(os.data(), order.data(), order.size() * 4);
  LoraMeta meta;
  meta.token_slot = ts.tensor(DType::kI32, {n});
  meta.sorted_tokens = os.tensor(DType::kI32, {n});
  Tensor xt = x.tensor(DType::kF32, {n, in}), tt = t.tensor(DType::kF32, {n, rank});
  const size_t copies = std::min(a.size(), b.size());
  const double s = timed_rounds(state, gpu, [&](size_t i) {
    LoraGroup g;
    g.count = static_cast<int>(members);
    for (int m = 0; m < g.count; ++m) {
      const size_t off = static_cast<size_t>(m) * stack * 2;  // bytes into the copy (bf16)
      g.a_stack[m] = Tensor(static_cast<char*>(a[i % copies].data()) + off, DType::kBF16, {slots, rank, in}, Device::kCuda);
      g.b_stack[m] = Tensor(static_cast<char*>(b[i % copies].data()) + off, DType::kBF16, {slots, out, rank}, Device::kCuda);
      g.y[m] = Tensor(static_cast<float*>(y.data()) + m * n * out, DType::kF32, {n, out}, Device::kCuda);
    }
    gpu->lora_group(g, xt, tt, meta);
  });
  const double adapters = static_cast<double>(distinct ? std::min(n, slots) : 1);
  const double adapter_bytes = adapters * static_cast<double>(members * rank * (in + out)) * 2;
  // The least a group must move: the adapters, x once, y read and written (f32).
  const double floor_bytes = adapter_bytes + static_cast<double>(n * in * 4 + members * n * out * 8);
  state.counters["us"] = s * 1e6;
  state.counters["adapter GB/s"] = adapter_bytes / s / 1e9;
  state.counters["x floor"] = s / (floor_bytes / kCeilingBytesPerSecond);
  state.SetLabel(distinct ? "one adapter per token" : "one adapter");
}

void lora_args(benchmark::internal::Benchmark* b) {
  for (int64_t distinct : {0, 1})
    for (int64_t n : {1, 8, 32, 64, 256, 2048}) b->Args({n, distinct});
}
BENCHMARK(BM_CudaLoraGroup)->Apply(lora_args)->UseManualTime()->Unit(benchmark::kMicrosecond)
    ->ArgNames({"n", "distinct"});

#endif  // QUIVER_HAS_CUDA

}  // namespace
}  // namespace quiver

BENCHMARK_MAIN();
