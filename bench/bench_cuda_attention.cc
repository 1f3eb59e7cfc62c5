// link: qv_backend
// Paged attention on the GPU, Llama-2-7B shape (32 heads of 128, one layer, blocks of 16):
// - BM_CudaAttentionPrefill: the tensor-core prefill kernel (16-bit and fp8 caches) against
//   the f32 CUDA-core kernel that --matmul-precision highest keeps, at 2,048 tokens as 16
//   prompts of 128, 4 of 512 and one of 2,048. TFLOP/s counts the causal products (q K^T
//   and P V, 4 * head_dim flop a query-key pair a head), against the H100/H200's 989 dense
//   bf16 TFLOP/s;
// - BM_CudaAttentionDecode: the decode kernel, bf16 against fp8 e4m3 caches, at the serving
//   benchmark's 256 sequences (320 and 1,024 keys) and 32 of 4,096, with Llama-2-7B's heads
//   and with GQA groups of 2, 4 and 7 query heads a KV head; GB/s of K and V.
// Run:  build/bench_cuda_attention --benchmark_out=bench_cuda_attention.json --benchmark_out_format=json
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
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

constexpr int64_t kHeads = 32, kHeadDim = 128, kBlockSize = 16;  // Llama-2-7B (decode cases: GQA too)
constexpr int kCallsPerRound = 20;

// The default backend and the --matmul-precision highest one, created once. nullptr: no GPU.
Backend* backend(bool highest) {
  static std::unique_ptr<Backend> b[2];
  static bool made[2] = {false, false};
  if (!made[highest]) {
    made[highest] = true;
    CudaBackendOptions o;
    o.gemm_split_activations = highest;
    std::string err;
    b[highest] = make_cuda_backend(o, &err);
  }
  return b[highest].get();
}

Buffer upload(Backend* gpu, const void* host, size_t bytes) {
  Buffer b(gpu, bytes);
  gpu->copy_from_host(b.data(), host, bytes);
  return b;
}

// Random bits for the cache: uniform values of the cache's type in [-1, 1], 1 Mi of them
// repeated (the values do not change the kernels' work; drawing a 256 x 4,096-key cache
// one value at a time takes the host longer than the benchmark).
std::vector<uint8_t> random_cache(DType t, size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const size_t es = dtype_size(t), pattern = std::min<size_t>(count, size_t{1} << 20);
  std::vector<uint8_t> bytes(count * es);
  for (size_t i = 0; i < pattern; ++i) {
    const float v = u(rng);
    if (t == DType::kF8E4M3) {
      bytes[i] = f32_to_e4m3(v);
    } else {
      const uint16_t h = t == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
      std::memcpy(&bytes[2 * i], &h, 2);
    }
  }
  for (size_t i = pattern; i < count; i += pattern)
    std::memcpy(&bytes[i * es], bytes.data(), std::min(pattern, count - i) * es);
  return bytes;
}

// One step's attention over `seqs` sequences of `len` keys, the last q_len of them queries
// (q_len = len: whole prompts; 1: decode), `heads` query heads over `kv_heads` KV heads of
// 128, on a fresh cache.
struct AttentionStep {
  Buffer k, v, q, out, starts, lens, tables;
  KvLayer cache;
  AttentionMeta meta;
  Tensor out_t, q_t;
  AttentionStep(Backend* gpu, DType t, int64_t seqs, int64_t len, int64_t q_len, int64_t heads = kHeads,
                int64_t kv_heads = kHeads) {
    const int64_t n = seqs * q_len, blocks_per_seq = (len + kBlockSize - 1) / kBlockSize;
    const int64_t num_blocks = seqs * blocks_per_seq;
    const size_t cache_count = static_cast<size_t>(num_blocks * kBlockSize * kv_heads * kHeadDim);
    const std::vector<uint8_t> kc = random_cache(t, cache_count, 1), vc = random_cache(t, cache_count, 2);
    std::vector<float> qh(static_cast<size_t>(n * heads * kHeadDim));
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-2.f, 2.f);
    for (float& x : qh) x = u(rng);
    std::vector<int32_t> sh{0}, lh, th;
    for (int64_t s = 0; s < seqs; ++s) {
      sh.push_back(static_cast<int32_t>((s + 1) * q_len));
      lh.push_back(static_cast<int32_t>(len));
      for (int64_t b = 0; b < blocks_per_seq; ++b) th.push_back(static_cast<int32_t>(s * blocks_per_seq + b));
    }
    k = upload(gpu, kc.data(), kc.size());
    v = upload(gpu, vc.data(), vc.size());
    q = upload(gpu, qh.data(), qh.size() * 4);
    out = Buffer(gpu, qh.size() * 4);
    starts = upload(gpu, sh.data(), sh.size() * 4);
    lens = upload(gpu, lh.data(), lh.size() * 4);
    tables = upload(gpu, th.data(), th.size() * 4);
    cache = KvLayer{k.tensor(t, {num_blocks, kBlockSize, kv_heads, kHeadDim}),
                    v.tensor(t, {num_blocks, kBlockSize, kv_heads, kHeadDim}), 1.f, 1.f};
    meta = AttentionMeta{starts.tensor(DType::kI32, {seqs + 1}), lens.tensor(DType::kI32, {seqs}),
                         tables.tensor(DType::kI32, {seqs, blocks_per_seq}), static_cast<int>(seqs),
                         static_cast<int>(q_len), static_cast<int>(len)};
    out_t = out.tensor(DType::kF32, {n, heads, kHeadDim});
    q_t = q.tensor(DType::kF32, {n, heads, kHeadDim});
  }
  void run(Backend* gpu) const { gpu->attention(out_t, q_t, cache, meta, 1.f / std::sqrt(float{kHeadDim})); }
};

