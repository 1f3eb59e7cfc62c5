// link: qv_backend
// The measurements behind the CUDA dispatch table (step_plan.h), on Llama-2-7B shapes
// (hidden 4096, intermediate 11008, vocab 32000), bf16 weights and stacks:
// - BM_CudaMatmul: one matmul under each MatmulKernel at 1 .. 2,048 tokens (the GEMV, the
//   skinny tensor-core kernel, cuBLAS without and with a workspace), weight GB/s and the
//   fraction of the H200's measured copy ceiling (4.26 TB/s, DESIGN.md section 5);
// - BM_CudaMatmulFp8: the same shapes in e4m3 (a scale per row, as --quantization fp8
//   loads them) on the GEMV and the skinny kernel at 1 .. 16 tokens, weight GB/s and the
//   fraction of the copy ceiling;
// - BM_CudaMatmulPrefill: the prefill GEMMs of one layer at 2,048 tokens, bf16 weights on
//   cuBLAS against the same weights in e4m3 on cuBLASLt's FP8 GEMM, the scales applied by a
//   pass (kCublasFp8) or in its epilogue (kCublasFp8Outer), TFLOP/s; and q/k/v at 128-1,024
//   tokens on the two FP8 kernels (the table's fp8_outer_min_n);
// - BM_CudaRopeKvWrite: rope_kv_write of one layer at 1 .. 16,384 tokens, GB/s;
// - BM_CudaLoraPlan: a projection group with LoRA (q/k/v: 3 x 4096 from 4096; down: 4096
//   from 11008; rank 16, and 64 / 128 for the prefill tiles; 64 slots) under each
//   shrink/expand pairing the kernels take at that size, plus the op that reads its outputs
//   (rope_kv_write, add_rms_norm), which adds the expand where the plan leaves it there.
//   Every token on slot 0, or token i on slot i % 64; the time over the byte floor
//   (weights, adapters, x, y).
// The table's choice at each size is the fastest row of its group; a kernel no size picks
// has no place in the table.
//
// Every benchmark cycles through enough copies of its weights (>= 512 MiB, 256 MiB in e4m3)
// that they cannot sit in the 60 MB L2, so GB/s is HBM bandwidth. Timing: kCallsPerRound
// calls enqueued back to back, then one synchronize, host clock around both; so per-call
// times include the launch gaps a CUDA graph would remove (~1-2 us per kernel).
// Run:  build/bench_cuda_ops --benchmark_out=bench_cuda_ops.json --benchmark_out_format=json
#include <benchmark/benchmark.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cuda_bench_timing.h"
#if defined(QUIVER_HAS_CUDA)
#include "backend/cuda/cuda_backend_factory.h"
#endif

