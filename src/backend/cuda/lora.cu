// CUDA multi-LoRA over the persistent slot stacks (DESIGN.md section 2), for a group of up
// to three projections of one input (q/k/v, gate/up) in two launches whatever the batch:
//   shrink  part[g, c, i, :] = a_g[slot_i][:, chunk c] @ x[i, chunk c]    (split over `in`)
//   expand  y_g[i, :] += b_g[slot_i] @ sum_c part[g, c, i, :]
// Both walk the tokens in LoraMeta::sorted_tokens order, 16 per block: with the batch
// grouped by adapter a tile mostly holds one slot, whose weight rows are loaded once and
// used for every token of the run (the runs are walked identically by every thread, so
// barriers stay uniform). Splitting shrink over `in` in 256-column chunks gives every batch
// size, down to one token, enough blocks to keep the GPU busy; the partial sums are added
// in a fixed order in expand, so results are deterministic (graph == eager, bitwise).
// Grids depend only on n and the stack shapes, never on which tokens carry an adapter, so
// a captured graph stays right whatever the slots are at replay (rules 3 and 4); a tile
// without any adapter exits at once. A slot outside the stack is treated as -1.
// The single-member ops lora_shrink / lora_expand run the same kernels (shrink adds a
// reduction into t; expand reads t as a one-chunk partial).
#include <algorithm>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.h"

