// CUDA multi-LoRA over the persistent slot stacks (DESIGN.md section 2), for a group of up
// to three projections of one input (q/k/v, gate/up) in two launches whatever the batch:
//   shrink  part[g, c, i, :] = a_g[slot_i][:, chunk c] @ x[i, chunk c]    (split over `in`)
//   expand  y_g[i, :] += b_g[slot_i] @ sum_c part[g, c, i, :]
// Every (token, rank) dot product of a chunk and every (token, output) of expand belongs to
// one thread, so a batch whose tokens all use different adapters (the decode case) runs as
// parallel as one that shares a single adapter; weights of a slot are re-read by its other
// tokens from L1/L2, and walking the tokens in LoraMeta::sorted_tokens order keeps the
// tokens of one adapter in neighbouring blocks. Splitting shrink over `in` in 64- or 256-column
// chunks gives every batch size, down to one token, enough blocks; expand adds the chunk
// partials in a fixed order, so results are deterministic (graph == eager, bitwise).
// Grids depend only on n and the stack shapes, never on which tokens carry an adapter, so
// a captured graph stays right whatever the slots are at replay (rules 3 and 4); tokens
// without an adapter return at once. A slot outside the stack is treated as -1.
// The single-member ops lora_shrink / lora_expand run the same kernels (shrink adds a
// reduction into t; expand reads t as a one-chunk partial).
#include <algorithm>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.h"