namespace quiver {
namespace {

#if defined(QUIVER_HAS_CUDA)

constexpr size_t kMinWorkingSetBytes = size_t{512} << 20;
constexpr int kCallsPerRound = 50;
constexpr double kCeilingBytesPerSecond = 4.26e12;

// The default backend, created once (cuBLAS start-up is slow). nullptr: no GPU.
Backend* backend() {
  static std::unique_ptr<Backend> b = [] {
    std::string err;
    return make_cuda_backend(CudaBackendOptions{}, &err);
  }();
  return b.get();
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

// A one-member group: random f32 x [n, in], y [n, out] f32 (the weights are the caller's).
struct OneMatmul {
  Buffer x, y;
  MatmulGroup g;
  Tensor x_f32;
  OneMatmul(Backend* gpu, int64_t out, int64_t in, int64_t n)
      : x(random_buffer(gpu, DType::kF32, static_cast<size_t>(n * in), 1.f, 2)),
        y(gpu, static_cast<size_t>(n * out) * 4) {
    g.count = 1;
    g.y[0] = y.tensor(DType::kF32, {n, out});
    x_f32 = x.tensor(DType::kF32, {n, in});
  }
};

const MatmulKernel kMatmuls[] = {MatmulKernel::kGemv, MatmulKernel::kSkinny, MatmulKernel::kCublasSmall,
                                 MatmulKernel::kCublas};

GroupPlan matmul_plan(MatmulKernel k) {
  return {k, ShrinkKernel::kNone, ExpandKernel::kNone, matmul_input_type(k, DType::kBF16, false)};
}

// Args: out, in, n, kernel (index into kMatmuls).
void BM_CudaMatmul(benchmark::State& state) {
  const int64_t out = state.range(0), in = state.range(1), n = state.range(2);
  const MatmulKernel kernel = kMatmuls[state.range(3)];
  Backend* gpu = backend();
  if (gpu == nullptr) {
    state.SkipWithError("no CUDA device");
    return;
  }
  std::vector<Buffer> w = rotating_copies(gpu, DType::kBF16, static_cast<size_t>(out * in), 0.05f);
  OneMatmul m(gpu, out, in, n);
  const GroupPlan plan = matmul_plan(kernel);
  const double s = timed_rounds(state, gpu, kCallsPerRound, [&](size_t i) {
    m.g.w[0] = w[i % w.size()].tensor(DType::kBF16, {out, in});
    gpu->project(plan, m.g, GroupLora(), m.x_f32);
  });
  const double weight_bytes = static_cast<double>(out * in) * 2;
  const double bytes = weight_bytes + static_cast<double>(n * (in + out)) * 4;
  state.counters["us"] = s * 1e6;
  state.counters["GB/s"] = bytes / s / 1e9;
  state.counters["frac_of_4.26TB/s"] = bytes / s / kCeilingBytesPerSecond;
  state.counters["TFLOP/s"] = 2.0 * static_cast<double>(n * in * out) / s / 1e12;
  state.SetLabel(to_string(kernel));
}

const int64_t kShapes[][2] = {{4096, 4096}, {11008, 4096}, {4096, 11008}, {32000, 4096}};

void matmul_args(benchmark::internal::Benchmark* b) {
  for (const auto& s : kShapes)
    for (int64_t n : {1, 2, 4, 8, 16, 32, 64, 128}) {
      if (n <= 16) b->Args({s[0], s[1], n, 0});
      if (n >= 3 && n <= 16) b->Args({s[0], s[1], n, 1});
      b->Args({s[0], s[1], n, 2});
      b->Args({s[0], s[1], n, 3});
    }
  b->Args({4096, 4096, 2048, 3});  // prefill-sized: tensor-core rate, not bandwidth
}
BENCHMARK(BM_CudaMatmul)->Apply(matmul_args)->UseManualTime()->MinTime(kMinCallSeconds)->Unit(benchmark::kMicrosecond)
    ->ArgNames({"out", "in", "n", "kernel"});

// Every buffer of w quantized to e4m3 with a scale per row, as --quantization fp8 loads them.
struct Fp8Copies {
  std::vector<Buffer> q, scale;
  int64_t out, in;
  Fp8Copies(Backend* gpu, const std::vector<Buffer>& w, int64_t out_, int64_t in_) : out(out_), in(in_) {
    for (const Buffer& b : w) {
      q.emplace_back(gpu, static_cast<size_t>(out * in));
      scale.emplace_back(gpu, static_cast<size_t>(out) * 4);
      gpu->quantize_fp8_rows(q.back().tensor(DType::kF8E4M3, {out, in}), scale.back().tensor(DType::kF32, {out}),
                             b.tensor(DType::kBF16, {out, in}));
    }
    gpu->synchronize();
  }
  Tensor get(size_t i) const {
    Tensor t = q[i % q.size()].tensor(DType::kF8E4M3, {out, in});
    t.row_scale = scale[i % scale.size()].tensor(DType::kF32, {out}).ptr<float>();
    return t;
  }
};

// Args: out, in, n, kernel (0: the GEMV, 1: the skinny kernel), e4m3 weights.
void BM_CudaMatmulFp8(benchmark::State& state) {
  const int64_t out = state.range(0), in = state.range(1), n = state.range(2);
  const MatmulKernel kernel = state.range(3) == 0 ? MatmulKernel::kGemv : MatmulKernel::kSkinny;
  Backend* gpu = backend();
  if (gpu == nullptr) {
    state.SkipWithError("no CUDA device");
    return;
  }
  // The e4m3 copies hold half the bf16 working set: 256 MiB, still past any L2.
  const Fp8Copies q(gpu, rotating_copies(gpu, DType::kBF16, static_cast<size_t>(out * in), 0.05f), out, in);
  OneMatmul m(gpu, out, in, n);
  const GroupPlan plan{kernel, ShrinkKernel::kNone, ExpandKernel::kNone,
                       matmul_input_type(kernel, DType::kF8E4M3, false)};
  const double s = timed_rounds(state, gpu, kCallsPerRound, [&](size_t i) {
    m.g.w[0] = q.get(i);
    gpu->project(plan, m.g, GroupLora(), m.x_f32);
  });
  const double bytes = static_cast<double>(out * in) + static_cast<double>(out) * 4 +
                       static_cast<double>(n * (in + out)) * 4;
  state.counters["us"] = s * 1e6;
  state.counters["GB/s"] = bytes / s / 1e9;
  state.counters["frac_of_4.26TB/s"] = bytes / s / kCeilingBytesPerSecond;
  state.SetLabel(to_string(kernel) + " e4m3");
}

void matmul_fp8_args(benchmark::internal::Benchmark* b) {
  for (const auto& s : kShapes)
    for (int64_t n : {1, 2, 4, 8, 16}) {
      if (n <= 2) b->Args({s[0], s[1], n, 0});
      if (n >= 3) b->Args({s[0], s[1], n, 1});
    }
}
BENCHMARK(BM_CudaMatmulFp8)->Apply(matmul_fp8_args)->UseManualTime()->MinTime(kMinCallSeconds)
    ->Unit(benchmark::kMicrosecond)
    ->ArgNames({"out", "in", "n", "kernel"});

// Args: out, in, n, kernel (0: bf16 weights on cuBLAS; 1 / 2: the same weights quantized to
// e4m3 with a scale per row, on kCublasFp8 / kCublasFp8Outer, x quantized per token in the
// same call).
// Prefill-sized: the tensor cores' rate, against the H100/H200's 989 (bf16) and 1,979 (FP8)
// dense TFLOP/s.
void BM_CudaMatmulPrefill(benchmark::State& state) {
  const int64_t out = state.range(0), in = state.range(1), n = state.range(2);
  const bool fp8 = state.range(3) >= 1;
  Backend* gpu = backend();
  if (gpu == nullptr) {
    state.SkipWithError("no CUDA device");
    return;
  }
  std::vector<Buffer> w = rotating_copies(gpu, DType::kBF16, static_cast<size_t>(out * in), 0.05f);
  std::optional<Fp8Copies> q;
  if (fp8) q.emplace(gpu, w, out, in);
  OneMatmul m(gpu, out, in, n);
  const MatmulKernel kernel = state.range(3) == 2   ? MatmulKernel::kCublasFp8Outer
                             : state.range(3) == 1 ? MatmulKernel::kCublasFp8
                                                   : MatmulKernel::kCublas;
  const DType wt = fp8 ? DType::kF8E4M3 : DType::kBF16;
  const GroupPlan plan{kernel, ShrinkKernel::kNone, ExpandKernel::kNone, matmul_input_type(kernel, wt, false)};
  const double s = timed_rounds(state, gpu, kCallsPerRound, [&](size_t i) {
    m.g.w[0] = fp8 ? q->get(i) : w[i % w.size()].tensor(DType::kBF16, {out, in});
    gpu->project(plan, m.g, GroupLora(), m.x_f32);
  });
  state.counters["us"] = s * 1e6;
  state.counters["TFLOP/s"] = 2.0 * static_cast<double>(n * in * out) / s / 1e12;
  state.SetLabel(to_string(kernel));
}
BENCHMARK(BM_CudaMatmulPrefill)
    ->ArgsProduct({{12288}, {4096}, {2048}, {0, 1, 2}})
    ->ArgsProduct({{4096}, {4096}, {2048}, {0, 1, 2}})
    ->ArgsProduct({{22016}, {4096}, {2048}, {0, 1, 2}})
    ->ArgsProduct({{4096}, {11008}, {2048}, {0, 1, 2}})
    ->ArgsProduct({{12288}, {4096}, {128, 256, 512, 1024}, {1, 2}})
    ->UseManualTime()->MinTime(kMinCallSeconds)->Unit(benchmark::kMicrosecond)
    ->ArgNames({"out", "in", "n", "kernel"});

// rope_kv_write of one Llama-2-7B layer (32 heads of 128 for q, k and v), n tokens at
// positions i % 4,096 into a bf16 cache, every token stored (slot i): q and k read and
// written, v read, k and v written to the cache, the table's rows read. The data fit the L2
// up to a few hundred tokens, so small n time launch and latency, not HBM.
void BM_CudaRopeKvWrite(benchmark::State& state) {
  const int64_t n = state.range(0), heads = 32, hd = 128, max_pos = 4096, elems = n * heads * hd;
  Backend* gpu = backend();
  if (gpu == nullptr) {
    state.SkipWithError("no CUDA device");
    return;
  }
  Buffer q = random_buffer(gpu, DType::kF32, static_cast<size_t>(elems), 1.f, 2);
  Buffer k = random_buffer(gpu, DType::kF32, static_cast<size_t>(elems), 1.f, 3);
  Buffer v = random_buffer(gpu, DType::kF32, static_cast<size_t>(elems), 1.f, 4);
  Buffer table = random_buffer(gpu, DType::kF32, static_cast<size_t>(max_pos * hd), 1.f, 5);
  Buffer kc(gpu, static_cast<size_t>(elems) * 2), vc(gpu, static_cast<size_t>(elems) * 2);
  std::vector<int32_t> pos(static_cast<size_t>(n)), slots(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    pos[static_cast<size_t>(i)] = static_cast<int32_t>(i % max_pos);
    slots[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  }
  Buffer ps(gpu, pos.size() * 4), ss(gpu, slots.size() * 4);
  gpu->copy_from_host(ps.data(), pos.data(), pos.size() * 4);
  gpu->copy_from_host(ss.data(), slots.data(), slots.size() * 4);
  const KvLayer cache{kc.tensor(DType::kBF16, {n, 1, heads, hd}), vc.tensor(DType::kBF16, {n, 1, heads, hd})};
  const double s = timed_rounds(state, gpu, kCallsPerRound, [&](size_t) {
    gpu->rope_kv_write(q.tensor(DType::kF32, {n, heads, hd}), k.tensor(DType::kF32, {n, heads, hd}),
                       v.tensor(DType::kF32, {n, heads, hd}), ps.tensor(DType::kI32, {n}),
                       table.tensor(DType::kF32, {max_pos, hd}), cache, ss.tensor(DType::kI32, {n}), GroupPlan(),
                       GroupLora());
  });
  const double bytes = static_cast<double>(elems) * (4 * 2 + 4 * 2 + 4 + 2 * 2) +
                       static_cast<double>(std::min(n, max_pos) * hd) * 4;
  state.counters["us"] = s * 1e6;
  state.counters["GB/s"] = bytes / s / 1e9;
  state.counters["frac_of_4.26TB/s"] = bytes / s / kCeilingBytesPerSecond;
}
BENCHMARK(BM_CudaRopeKvWrite)->Arg(1)->Arg(16)->Arg(64)->Arg(256)->Arg(2048)->Arg(16384)->UseManualTime()
    ->MinTime(kMinCallSeconds)->Unit(benchmark::kMicrosecond)->ArgNames({"n"});

// The LoRA pairings of BM_CudaLoraPlan: shrink, expand (the matmul is the table's for n
// without LoRA, or the one the fused shrink rides on).
const std::pair<ShrinkKernel, ExpandKernel> kPairings[] = {
    {ShrinkKernel::kFused, ExpandKernel::kNextOp},  {ShrinkKernel::kTokenRows, ExpandKernel::kNextOp},
    {ShrinkKernel::kTiled, ExpandKernel::kTiled},   {ShrinkKernel::kTiledMma, ExpandKernel::kTiledMma},
    {ShrinkKernel::kTiled, ExpandKernel::kTiledMma}, {ShrinkKernel::kTiledMma, ExpandKernel::kTiled}};

// Args: group (0: q/k/v, 1: down), n, pairing (index into kPairings), distinct (0: every
// token on slot 0; 1: token i on slot i % 64), rank.
void BM_CudaLoraPlan(benchmark::State& state) {
  const bool qkv = state.range(0) == 0;
  const int64_t n = state.range(1), rank = state.range(4), slots = 64, heads = 32, hd = 128;
  const auto [shrink, expand] = kPairings[state.range(2)];
  const bool distinct = state.range(3) == 1;
  const int64_t in = qkv ? 4096 : 11008, out = 4096, members = qkv ? 3 : 1;
  Backend* gpu = backend();
  if (gpu == nullptr) {
    state.SkipWithError("no CUDA device");
    return;
  }
  GroupPlan plan = matmul_plan(plan_device_matmul(DispatchTable{}, n, in, DType::kBF16, false).matmul);
  if (shrink == ShrinkKernel::kFused) {
    if (n > 16) {
      state.SkipWithError("the fused shrinks take at most 16 tokens");
      return;
    }
    plan = matmul_plan(n <= 2 ? MatmulKernel::kGemv : MatmulKernel::kSkinny);
  }
  plan.shrink = shrink;
  plan.expand = expand;
  const size_t weight = static_cast<size_t>(members * out * in), stack = static_cast<size_t>(slots * rank * in);
  std::vector<Buffer> w = rotating_copies(gpu, DType::kBF16, weight, 0.05f);
  std::vector<Buffer> a = rotating_copies(gpu, DType::kBF16, stack * members, 0.05f);
  std::vector<Buffer> b = rotating_copies(gpu, DType::kBF16, static_cast<size_t>(slots * out * rank) * members, 0.05f);
  Buffer x = random_buffer(gpu, DType::kF32, static_cast<size_t>(n * in), 1.f, 3);
  Buffer x16 = random_buffer(gpu, DType::kBF16, static_cast<size_t>(n * in), 1.f, 3);
  Buffer t(gpu, static_cast<size_t>(kMaxGroup * n * rank) * 4);
  Buffer y = random_buffer(gpu, DType::kF32, static_cast<size_t>(members * n * out), 1.f, 4);
  Buffer res = random_buffer(gpu, DType::kF32, static_cast<size_t>(n * out), 1.f, 5);
  Buffer normed(gpu, static_cast<size_t>(n * out) * 4), norm_w = random_buffer(gpu, DType::kBF16, out, 1.f, 6);
  Buffer cos_sin = random_buffer(gpu, DType::kF32, static_cast<size_t>(64 * hd), 1.f, 7);
  Buffer cache = random_buffer(gpu, DType::kBF16, static_cast<size_t>(16 * heads * hd), 1.f, 8);
  std::vector<int32_t> token_slot(static_cast<size_t>(n)), order, skip(static_cast<size_t>(n), -1),
      pos(static_cast<size_t>(n), 3);
  for (int64_t i = 0; i < n; ++i) token_slot[static_cast<size_t>(i)] = distinct ? static_cast<int32_t>(i % slots) : 0;
  lora_sorted_tokens(token_slot, &order);
  Buffer ts(gpu, token_slot.size() * 4), os(gpu, order.size() * 4), ks(gpu, skip.size() * 4), ps(gpu, pos.size() * 4);
  gpu->copy_from_host(ts.data(), token_slot.data(), token_slot.size() * 4);
  gpu->copy_from_host(os.data(), order.data(), order.size() * 4);
  gpu->copy_from_host(ks.data(), skip.data(), skip.size() * 4);
  gpu->copy_from_host(ps.data(), pos.data(), pos.size() * 4);
  GroupLora lora;
  lora.count = static_cast<int>(members);
  lora.t = t.tensor(DType::kF32, {kMaxGroup, n, rank});
  lora.meta.token_slot = ts.tensor(DType::kI32, {n});
  lora.meta.sorted_tokens = os.tensor(DType::kI32, {n});
  lora.meta.run_tokens = lora_run_tokens(token_slot, order);  // as the engine counts them
  MatmulGroup g;
  g.count = lora.count;
  g.x16 = x16.tensor(DType::kBF16, {n, in});
  for (int m = 0; m < g.count; ++m)
    g.y[m] = lora.y[m] = Tensor(static_cast<float*>(y.data()) + m * n * out, DType::kF32, {n, out}, Device::kCuda);
  const Tensor xt = x.tensor(DType::kF32, {n, in});
  const Tensor cache_t(cache.data(), DType::kBF16, {1, 16, heads, hd}, Device::kCuda);
  const size_t copies = std::min({w.size(), a.size(), b.size()});
  const double s = timed_rounds(state, gpu, kCallsPerRound, [&](size_t i) {
    const size_t c = i % copies;
    for (int m = 0; m < g.count; ++m) {
      g.w[m] = Tensor(static_cast<char*>(w[c].data()) + static_cast<size_t>(m) * out * in * 2, DType::kBF16,
                      {out, in}, Device::kCuda);
      lora.a_stack[m] = Tensor(static_cast<char*>(a[c].data()) + static_cast<size_t>(m) * stack * 2, DType::kBF16,
                               {slots, rank, in}, Device::kCuda);
      lora.b_stack[m] = Tensor(static_cast<char*>(b[c].data()) + static_cast<size_t>(m) * slots * out * rank * 2,
                               DType::kBF16, {slots, out, rank}, Device::kCuda);
    }
    gpu->project(plan, g, lora, xt);
    if (qkv) {
      gpu->rope_kv_write(lora.y[0].view({n, heads, hd}), lora.y[1].view({n, heads, hd}),
                         lora.y[2].view({n, heads, hd}), ps.tensor(DType::kI32, {n}),
                         cos_sin.tensor(DType::kF32, {64, hd}), KvLayer{cache_t, cache_t}, ks.tensor(DType::kI32, {n}), plan,
                         lora);
    } else {
      gpu->add_rms_norm(normed.tensor(DType::kF32, {n, out}), Tensor(), res.tensor(DType::kF32, {n, out}), lora.y[0],
                        norm_w.tensor(DType::kBF16, {out}), 1e-5f, plan, lora);
    }
  });
  const double adapters = static_cast<double>(distinct ? std::min(n, slots) : 1);
  const double adapter_bytes = adapters * static_cast<double>(members * rank * (in + out)) * 2;
  // The least a group must move: its weights, the adapters, x once, y written and read.
  const double floor_bytes = static_cast<double>(weight) * 2 + adapter_bytes +
                             static_cast<double>(n * in * 4 + members * n * out * 8);
  state.counters["us"] = s * 1e6;
  state.counters["x floor"] = s / (floor_bytes / kCeilingBytesPerSecond);
  state.SetLabel(std::string(qkv ? "qkv " : "down ") + to_string(plan.matmul) + "+" + to_string(shrink) + "/" +
                 to_string(expand) + (distinct ? " one adapter per token" : " one adapter") + " r=" +
                 std::to_string(rank));
}

void lora_plan_args(benchmark::internal::Benchmark* b) {
  for (int64_t group : {0, 1})
    for (int64_t distinct : {0, 1})
      for (int64_t n : {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 2048})
        for (int64_t p = 0; p < 6; ++p) {
          if (p == 0 && n > 16) continue;       // fused: decode sizes only
          if (p == 1 && n > 256) continue;      // one token per block: up to the largest decode bucket
          if (p >= 3 && n < 64) continue;       // tensor-core tiles: prefill sizes
          b->Args({group, n, p, distinct, 16});
        }
  // Higher ranks, where the tiles' arithmetic grows with R and tensor cores may pay:
  // the tiled pairings on one adapter at prefill sizes.
  for (int64_t rank : {64, 128})
    for (int64_t group : {0, 1})
      for (int64_t n : {128, 512, 2048})
        for (int64_t p = 2; p < 6; ++p) b->Args({group, n, p, 0, rank});
}
BENCHMARK(BM_CudaLoraPlan)->Apply(lora_plan_args)->UseManualTime()->MinTime(kMinCallSeconds)
    ->Unit(benchmark::kMicrosecond)
    ->ArgNames({"group", "n", "pairing", "distinct", "rank"});

#endif  // QUIVER_HAS_CUDA

}  // namespace
}  // namespace quiver

BENCHMARK_MAIN();
