// CUDA paged attention, entry point and decode path. A step whose every sequence brings
// one query (max_query_len == 1) runs the decode kernel below; any other step runs the
// variable-length prefill kernel (attention_prefill.cu) for its multi-token sequences and
// the decode kernel for the one-query sequences mixed into the same batch.
//
// Decode: flash-decoding split-K. Each block owns one sequence, `gc` query heads that
// share one KV head (the GQA group, or a divisor of it <= 8) and one partition of the
// sequence's keys (decode_split.h: 8 partitions per sequence at batch 1, so a short
// context does not leave one block per head walking it serially; one per 256 keys from a
// few dozen sequences, where more, smaller blocks measured slower; never dependent on
// max_seq_len, so graph and eager agree bitwise).
// An fp8 e4m3 cache (KvLayer) is widened 16 elements a 16-byte vector, its K scale folded into
// q and its V scale into the output.
// K rows are read once per block and used by all gc heads:
//   1. scores: one thread per key computes its gc dot products (K row in 16-byte vectors,
//      all in flight at once, q broadcast from shared memory) into shared memory;
//   2. softmax of the partition per head (max, exp, sum) by one warp per head;
//   3. P V: threads split each V row into 16-byte vectors and the keys among themselves,
//      accumulating gc heads in registers, then reduce over keys in shared memory.
// With PREWAIT (batches with the most partitions per sequence, a grid of a few hundred
// blocks), each thread's first key's K vectors and its first kVRounds V rows are loaded
// before the PDL wait, except this step's own key (rope_kv_write writes it): they are in
// flight while the previous kernels finish. That holds the K vectors across the q load:
// 121 registers instead of 58 (ptxas, bf16, head_dim 128, one head per block), which
// halves the blocks per SM and costs more than it saves once the batch fills the GPU (H200,
// 7B: 0.09 ms gained at batch 1, but base batch 64 7.98 ms against 7.39-7.45 without it).
// With one partition in the grid the block writes the output. Otherwise it writes (o, max,
// sum), and the block that finishes its (sequence, head group) last, by an atomic count,
// merges the partitions in partition order (no combine kernel; the count goes back to 0
// for the next launch or replay). The grid is (decode_grid_splits, heads / gc, seqs): at
// most 2 x target blocks per sequence and head group, each taking every gridDim.x-th
// partition, so a graph's bound (meta.max_seq_len, up to the model's context) does not
// launch a block for every partition the longest sequence could have. At 256 sequences of
// Llama-2-7B and a 4,096-token bound a block per partition would be 16 blocks per
// (sequence, head) where 2 have keys: 131,072 blocks a layer, 165 us a layer at a 2-token
// context (ncu, H200).
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backend/cuda/attention.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/decode_split.h"

