// StepPlan: which kernel runs each projection of a forward step, decided once per step
// from its shape, before any op runs (and before a graph is captured or replayed). The
// model hands each group's GroupPlan to Backend::project and to the op that reads the
// group's outputs next, so what runs is written down in one place and printed by --trace.
//
// Device backends derive the plan from one DispatchTable (step_plan.cc), which holds
// every token-count threshold of the CUDA backend and the measurement behind each;
// host backends run every group the same way at every size (plan_host_step).
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace quiver {

// The projection groups of a Llama layer, in forward order, and what reads each one's
// outputs next (the op that can absorb its LoRA expand).
enum class ProjGroup : uint8_t { kQkv, kO, kGateUp, kDown };
inline constexpr int kNumProjGroups = 4;
inline constexpr int kMaxGroupMembers = 3;

enum class MatmulKernel : uint8_t {
  kHost,         // the host backend's matmul
  kGemv,         // f32 activations, each weight read once (gemv.cu)
  kSkinny,       // 16-bit tensor-core tiles of up to 16 tokens (gemm_skinny.cu)
  kCublasSmall,  // cuBLAS on a handle without workspace (no split-K reduce kernel)
  kCublas,       // cuBLAS with its workspace
  kCublasFp8,    // fp8 weights: cuBLASLt's FP8 GEMM, x quantized per token, a pass applies
                 // the scales (gemm_fp8.cu)
  kCublasFp8Outer,  // kCublasFp8 with the scales in cuBLASLt's epilogue (outer-vector
                    // scales) where it has such a kernel, else as kCublasFp8
};

enum class ShrinkKernel : uint8_t {
  kNone,       // no LoRA this step
  kHost,       // the host backend's shrink
  kFused,      // extra blocks of the matmul's own launch (GEMV or skinny)
  kTokenRows,  // one token per block, beside the matmul on the side stream, writes t
  kTiled,      // 16 slot-sorted tokens per block, split partials (lora.cu)
  kTiledMma,   // kTiled with one-adapter tiles on tensor cores (lora_shrink_mma.cu)
};

enum class ExpandKernel : uint8_t {
  kNone,
  kHost,      // the host backend's expand, right after the shrink
  kNextOp,    // added by the op that reads the outputs next (lora_delta.cuh)
  kTiled,     // 16 slot-sorted tokens per block (lora.cu)
  kTiledMma,  // kTiled with one-adapter tiles on tensor cores (lora_expand_mma.cu)
};

// The fp8 kernels on cuBLASLt's FP8 GEMM.
inline bool is_cublas_fp8(MatmulKernel k) {
  return k == MatmulKernel::kCublasFp8 || k == MatmulKernel::kCublasFp8Outer;
}

struct GroupPlan {
  MatmulKernel matmul = MatmulKernel::kHost;
  ShrinkKernel shrink = ShrinkKernel::kNone;
  ExpandKernel expand = ExpandKernel::kNone;
  // The type the matmul multiplies x in: kF32, a 16-bit type (the weights' own, f16 for
  // the skinny kernel on fp8 weights), or e4m3 (the kCublasFp8 kernels: codes with a scale
  // per token), in which case the op that produces x writes that copy beside it
  // (MatmulGroup::x16) where it can; a matmul without it converts x itself.
  DType x_type = DType::kF32;
  bool lora() const { return shrink != ShrinkKernel::kNone; }
  bool expand_in_next_op() const { return expand == ExpandKernel::kNextOp; }
  friend bool operator==(const GroupPlan&, const GroupPlan&) = default;
};

// What the dispatch of a step depends on.
struct GroupShape {
  int count = 0;                       // members (q/k/v: 3, gate/up: 2, o and down: 1)
  int64_t in = 0;                      // input features
  int64_t out[kMaxGroupMembers] = {};  // output features of each member
};
struct StepShape {
  int64_t tokens = 0;
  bool lora = false;  // LoRA kernels run this step
  DType weights = DType::kF32;
  // int8 weights (host backends): the float type they were quantized from, whose
  // activation rounding they keep (a bf16 checkpoint's default rounds x to bf16).
  DType weights_source = DType::kF32;
  DType stacks = DType::kF32;  // the LoRA slot stacks' type
  int64_t rank = 0;            // the stacks' max rank
  // Tokens in one-adapter runs of 16 (lora_run_tokens, backend.h): what the tensor-core
  // LoRA tiles would take. 0 for graph buckets, whose plan is fixed at capture.
  int64_t lora_run_tokens = 0;
  GroupShape group[kNumProjGroups];
};

struct StepPlan {
  int64_t tokens = 0;
  GroupPlan group[kNumProjGroups];
  const GroupPlan& operator[](ProjGroup g) const { return group[static_cast<int>(g)]; }
  bool lora() const;
  // One line: "n=8 qkv=skinny+fused>rope_kv_write o=... " (what --trace prints).
  std::string describe() const;
  friend bool operator==(const StepPlan&, const StepPlan&) = default;
};

std::string to_string(MatmulKernel k);
std::string to_string(ShrinkKernel k);
std::string to_string(ExpandKernel k);
std::string to_string(ProjGroup g);
// The op that reads a group's outputs next (and absorbs an ExpandKernel::kNextOp).
std::string next_op(ProjGroup g);

// Every token-count threshold of the device dispatch. The defaults are the engine's; each
// field names the measurement that sets it: bench_cuda_ops on one H200 (Llama-2-7B shapes,
// bf16 weights and stacks, r=16; BM_CudaMatmul per kernel, BM_CudaLoraPlan per LoRA
// pairing with the op that reads the group's outputs; us per call, launch gaps included).
struct DispatchTable {
  // Matmuls of up to this many tokens run the GEMV (f32 x); above it x is rounded to the
  // weights' 16-bit type. 4096 x 4096: GEMV 10.7 / 10.8 us at 1 / 2 tokens against 14.5 /
  // 15.7 on cuBLAS; at 4 tokens 17.1 against the skinny kernel's 13.7. At most 16.
  int gemv_max_n = 2;
  // Matmuls without LoRA up to this many tokens run the skinny tensor-core kernel: 4096 x
  // 4096 at 4 / 8 tokens 13.7 / 14.0 us against cuBLAS's 14.4 / 15.6 (the wider 11008 x
  // 4096, 4096 x 11008 and lm_head shapes are within 2-6% of cuBLAS either way). At 16
  // tokens cuBLAS is ahead on the wide shapes (29.1 against 35.2 us at 11008 x 4096; 4096 x
  // 4096 ties, 16.1 against 15.9). At most 16.
  int skinny_max_n = 8;
  // With LoRA, the skinny kernel with the shrink in its own launch up to this many tokens:
  // q/k/v group at 16 tokens 34.8 us against 47.3 for cuBLAS + the token-rows shrink; down
  // 36.5 against 39.4. At most 16. (At 1-2 tokens the GEMV takes the shrink the same way:
  // q/k/v 27.0 us against 30.9 with token rows and 35.7 tiled.)
  int skinny_lora_max_n = 16;
  // cuBLAS matmuls up to this many tokens use the handle without workspace (no split-K
  // reduce kernel): 4096 x 11008 at 32 / 64 tokens 30.6 / 31.7 us against 31.7 / 34.8 with
  // the 32 MiB workspace; the other shapes tie (at 128 tokens all do).
  int cublas_small_max_n = 64;
  // Up to this many tokens the LoRA expand is left to the op after the projection (no LoRA
  // kernel after the matmul on the step's chain), the shrink being fused or token rows
  // beside the matmul: q/k/v at 32 / 64 tokens 49.9 / 52.3 us against 51.5 / 55.2 tiled
  // (one adapter), 53.0 / 61.4 against 60.1 / 69.5 (an adapter a token); down 41.1 / 38.9
  // against 45.2 / 43.4. At 128 tokens down with one adapter is faster tiled (55.3 against
  // 58.3), q/k/v and an adapter a token still with token rows (79.4 against 83.6). At 256
  // the tiled kernels win in both (H100: q/k/v 120.8 against 127.5 us an adapter a token,
  // 111.8 against 116.1 one adapter), and the 256-request step over 64 adapters (Llama-2-7B,
  // prompt 256) took 22.6 ms with this limit against 25.4 with it at 256 (fp8 cache; bf16
  // cache 30.0 against 32.0). The token-rows shrink and the next op read a token's A and B
  // slices per token, the tiled kernels once per run of tokens on one adapter (4 there).
  int expand_next_op_max_n = 64;
  // From this many tokens in one-adapter runs (StepShape::lora_run_tokens), with bf16
  // stacks and x rounded to bf16, the shrink takes those tiles on tensor cores: r=16, all
  // tokens on one adapter, q/k/v at 2,048 tokens 510 us against 542 on CUDA cores, down
  // 352 against 372; at 512 tokens level over the two (q/k/v 149 against 155, down 111
  // against 105). Without runs (token i on adapter i % 64) the tensor-core kernels find
  // no tile and only add their launch: 512 tokens, down 129 against 112 us.
  int lora_mma_min_n = 512;
  // With that, from this rank the expand takes the runs on tensor cores too: 2,048 tokens
  // on one adapter, q/k/v at r=64 / 128 597 / 722 us against 770 / 1,079 with the CUDA-core
  // expand, down 407 / 464 against 450 / 573; at r=16 level (516 against 510, 353 against
  // 352). The CUDA-core expand is instruction-bound, its cost linear in the rank (173 us
  // more at r=64, 357 at r=128, q/k/v), so r=32 is past the break-even (~50 us).
  int lora_mma_expand_min_rank = 32;
  // fp8 weights: from 3 (past gemv_max_n) to this many tokens the skinny kernel (weights
  // widened exactly to f16 in registers, x's f16 copy), above it cuBLASLt's FP8 GEMM (x
  // quantized per token). The GEMV there, f32 x for every token, was bound by reading x:
  // a 7B step at 4 / 8 / 16 tokens 6.77 / 11.33 / 24.26 ms against bf16's 5.72 / 5.93 /
  // 7.02 (H100, base model). At most 16.
  int fp8_skinny_max_n = 16;
  // fp8 weights on cuBLASLt from this many tokens: the per-token and per-channel scales in
  // the GEMM's epilogue (kCublasFp8Outer) instead of a pass over y after a unit-scale GEMM.
  // H100, q/k/v (12,288 x 4,096) through the backend, x's quantization included
  // (bench_cuda_ops BM_CudaMatmulPrefill): 219 us against 269 at 2,048 tokens, 112 against
  // 136 at 1,024, 60.9 against 72.3 at 512, but 43.3 against 42.0 at 256 (31.5 against 34.1
  // at 128, 27.8 against 25.5 at 32 called directly): the epilogue costs about a tenth of the
  // kernel, the pass y's bytes, which outweigh it from 512 tokens on.
  int fp8_outer_min_n = 512;
};

// Refuses a table the kernels cannot follow (the GEMV and skinny kernels take at most 16
// tokens; no threshold is negative).
void check_dispatch_table(const DispatchTable& table);
// The CUDA backend's plan. split_activations: --matmul-precision highest (cuBLAS on hi +
// lo halves, so x is never rounded for the matmul; fp8 weights run the f32-x GEMV at every
// token count).
StepPlan plan_device_step(const DispatchTable& table, const StepShape& shape, bool split_activations);
// The type kernel k multiplies x in with weights of type `weights` (GroupPlan::x_type):
// their 16-bit type for the kernels that round x (skinny, cuBLAS; not under
// split_activations), f16 for the skinny kernel on fp8 weights and e4m3 for cuBLASLt's
// FP8 GEMM, otherwise f32.
DType matmul_input_type(MatmulKernel k, DType weights, bool split_activations);
// The plan of one matmul of n tokens without LoRA (lm_head), as a group's would be.
GroupPlan plan_device_matmul(const DispatchTable& table, int64_t n, int64_t in, DType weights, bool split_activations);
// The ref and cpu backends' plan: host kernels, the expand right after the shrink. x is
// multiplied in f32, or, with round_x16 (--matmul-precision default), rounded to bf16 for
// bf16 weights at every token count, so that a request's numerics do not depend on how
// many others share its step (each element is rounded alone; sums run per token).
StepPlan plan_host_step(const StepShape& shape, bool round_x16);
// Whether plan_host_step, with round_x16, rounds x to bf16 for weights of this type
// (`source`: what int8 weights were quantized from): bf16 weights, and int8 ones quantized
// from bf16, which keep their checkpoint's rounding.
inline bool host_x_is_bf16(DType weights, DType source) {
  return weights == DType::kBF16 || (weights == DType::kI8 && source == DType::kBF16);
}

}  // namespace quiver
