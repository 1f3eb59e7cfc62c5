// link: qv_backend
// CpuBackend matmul on TinyLlama-1.1B shapes with bf16 weights: GEMV (n=1) and batched
// decode (n=8, 16) report weight GB/s, prefill (n=128) reports GFLOP/s; each with f32
// activations (--matmul-precision highest) and with activations rounded to bf16
// (matmul_x16: the AVX512-BF16 dot-product kernel where the CPU has it, label "bf16-dot",
// and the same on weights packed for it as the engine packs projections, "bf16-packed").
// int8 weights (BM_MatmulInt8) row-major and packed. Also LoRA shrink+expand at decode
// (rank 16) next to the base GEMV it rides on.
//
// Each benchmark cycles through enough copies of the weight that they cannot sit in the
// last-level cache, so GB/s is memory bandwidth, not L3 bandwidth.
// Run:  build/bench_cpu_matmul --benchmark_out=bench_cpu_matmul.json --benchmark_out_format=json
//       (the JSON context records date, host and CPU; add the commit by hand).
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"

namespace quiver {
namespace {

constexpr size_t kMinWorkingSetBytes = size_t{512} << 20;  // well past any L3

// Copies of one weight: bf16 (E = uint16_t) or int8 with row scales (E = int8_t), row-major
// or packed as the engine packs projections.
template <class E>
struct Weights {
  static constexpr DType kType = sizeof(E) == 1 ? DType::kI8 : DType::kBF16;
  std::vector<std::vector<E>> copies;
  std::vector<float> scales;  // int8's row scales
  int64_t out = 0, in = 0;
  bool packed = false;
  Tensor view(E* data) const {
    Tensor t(data, kType, {out, in});
    if (!scales.empty()) t.row_scale = scales.data();
    return t;
  }
  Tensor get(size_t i) {
    Tensor t = view(copies[i % copies.size()].data());
    if (packed) t.layout = WeightLayout::kBlock16;
    return t;
  }
  size_t bytes() const { return static_cast<size_t>(out * in) * sizeof(E); }
};

// The last shape's weights are kept: google-benchmark calls a benchmark several times
// (iteration-count probes, repetitions) and building 512 MiB of copies is slow. cached:
// one copy, which a weight small enough keeps in the cores' caches (the kernel's own rate).
template <class E>
Weights<E>& make_weights(int64_t out, int64_t in, CpuBackend* packer, bool cached = false) {
  static Weights<E> w;
  static bool w_cached = false;
  if (w.out == out && w.in == in && w.packed == (packer != nullptr) && w_cached == cached) return w;
  w = Weights<E>{{}, {}, out, in, false};
  w_cached = cached;
  const size_t one = static_cast<size_t>(out * in);
  std::mt19937 rng(1);
  std::vector<E> base(one);
  if constexpr (sizeof(E) == 1) {
    w.scales.assign(static_cast<size_t>(out), 1e-3f);
    std::uniform_int_distribution<int> q(-127, 127);
    for (auto& v : base) v = static_cast<E>(q(rng));
  } else {
    std::uniform_real_distribution<float> u(-0.05f, 0.05f);
    for (auto& v : base) v = f32_to_bf16(u(rng));
  }
  if (packer != nullptr) {
    std::vector<E> packed(one);
    packer->pack_projection(packed.data(), w.view(base.data()));
    base = std::move(packed);
    w.packed = true;
  }
  const size_t n = cached ? 1 : std::max<size_t>(2, kMinWorkingSetBytes / w.bytes() + 1);
  for (size_t i = 0; i < n; ++i) w.copies.push_back(base);
  return w;
}

std::vector<float> random_vec(size_t n) {
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> h(x.size());
  for (size_t j = 0; j < x.size(); ++j) h[j] = f32_to_bf16(x[j]);
  return h;
}

// GB/s of the weight's bytes and GFLOP/s of its multiply-adds, per iteration.
void set_rates(benchmark::State& state, size_t weight_bytes, int64_t macs) {
  const double iters = static_cast<double>(state.iterations());
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(weight_bytes) * iters / 1e9, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * static_cast<double>(macs) * iters / 1e9, benchmark::Counter::kIsRate);
}

CpuBackend& backend(int threads) {
  static std::unique_ptr<CpuBackend> b;  // one pool per thread count, reused across runs
  static int b_threads = -1;
  if (b_threads != threads) {
    b = std::make_unique<CpuBackend>(threads);
    b_threads = threads;
  }
  return *b;
}

// Args: out, in, n (tokens), threads, x16 (1: activations in bf16; 2: and packed weights)
void BM_MatmulBf16(benchmark::State& state) {
  const int64_t out = state.range(0), in = state.range(1), n = state.range(2);
  const bool x16 = state.range(4) >= 1;
  CpuBackend& cpu = backend(static_cast<int>(state.range(3)));
  const bool pack = state.range(4) == 2;
  if (pack && cpu.projection_layout(Tensor(nullptr, DType::kBF16, {out, in})) != WeightLayout::kBlock16) {
    state.SkipWithError("no packed layout on this CPU");
    return;
  }
  Weights<uint16_t>& w = make_weights<uint16_t>(out, in, pack ? &cpu : nullptr);
  std::vector<float> x = random_vec(static_cast<size_t>(n * in)), y(static_cast<size_t>(n * out));
  std::vector<uint16_t> xh = to_bf16(x);
  Tensor xt(x.data(), DType::kF32, {n, in}), yt(y.data(), DType::kF32, {n, out});
  Tensor xht(xh.data(), DType::kBF16, {n, in});
  size_t i = 0;
  for (auto _ : state) {
    if (x16) cpu.matmul_x16(yt, xht, w.get(i++), Tensor());
    else cpu.matmul(yt, xt, w.get(i++), Tensor());
    benchmark::DoNotOptimize(y.data());
  }
  set_rates(state, w.bytes(), n * in * out);
  const char* kernel = !x16 ? "" : pack ? " bf16-packed" : cpu.has_bf16_dot() ? " bf16-dot" : " bf16 x";
  state.SetLabel(std::string(cpu_isa_name(cpu.isa())) + kernel);
}

const int64_t kShapes[][2] = {{2048, 2048}, {256, 2048}, {5632, 2048}, {2048, 5632}, {32000, 2048}};

void matmul_args(benchmark::internal::Benchmark* b) {
  for (int64_t x16 : {0, 1, 2}) {
    for (int64_t n : {1, 8, 16, 128})
      for (const auto& s : kShapes) b->Args({s[0], s[1], n, 0, x16});
    for (const auto& s : kShapes) b->Args({s[0], s[1], 1, 1, x16});  // single-thread GEMV
  }
}
BENCHMARK(BM_MatmulBf16)->Apply(matmul_args)->UseRealTime()->Unit(benchmark::kMicrosecond)
    ->ArgNames({"out", "in", "n", "threads", "x16"});

// int8 weights with row scales (--quantization int8), activations in bf16: row-major (the
// dot-product kernel widening each tile's weights in registers, packed:0) and packed as the
// engine packs projections (packed:1). GB/s counts the int8 bytes. cached:1 keeps one copy
// of a 256 x 2048 weight (256 KiB a thread, in each core's L2): the kernel's own rate,
// which the one-token GEMV must exceed to be bound by memory.
// Args: out, in, n (tokens), packed, cached
void BM_MatmulInt8(benchmark::State& state) {
  const int64_t out = state.range(0), in = state.range(1), n = state.range(2);
  const bool pack = state.range(3) == 1, cached = state.range(4) == 1;
  CpuBackend& cpu = backend(0);
  Tensor probe(nullptr, DType::kI8, {out, in});
  const float one_scale = 1.f;
  probe.row_scale = &one_scale;
  if (!cpu.has_bf16_dot() || (pack && cpu.projection_layout(probe) != WeightLayout::kBlock16)) {
    state.SkipWithError("no AVX512-BF16 int8 kernel on this CPU");
    return;
  }
  Weights<int8_t>& w = make_weights<int8_t>(out, in, pack ? &cpu : nullptr, cached);
  std::vector<float> x = random_vec(static_cast<size_t>(n * in)), y(static_cast<size_t>(n * out));
  std::vector<uint16_t> xh = to_bf16(x);
  Tensor xht(xh.data(), DType::kBF16, {n, in}), yt(y.data(), DType::kF32, {n, out});
  size_t i = 0;
  for (auto _ : state) {
    cpu.matmul_x16(yt, xht, w.get(i++), Tensor());
    benchmark::DoNotOptimize(y.data());
  }
  set_rates(state, w.bytes(), n * in * out);
  state.SetLabel(std::string(pack ? "int8-packed" : "int8-dot") + (cached ? " cached" : ""));
}

void int8_args(benchmark::internal::Benchmark* b) {
  for (int64_t pack : {0, 1}) {
    for (int64_t n : {1, 2, 4, 8, 16, 128})
      for (int s = 0; s < 4; ++s) b->Args({kShapes[s][0], kShapes[s][1], n, pack, 0});
    b->Args({256, 2048, 1, pack, 1});
  }
}
BENCHMARK(BM_MatmulInt8)->Apply(int8_args)->UseRealTime()->Unit(benchmark::kMicrosecond)
    ->ArgNames({"out", "in", "n", "packed", "cached"});

// The cores' peak bf16 multiply-add rate, the ceiling of the compute-bound cases above:
// 16 independent vdpbf16ps chains per thread in registers, nothing loaded. Compiled for
// AVX512-BF16 here alone and run only where the CPU has it.
constexpr int64_t kPeakIters = 1 << 20;
constexpr double kPeakFlops = kPeakIters * 16 * 64.0;  // 16 chains, 32 pairs = 64 flop each

__attribute__((target("avx512f,avx512bf16"))) void dpbf16_chains() {
  __m512 acc[16];
  for (auto& a : acc) a = _mm512_setzero_ps();
  __m512bh w = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3c00));  // bf16 0.0078125
  for (int64_t i = 0; i < kPeakIters; ++i) {
    for (auto& a : acc) a = _mm512_dpbf16_ps(a, w, w);
    asm volatile("" : "+v"(w));  // keeps the chains live and in order
  }
  float sum = 0;
  for (auto& a : acc) sum += _mm512_reduce_add_ps(a);
  benchmark::DoNotOptimize(sum);
}