namespace quiver {
namespace {

using cuda::AttentionParams;

using cuda::decode_max_splits;
using cuda::decode_part_len;
using cuda::decode_splits;
using cuda::decode_target;

constexpr int kPart = cuda::kDecodePartMax;  // the scores' shared memory holds a partition
constexpr int kThreads = 128;               // decode block
constexpr int kVRounds = 4;                 // V rows per thread in flight in phase 3

template <typename T, int HD, int GMAX>
struct DecodeShape {
  static constexpr int E = cuda::Vec16<T>::E;  // elements per 16-byte vector
  static constexpr int NV = HD / E;             // vectors per K/V row
  // Keys in flight in the P V phase: one per NV threads, fewer where the reduction buffer
  // would not fit (fp8 rows of 16 elements a vector with 4-8 heads a block; the threads past
  // KL wait out phase 3).
  static constexpr int kStaticFloats = 48 * 1024 / 4;
  static constexpr int KL_all = kThreads / NV;
  static constexpr int KL_fit = (kStaticFloats - 2 * GMAX) / (GMAX * HD);
  static constexpr int KL = KL_all < KL_fit ? KL_all : KL_fit;
  // Shared memory (floats): q [GMAX][HD] and scores [GMAX][kPart] during phases 1-2,
  // reused as the P V reduction [KL][GMAX][HD] in phase 3; then max/sum [GMAX][2].
  static constexpr int kPhase12 = GMAX * HD + GMAX * kPart;
  static constexpr int kPhase3 = KL * GMAX * HD;
  static constexpr int kFloats = (kPhase12 > kPhase3 ? kPhase12 : kPhase3) + 2 * GMAX;
  // Small heads (8, 16) give NV of 1-4 and KL up to 128: every key of the partition is in
  // flight at once in phase 3, and KL * HD = kThreads * E keeps the reduction buffer at the
  // size the large heads use. q_s rows are read as float4, so HD must be a multiple of 4.
  static_assert(HD % E == 0 && HD % 4 == 0, "head_dim not a whole number of 16-byte vectors");
  static_assert(NV >= 1 && NV <= kThreads && KL >= 1, "a K/V row must fit the block's threads");
  static_assert(kFloats * sizeof(float) <= 48 * 1024, "decode shared memory above the static limit");
};

// Element e of head h's output from its `splits` partitions at base ([splits][hd + 2]:
// o unnormalised, max, sum), merged in partition order.
__device__ __forceinline__ float merge_partitions(const float* base, int splits, int hd, int e) {
  float mx = -INFINITY;
  for (int i = 0; i < splits; ++i) mx = fmaxf(mx, __ldcg(base + i * (hd + 2) + hd));
  float sum = 0.f, o = 0.f;
  for (int i = 0; i < splits; ++i) {
    const float* pi = base + i * (hd + 2);
    const float w = expf(__ldcg(pi + hd) - mx);
    sum += __ldcg(pi + hd + 1) * w;
    o += __ldcg(pi + e) * w;
  }
  return o / sum;
}

// K vectors a thread keeps in flight in phase 1 (registers bound them with more heads).
template <typename T, int HD, int GMAX>
struct KeyVectors {
  static constexpr int NV = DecodeShape<T, HD, GMAX>::NV;
  static constexpr int kMax = GMAX <= 2 ? 16 : 8;
  static constexpr int kIn = NV < kMax ? NV : kMax;
};

// Phase 1 for key tl: sc[g][tl] = q_s[g] . K row krow for the block's gc heads, the row's
// first kIn vectors already in `first`, the rest loaded kIn at a time.
template <typename T, int HD, int GMAX, int kIn>
__device__ __forceinline__ void score_key(float* sc, const float* q_s, const T* krow, const uint4 (&first)[kIn],
                                          int gc, int tl) {
  using S = DecodeShape<T, HD, GMAX>;
  constexpr int E = S::E, NV = S::NV;
  float acc[GMAX];
#pragma unroll
  for (int g = 0; g < GMAX; ++g) acc[g] = 0.f;
#pragma unroll
  for (int v0 = 0; v0 < NV; v0 += kIn) {
    uint4 kraw[kIn];
#pragma unroll
    for (int v = 0; v < kIn; ++v) {
      if (v0 == 0) kraw[v] = first[v];
      else if (v0 + v < NV) kraw[v] = cuda::load16_fresh(krow + (v0 + v) * E);
    }
#pragma unroll
    for (int vi = 0; vi < kIn; ++vi) {
      const int v = v0 + vi;
      if (v >= NV) break;  // NV not a multiple of kIn (f32, head_dim 80)
      float kf[E];
      cuda::Vec16<T>::unpack(kraw[vi], kf);
#pragma unroll
      for (int g = 0; g < GMAX; ++g) {
        if (g >= gc) break;
        const float4* qv = reinterpret_cast<const float4*>(q_s + g * HD + v * E);
#pragma unroll
        for (int e4 = 0; e4 < E / 4; ++e4) {
          const float4 qq = qv[e4];
          acc[g] = fmaf(qq.x, kf[4 * e4], acc[g]);
          acc[g] = fmaf(qq.y, kf[4 * e4 + 1], acc[g]);
          acc[g] = fmaf(qq.z, kf[4 * e4 + 2], acc[g]);
          acc[g] = fmaf(qq.w, kf[4 * e4 + 3], acc[g]);
        }
      }
    }
  }
#pragma unroll
  for (int g = 0; g < GMAX; ++g)
    if (g < gc) sc[g * kPart + tl] = acc[g];
}

// Blocks per SM that ptxas must fit in the large-batch kernel (1: no bound; f32 caches,
// head_dim above 128 and the early-load kernel are left free). One head per block: 16-bit
// caches keep the 8 they had before the partition loop (58 registers then, 68 with the loop
// unbounded, 64 and an 8-byte spill bounded; sm_90, bf16, head_dim 128). fp8 caches get 6
// (72 registers, no spill): left free, ptxas took 102, 4 blocks an SM, too few loads in
// flight to stream the cache (H100, 32 heads of 128: 256 sequences of 320 keys 284 us
// against 352, of 1,024 keys 802 against 933, 32 of 4,096 418 against 476; 8 blocks, 64
// registers and a 4-byte spill, 281 / 829 / 428).
// With 2-8 heads a block (GQA) ptxas left free took 145-218 registers, 2-3 blocks an SM.
// Held to 4-5 blocks (16-bit caches, 2 / 4 / 8 heads: 4 / 5 / 4 blocks, bf16 128 / 96 /
// 118 registers, a 16-byte spill at 2 heads, f16 84 bytes there; fp8 2 / 4 heads: 5 / 4
// blocks, 94 / 123 registers) they stream 9-37% faster (H100, 256 sequences of 1,024 keys:
// 32 / 8 heads of 128 bf16 459 us against 555, fp8 368 against 414; 32 / 16 bf16 883
// against 1,202, fp8 506 against 800; 28 / 4 bf16 323 against 364). bf16 8 heads at 5
// blocks spills 192 bytes and loses (416 us against 323). The fp8 8-head kernel (8 x 16
// accumulators a thread) spills 280 bytes at 3 blocks and gains nothing (28 / 4 heads, 408
// against 417 us), so it stays free.
template <typename T, int HD, int GMAX, bool PREWAIT>
constexpr int kDecodeMinBlocks = PREWAIT || HD > 128 || sizeof(T) == 4 ? 1
                                 : GMAX == 1 ? (sizeof(T) == 2 ? 8 : 6)
                                 : GMAX == 2 ? (sizeof(T) == 2 ? 4 : 5)
                                 : GMAX == 4 ? (sizeof(T) == 2 ? 5 : 4)
                                             : (sizeof(T) == 2 ? 4 : 1);

// part: [num_seqs, num_heads, max_splits, HD + 2] f32 (o unnormalised, max, sum) and
// counts: [num_seqs, num_heads / gc] i32, zero; both used when max_splits > 1.
// Block x takes partitions x, x + gridDim.x, ... of its sequence (decode_grid_splits);
// with PREWAIT the grid has a block per partition, and a block takes its own only.
template <typename T, int HD, int GMAX, bool PREWAIT>
__global__ void __launch_bounds__(kThreads, kDecodeMinBlocks<T, HD, GMAX, PREWAIT>)
decode_kernel(AttentionParams p, float* __restrict__ part, int* __restrict__ counts, int gc, int max_splits,
              int target) {
  if constexpr (!PREWAIT) cuda::pdl_enter();  // launched with pdl (cuda_common.h)
  using S = DecodeShape<T, HD, GMAX>;
  constexpr int E = S::E, NV = S::NV, KL = S::KL;
  __shared__ __align__(16) float smem[S::kFloats];
  __shared__ bool last;
  float* q_s = smem;                        // [GMAX][HD]
  float* sc = smem + GMAX * HD;             // [GMAX][kPart]
  float* red = smem;                        // [KL][GMAX][HD] (phase 3)
  float* ml = smem + S::kFloats - 2 * GMAX;  // [GMAX][2]

  const int s = blockIdx.z, h0 = blockIdx.y * gc, kvh = h0 / p.group;
  // PREWAIT: before the PDL wait this block reads only what no kernel of this step writes
  // (the contract's exception for attention, cuda_common.h): the step's metadata, copied
  // in before its first kernel, and the K/V rows of earlier positions, written by earlier
  // steps. This step's key (position len - 1) and q come from rope_kv_write: after it.
  const int row = p.query_start[s], q_len = p.query_start[s + 1] - row;
  const int len = p.seq_lens[s];
  const int part_len = decode_part_len(len, target);
  const int splits = q_len <= 0 || (p.mixed && q_len != 1) ? 0 : decode_splits(len, target);
  if (static_cast<int>(blockIdx.x) >= splits) {
    if constexpr (PREWAIT) cuda::pdl_enter();  // the chain stays transitive
    return;
  }
  const T* k_cache = static_cast<const T*>(p.k_cache);
  const T* v_cache = static_cast<const T*>(p.v_cache);
  const int kl = threadIdx.x / NV, ev = threadIdx.x % NV;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  constexpr int kIn = KeyVectors<T, HD, GMAX>::kIn;

  for (int split = blockIdx.x; split < splits; split += gridDim.x) {
    const int start = split * part_len;
    const int nk = min(len - start, part_len);
    // This step's key, as a partition index (maybe outside), when loads precede the wait.
    const int fresh = PREWAIT ? len - 1 - start : -1;

    // Phase 3's first V rows: thread (kl, ev) takes vector ev of keys kl, kl + KL, ...
    const auto load_v = [&](int tl) {
      return cuda::load16_fresh(cuda::kv_row(v_cache, p, s, start + tl, kvh, HD) + ev * E);
    };
    uint4 vraw[kVRounds];
#pragma unroll
    for (int u = 0; u < kVRounds; ++u) {
      const int tl = kl + u * KL;
      if (kl < KL && tl < nk && tl != fresh) vraw[u] = load_v(tl);
    }
    // Phase 1's first K vectors of the key in hand; PREWAIT loads those of the thread's first key here.
    uint4 kraw[kIn];
    if constexpr (PREWAIT) {  // all but this step's key before the wait
      const auto load_kfirst = [&] {
        const T* krow = cuda::kv_row(k_cache, p, s, start + threadIdx.x, kvh, HD);
#pragma unroll
        for (int v = 0; v < kIn; ++v) kraw[v] = cuda::load16_fresh(krow + v * E);
      };
      if (static_cast<int>(threadIdx.x) < nk && static_cast<int>(threadIdx.x) != fresh) load_kfirst();
      cuda::pdl_enter();  // launched with pdl (cuda_common.h)
      if (static_cast<int>(threadIdx.x) == fresh) load_kfirst();
#pragma unroll
      for (int u = 0; u < kVRounds; ++u) {
        const int tl = kl + u * KL;
        if (kl < KL && tl == fresh) vraw[u] = load_v(tl);
      }
    }

    // q, pre-scaled, for the block's heads (again per partition: phase 3 overwrites it).
    for (int i = threadIdx.x; i < gc * HD; i += kThreads) {
      const int g = i / HD, e = i % HD;
      q_s[g * HD + e] = p.q[(static_cast<int64_t>(row) * p.num_heads + h0 + g) * HD + e] * p.scale;
    }
    __syncthreads();

    // 1. scores: thread per key. With PREWAIT the first key's first K vectors are loaded.
    for (int tl = threadIdx.x; tl < nk; tl += kThreads) {
      const T* krow = cuda::kv_row(k_cache, p, s, start + tl, kvh, HD);
      if (!PREWAIT || tl >= kThreads) {
#pragma unroll
        for (int v = 0; v < kIn; ++v) kraw[v] = cuda::load16_fresh(krow + v * E);
      }
      score_key<T, HD, GMAX, kIn>(sc, q_s, krow, kraw, gc, tl);
    }
    __syncthreads();

    // 2. softmax over the partition, one warp per head.
    for (int g = warp; g < gc; g += kThreads / 32) {
      float mx = -INFINITY;
      for (int tl = lane; tl < nk; tl += 32) mx = fmaxf(mx, sc[g * kPart + tl]);
      mx = cuda::warp_max(mx);
      float sum = 0.f;
      for (int tl = lane; tl < nk; tl += 32) {
        const float e = expf(sc[g * kPart + tl] - mx);
        sc[g * kPart + tl] = e;
        sum += e;
      }
      sum = cuda::warp_sum(sum);
      if (lane == 0) {
        ml[2 * g] = mx;
        ml[2 * g + 1] = sum;
      }
    }
    __syncthreads();

    // 3. P V: rounds of kVRounds V rows per thread, the next round's loads issued before
    // this round's products.
    float acc[GMAX][E];
#pragma unroll
    for (int g = 0; g < GMAX; ++g)
#pragma unroll
      for (int e = 0; e < E; ++e) acc[g][e] = 0.f;
    if (kl < KL) {
      for (int tl0 = kl; tl0 < nk; tl0 += kVRounds * KL) {
        uint4 cur[kVRounds];
#pragma unroll
        for (int u = 0; u < kVRounds; ++u) {
          cur[u] = vraw[u];
          const int tn = tl0 + (kVRounds + u) * KL;
          if (tn < nk) vraw[u] = load_v(tn);
        }
#pragma unroll
        for (int u = 0; u < kVRounds; ++u) {
          const int tl = tl0 + u * KL;
          if (tl >= nk) break;
          float vf[E];
          cuda::Vec16<T>::unpack(cur[u], vf);
#pragma unroll
          for (int g = 0; g < GMAX; ++g) {
            if (g >= gc) break;
            const float pr = sc[g * kPart + tl];
#pragma unroll
            for (int e = 0; e < E; ++e) acc[g][e] = fmaf(pr, vf[e], acc[g][e]);
          }
        }
      }
    }
    __syncthreads();  // sc is dead from here on; red overlays it
    if (kl < KL) {
#pragma unroll
      for (int g = 0; g < GMAX; ++g) {
        if (g >= gc) break;
#pragma unroll
        for (int e = 0; e < E; ++e) red[(kl * GMAX + g) * HD + ev * E + e] = acc[g][e];
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < gc * HD; i += kThreads) {
      const int g = i / HD, e = i % HD;
      float o = 0.f;
      for (int k = 0; k < KL; ++k) o += red[(k * GMAX + g) * HD + e];
      o *= p.v_scale;  // 1 but for fp8 caches; the merge is linear in o
      const int h = h0 + g;
      if (max_splits == 1) {
        p.out[(static_cast<int64_t>(row) * p.num_heads + h) * HD + e] = o / ml[2 * g + 1];
      } else {
        float* dst = part + ((static_cast<int64_t>(s) * p.num_heads + h) * max_splits + split) * (HD + 2);
        dst[e] = o;
        if (e == 0) {
          dst[HD] = ml[2 * g];
          dst[HD + 1] = ml[2 * g + 1];
        }
      }
    }
    if (max_splits == 1) return;  // one partition, and the grid has one block for it
    // The last partition of this (sequence, head group) to finish merges them all. A block
    // counts each of its partitions: its later ones have not counted when an earlier one
    // is the last, so only the block's final partition can be.
    __threadfence();  // this block's partials are visible before its count is
    __syncthreads();
    if (threadIdx.x == 0) {
      int* count = counts + static_cast<int64_t>(s) * gridDim.y + blockIdx.y;
      last = atomicAdd(count, 1) == splits - 1;
      if (last) *count = 0;  // every partition has counted: ready for the next launch
    }
    __syncthreads();
    if (last) {
      __threadfence();
      for (int i = threadIdx.x; i < gc * HD; i += kThreads) {
        const int g = i / HD, e = i % HD, h = h0 + g;
        const float* base = part + (static_cast<int64_t>(s) * p.num_heads + h) * max_splits * (HD + 2);
        p.out[(static_cast<int64_t>(row) * p.num_heads + h) * HD + e] = merge_partitions(base, splits, HD, e);
      }
    }
    if constexpr (PREWAIT) break;
    __syncthreads();  // the next partition rewrites q_s, sc and ml, and `last`
  }
}

// Heads per decode block: the largest divisor of the GQA group that is at most 8.
int heads_per_block(int group) {
  for (int g = std::min(group, 8); g > 1; --g)
    if (group % g == 0) return g;
  return 1;
}

size_t partials_bytes(int64_t num_seqs, int64_t num_heads, int64_t hd, int64_t max_splits) {
  return static_cast<size_t>(num_seqs * num_heads * max_splits * (hd + 2)) * sizeof(float);
}

size_t counts_bytes(int64_t num_seqs, int64_t head_groups) {
  return static_cast<size_t>(num_seqs * head_groups) * sizeof(int);
}

}  // namespace

void CudaBackend::attention(Tensor out, Tensor q, const KvLayer& cache, const AttentionMeta& meta, float scale) {
  const Tensor k_cache = cache.k, v_cache = cache.v;
  cuda::check_f32(out, "attention: out must be f32 on the GPU");
  cuda::check_f32(q, "attention: q must be f32 on the GPU");
  check(q.ndim == 3 && out.numel() == q.numel(), "attention: q and out must be [n, num_heads, head_dim]");
  check(k_cache.ndim == 4 && v_cache.ndim == 4 && k_cache.dtype == v_cache.dtype &&
            k_cache.numel() == v_cache.numel(),
        "attention: k_cache and v_cache must be [num_blocks, block_size, num_kv_heads, head_dim], same dtype");
  const int64_t num_heads = q.dim(1), hd = q.dim(2), num_kv = k_cache.dim(2);
  check(k_cache.dim(3) == hd && num_kv > 0 && num_heads % num_kv == 0, "attention: head shapes do not match");
  check(cuda::aligned16(k_cache.data) && cuda::aligned16(v_cache.data), "attention: caches must be 16-byte aligned");
  check(meta.query_start.dtype == DType::kI32 && meta.seq_lens.dtype == DType::kI32 &&
            meta.block_tables.dtype == DType::kI32 && meta.block_tables.ndim == 2,
        "attention: meta tensors must be i32, block_tables [num_seqs, max_blocks]");
  if (meta.num_seqs == 0 || meta.max_query_len == 0 || q.dim(0) == 0) return;
  check(meta.num_seqs <= 65535 && num_heads <= 65535, "attention: more than 65535 sequences or heads");

  AttentionParams p;
  p.out = out.ptr<float>();
  p.q = q.ptr<float>();
  p.k_cache = k_cache.data;
  p.v_cache = v_cache.data;
  p.query_start = meta.query_start.ptr<int32_t>();
  p.seq_lens = meta.seq_lens.ptr<int32_t>();
  p.block_tables = meta.block_tables.ptr<int32_t>();
  p.max_blocks_per_seq = static_cast<int>(meta.block_tables.dim(1));
  p.block_size = static_cast<int>(k_cache.dim(1));
  p.num_heads = static_cast<int>(num_heads);
  p.num_kv_heads = static_cast<int>(num_kv);
  p.group = static_cast<int>(num_heads / num_kv);
  p.num_seqs = meta.num_seqs;
  const bool fp8 = k_cache.dtype == DType::kF8E4M3;
  p.scale = fp8 ? scale * cache.k_scale : scale;
  p.v_scale = fp8 ? cache.v_scale : 1.f;

  if (meta.max_query_len > 1) {
    // The decode sequences of a mixed step go to the decode kernels below, which split
    // their keys across blocks; in the prefill kernel each would be one block walking all
    // its keys for one query row.
    p.mixed = true;
    cuda::attention_prefill(p, k_cache.dtype, static_cast<int>(hd), meta.max_query_len,
                            !options_.gemm_split_activations, stream_);
  }
  check(meta.max_seq_len >= 1, "attention: meta.max_seq_len must bound the sequence lengths");
  const int gc = heads_per_block(p.group);
  const int target = decode_target(meta.num_seqs, num_heads / gc, num_sms_);
  const int max_splits = decode_max_splits(meta.max_seq_len, target);
  // Early loads where the grid is a few hundred blocks (see decode_kernel); from the batch
  // alone, like the target, so graph and eager launch the same kernel.
  const bool prewait = target == cuda::kDecodeMaxTarget;
  float* part = nullptr;
  int* counts = nullptr;
  if (max_splits > 1) {
    part = static_cast<float*>(
        scratch(attention_scratch_, partials_bytes(meta.num_seqs, num_heads, hd, max_splits), "attention"));
    counts = static_cast<int*>(scratch(attention_counts_, counts_bytes(meta.num_seqs, num_heads / gc), "attention"));
  }
  const dim3 grid(static_cast<unsigned>(prewait ? max_splits : cuda::decode_grid_splits(max_splits, target)),
                  static_cast<unsigned>(num_heads / gc),
                  static_cast<unsigned>(meta.num_seqs));
  cuda::dispatch_kv(k_cache.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cuda::dispatch_head_dim(hd, [&](auto hd_c) {
      constexpr int HD = decltype(hd_c)::value;
      if constexpr (!cuda::kv_type_fits<T, HD>) {
        check(false, "attention: an fp8 KV cache needs head_dim a multiple of 16");
        return;
      } else {
        const auto pick = [&](auto prewait) {
          constexpr bool P = decltype(prewait)::value;
          return gc == 1 ? decode_kernel<T, HD, 1, P> : gc == 2 ? decode_kernel<T, HD, 2, P>
                 : gc <= 4 ? decode_kernel<T, HD, 4, P> : decode_kernel<T, HD, 8, P>;
        };
        auto kernel = prewait ? pick(std::true_type()) : pick(std::false_type());
        cuda::launch_kernel(kernel, grid, kThreads, 0, stream_, pdl_, p, part, counts, gc, max_splits, target);
      }
    });
  }, "attention: cache must be F32, F16, BF16 or F8_E4M3");
}

bool CudaBackend::supports_head_dim(int64_t hd) const { return cuda::has_attention_head_dim(hd); }

bool CudaBackend::supports_kv_dtype(DType t, int64_t head_dim) const {
  if (t == DType::kF8E4M3) return head_dim % 16 == 0;
  return t == DType::kF32 || is_16bit_float(t);
}

}  // namespace quiver
