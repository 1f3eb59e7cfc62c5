// link: qv_backend
// The dispatch table (step_plan.h) across token counts: every token count from 1 to 4,096
// on a Llama-2-7B shape gets one kernel per group by the rules the table states, the
// 16-bit copy goes with the kernels that multiply in 16 bits, the LoRA expand is left to
// the next op exactly when the shrink is one-token (fused or token rows), and shapes or
// types a kernel cannot take fall to one that can.
#include <gtest/gtest.h>

#include <string>

#include "backend/step_plan.h"

namespace quiver {
namespace {

StepShape shape_7b(int64_t n, bool lora, DType weights = DType::kBF16, DType stacks = DType::kBF16,
                   int64_t rank = 16) {
  StepShape s;
  s.tokens = n;
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
    for (bool lora : {false, true}) {
      const StepPlan p = plan_device_step(t, shape_7b(n, lora), false);
      ASSERT_EQ(p.tokens, n);
      ASSERT_EQ(p.lora(), lora) << n;
      for (const GroupPlan& g : p.group) {
        const std::string at = "n=" + std::to_string(n) + (lora ? " lora" : "");
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
          EXPECT_EQ(g.shrink, n >= 512 ? ShrinkKernel::kTiledMma : ShrinkKernel::kTiled) << at;
          EXPECT_EQ(g.expand, n >= 512 ? ExpandKernel::kTiledMma : ExpandKernel::kTiled) << at;
        }
        const bool one_token_shrink = g.shrink == ShrinkKernel::kFused || g.shrink == ShrinkKernel::kTokenRows;
        EXPECT_EQ(g.expand_in_next_op(), one_token_shrink) << at;
      }
    }
  }
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
  EXPECT_EQ(plan_device_step(t, shape_7b(1024, true, DType::kBF16, DType::kBF16, 8), false).group[0].expand,
            ExpandKernel::kTiled);
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

TEST(StepPlan, HostPlanAndDescription) {
  const StepPlan host = plan_host_step(shape_7b(5, true));
  for (const GroupPlan& g : host.group) {
    EXPECT_EQ(g.matmul, MatmulKernel::kHost);
    EXPECT_EQ(g.shrink, ShrinkKernel::kHost);
    EXPECT_EQ(g.expand, ExpandKernel::kHost);
    EXPECT_EQ(g.x_type, DType::kF32);
  }
  EXPECT_FALSE(plan_host_step(shape_7b(5, false)).lora());
  const DispatchTable t;
  EXPECT_EQ(plan_device_step(t, shape_7b(1, true), false).describe(),
            "n=1 qkv=gemv+fused>rope_kv_write o=gemv+fused>add_rms_norm gate_up=gemv+fused>silu_mul "
            "down=gemv+fused>add_rms_norm");
  EXPECT_EQ(plan_device_step(t, shape_7b(1024, true), false).describe(),
            "n=1024 qkv=cublas(BF16)+tiled-mma/tiled-mma o=cublas(BF16)+tiled-mma/tiled-mma "
            "gate_up=cublas(BF16)+tiled-mma/tiled-mma down=cublas(BF16)+tiled-mma/tiled-mma");
  EXPECT_EQ(plan_device_step(t, shape_7b(32, false), false).describe(),
            "n=32 qkv=cublas-small(BF16) o=cublas-small(BF16) gate_up=cublas-small(BF16) down=cublas-small(BF16)");
}

}  // namespace
}  // namespace quiver