void BM_Bf16DotPeak(benchmark::State& state) {
  CpuBackend& cpu = backend(0);
  if (!cpu.has_bf16_dot()) {
    state.SkipWithError("no AVX512-BF16 on this CPU");
    return;
  }
  const int threads = cpu.pool().num_threads();
  for (auto _ : state) cpu.pool().parallel_for(threads, [](int64_t, int64_t, int) { dpbf16_chains(); }, 1);
  state.counters["GFLOP/s"] = benchmark::Counter(
      kPeakFlops * threads * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(std::to_string(threads) + " threads");
}
BENCHMARK(BM_Bf16DotPeak)->UseRealTime()->Unit(benchmark::kMillisecond);

// LoRA at decode: shrink [rank x in] then expand [out x rank] for one token, f32 stacks
// (2 slots). Compare with BM_MatmulBf16/out:2048/in:2048/n:1.
void BM_LoraDecode(benchmark::State& state) {
  const int64_t in = 2048, out = 2048, rank = state.range(0), slots = 2;
  CpuBackend& cpu = backend(0);
  std::vector<float> a = random_vec(static_cast<size_t>(slots * rank * in));
  std::vector<float> b = random_vec(static_cast<size_t>(slots * out * rank));
  std::vector<float> x = random_vec(static_cast<size_t>(in)), t(static_cast<size_t>(rank)), y(static_cast<size_t>(out));
  int32_t slot = 1, seg_start[2] = {0, 1};
  LoraMeta meta;
  meta.token_slot = Tensor(&slot, DType::kI32, {1});
  meta.seg_start = Tensor(seg_start, DType::kI32, {2});
  meta.seg_slot = Tensor(&slot, DType::kI32, {1});
  meta.num_segments = 1;
  Tensor at(a.data(), DType::kF32, {slots, rank, in}), bt(b.data(), DType::kF32, {slots, out, rank});
  Tensor xt(x.data(), DType::kF32, {1, in}), tt(t.data(), DType::kF32, {1, rank}), yt(y.data(), DType::kF32, {1, out});
  for (auto _ : state) {
    cpu.lora_shrink(tt, xt, at, meta);
    cpu.lora_expand(yt, tt, bt, meta);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(std::string(cpu_isa_name(cpu.isa())));
}
BENCHMARK(BM_LoraDecode)->Arg(16)->Arg(64)->UseRealTime()->Unit(benchmark::kMicrosecond)->ArgNames({"rank"});

}  // namespace
}  // namespace quiver

BENCHMARK_MAIN();
