// link: qv_backend
// The dispatch table (step_plan.h) across token counts: every token count from 1 to 4,096
// on a Llama-2-7B shape gets one kernel per group by the rules the table states, the
// 16-bit copy goes with the kernels that multiply in 16 bits, the LoRA expand is left to
// the next op exactly when the shrink is one-token (fused or token rows), the tensor-core
// LoRA tiles run only where the step has enough one-adapter runs (and the expand's only from
// their rank), and shapes or types a kernel cannot take fall to one that can.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/step_plan.h"

namespace quiver {
namespace {

StepShape shape_7b(int64_t n, bool lora, DType weights = DType::kBF16, DType stacks = DType::kBF16,
                   int64_t rank = 16, int64_t run_tokens = -1) {
  StepShape s;
  s.tokens = n;
  s.lora_run_tokens = run_tokens < 0 ? n : run_tokens;  // default: one prefill chunk
  s.lora = lora;
  s.weights = weights;
  s.stacks = stacks;
  s.rank = rank;
  s.group[0] = {3, 4096, {4096, 4096, 4096}};
  s.group[1] = {1, 4096, {4096}};
  s.group[2] = {2, 4096, {11008, 11008}};
  s.group[3] = {1, 11008, {4096}};
  return s;
}

TEST(StepPlan, SevenBAcrossTokenCounts) {
  const DispatchTable t;
  for (int64_t n = 1; n <= 4096; ++n) {
    for (int lora_case = 0; lora_case < 4; ++lora_case) {
      // no LoRA; r=16 on one adapter (every token in a run); r=64 on one adapter; r=16, no runs
      const bool lora = lora_case > 0;
      const int64_t rank = lora_case == 2 ? 64 : 16, runs = lora_case == 3 ? 0 : n;
      const StepPlan p = plan_device_step(t, shape_7b(n, lora, DType::kBF16, DType::kBF16, rank, runs), false);
      ASSERT_EQ(p.tokens, n);
      ASSERT_EQ(p.lora(), lora) << n;
      for (const GroupPlan& g : p.group) {
        const std::string at = "n=" + std::to_string(n) + " case " + std::to_string(lora_case);
        // Only the GEMV multiplies f32 activations.
        EXPECT_EQ(g.x_type, g.matmul == MatmulKernel::kGemv ? DType::kF32 : DType::kBF16) << at;
        if (!lora) {
          const MatmulKernel want = n <= 2 ? MatmulKernel::kGemv
                                    : n <= 8 ? MatmulKernel::kSkinny
                                    : n <= 64 ? MatmulKernel::kCublasSmall
                                              : MatmulKernel::kCublas;
          EXPECT_EQ(g.matmul, want) << at;
          EXPECT_EQ(g.shrink, ShrinkKernel::kNone) << at;
          EXPECT_EQ(g.expand, ExpandKernel::kNone) << at;
          continue;
        }
        if (n <= 2) {
          EXPECT_EQ(g.matmul, MatmulKernel::kGemv) << at;
          EXPECT_EQ(g.shrink, ShrinkKernel::kFused) << at;
        } else if (n <= 16) {
          EXPECT_EQ(g.matmul, MatmulKernel::kSkinny) << at;
          EXPECT_EQ(g.shrink, ShrinkKernel::kFused) << at;
        } else if (n <= 64) {
          EXPECT_EQ(g.matmul, MatmulKernel::kCublasSmall) << at;
          EXPECT_EQ(g.shrink, ShrinkKernel::kTokenRows) << at;
        } else {
          EXPECT_EQ(g.matmul, MatmulKernel::kCublas) << at;
          EXPECT_EQ(g.shrink, runs >= 512 ? ShrinkKernel::kTiledMma : ShrinkKernel::kTiled) << at;
          EXPECT_EQ(g.expand, runs >= 512 && rank >= 32 ? ExpandKernel::kTiledMma : ExpandKernel::kTiled) << at;
        }
        const bool one_token_shrink = g.shrink == ShrinkKernel::kFused || g.shrink == ShrinkKernel::kTokenRows;
        EXPECT_EQ(g.expand_in_next_op(), one_token_shrink) << at;
      }
    }
  }
}

// fp8 weights: the GEMV (f32 x) at 1-2 tokens, the skinny kernel (x's f16 copy, weights
// widened exactly to f16 in registers) to 16, cuBLASLt's FP8 GEMM above (x's e4m3 copy, with
// its per-token scales, written by the norms and silu_mul; the scales in its epilogue from
// 512 tokens); LoRA fused
// into the GEMV at 1-2 tokens with bf16 or f32 stacks and into the skinny kernel with
// 16-bit stacks, token rows beside them otherwise and beside the FP8 GEMM to 64, the tiles
// past that (on tensor cores for bf16 stacks and one-adapter runs: project() makes their
// bf16 x). --matmul-precision highest keeps x in f32: the GEMV at every size.
TEST(StepPlan, Fp8WeightsAcrossTokenCounts) {
  const DispatchTable t;
  for (int64_t n = 1; n <= 2048; n += n < 40 ? 1 : 37) {
    for (DType stacks : {DType::kBF16, DType::kF16, DType::kF32}) {
      const std::string at = "n=" + std::to_string(n) + " stacks " + std::string(dtype_name(stacks));
      const StepPlan base = plan_device_step(t, shape_7b(n, false, DType::kF8E4M3, stacks), false);
      const StepPlan lora = plan_device_step(t, shape_7b(n, true, DType::kF8E4M3, stacks), false);
      const StepPlan highest = plan_device_step(t, shape_7b(n, true, DType::kF8E4M3, stacks), true);
      for (int g = 0; g < kNumProjGroups; ++g) {
        const MatmulKernel want = n <= 2     ? MatmulKernel::kGemv
                                  : n <= 16  ? MatmulKernel::kSkinny
                                  : n < 512 ? MatmulKernel::kCublasFp8
                                             : MatmulKernel::kCublasFp8Outer;
        EXPECT_EQ(base.group[g].matmul, want) << at;
        const DType x_type = want == MatmulKernel::kSkinny ? DType::kF16
                             : want == MatmulKernel::kGemv ? DType::kF32
                                                           : DType::kF8E4M3;  // the norms' fp8 copy
        EXPECT_EQ(base.group[g].x_type, x_type) << at;
        EXPECT_EQ(lora.group[g].matmul, want) << at;
        const bool fused = n <= 2 ? stacks != DType::kF16 : n <= 16 && stacks != DType::kF32;
        const ShrinkKernel shrink = fused                                 ? ShrinkKernel::kFused
                                    : n <= 64                             ? ShrinkKernel::kTokenRows
                                    : n >= 512 && stacks == DType::kBF16 ? ShrinkKernel::kTiledMma
                                                                          : ShrinkKernel::kTiled;
        EXPECT_EQ(lora.group[g].shrink, shrink) << at;
        EXPECT_EQ(highest.group[g].matmul, MatmulKernel::kGemv) << at;
        EXPECT_EQ(highest.group[g].x_type, DType::kF32) << at;
      }
    }
  }
  DispatchTable narrow;
  narrow.fp8_skinny_max_n = 4;
  EXPECT_EQ(plan_device_step(narrow, shape_7b(5, false, DType::kF8E4M3), false).group[0].matmul,
            MatmulKernel::kCublasFp8);
  EXPECT_EQ(plan_device_step(narrow, shape_7b(5, true, DType::kF8E4M3), false).group[0].shrink,
            ShrinkKernel::kTokenRows);
  narrow.fp8_outer_min_n = 17;
  EXPECT_EQ(plan_device_step(narrow, shape_7b(17, false, DType::kF8E4M3), false).group[0].matmul,
            MatmulKernel::kCublasFp8Outer);
  // The tensor-core shrink reads the bf16 copy of x that project() makes for either FP8 GEMM.
  EXPECT_EQ(plan_device_step(narrow, shape_7b(2048, true, DType::kF8E4M3), false).group[0].shrink,
            ShrinkKernel::kTiledMma);
  narrow.fp8_outer_min_n = -1;
  EXPECT_DEATH(check_dispatch_table(narrow), "thresholds must be >= 0");
}

TEST(StepPlan, PlansArePureFunctionsOfTheShape) {
  const DispatchTable t;
  for (int64_t n : {1, 2, 3, 8, 9, 16, 17, 64, 65, 511, 512, 2048}) {
    EXPECT_EQ(plan_device_step(t, shape_7b(n, true), false), plan_device_step(t, shape_7b(n, true), false));
    EXPECT_FALSE(plan_device_step(t, shape_7b(n, true), false) == plan_device_step(t, shape_7b(n, false), false));
  }
}

TEST(StepPlan, TypesAndShapesTheKernelsCannotTake) {
  const DispatchTable t;
  // f32 weights: the GEMV, then cuBLAS; never the skinny kernel or a 16-bit copy.
  for (int64_t n : {1, 4, 8, 16, 64, 1024}) {
    const StepPlan p = plan_device_step(t, shape_7b(n, true, DType::kF32, DType::kF32), false);
    for (const GroupPlan& g : p.group) {
      EXPECT_NE(g.matmul, MatmulKernel::kSkinny) << n;
      EXPECT_EQ(g.x_type, DType::kF32) << n;
      EXPECT_NE(g.shrink, ShrinkKernel::kTiledMma) << n;
      EXPECT_NE(g.expand, ExpandKernel::kTiledMma) << n;
    }
  }
  // --matmul-precision highest: x is never rounded, so no skinny kernel and no copy.
  for (int64_t n : {4, 8, 16, 2048}) {
    for (const GroupPlan& g : plan_device_step(t, shape_7b(n, true), true).group) {
      EXPECT_NE(g.matmul, MatmulKernel::kSkinny) << n;
      EXPECT_EQ(g.x_type, DType::kF32) << n;
      EXPECT_NE(g.shrink, ShrinkKernel::kTiledMma) << n;
    }
  }
  // f32 stacks over bf16 weights: the GEMV takes them fused, the skinny kernel does not.
  EXPECT_EQ(plan_device_step(t, shape_7b(1, true, DType::kBF16, DType::kF32), false).group[0].shrink,
            ShrinkKernel::kFused);
  const GroupPlan b8 = plan_device_step(t, shape_7b(8, true, DType::kBF16, DType::kF32), false).group[0];
  EXPECT_EQ(b8.matmul, MatmulKernel::kSkinny);
  EXPECT_EQ(b8.shrink, ShrinkKernel::kTokenRows);
  EXPECT_TRUE(b8.expand_in_next_op());
  // An input width the one-token shrink cannot take (not a multiple of 8): tiled, with
  // its own expand, at every size.
  for (int64_t n : {1, 8, 40, 100}) {
    StepShape s = shape_7b(n, true);
    s.group[1].in = 4100;
    const GroupPlan g = plan_device_step(t, s, false).group[1];
    EXPECT_EQ(g.shrink, ShrinkKernel::kTiled) << n;
    EXPECT_EQ(g.expand, ExpandKernel::kTiled) << n;
  }
  // Ranks or outputs off 16: no tensor-core expand; a rank above 512: no one-token shrink.
  EXPECT_EQ(plan_device_step(t, shape_7b(1024, true, DType::kBF16, DType::kBF16, 40), false).group[0].expand,
            ExpandKernel::kTiled);
  StepShape odd = shape_7b(1024, true, DType::kBF16, DType::kBF16, 64);
  EXPECT_EQ(plan_device_step(t, odd, false).group[0].expand, ExpandKernel::kTiledMma);
  odd.group[0].out[1] = 1000;
  EXPECT_EQ(plan_device_step(t, odd, false).group[0].expand, ExpandKernel::kTiled);
  // Half the tokens in runs: the tensor cores from 512 run tokens, not 512 tokens.
  EXPECT_EQ(plan_device_step(t, shape_7b(1022, true, DType::kBF16, DType::kBF16, 64, 511), false).group[0].shrink,
            ShrinkKernel::kTiled);
  EXPECT_EQ(plan_device_step(t, shape_7b(1024, true, DType::kBF16, DType::kBF16, 64, 512), false).group[0].shrink,
            ShrinkKernel::kTiledMma);
  EXPECT_EQ(plan_device_step(t, shape_7b(4, true, DType::kBF16, DType::kBF16, 1024), false).group[0].shrink,
            ShrinkKernel::kTiled);
  // LoRA on, but stacks of rank 0: nothing to run.
  EXPECT_FALSE(plan_device_step(t, shape_7b(4, true, DType::kBF16, DType::kBF16, 0), false).lora());
}

TEST(StepPlan, TheTableMovesTheThresholds) {
  DispatchTable t;
  t.gemv_max_n = 0;
  t.skinny_max_n = 0;
  t.skinny_lora_max_n = 0;
  t.cublas_small_max_n = 0;
  t.expand_next_op_max_n = 0;
  t.lora_mma_min_n = 1;
  t.lora_mma_expand_min_rank = 16;
  for (int64_t n : {1, 2, 8, 64}) {
    const GroupPlan g = plan_device_step(t, shape_7b(n, true), false).group[0];
    EXPECT_EQ(g.matmul, MatmulKernel::kCublas) << n;
    EXPECT_EQ(g.shrink, ShrinkKernel::kTiledMma) << n;
    EXPECT_EQ(g.expand, ExpandKernel::kTiledMma) << n;
  }
  t.gemv_max_n = 17;
  EXPECT_DEATH(check_dispatch_table(t), "must be in \\[0, 16\\]");
  EXPECT_DEATH(plan_device_step(t, shape_7b(1, false), false), "dispatch table");
}

int64_t run_tokens(const std::vector<int32_t>& slots) {
  std::vector<int32_t> order;
  lora_sorted_tokens(slots, &order);
  return lora_run_tokens(slots, order);
}

TEST(StepPlan, RunTokensCountTheTilesOfOneAdapterRuns) {
  EXPECT_EQ(run_tokens(std::vector<int32_t>(40, 2)), 32);  // two whole tiles, 8 left over
  std::vector<int32_t> alternating(64);
  for (size_t i = 0; i < alternating.size(); ++i) alternating[i] = static_cast<int32_t>(i % 2);
  EXPECT_EQ(run_tokens(alternating), 0);  // sorted by slot, but no tile is consecutive tokens
  std::vector<int32_t> base_after(32, -1);
  std::fill_n(base_after.begin(), 16, 0);
  EXPECT_EQ(run_tokens(base_after), 16);  // base-model tokens are no run
  // 8 decode tokens on adapter 1, then a 24-token chunk on adapter 0 (sorted first): its
  // first 16 tokens fill a tile, the other 8 share one with the decode tokens.
  std::vector<int32_t> mixed(32, 0);
  std::fill_n(mixed.begin(), 8, 1);
  EXPECT_EQ(run_tokens(mixed), 16);
  EXPECT_EQ(run_tokens({}), 0);
}

TEST(StepPlan, HostPlanAndDescription) {
  const StepPlan host = plan_host_step(shape_7b(5, true), false);
  for (const GroupPlan& g : host.group) {
    EXPECT_EQ(g.matmul, MatmulKernel::kHost);
    EXPECT_EQ(g.shrink, ShrinkKernel::kHost);
    EXPECT_EQ(g.expand, ExpandKernel::kHost);
    EXPECT_EQ(g.x_type, DType::kF32);
  }
  EXPECT_FALSE(plan_host_step(shape_7b(5, false), true).lora());
  // Rounding x: bf16 weights at every size (f16 and f32 weights keep f32 x).
  for (int64_t n : {1, 2, 3, 64})
    for (DType w : {DType::kBF16, DType::kF16, DType::kF32})
      for (const GroupPlan& g : plan_host_step(shape_7b(n, true, w, w), true).group)
        EXPECT_EQ(g.x_type, w == DType::kBF16 ? DType::kBF16 : DType::kF32) << n << dtype_name(w);
  const DispatchTable t;
  EXPECT_EQ(plan_device_step(t, shape_7b(1, true), false).describe(),
            "n=1 qkv=gemv+fused>rope_kv_write o=gemv+fused>add_rms_norm gate_up=gemv+fused>silu_mul "
            "down=gemv+fused>add_rms_norm");
  EXPECT_EQ(plan_device_step(t, shape_7b(1024, true), false).describe(),
            "n=1024 qkv=cublas(BF16)+tiled-mma/tiled o=cublas(BF16)+tiled-mma/tiled "
            "gate_up=cublas(BF16)+tiled-mma/tiled down=cublas(BF16)+tiled-mma/tiled");
  EXPECT_EQ(plan_device_step(t, shape_7b(32, false), false).describe(),
            "n=32 qkv=cublas-small(BF16) o=cublas-small(BF16) gate_up=cublas-small(BF16) down=cublas-small(BF16)");
}

}  // namespace
}  // namespace quiver