namespace quiver {
namespace {

constexpr int kTile = 16;      // shrink: tokens per block
constexpr int kThreads = 256;
constexpr int kChunk = 256;    // shrink: most `in` columns per block
constexpr int kOutPerBlock = kThreads;  // expand: one output per thread
constexpr int kTiledExpandMinN = 16;    // from here: partials reduced once, tiled expand

struct GroupArgs {
  const void* a[kMaxGroup] = {};  // [S, R, in]
  const void* b[kMaxGroup] = {};  // [S, out_g, R]
  float* y[kMaxGroup] = {};       // [n, out_g]
  int out[kMaxGroup] = {};
};

__device__ __forceinline__ int token_at(const int32_t* sorted, int p) { return sorted != nullptr ? sorted[p] : p; }

__device__ __forceinline__ int slot_of(const int32_t* token_slot, int tok, int num_slots) {
  const int s = token_slot[tok];
  return s < num_slots ? s : -1;
}

// Loads 8 consecutive elements as floats (zeros past `valid`); vec: 16-byte aligned rows.
template <typename T>
__device__ __forceinline__ void load8(float (&f)[8], const T* p, int valid, bool vec) {
  if (vec && valid >= 8) {
    constexpr int E = cuda::Vec16<T>::E;
#pragma unroll
    for (int v = 0; v < 8 / E; ++v) {
      float part[E];
      cuda::Vec16<T>::unpack(cuda::load16(p + v * E), part);
#pragma unroll
      for (int e = 0; e < E; ++e) f[v * E + e] = part[e];
    }
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) f[j] = j < valid ? cuda::to_f32(p[j]) : 0.f;
  }
}

// part: [G, chunks, n, R] f32. grid (ceil(n / 16), chunks, G); chunk = kc columns (64 for
// small batches: shorter dot products, more blocks; 256 otherwise: fewer partials). Each
// (token m, rank r) item is a group of tpi threads (a power of two, as many as the items
// leave room for, so one token still uses the whole block) that split the chunk's columns
// 8 at a time and reduce with shuffles; all lanes of a warp run the same iterations.
template <typename T>
__global__ void __launch_bounds__(kThreads)
shrink_kernel(float* __restrict__ part, const float* __restrict__ x, GroupArgs args,
              const int32_t* __restrict__ token_slot, const int32_t* __restrict__ sorted, int n, int in, int rank,
              int num_slots, int kc) {
  __shared__ int tok[kTile], slot[kTile];
  __shared__ __align__(16) float xs[kTile][kChunk];
  const int p0 = blockIdx.x * kTile, c = blockIdx.y, g = blockIdx.z;
  const int count = min(kTile, n - p0);
  if (threadIdx.x < kTile) {
    const int m = threadIdx.x;
    const int t = m < count ? token_at(sorted, p0 + m) : 0;
    tok[m] = t;
    slot[m] = m < count ? slot_of(token_slot, t, num_slots) : -1;
  }
  __syncthreads();
  bool any = false;
  for (int m = 0; m < count; ++m) any |= slot[m] >= 0;
  if (!any) return;  // uniform
  const int k0 = c * kc, width = min(kc, in - k0);
  for (int idx = threadIdx.x; idx < kTile * kc; idx += kThreads) {
    const int m = idx / kc, kk = idx % kc;
    xs[m][kk] = (m < count && kk < width && slot[m] >= 0) ? x[static_cast<int64_t>(tok[m]) * in + k0 + kk] : 0.f;
  }
  __syncthreads();
  const T* a = static_cast<const T*>(args.a[g]);
  // 16-byte loads need every row start aligned: in * sizeof(T) a multiple of 16.
  const bool vec = (static_cast<int64_t>(in) * sizeof(T)) % 16 == 0 && (reinterpret_cast<uintptr_t>(a) & 15u) == 0;
  float* part_c = part + (static_cast<int64_t>(g) * gridDim.y + c) * n * rank;
  const int items = count * rank;
  int tpi = 1;
  while (tpi < 32 && tpi * 2 * items <= kThreads && tpi * 2 * 8 <= kc) tpi *= 2;
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
        load8(af, arow + k, width - k, vec);
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
      float t = 0.f;
      for (int c = 0; c < chunks; ++c) t += part_g[(static_cast<int64_t>(c) * n + tok) * rank + rr];
      ts[rr] = t;
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
expand_kernel(GroupArgs args, const float* __restrict__ part, int chunks, const int32_t* __restrict__ token_slot,
              const int32_t* __restrict__ sorted, int n, int rank, int num_slots) {
  extern __shared__ float ts[];  // [R]
  __shared__ float red[kThreads];
  const int g = blockIdx.z, out = args.out[g], o0 = blockIdx.y * kOutPerBlock;
  if (o0 >= out) return;  // uniform: this member has fewer outputs than the largest
  const int tok = token_at(sorted, blockIdx.x);
  const int slot = slot_of(token_slot, tok, num_slots);
  if (slot < 0) return;  // uniform
  reduce_parts(ts, red, part + static_cast<int64_t>(g) * chunks * n * rank, chunks, n, tok, rank);
  const int o = o0 + threadIdx.x;
  if (o >= out) return;
  const T* b = static_cast<const T*>(args.b[g]);
  const T* brow = b + (static_cast<int64_t>(slot) * out + o) * rank;
  constexpr int E = cuda::Vec16<T>::E;
  float s = 0.f;
  int r = 0;
  if ((static_cast<int64_t>(rank) * sizeof(T)) % 16 == 0 && (reinterpret_cast<uintptr_t>(b) & 15u) == 0) {
    for (; r < rank; r += E) {
      float f[E];
      cuda::Vec16<T>::unpack(cuda::load16(brow + r), f);
#pragma unroll
      for (int e = 0; e < E; ++e) s = fmaf(f[e], ts[r + e], s);
    }
  }
  for (; r < rank; ++r) s = fmaf(cuda::to_f32(brow[r]), ts[r], s);
  args.y[g][static_cast<int64_t>(tok) * out + o] += s;
}

// Batches of 16 or more tokens: y_g[i, o] += b_g[slot_i][o, :] . t[g, i, :] with t already
// reduced ([G, n, R]). grid (ceil(n / tile), ceil(max out / 256), G): a block takes `tile`
// sorted tokens (so a slot's B rows, re-read per token, stay in L1) and 256 outputs; the
// tile's t rows sit in shared memory (tile x R floats, dynamic).
template <typename T>
__global__ void __launch_bounds__(kThreads)
expand_tiled_kernel(GroupArgs args, const float* __restrict__ t, const int32_t* __restrict__ token_slot,
                    const int32_t* __restrict__ sorted, int n, int rank, int num_slots, int tile) {
  extern __shared__ float ts[];  // [tile][R]
  __shared__ int tok[kTile], slot[kTile];
  const int g = blockIdx.z, out = args.out[g], o0 = blockIdx.y * kOutPerBlock;
  if (o0 >= out) return;  // uniform
  const int p0 = blockIdx.x * tile, count = min(tile, n - p0);
  if (threadIdx.x < tile) {
    const int m = threadIdx.x;
    const int tk = m < count ? token_at(sorted, p0 + m) : 0;
    tok[m] = tk;
    slot[m] = m < count ? slot_of(token_slot, tk, num_slots) : -1;
  }
  __syncthreads();
  const float* t_g = t + static_cast<int64_t>(g) * n * rank;
  for (int idx = threadIdx.x; idx < count * rank; idx += kThreads) {
    const int m = idx / rank, r = idx % rank;
    ts[idx] = slot[m] >= 0 ? t_g[static_cast<int64_t>(tok[m]) * rank + r] : 0.f;
  }
  __syncthreads();
  const int o = o0 + threadIdx.x;
  if (o >= out) return;
  const T* b = static_cast<const T*>(args.b[g]);
  const bool vec = (static_cast<int64_t>(rank) * sizeof(T)) % 16 == 0 && (reinterpret_cast<uintptr_t>(b) & 15u) == 0;
  constexpr int E = cuda::Vec16<T>::E;
  float* y = args.y[g];
  for (int m = 0; m < count; ++m) {
    const int s = slot[m];
    if (s < 0) continue;
    const T* brow = b + (static_cast<int64_t>(s) * out + o) * rank;
    const float* tm = ts + m * rank;
    float acc = 0.f;
    int r = 0;
    if (vec) {
      for (; r < rank; r += E) {
        float f[E];
        cuda::Vec16<T>::unpack(cuda::load16(brow + r), f);
#pragma unroll
        for (int e = 0; e < E; ++e) acc = fmaf(f[e], tm[r + e], acc);
      }
    }
    for (; r < rank; ++r) acc = fmaf(cuda::to_f32(brow[r]), tm[r], acc);
    y[static_cast<int64_t>(tok[m]) * out + o] += acc;
  }
}

// t[g, i, r] = sum_c part[g, c, i, r] for tokens with a slot. grid over G x n x R.
__global__ void reduce_kernel(float* __restrict__ t, const float* __restrict__ part, int chunks,
                              const int32_t* __restrict__ token_slot, int n, int rank, int num_slots, int members) {
  const int64_t per = static_cast<int64_t>(n) * rank;
  const int64_t idx = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (idx >= per * members) return;
  const int64_t g = idx / per, i = idx % per;
  const int slot = token_slot[i / rank];
  if (slot < 0 || slot >= num_slots) return;
  const float* p = part + g * chunks * per + i;
  float s = 0.f;
  for (int c = 0; c < chunks; ++c) s += p[c * per];
  t[idx] = s;
}

void check_meta(const LoraMeta& meta, int64_t n, const char* op) {
  check(meta.token_slot.dtype == DType::kI32 && meta.token_slot.numel() >= n,
        std::string(op) + ": token_slot must be i32 [n]");
  check(meta.sorted_tokens.empty() || (meta.sorted_tokens.dtype == DType::kI32 && meta.sorted_tokens.numel() == n),
        std::string(op) + ": sorted_tokens must be empty or i32 [n]");
}

const int32_t* sorted_ptr(const LoraMeta& meta) {
  return meta.sorted_tokens.empty() ? nullptr : meta.sorted_tokens.ptr<int32_t>();
}

}  // namespace

float* CudaBackend::lora_shrink_parts(const LoraGroup& g, Tensor x, const LoraMeta& meta, int* chunks,
                                     cudaStream_t stream) {
  cuda::check_f32(x, "lora: x must be f32 on the GPU");
  check(x.ndim == 2, "lora: x must be [n, in]");
  const int64_t n = x.dim(0), in = x.dim(1);
  const Tensor& a0 = g.a_stack[0];
  check(a0.ndim == 3, "lora: a_stack must be [S, R, in]");
  const int64_t num_slots = a0.dim(0), rank = a0.dim(1);
  GroupArgs args;
  for (int i = 0; i < g.count; ++i) {
    const Tensor& a = g.a_stack[i];
    check(a.ndim == 3 && a.dim(0) == num_slots && a.dim(1) == rank && a.dim(2) == in && a.dtype == a0.dtype,
          "lora: a_stacks of a group must share [S, R, in] and dtype");
    args.a[i] = a.data;
  }
  check(n < (int64_t{1} << 31) && in < (int64_t{1} << 31) && rank <= 4096, "lora: dimensions out of range");
  check_meta(meta, n, "lora");
  const int kc = n <= 64 ? 64 : kChunk;
  *chunks = static_cast<int>(cuda::ceil_div(in, kc));
  // [G, chunks, n, R] partials, then room for the reduced [G, n, R] (lora_expand_parts).
  const size_t bytes = sizeof(float) * static_cast<size_t>(g.count) * (*chunks + 1) * n * rank;
  float* part = static_cast<float*>(scratch(lora_scratch_, bytes, "lora"));
  const dim3 grid(static_cast<unsigned>(cuda::ceil_div(n, kTile)), static_cast<unsigned>(*chunks),
                  static_cast<unsigned>(g.count));
  cuda::dispatch_float(a0.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    shrink_kernel<T><<<grid, kThreads, 0, stream>>>(part, x.ptr<float>(), args, meta.token_slot.ptr<int32_t>(),
                                                     sorted_ptr(meta), static_cast<int>(n), static_cast<int>(in),
                                                     static_cast<int>(rank), static_cast<int>(num_slots), kc);
    cuda::launch_check();
  }, "lora: a_stack must be F32, F16 or BF16");
  return part;
}

