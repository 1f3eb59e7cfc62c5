// CUDA multi-LoRA for decode batches of fewer than 16 tokens (the gather kernels; see
// lora_kernels.h). Latency rules there, so both kernels spread one token over many blocks:
//   shrink  part[g, c, i, :] = a_g[slot_i][:, chunk c] @ x[i, chunk c] (kLoraGatherSplit columns): every
//           (token, rank) dot of a chunk belongs to a group of tpi threads;
//   expand  one token per block and one output per thread; the block first adds the
//           token's chunk partials (all threads, fixed order).
// Tokens with slot -1 return at once; grids depend only on n and the shapes (graph rule 4).
#include "backend/cuda/lora_kernels.h"

namespace quiver::cuda {
namespace {

constexpr int kTile = 16;  // shrink: tokens per block
constexpr int kThreads = 256;
constexpr int kChunk = kLoraGatherSplit;
constexpr int kOutPerBlock = kThreads;  // expand: one output per thread

// part: [G, chunks, n, R] f32. grid (ceil(n / 16), chunks, G); chunk = kChunk columns
// (lora_kernels.h says why 256). Each (token m, rank r) item is a
// group of tpi threads (a power of two, as many as the items leave room for, so one token
// still uses the whole block) that split the chunk's columns 8 at a time and reduce with
// shuffles; all lanes of a warp run the same iterations.
template <typename T>
__global__ void __launch_bounds__(kThreads)
gather_shrink_kernel(float* __restrict__ part, const float* __restrict__ x, LoraGroupArgs args,
                     const int32_t* __restrict__ token_slot, const int32_t* __restrict__ sorted, int n, int in,
                     int rank, int num_slots) {
  __shared__ int tok[kTile], slot[kTile];
  __shared__ __align__(16) float xs[kTile][kChunk];
  const int p0 = blockIdx.x * kTile, c = blockIdx.y, g = blockIdx.z;
  const int count = min(kTile, n - p0);
  lora_load_tile(tok, slot, sorted, token_slot, p0, n, num_slots);
  __syncthreads();
  bool any = false;
  for (int m = 0; m < count; ++m) any |= slot[m] >= 0;
  if (!any) return;  // uniform
  const int k0 = c * kChunk, width = min(kChunk, in - k0);
  for (int idx = threadIdx.x; idx < kTile * kChunk; idx += kThreads) {
    const int m = idx / kChunk, kk = idx % kChunk;
    xs[m][kk] = (m < count && kk < width && slot[m] >= 0) ? x[static_cast<int64_t>(tok[m]) * in + k0 + kk] : 0.f;
  }
  __syncthreads();
  const T* a = static_cast<const T*>(args.a[g]);
  // 16-byte loads need every row start aligned: in * sizeof(T) a multiple of 16.
  const bool vec = (static_cast<int64_t>(in) * sizeof(T)) % 16 == 0 && aligned16(a);
  float* part_c = part + (static_cast<int64_t>(g) * gridDim.y + c) * n * rank;
  const int items = count * rank;
  int tpi = 1;
  while (tpi < 32 && tpi * 2 * items <= kThreads && tpi * 2 * 8 <= kChunk) tpi *= 2;
  const int groups = kThreads / tpi, sub = threadIdx.x % tpi;
  for (int base = 0; base < items; base += groups) {
    const int item = base + static_cast<int>(threadIdx.x) / tpi;
    const int m = item < items ? item / rank : 0, r = item % rank;
    const int s = item < items ? slot[m] : -1;
    float acc = 0.f;
    if (s >= 0) {
      const T* arow = a + (static_cast<int64_t>(s) * rank + r) * in + k0;
#pragma unroll 4
      for (int k = sub * 8; k < width; k += tpi * 8) {
        float af[8];
        Row8<T> row;
        row.load(arow + k, width - k, vec);
        row.to_f32(af);
        const float4 x0 = *reinterpret_cast<const float4*>(&xs[m][k]);
        const float4 x1 = *reinterpret_cast<const float4*>(&xs[m][k + 4]);
        acc = fmaf(af[0], x0.x, acc);
        acc = fmaf(af[1], x0.y, acc);
        acc = fmaf(af[2], x0.z, acc);
        acc = fmaf(af[3], x0.w, acc);
        acc = fmaf(af[4], x1.x, acc);
        acc = fmaf(af[5], x1.y, acc);
        acc = fmaf(af[6], x1.z, acc);
        acc = fmaf(af[7], x1.w, acc);
      }
    }
    for (int o = tpi / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (s >= 0 && sub == 0) part_c[static_cast<int64_t>(tok[m]) * rank + r] = acc;
  }
}

// t = sum over chunks of part[., c, tok, :] into ts[0..R): thread (r, lane group) sums every
// (256 / R)-th chunk, then a fixed-order pass adds the groups. Contains barriers.
__device__ __forceinline__ void reduce_parts(float* ts, float* red, const float* part_g, int chunks, int n, int tok,
                                             int rank) {
  const int per = rank <= kThreads ? kThreads / rank : 1;  // threads per rank
  const int r = threadIdx.x % rank, q = threadIdx.x / rank;
  if (rank <= kThreads) {
    float s = 0.f;
    if (q < per)
      for (int c = q; c < chunks; c += per) s += part_g[(static_cast<int64_t>(c) * n + tok) * rank + r];
    red[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x < rank) {
      float t = 0.f;
      for (int j = 0; j < per; ++j) t += red[j * rank + threadIdx.x];
      ts[threadIdx.x] = t;
    }
  } else {
    for (int rr = threadIdx.x; rr < rank; rr += kThreads) {
      ts[rr] = lora_part_sum(part_g, chunks, n, rank, tok, rr);
    }
  }
  __syncthreads();
}

// y_g[i, o] += b_g[slot_i][o, :] . t_i, t_i = sum over chunks of part[g, c, i, :].
// grid (n, ceil(max out / 256), G): one token per block (sorted order), one output per
// thread, whose B row (R contiguous elements) is read with 16-byte loads when aligned.
// Dynamic shared memory: R floats.
template <typename T>
__global__ void __launch_bounds__(kThreads)
gather_expand_kernel(LoraGroupArgs args, const float* __restrict__ part, int chunks,
                     const int32_t* __restrict__ token_slot, const int32_t* __restrict__ sorted, int n, int rank,
                     int num_slots) {
  extern __shared__ float ts[];  // [R]
  __shared__ float red[kThreads];
  const int g = blockIdx.z, out = args.out[g], o0 = blockIdx.y * kOutPerBlock;
  if (o0 >= out) return;  // uniform: this member has fewer outputs than the largest
  const int tok = lora_token_at(sorted, blockIdx.x);
  const int slot = lora_slot_of(token_slot, tok, num_slots);
  if (slot < 0) return;  // uniform
  const int o = o0 + threadIdx.x;
  const bool mine = o < out;
  const T* b = static_cast<const T*>(args.b[g]);
  const T* brow = b + (static_cast<int64_t>(slot) * out + (mine ? o : 0)) * rank;
  float* y = args.y[g] + static_cast<int64_t>(tok) * out + o;
  // The B row's first kPre vectors and y are loaded before the partials are summed (loads
  // in flight across the block's barriers instead of one after another).
  constexpr int E = Vec16<T>::E, kPre = 4;
  const bool vec = (static_cast<int64_t>(rank) * sizeof(T)) % 16 == 0 && aligned16(b);
  const int pre = vec ? min(rank / E, kPre) : 0;
  uint4 bpre[kPre];
#pragma unroll
  for (int v = 0; v < kPre; ++v)
    if (mine && v < pre) bpre[v] = load16(brow + v * E);
  const float y0 = mine ? *y : 0.f;
  reduce_parts(ts, red, part + static_cast<int64_t>(g) * chunks * n * rank, chunks, n, tok, rank);
  if (!mine) return;
  float s = 0.f;
#pragma unroll
  for (int v = 0; v < kPre; ++v) {
    if (v >= pre) break;
    float f[E];
    Vec16<T>::unpack(bpre[v], f);
#pragma unroll
    for (int e = 0; e < E; ++e) s = fmaf(f[e], ts[v * E + e], s);
  }
  int r = pre * E;
  if (vec) {
    for (; r < rank; r += E) {
      float f[E];
      Vec16<T>::unpack(load16(brow + r), f);
#pragma unroll
      for (int e = 0; e < E; ++e) s = fmaf(f[e], ts[r + e], s);
    }
  }
  for (; r < rank; ++r) s = fmaf(to_f32(brow[r]), ts[r], s);
  *y = y0 + s;
}

}  // namespace

void lora_gather_shrink(float* part, const float* x, const LoraGroupArgs& args, int members,
                        const int32_t* token_slot, const int32_t* sorted, int n, int in, int rank, int num_slots,
                        DType stack_type, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(ceil_div(n, kTile)), static_cast<unsigned>(ceil_div(in, kChunk)),
                  static_cast<unsigned>(members));
  dispatch_float(stack_type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    gather_shrink_kernel<T><<<grid, kThreads, 0, stream>>>(part, x, args, token_slot, sorted, n, in, rank, num_slots);
    launch_check();
  }, "lora: a_stack must be F32, F16 or BF16");
}

void lora_gather_expand(const LoraGroupArgs& args, int members, int max_out, const float* part, int chunks,
                        const int32_t* token_slot, const int32_t* sorted, int n, int rank, int num_slots,
                        DType stack_type, cudaStream_t stream) {
  const size_t smem = sizeof(float) * static_cast<size_t>(rank);
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(ceil_div(max_out, kOutPerBlock)),
                  static_cast<unsigned>(members));
  dispatch_float(stack_type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    gather_expand_kernel<T><<<grid, kThreads, smem, stream>>>(args, part, chunks, token_slot, sorted, n, rank,
                                                              num_slots);
    launch_check();
  }, "lora: b_stack must be F32, F16 or BF16");
}

}  // namespace quiver::cuda