DType cache_type(int64_t i) { return i == 0 ? DType::kBF16 : i == 1 ? DType::kF16 : DType::kF8E4M3; }

// Args: prompts, prompt length, cache type (0 bf16, 1 f16, 2 fp8 e4m3), kernel (0: tensor
// cores, 1: the f32 kernel of --matmul-precision highest).
void BM_CudaAttentionPrefill(benchmark::State& state) {
  const int64_t seqs = state.range(0), len = state.range(1);
  const DType t = cache_type(state.range(2));
  Backend* gpu = backend(state.range(3) == 1);
  if (gpu == nullptr) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const AttentionStep step(gpu, t, seqs, len, len);
  const double s = timed_rounds(state, gpu, kCallsPerRound, [&](size_t) { step.run(gpu); });
  const double pairs = static_cast<double>(seqs) * static_cast<double>(len) * static_cast<double>(len + 1) / 2;
  state.counters["us"] = s * 1e6;
  state.counters["TFLOP/s"] = pairs * 4.0 * kHeadDim * kHeads / s / 1e12;
  state.SetLabel(std::string(dtype_name(t)) + (state.range(3) == 1 ? " f32 kernel" : " tensor cores"));
}
BENCHMARK(BM_CudaAttentionPrefill)
    ->ArgsProduct({{16}, {128}, {0, 1, 2}, {0, 1}})
    ->ArgsProduct({{4}, {512}, {0, 1, 2}, {0, 1}})
    ->ArgsProduct({{1}, {2048}, {0, 1, 2}, {0, 1}})
    ->UseManualTime()->MinTime(kMinCallSeconds)->Unit(benchmark::kMicrosecond)
    ->ArgNames({"prompts", "len", "cache", "kernel"});

// A decode step's attention: one query each over `len` keys. Args: sequences, keys, cache
// type, query heads, KV heads: 32 / 32 (Llama-2-7B), 32 / 8 (Llama-3-8B, Mistral-7B: 4 query
// heads a KV head), 28 / 4 (Qwen2-7B: 7), 32 / 16 (2). GB/s of K and V, against the card's
// copy ceiling (H200 4,260 GB/s, H100 2,950: bench/records/machines.json).
void BM_CudaAttentionDecode(benchmark::State& state) {
  const int64_t seqs = state.range(0), len = state.range(1), heads = state.range(3), kv_heads = state.range(4);
  const DType t = cache_type(state.range(2));
  Backend* gpu = backend(false);
  if (gpu == nullptr) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const AttentionStep step(gpu, t, seqs, len, 1, heads, kv_heads);
  const double s = timed_rounds(state, gpu, kCallsPerRound, [&](size_t) { step.run(gpu); });
  const double bytes =
      2.0 * static_cast<double>(seqs * len * kv_heads * kHeadDim) * static_cast<double>(dtype_size(t));
  state.counters["us"] = s * 1e6;
  state.counters["GB/s"] = bytes / s / 1e9;
  state.SetLabel(std::string(dtype_name(t)));
}
BENCHMARK(BM_CudaAttentionDecode)
    ->ArgsProduct({{256}, {320, 1024}, {0, 2}, {32}, {32}})
    ->ArgsProduct({{32}, {4096}, {0, 2}, {32}, {32}})
    ->ArgsProduct({{256}, {320, 1024}, {0, 2}, {32}, {8}})
    ->ArgsProduct({{32}, {4096}, {0, 2}, {32}, {8}})
    ->ArgsProduct({{256}, {1024}, {0, 2}, {28}, {4}})
    ->ArgsProduct({{32}, {4096}, {0, 2}, {28}, {4}})
    ->ArgsProduct({{256}, {1024}, {0, 2}, {32}, {16}})
    ->ArgsProduct({{256}, {1024}, {1}, {32}, {16, 8}})  // f16: its 2-head kernel spills 84 bytes at 4 blocks
    ->UseManualTime()->MinTime(kMinCallSeconds)->Unit(benchmark::kMicrosecond)
    ->ArgNames({"seqs", "len", "cache", "heads", "kv_heads"});

#endif  // QUIVER_HAS_CUDA

}  // namespace
}  // namespace quiver

BENCHMARK_MAIN();