void CudaBackend::lora_expand_parts(const LoraGroup& g, const float* part, int chunks, int64_t n, const LoraMeta& meta) {
  const Tensor& b0 = g.b_stack[0];
  check(b0.ndim == 3, "lora: b_stack must be [S, out, R]");
  const int64_t num_slots = b0.dim(0), rank = b0.dim(2);
  GroupArgs args;
  int64_t max_out = 0;
  for (int i = 0; i < g.count; ++i) {
    const Tensor& b = g.b_stack[i];
    const Tensor& y = g.y[i];
    cuda::check_f32(y, "lora: y must be f32 on the GPU");
    check(b.ndim == 3 && b.dim(0) == num_slots && b.dim(2) == rank && b.dtype == b0.dtype,
          "lora: b_stacks of a group must share [S, *, R] and dtype");
    check(y.ndim == 2 && y.dim(0) == n && y.dim(1) == b.dim(1) && y.dim(1) < (int64_t{1} << 31),
          "lora: y must be [n, out] matching its b_stack");
    args.b[i] = b.data;
    args.y[i] = y.ptr<float>();
    args.out[i] = static_cast<int>(y.dim(1));
    max_out = std::max(max_out, y.dim(1));
  }
  check_meta(meta, n, "lora");
  if (max_out == 0) return;
  const int ni = static_cast<int>(n), ri = static_cast<int>(rank), si = static_cast<int>(num_slots);
  const unsigned out_blocks = static_cast<unsigned>(cuda::ceil_div(max_out, kOutPerBlock));
  if (n < kTiledExpandMinN) {  // one token per block, partials summed in the block
    const size_t smem = sizeof(float) * static_cast<size_t>(rank);
    check(smem <= 32 * 1024, "lora: rank above 8192");
    cuda::dispatch_float(b0.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      expand_kernel<T><<<dim3(static_cast<unsigned>(n), out_blocks, static_cast<unsigned>(g.count)), kThreads, smem,
                         stream_>>>(args, part, chunks, meta.token_slot.ptr<int32_t>(), sorted_ptr(meta), ni, ri, si);
      cuda::launch_check();
    }, "lora: b_stack must be F32, F16 or BF16");
    return;
  }
  // Sum the partials once (instead of once per output block), then the tiled expand.
  const float* t = part;
  if (chunks > 1) {
    float* reduced = const_cast<float*>(part) + static_cast<int64_t>(g.count) * chunks * n * rank;
    const int64_t count = static_cast<int64_t>(g.count) * n * rank;
    reduce_kernel<<<static_cast<unsigned>(cuda::ceil_div(count, kThreads)), kThreads, 0, stream_>>>(
        reduced, part, chunks, meta.token_slot.ptr<int32_t>(), ni, ri, si, g.count);
    cuda::launch_check();
    t = reduced;
  }
  const int tile = n < 128 ? 4 : kTile;
  const size_t smem = sizeof(float) * static_cast<size_t>(tile) * rank;
  check(smem <= 48 * 1024, "lora: rank above 768");
  cuda::dispatch_float(b0.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const dim3 grid(static_cast<unsigned>(cuda::ceil_div(n, tile)), out_blocks, static_cast<unsigned>(g.count));
    expand_tiled_kernel<T><<<grid, kThreads, smem, stream_>>>(args, t, meta.token_slot.ptr<int32_t>(),
                                                              sorted_ptr(meta), ni, ri, si, tile);
    cuda::launch_check();
  }, "lora: b_stack must be F32, F16 or BF16");
}