namespace quiver {
namespace {

constexpr int kTile = 16;      // tokens per block
constexpr int kThreads = 256;  // 8 warps
constexpr int kChunk = 256;    // shrink: `in` columns per block (32 lanes x 8)
constexpr int kOutPerThread = 4;
constexpr int kOutPerBlock = kThreads * kOutPerThread;  // expand: outputs per block

struct GroupArgs {
  const void* a[kMaxGroup] = {};  // [S, R, in]
  const void* b[kMaxGroup] = {};  // [S, out_g, R]
  float* y[kMaxGroup] = {};       // [n, out_g]
  int out[kMaxGroup] = {};
};

// The block's tile of tokens: original indices and slots, in shared memory.
struct Tile {
  int tok[kTile];
  int slot[kTile];
};

// Fills `tile` for tokens p0 .. p0 + count of the sorted order; returns whether any has a
// slot (uniform over the block). Contains a barrier.
__device__ __forceinline__ bool load_tile(Tile& tile, const int32_t* token_slot, const int32_t* sorted, int p0,
                                          int count, int num_slots) {
  if (threadIdx.x < kTile) {
    int tok = -1, slot = -1;
    if (static_cast<int>(threadIdx.x) < count) {
      tok = sorted != nullptr ? sorted[p0 + threadIdx.x] : p0 + static_cast<int>(threadIdx.x);
      slot = token_slot[tok];
      if (slot >= num_slots) slot = -1;
    }
    tile.tok[threadIdx.x] = tok;
    tile.slot[threadIdx.x] = slot;
  }
  __syncthreads();
  bool any = false;
  for (int m = 0; m < count; ++m) any |= tile.slot[m] >= 0;
  return any;
}

// End of the run of equal slots that starts at `begin`.
__device__ __forceinline__ int run_end(const Tile& tile, int begin, int count) {
  int e = begin + 1;
  while (e < count && tile.slot[e] == tile.slot[begin]) ++e;
  return e;
}

// Loads 8 consecutive elements of a row as floats (zeros past `limit`).
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

// part: [G, chunks, n, R] f32. grid (ceil(n / 16), chunks, G).
template <typename T>
__global__ void __launch_bounds__(kThreads)
shrink_kernel(float* __restrict__ part, const float* __restrict__ x, GroupArgs args,
              const int32_t* __restrict__ token_slot, const int32_t* __restrict__ sorted, int n, int in, int rank,
              int num_slots) {
  __shared__ Tile tile;
  __shared__ __align__(16) float xs[kTile][kChunk];
  const int p0 = blockIdx.x * kTile, c = blockIdx.y, g = blockIdx.z;
  const int count = min(kTile, n - p0);
  if (!load_tile(tile, token_slot, sorted, p0, count, num_slots)) return;
  const int k0 = c * kChunk, width = min(kChunk, in - k0);
  for (int idx = threadIdx.x; idx < kTile * kChunk; idx += kThreads) {
    const int m = idx / kChunk, kk = idx % kChunk;
    xs[m][kk] = (m < count && kk < width && tile.slot[m] >= 0) ? x[static_cast<int64_t>(tile.tok[m]) * in + k0 + kk]
                                                               : 0.f;
  }
  __syncthreads();
  const T* a = static_cast<const T*>(args.a[g]);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int col = lane * 8, valid = width - col;
  // 16-byte loads need every row start aligned: in * sizeof(T) a multiple of 16.
  const bool vec = (static_cast<int64_t>(in) * sizeof(T)) % 16 == 0 && (reinterpret_cast<uintptr_t>(a) & 15u) == 0;
  float* part_c = part + (static_cast<int64_t>(g) * gridDim.y + c) * n * rank;
  for (int begin = 0; begin < count;) {
    const int end = run_end(tile, begin, count), slot = tile.slot[begin];
    if (slot >= 0) {
      for (int r = warp; r < rank; r += kThreads / 32) {
        float af[8];
        load8(af, a + (static_cast<int64_t>(slot) * rank + r) * in + k0 + col, valid, vec);
        for (int m = begin; m < end; ++m) {
          const float4 x0 = *reinterpret_cast<const float4*>(&xs[m][col]);
          const float4 x1 = *reinterpret_cast<const float4*>(&xs[m][col + 4]);
          float s = af[0] * x0.x;
          s = fmaf(af[1], x0.y, s);
          s = fmaf(af[2], x0.z, s);
          s = fmaf(af[3], x0.w, s);
          s = fmaf(af[4], x1.x, s);
          s = fmaf(af[5], x1.y, s);
          s = fmaf(af[6], x1.z, s);
          s = fmaf(af[7], x1.w, s);
          s = cuda::warp_sum(s);
          if (lane == 0) part_c[static_cast<int64_t>(tile.tok[m]) * rank + r] = s;
        }
      }
    }
    begin = end;
  }
}

// y_g[i, o] += b_g[slot_i][o, :] . t_i, t_i = sum over chunks of part[g, c, i, :].
// grid (ceil(n / 16), ceil(max out / 1024), G); dynamic shared memory: 16 x R floats.
template <typename T>
__global__ void __launch_bounds__(kThreads)
expand_kernel(GroupArgs args, const float* __restrict__ part, int chunks, const int32_t* __restrict__ token_slot,
              const int32_t* __restrict__ sorted, int n, int rank, int num_slots) {
  extern __shared__ float ts[];  // [16][R]
  __shared__ Tile tile;
  const int p0 = blockIdx.x * kTile, g = blockIdx.z;
  const int out = args.out[g], o0 = blockIdx.y * kOutPerBlock;
  if (o0 >= out) return;  // uniform: this member has fewer outputs than the largest
  const int count = min(kTile, n - p0);
  if (!load_tile(tile, token_slot, sorted, p0, count, num_slots)) return;
  const float* part_g = part + static_cast<int64_t>(g) * chunks * n * rank;
  for (int idx = threadIdx.x; idx < count * rank; idx += kThreads) {
    const int m = idx / rank, r = idx % rank;
    float s = 0.f;
    if (tile.slot[m] >= 0)
      for (int c = 0; c < chunks; ++c) s += part_g[(static_cast<int64_t>(c) * n + tile.tok[m]) * rank + r];
    ts[idx] = s;
  }
  __syncthreads();
  const T* b = static_cast<const T*>(args.b[g]);
  float* y = args.y[g];
  for (int begin = 0; begin < count;) {
    const int end = run_end(tile, begin, count), slot = tile.slot[begin];
    if (slot >= 0) {
#pragma unroll
      for (int j = 0; j < kOutPerThread; ++j) {
        const int o = o0 + j * kThreads + threadIdx.x;
        if (o >= out) break;
        const T* brow = b + (static_cast<int64_t>(slot) * out + o) * rank;
        for (int m = begin; m < end; ++m) {
          const float* t = ts + m * rank;
          float s = 0.f;
          for (int r = 0; r < rank; ++r) s = fmaf(cuda::to_f32(brow[r]), t[r], s);
          y[static_cast<int64_t>(tile.tok[m]) * out + o] += s;
        }
      }
    }
    begin = end;
  }
}

// t[i, r] = sum_c part[0, c, i, r] for tokens with a slot (the single-op lora_shrink).
__global__ void reduce_kernel(float* __restrict__ t, const float* __restrict__ part, int chunks,
                              const int32_t* __restrict__ token_slot, int n, int rank, int num_slots) {
  const int64_t idx = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(n) * rank) return;
  const int slot = token_slot[idx / rank];
  if (slot < 0 || slot >= num_slots) return;
  float s = 0.f;
  for (int c = 0; c < chunks; ++c) s += part[static_cast<int64_t>(c) * n * rank + idx];
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

float* CudaBackend::lora_shrink_parts(const LoraGroup& g, Tensor x, const LoraMeta& meta, int* chunks) {
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
  *chunks = static_cast<int>(cuda::ceil_div(in, kChunk));
  const size_t bytes = sizeof(float) * static_cast<size_t>(g.count) * *chunks * n * rank;
  float* part = static_cast<float*>(scratch(lora_scratch_, bytes, "lora"));
  const dim3 grid(static_cast<unsigned>(cuda::ceil_div(n, kTile)), static_cast<unsigned>(*chunks),
                  static_cast<unsigned>(g.count));
  cuda::dispatch_float(a0.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    shrink_kernel<T><<<grid, kThreads, 0, stream_>>>(part, x.ptr<float>(), args, meta.token_slot.ptr<int32_t>(),
                                                     sorted_ptr(meta), static_cast<int>(n), static_cast<int>(in),
                                                     static_cast<int>(rank), static_cast<int>(num_slots));
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
  const dim3 grid(static_cast<unsigned>(cuda::ceil_div(n, kTile)), static_cast<unsigned>(cuda::ceil_div(max_out, kOutPerBlock)),
                  static_cast<unsigned>(g.count));
  const size_t smem = sizeof(float) * kTile * static_cast<size_t>(rank);
  check(smem <= 48 * 1024, "lora: rank above 768");
  cuda::dispatch_float(b0.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    expand_kernel<T><<<grid, kThreads, smem, stream_>>>(args, part, chunks, meta.token_slot.ptr<int32_t>(),
                                                        sorted_ptr(meta), static_cast<int>(n), static_cast<int>(rank),
                                                        static_cast<int>(num_slots));
    cuda::launch_check();
  }, "lora: b_stack must be F32, F16 or BF16");
}

void CudaBackend::lora_group(const LoraGroup& g, Tensor x, Tensor /*t*/, const LoraMeta& meta) {
  check(g.count >= 1 && g.count <= kMaxGroup, "lora_group: 1..3 members");
  const int64_t n = x.dim(0);
  if (n == 0 || g.a_stack[0].dim(1) == 0) return;
  int chunks = 0;
  const float* part = lora_shrink_parts(g, x, meta, &chunks);
  lora_expand_parts(g, part, chunks, n, meta);
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
  const float* part = lora_shrink_parts(g, x, meta, &chunks);
  const int64_t count = n * rank;
  reduce_kernel<<<static_cast<unsigned>(cuda::ceil_div(count, kThreads)), kThreads, 0, stream_>>>(
      t.ptr<float>(), part, chunks, meta.token_slot.ptr<int32_t>(), static_cast<int>(n), static_cast<int>(rank),
      static_cast<int>(a_stack.dim(0)));
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
