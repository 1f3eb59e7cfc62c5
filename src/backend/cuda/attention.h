// Shared by the paged-attention kernels (attention.cu: decode, split-K; attention_prefill.cu:
// variable-length causal prefill): the parameter block, KV addressing, and the dispatch
// from runtime (kv dtype, head_dim) to template instances. Included only from .cu files.
#pragma once

#include <type_traits>
#include <utility>

#include "backend/cuda/cuda_common.h"

namespace quiver::cuda {

// One step's attention, as every kernel sees it. Layouts:
//   out, q: [n, num_heads, head_dim] f32
//   k_cache, v_cache: [num_blocks, block_size, num_kv_heads, head_dim] T (f32, f16, bf16, fp8 e4m3)
//   query_start: [num_seqs + 1]; seq_lens: [num_seqs]; block_tables: [num_seqs, max_blocks_per_seq]
struct AttentionParams {
  float* out = nullptr;
  const float* q = nullptr;
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  const int32_t* query_start = nullptr;
  const int32_t* seq_lens = nullptr;
  const int32_t* block_tables = nullptr;
  int max_blocks_per_seq = 0;
  int block_size = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int group = 0;  // num_heads / num_kv_heads
  int num_seqs = 0;
  float scale = 1.f;    // of q: the softmax scale, times an fp8 cache's k_scale
  float v_scale = 1.f;  // of the outputs: an fp8 cache's v_scale (KvLayer)
  // A step with multi-token sequences runs both kernels over all its sequences: the prefill
  // kernel skips the ones with a single query, the decode kernels take only those.
  bool mixed = false;
};

// Start of the K (or V) row of head kvh at position t of sequence s.
template <typename T>
__device__ __forceinline__ const T* kv_row(const T* cache, const AttentionParams& p, int s, int t, int kvh, int hd) {
  const int32_t block = p.block_tables[static_cast<int64_t>(s) * p.max_blocks_per_seq + t / p.block_size];
  const int64_t slot = static_cast<int64_t>(block) * p.block_size + t % p.block_size;
  return cache + (slot * p.num_kv_heads + kvh) * hd;
}

// The head sizes with attention kernels: one decode and one prefill instance per (kv dtype,
// head size). Both kernels are written for any multiple of 8 up to 256 (a row is a whole
// number of 16-byte vectors in every kv dtype: 8 x 2 bytes, 2 x 4 x 4 bytes); the list is
// what the fixtures (8, 16) and real models use, since each entry costs compile time.
using AttentionHeadDims = std::integer_sequence<int, 8, 16, 32, 64, 80, 96, 128, 256>;

template <typename Fn, int... HDs>
bool dispatch_head_dim_in(int64_t hd, Fn& fn, std::integer_sequence<int, HDs...>) {
  return ((hd == HDs ? (fn(std::integral_constant<int, HDs>{}), true) : false) || ...);
}

// Calls fn(std::integral_constant<int, HD>{}) for the head sizes in AttentionHeadDims.
template <typename Fn>
void dispatch_head_dim(int64_t hd, Fn&& fn) {
  check(dispatch_head_dim_in(hd, fn, AttentionHeadDims{}), "attention: no kernel for this head_dim");
}

template <int... HDs>
constexpr bool has_head_dim_in(int64_t hd, std::integer_sequence<int, HDs...>) {
  return ((hd == HDs) || ...);
}
constexpr bool has_attention_head_dim(int64_t hd) { return has_head_dim_in(hd, AttentionHeadDims{}); }

// Whether the kernels read T for heads of HD: rows are whole 16-byte vectors, so fp8
// (16 elements a vector) needs head_dim a multiple of 16.
template <typename T, int HD>
constexpr bool kv_type_fits = HD % Vec16<T>::E == 0;

// What a block of either prefill kernel owns, from its place in the grid
// (ceil(max_query_len / BQ), num_heads, num_seqs): query head h of sequence s, queries
// [q0, q0 + BQ) of the sequence's chunk. Query j of the chunk sits at position ctx + j and
// sees keys [0, ctx + j].
struct PrefillBlock {
  int s, h, kvh;
  int q_begin;   // the chunk's first row of q and out
  int q_len;     // queries in the chunk
  int q0;        // the block's first query in the chunk
  int ctx;       // keys before the chunk
  int last_key;  // the last key any of the block's queries sees
  template <int BQ>
  __device__ static PrefillBlock at(const AttentionParams& p) {
    PrefillBlock b;
    b.s = blockIdx.z;
    b.h = blockIdx.y;
    b.kvh = b.h / p.group;
    b.q_begin = p.query_start[b.s];
    b.q_len = p.query_start[b.s + 1] - b.q_begin;
    b.q0 = blockIdx.x * BQ;
    b.ctx = p.seq_lens[b.s] - b.q_len;
    b.last_key = b.ctx + min(b.q0 + BQ, b.q_len) - 1;
    return b;
  }
  // Past the chunk, or a single query of a mixed step (the decode kernel's).
  __device__ bool idle(const AttentionParams& p) const { return q0 >= q_len || (p.mixed && q_len == 1); }
};

// Whether the tensor-core prefill kernel (attention_prefill_mma.cu) takes a cache of T with
// heads of HD: 16-bit and fp8 caches, head_dim a multiple of 16 up to 128.
template <typename T, int HD>
constexpr bool prefill_mma_takes = !std::is_same_v<T, float> && HD % 16 == 0 && HD <= 128;

// Variable-length causal attention for steps with a sequence of more than one query
// (attention_prefill.cu). Grid from max_query_len, a host upper bound of q_len.
// tensor_cores: on attention_prefill_mma where it takes the cache (false: f32 math
// throughout, --matmul-precision highest).
void attention_prefill(const AttentionParams& p, DType kv_type, int head_dim, int max_query_len, bool tensor_cores,
                       cudaStream_t stream);
// The same on tensor cores (attention_prefill_mma.cu): 16-bit and fp8 caches, head_dim a
// multiple of 16 up to 128; false, with nothing launched, for any other.
bool attention_prefill_mma(const AttentionParams& p, DType kv_type, int head_dim, int max_query_len,
                           cudaStream_t stream);

}  // namespace quiver::cuda