void CudaBackend::lora_group(const LoraGroup& g, Tensor x, Tensor /*t*/, const LoraMeta& meta) {
  check(g.count >= 1 && g.count <= kMaxGroup, "lora_group: 1..3 members");
  const int64_t n = x.dim(0);
  if (n == 0 || g.a_stack[0].dim(1) == 0) return;
  int chunks = 0;
  const float* part = lora_shrink_parts(g, x, meta, &chunks, stream_);
  lora_expand_parts(g, part, chunks, n, meta);
}

// The shrink reads only x, so it runs on the side stream while the base GEMV streams the
// weights on the main one (a fork/join that stream capture records as graph edges); the
// expand, which adds into the GEMV's output, waits for both.
void CudaBackend::project(const MatmulGroup& g, const LoraGroup* lora, Tensor x, Tensor t, const LoraMeta& meta) {
  if (lora == nullptr || x.dim(0) == 0 || lora->a_stack[0].dim(1) == 0) {
    matmul_group(g, x);
    if (lora != nullptr) lora_group(*lora, x, t, meta);
    return;
  }
  check(lora->count >= 1 && lora->count <= kMaxGroup, "project: 1..3 LoRA members");
  cuda::cuda_check(cudaEventRecord(fork_, stream_));
  cuda::cuda_check(cudaStreamWaitEvent(side_stream_, fork_, 0));
  int chunks = 0;
  const float* part = lora_shrink_parts(*lora, x, meta, &chunks, side_stream_);
  cuda::cuda_check(cudaEventRecord(join_, side_stream_));
  matmul_group(g, x);
  cuda::cuda_check(cudaStreamWaitEvent(stream_, join_, 0));
  lora_expand_parts(*lora, part, chunks, x.dim(0), meta);
}

