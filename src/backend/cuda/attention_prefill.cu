// CUDA paged attention for the multi-token sequences of a step (prefill, chunked prefill;
// the one-query sequences mixed in go to the decode kernel): variable-length causal
// attention, FlashAttention-2 style on the CUDA cores in f32: for f32 caches, head sizes
// the tensor-core kernel (attention_prefill_mma.cu) does not take, and --matmul-precision
// highest.
//
// A block owns (sequence, query head, 32 consecutive queries of that sequence): its 4 warps
// take 8 query rows each. K/V tiles of 32 keys are gathered through the block table into
// shared memory as f32; each lane scores one key of the tile against the warp's 8 rows,
// the rows' running max/sum are updated (online softmax), and P V accumulates with lanes
// splitting head_dim. Query j of a sequence with q_len queries and seq_len keys sits at
// position seq_len - q_len + j and sees keys [0, that position].
// Grid (ceil(max_query_len / 32), num_heads, num_seqs); blocks past their q_len exit.
#include <cmath>

#include "backend/cuda/attention.h"

namespace quiver::cuda {
namespace {

constexpr int kBq = 32;           // queries per block
constexpr int kBk = 32;           // keys per tile (one per lane)
constexpr int kRows = 8;          // query rows per warp
constexpr int kThreads = 128;     // 4 warps x 8 rows = kBq
constexpr float kNoMax = -1e30f;  // running-max start: finite, so exp(kNoMax - kNoMax) = 1, not NaN

// Dynamic shared memory (floats): q [kBq][HD], k [kBk][HD + 4] (padded: conflict-free
// float4 reads by 32 lanes on 32 rows), v [kBk][HD].
template <int HD>
constexpr int prefill_smem_bytes() {
  return (kBq * HD + kBk * (HD + 4) + kBk * HD) * static_cast<int>(sizeof(float));
}

template <typename T, int HD>
__global__ void __launch_bounds__(kThreads) prefill_kernel(AttentionParams p) {
  constexpr int E = Vec16<T>::E, NV = HD / E, KS = HD + 4;
  constexpr int EPL = (HD + 31) / 32;  // output elements per lane: lane + 32 * i
  // Small heads (8, 16): one or two 16-byte vectors per row and EPL = 1 (lanes >= HD idle in
  // P V). Tiles are written and read as float4, so every row offset (HD, KS) is a multiple of 4.
  static_assert(HD % E == 0 && HD % 4 == 0 && HD <= 256, "head_dim not a whole number of 16-byte vectors");
  extern __shared__ __align__(16) float smem[];
  float* q_s = smem;               // [kBq][HD]
  float* k_s = q_s + kBq * HD;     // [kBk][KS]
  float* v_s = k_s + kBk * KS;     // [kBk][HD]

  const PrefillBlock block = PrefillBlock::at<kBq>(p);
  if (block.idle(p)) return;
  const auto [s, h, kvh, q_begin, q_len, q0, ctx, last_key] = block;
  const T* k_cache = static_cast<const T*>(p.k_cache);
  const T* v_cache = static_cast<const T*>(p.v_cache);

  for (int i = threadIdx.x; i < kBq * HD; i += kThreads) {
    const int r = i / HD, e = i % HD;
    q_s[i] = q0 + r < q_len ? p.q[(static_cast<int64_t>(q_begin + q0 + r) * p.num_heads + h) * HD + e] * p.scale
                            : 0.f;
  }

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r0 = warp * kRows;  // the warp's first row in the tile
  float m[kRows], l[kRows], o[kRows][EPL];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    m[r] = kNoMax;
    l[r] = 0.f;
#pragma unroll
    for (int i = 0; i < EPL; ++i) o[r][i] = 0.f;
  }

