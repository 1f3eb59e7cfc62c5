// The LoRA expand a group's plan leaves to the op after it (ExpandKernel::kNextOp), added
// inside the kernel of the op that reads the projection's outputs next:
// y[i, row] += b[slot_i][row, :] . t[i, :]. Each output's B row is loaded before the
// kernel's PDL wait (the slots and the stacks are written by no kernel of the step), t
// after it, so the term adds loads in flight, not a kernel to the step's chain
// (gemv_lora.cu says why that matters at batch 1).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/lora_kernels.h"

namespace quiver::cuda {

struct LoraDeltaArgs {
  const void* b[kMaxGroup] = {};   // [S, out_g, R]
  const float* t[kMaxGroup] = {};  // [n, R]
  int out[kMaxGroup] = {};
  const int32_t* token_slot = nullptr;
  int count = 0, rank = 0, num_slots = 0;
  DType type = DType::kF32;  // the stacks'
  bool vec = false;          // 16-bit stacks, R % 8 == 0, 16-byte aligned: vector loads
};

struct LoraDeltaT;

// Bytes of one B row (R entries of the stacks' type).
__device__ __forceinline__ int64_t lora_row_bytes(const LoraDeltaArgs& d) {
  return (d.type == DType::kF32 ? 4 : 2) * static_cast<int64_t>(d.rank);
}

// B[slot][row] of member g for token tok (its B row of output `row`); null when there is
// no term (no such member, slot -1 or outside the stack).
__device__ __forceinline__ const char* lora_brow(const LoraDeltaArgs& d, int g, int tok, int row) {
  if (g >= d.count) return nullptr;
  const int slot = lora_slot_of(d.token_slot, tok, d.num_slots);
  if (slot < 0) return nullptr;
  const int64_t rows = static_cast<int64_t>(slot) * group_pick(g, d.out) + row;
  return static_cast<const char*>(group_pick(g, d.b)) + rows * lora_row_bytes(d);
}

// One output's term: load() before the wait, apply() after it. 10 registers (t's address
// is worked out in apply()).
struct LoraDeltaRow {
  uint4 raw[2] = {};            // its first 16 ranks, vec only
  const char* brow = nullptr;   // null: no term (no delta, slot -1 or outside the stack)

  // (Re)loads the term of output `row` of member g for token tok.
  __device__ __forceinline__ void load(const LoraDeltaArgs& d, int g, int tok, int row) {
    brow = lora_brow(d, g, tok, row);
    if (brow != nullptr && d.vec) {
      raw[0] = load16(brow);
      if (d.rank >= 16) raw[1] = load16(brow + 16);
    }
  }

  // y + the row of B . t (member g, token tok, as loaded), ranks in order.
  __device__ __forceinline__ float apply(const LoraDeltaArgs& d, int g, int tok, float y) const;
  // The same with t's first ranks already in registers (LoraDeltaT::load, after the wait).
  __device__ __forceinline__ float apply(const LoraDeltaArgs& d, const LoraDeltaT& t, float y) const;
};

// The terms of four consecutive outputs (row .. row + 3) of one member and token: one B
// pointer for the four, 34 registers where four LoraDeltaRows take 40 (the delta norm
// kernel holds two a thread).
struct LoraDeltaRow4 {
  uint4 raw[4][2] = {};         // their first 16 ranks, vec only
  const char* brow = nullptr;   // B[slot][row]; null: no term

  __device__ __forceinline__ void load(const LoraDeltaArgs& d, int g, int tok, int row) {
    brow = lora_brow(d, g, tok, row);
    if (brow != nullptr && d.vec) {  // 16-bit stacks
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        raw[k][0] = load16(brow + k * lora_row_bytes(d));
        if (d.rank >= 16) raw[k][1] = load16(brow + k * lora_row_bytes(d) + 16);
      }
    }
  }

  // y + the four rows of B . t, as LoraDeltaRow::apply.
  __device__ __forceinline__ float4 apply(const LoraDeltaArgs& d, const LoraDeltaT& t, float4 y) const;
};

// t [n, R] of one (member, token): its first 16 ranks in registers when the B rows take
// vector loads (d.vec), so an op whose outputs share a token loads them once, right after
// its wait, beside its other loads; ranks past 16 are read from memory.
struct LoraDeltaT {
  float v[16] = {};
  const float* t = nullptr;

  __device__ __forceinline__ void load(const LoraDeltaArgs& d, int g, int tok) {
    if (g >= d.count) return;
    t = group_pick(g, d.t) + static_cast<int64_t>(tok) * d.rank;
    if (!d.vec) return;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      if (4 * q + 4 > d.rank) break;  // vec: R % 8 == 0, so R >= 8 and t 16-byte aligned
      const float4 f = *reinterpret_cast<const float4*>(t + 4 * q);
      v[4 * q] = f.x;
      v[4 * q + 1] = f.y;
      v[4 * q + 2] = f.z;
      v[4 * q + 3] = f.w;
    }
  }
};