void CudaBackend::lora_shrink(Tensor t, Tensor x, Tensor a_stack, const LoraMeta& meta) {
  cuda::check_f32(t, "lora_shrink: t must be f32 on the GPU");
  check(a_stack.ndim == 3 && x.ndim == 2, "lora_shrink: a_stack must be [S, R, in], x [n, in]");
  const int64_t n = x.dim(0), rank = a_stack.dim(1);
  check(a_stack.dim(2) == x.dim(1) && t.numel() == n * rank, "lora_shrink: shape mismatch");
  if (n == 0 || rank == 0) return;
  LoraGroup g;
  g.count = 1;
  g.a_stack[0] = a_stack;
  int chunks = 0;
  const float* part = lora_shrink_parts(g, x, meta, &chunks, stream_);
  const int64_t count = n * rank;
  reduce_kernel<<<static_cast<unsigned>(cuda::ceil_div(count, kThreads)), kThreads, 0, stream_>>>(
      t.ptr<float>(), part, chunks, meta.token_slot.ptr<int32_t>(), static_cast<int>(n), static_cast<int>(rank),
      static_cast<int>(a_stack.dim(0)), 1);
  cuda::launch_check();
}

void CudaBackend::lora_expand(Tensor y, Tensor t, Tensor b_stack, const LoraMeta& meta) {
  cuda::check_f32(t, "lora_expand: t must be f32 on the GPU");
  check(b_stack.ndim == 3 && y.ndim == 2, "lora_expand: b_stack must be [S, out, R], y [n, out]");
  const int64_t n = y.dim(0), rank = b_stack.dim(2);
  check(b_stack.dim(1) == y.dim(1) && t.numel() == n * rank, "lora_expand: shape mismatch");
  if (n == 0 || rank == 0 || y.dim(1) == 0) return;
  LoraGroup g;
  g.count = 1;
  g.y[0] = y;
  g.b_stack[0] = b_stack;
  lora_expand_parts(g, t.ptr<float>(), 1, n, meta);
}

}  // namespace quiver