  for (int kt = 0; kt * kBk <= last_key; ++kt) {
    __syncthreads();  // the previous tile is consumed (and q_s written, the first time)
    for (int i = threadIdx.x; i < kBk * NV; i += kThreads) {
      const int j = i / NV, v = i % NV, t = kt * kBk + j;
      float kf[E], vf[E];
      if (t <= last_key) {
        Vec16<T>::unpack(load16(kv_row(k_cache, p, s, t, kvh, HD) + v * E), kf);
        Vec16<T>::unpack(load16(kv_row(v_cache, p, s, t, kvh, HD) + v * E), vf);
      } else {
#pragma unroll
        for (int e = 0; e < E; ++e) kf[e] = vf[e] = 0.f;
      }
#pragma unroll
      for (int e = 0; e < E; e += 4) {
        *reinterpret_cast<float4*>(k_s + j * KS + v * E + e) = make_float4(kf[e], kf[e + 1], kf[e + 2], kf[e + 3]);
        *reinterpret_cast<float4*>(v_s + j * HD + v * E + e) = make_float4(vf[e], vf[e + 1], vf[e + 2], vf[e + 3]);
      }
    }
    __syncthreads();

    // Scores of key (kt * kBk + lane) against the warp's rows.
    float sc[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) sc[r] = 0.f;
#pragma unroll 4
    for (int e = 0; e < HD; e += 4) {
      const float4 kk = *reinterpret_cast<const float4*>(k_s + lane * KS + e);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float4 qq = *reinterpret_cast<const float4*>(q_s + (r0 + r) * HD + e);
        sc[r] = fmaf(qq.x, kk.x, fmaf(qq.y, kk.y, fmaf(qq.z, kk.z, fmaf(qq.w, kk.w, sc[r]))));
      }
    }
    const int t = kt * kBk + lane;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int qi = q0 + r0 + r;  // query index within the sequence's chunk
      if (qi >= q_len || t > ctx + qi) sc[r] = -INFINITY;
      const float m_new = fmaxf(m[r], warp_max(sc[r]));
      const float pr = expf(sc[r] - m_new);  // 0 for masked keys
      const float alpha = expf(m[r] - m_new);
      l[r] = l[r] * alpha + warp_sum(pr);
      m[r] = m_new;
      sc[r] = pr;
#pragma unroll
      for (int i = 0; i < EPL; ++i) o[r][i] *= alpha;
    }
    // P V: lane owns output elements lane + 32 i; p of key j comes from lane j.
#pragma unroll 4
    for (int j = 0; j < kBk; ++j) {
      float vv[EPL];
#pragma unroll
      for (int i = 0; i < EPL; ++i) vv[i] = (lane + 32 * i < HD) ? v_s[j * HD + lane + 32 * i] : 0.f;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float pj = __shfl_sync(0xffffffffu, sc[r], j);
#pragma unroll
        for (int i = 0; i < EPL; ++i) o[r][i] = fmaf(pj, vv[i], o[r][i]);
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int qi = q0 + r0 + r;
    if (qi >= q_len) continue;
    float* dst = p.out + (static_cast<int64_t>(q_begin + qi) * p.num_heads + h) * HD;
    const float inv = p.v_scale / l[r];  // v_scale: 1 but for fp8 caches
#pragma unroll
    for (int i = 0; i < EPL; ++i)
      if (lane + 32 * i < HD) dst[lane + 32 * i] = o[r][i] * inv;
  }
}

template <typename T, int HD>
void set_smem_limit() {
  if constexpr (kv_type_fits<T, HD>)
    cuda_check(cudaFuncSetAttribute(prefill_kernel<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    prefill_smem_bytes<HD>()));
}

template <typename T, int... HDs>
void set_smem_limits(std::integer_sequence<int, HDs...>) {
  (set_smem_limit<T, HDs>(), ...);
}

}  // namespace

void attention_prefill(const AttentionParams& p, DType kv_type, int head_dim, int max_query_len, bool tensor_cores,
                       cudaStream_t stream) {
  if (tensor_cores && attention_prefill_mma(p, kv_type, head_dim, max_query_len, stream)) return;
  const dim3 grid(static_cast<unsigned>(ceil_div(max_query_len, kBq)), static_cast<unsigned>(p.num_heads),
                  static_cast<unsigned>(p.num_seqs));
  dispatch_kv(kv_type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_head_dim(head_dim, [&](auto hd_c) {
      constexpr int HD = decltype(hd_c)::value;
      if constexpr (kv_type_fits<T, HD>) {
        prefill_kernel<T, HD><<<grid, kThreads, prefill_smem_bytes<HD>(), stream>>>(p);
        launch_check();
      } else {
        check(false, "attention: an fp8 KV cache needs head_dim a multiple of 16");
      }
    });
  }, "attention: cache must be F32, F16, BF16 or F8_E4M3");
}

void configure_attention_kernels() {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3}) {
    dispatch_kv(t, [&](auto tag) { set_smem_limits<typename decltype(tag)::type>(AttentionHeadDims{}); },
                   "attention: kv dtype");
  }
}

}  // namespace quiver::cuda