// p + ranks r0..r0 + 7 of a B row (raw: their 16-bit values, bf16 or f16) . t, in rank order.
__device__ __forceinline__ float lora_dot8(bool bf16, const uint4& raw, const LoraDeltaT& t, int r0, float p) {
  float f[8];
  if (bf16) Vec16<__nv_bfloat16>::unpack(raw, f);
  else Vec16<__half>::unpack(raw, f);
#pragma unroll
  for (int e = 0; e < 8; ++e) p = fmaf(f[e], r0 + e < 16 ? t.v[r0 + e] : t.t[r0 + e], p);
  return p;
}

// The row of B at brow (raw: its first 16 ranks, vec) . t, ranks in order.
__device__ __forceinline__ float lora_term(const LoraDeltaArgs& d, const uint4 (&raw)[2], const char* brow,
                                           const LoraDeltaT& t) {
  float p = 0.f;
  int r = 0;
  if (d.vec) {
    const bool bf16 = d.type == DType::kBF16;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (8 * h + 8 > d.rank) break;
      p = lora_dot8(bf16, raw[h], t, 8 * h, p);
      r = 8 * h + 8;
    }
  }
  for (; r < d.rank; ++r) p = fmaf(load_any(brow, d.type, r), t.t[r], p);
  return p;
}

__device__ __forceinline__ float LoraDeltaRow::apply(const LoraDeltaArgs& d, const LoraDeltaT& t, float y) const {
  return brow == nullptr ? y : y + lora_term(d, raw, brow, t);
}

__device__ __forceinline__ float4 LoraDeltaRow4::apply(const LoraDeltaArgs& d, const LoraDeltaT& t, float4 y) const {
  if (brow == nullptr) return y;
  const int64_t stride = lora_row_bytes(d);
  return make_float4(y.x + lora_term(d, raw[0], brow, t), y.y + lora_term(d, raw[1], brow + stride, t),
                     y.z + lora_term(d, raw[2], brow + 2 * stride, t), y.w + lora_term(d, raw[3], brow + 3 * stride, t));
}

__device__ __forceinline__ float LoraDeltaRow::apply(const LoraDeltaArgs& d, int g, int tok, float y) const {
  if (brow == nullptr) return y;
  LoraDeltaT t;
  t.load(d, g, tok);
  return apply(d, t, y);
}

// The kernel arguments of the expand that `plan` leaves to an op whose inputs ys (in order,
// n rows each) are the group's outputs; count 0 when the plan leaves none. Checks what it
// is given.
inline LoraDeltaArgs lora_delta_args(const GroupPlan& plan, const GroupLora& lora, std::initializer_list<Tensor> ys,
                                     int64_t n, const char* op) {
  LoraDeltaArgs d;
  if (!plan.expand_in_next_op()) return d;
  const std::string what = std::string(op) + ": the plan's LoRA expand";
  check(lora.count >= 1 && lora.count <= static_cast<int>(ys.size()),
        what + " needs a group LoRA of 1 up to the op's input count members");
  const Tensor& b0 = lora.b_stack[0];
  check(b0.ndim == 3 && (b0.dtype == DType::kF32 || is_16bit_float(b0.dtype)),
        what + ": b_stack must be [S, out, R] f32, f16 or bf16");
  const int64_t num_slots = b0.dim(0), rank = b0.dim(2);
  check(rank >= 1 && rank <= kLoraMaxRank, what + ": rank outside 1..512");
  check_lora_meta(lora.meta, n, op);
  bool vec = b0.dtype != DType::kF32 && rank % 8 == 0;
  int i = 0;
  for (const Tensor& y : ys) {
    if (i == lora.count) break;
    const Tensor& b = lora.b_stack[i];
    const Tensor t = lora.t_of(i);
    check(lora.y[i].data == y.data && y.numel() % n == 0, what + " belongs to other tensors than this op's inputs");
    check(b.ndim == 3 && b.dim(0) == num_slots && b.dim(2) == rank && b.dtype == b0.dtype && b.dim(1) == y.numel() / n,
          what + ": b_stacks must be [S, out, R], out the input's row size, with one R and dtype");
    check(t.dtype == DType::kF32 && t.device == Device::kCuda && t.dim(0) == n && t.dim(1) == rank,
          what + ": t must be [n, R] f32 on the GPU");
    vec = vec && aligned16(b.data) && aligned16(t.data);
    d.b[i] = b.data;
    d.t[i] = t.ptr<float>();
    d.out[i] = static_cast<int>(b.dim(1));
    ++i;
  }
  d.token_slot = lora.meta.token_slot.ptr<int32_t>();
  d.count = lora.count;
  d.rank = static_cast<int>(rank);
  d.num_slots = static_cast<int>(num_slots);
  d.type = b0.dtype;
  d.vec = vec;
  return d;
}

}  // namespace quiver::cuda
