#include "backend/step_plan.h"

#include "core/check.h"

namespace quiver {
namespace {

// The largest rank the CUDA LoRA kernels take (the engine's --max-lora-rank bound).
constexpr int64_t kMaxRank = 512;

// The matmul of a group without LoRA.
MatmulKernel base_matmul(const DispatchTable& t, int64_t n, const GroupShape& g, DType w, bool split) {
  if (n <= t.gemv_max_n) return MatmulKernel::kGemv;
  if (w == DType::kF8E4M3) {  // split: f32 x at every size, the GEMV 16 tokens a pass
    if (split) return MatmulKernel::kGemv;
    if (n <= t.fp8_skinny_max_n) return g.in % 8 == 0 ? MatmulKernel::kSkinny : MatmulKernel::kGemv;
    return n >= t.fp8_outer_min_n ? MatmulKernel::kCublasFp8Outer : MatmulKernel::kCublasFp8;
  }
  if (n >= 3 && n <= t.skinny_max_n && is_16bit_float(w) && g.in % 8 == 0 && !split) return MatmulKernel::kSkinny;
  return n <= t.cublas_small_max_n ? MatmulKernel::kCublasSmall : MatmulKernel::kCublas;
}

GroupPlan plan_group(const DispatchTable& t, const StepShape& s, const GroupShape& g, bool split) {
  const int64_t n = s.tokens;
  GroupPlan p;
  p.matmul = base_matmul(t, n, g, s.weights, split);
  p.x_type = matmul_input_type(p.matmul, s.weights, split);
  if (!s.lora || s.rank < 1) return p;
  // One token per block, rank rows of A per token: the fused and kTokenRows shrinks.
  const bool rows_ok = s.rank <= kMaxRank && g.in >= 8 && g.in % 8 == 0;
  const bool next_op = n <= t.expand_next_op_max_n;
  // Beside fp8 weights the GEMV takes bf16 stacks (the model's type) as well.
  const bool gemv_stacks = s.stacks == s.weights || s.stacks == DType::kF32 ||
                           (s.weights == DType::kF8E4M3 && s.stacks == DType::kBF16);
  if (next_op && rows_ok && n <= 2 && p.matmul == MatmulKernel::kGemv && gemv_stacks) {
    // batch 1-2: one launch for the GEMV and the shrink
    p.shrink = ShrinkKernel::kFused;
    p.expand = ExpandKernel::kNextOp;
  } else if (next_op && rows_ok && n >= 3 && n <= t.skinny_lora_max_n && !split &&
             ((is_16bit_float(s.weights) && s.stacks == s.weights) ||
              (p.matmul == MatmulKernel::kSkinny && s.weights == DType::kF8E4M3 && is_16bit_float(s.stacks)))) {
    p.matmul = MatmulKernel::kSkinny;  // 3..16 tokens: one launch for the matmul and the shrink
    p.shrink = ShrinkKernel::kFused;
    p.expand = ExpandKernel::kNextOp;
  } else if (next_op && rows_ok) {
    p.shrink = ShrinkKernel::kTokenRows;  // beside the matmul; nothing after it on the chain
    p.expand = ExpandKernel::kNextOp;
  } else {
    const bool mma = s.lora_run_tokens >= t.lora_mma_min_n && s.stacks == DType::kBF16;
    // fp8 weights on cuBLASLt read x in f32; project() makes the bf16 copy these tiles read.
    const bool x_bf16 = p.x_type == DType::kBF16 || (is_cublas_fp8(p.matmul) && !split);
    p.shrink = mma && x_bf16 && g.in % 8 == 0 ? ShrinkKernel::kTiledMma : ShrinkKernel::kTiled;
    bool outs16 = s.rank % 16 == 0;
    for (int i = 0; i < g.count; ++i) outs16 &= g.out[i] % 16 == 0;
    p.expand = mma && outs16 && s.rank >= t.lora_mma_expand_min_rank ? ExpandKernel::kTiledMma : ExpandKernel::kTiled;
  }
  p.x_type = matmul_input_type(p.matmul, s.weights, split);
  return p;
}

}  // namespace

DType matmul_input_type(MatmulKernel k, DType weights, bool split_activations) {
  if (weights == DType::kF8E4M3) {
    if (split_activations) return DType::kF32;
    return k == MatmulKernel::kSkinny ? DType::kF16 : is_cublas_fp8(k) ? DType::kF8E4M3 : DType::kF32;
  }
  const bool rounds = k != MatmulKernel::kGemv && k != MatmulKernel::kHost && !split_activations;
  return rounds && is_16bit_float(weights) ? weights : DType::kF32;
}

bool StepPlan::lora() const {
  for (const GroupPlan& g : group)
    if (g.lora()) return true;
  return false;
}

std::string to_string(MatmulKernel k) {
  switch (k) {
    case MatmulKernel::kHost: return "host";
    case MatmulKernel::kGemv: return "gemv";
    case MatmulKernel::kSkinny: return "skinny";
    case MatmulKernel::kCublasSmall: return "cublas-small";
    case MatmulKernel::kCublas: return "cublas";
    case MatmulKernel::kCublasFp8: return "cublas-fp8";
    case MatmulKernel::kCublasFp8Outer: return "cublas-fp8-outer";
  }
  return "?";
}

std::string to_string(ShrinkKernel k) {
  switch (k) {
    case ShrinkKernel::kNone: return "none";
    case ShrinkKernel::kHost: return "host";
    case ShrinkKernel::kFused: return "fused";
    case ShrinkKernel::kTokenRows: return "token-rows";
    case ShrinkKernel::kTiled: return "tiled";
    case ShrinkKernel::kTiledMma: return "tiled-mma";
  }
  return "?";
}

std::string to_string(ExpandKernel k) {
  switch (k) {
    case ExpandKernel::kNone: return "none";
    case ExpandKernel::kHost: return "host";
    case ExpandKernel::kNextOp: return "next-op";
    case ExpandKernel::kTiled: return "tiled";
    case ExpandKernel::kTiledMma: return "tiled-mma";
  }
  return "?";
}

std::string to_string(ProjGroup g) {
  switch (g) {
    case ProjGroup::kQkv: return "qkv";
    case ProjGroup::kO: return "o";
    case ProjGroup::kGateUp: return "gate_up";
    case ProjGroup::kDown: return "down";
  }
  return "?";
}

std::string next_op(ProjGroup g) {
  switch (g) {
    case ProjGroup::kQkv: return "rope_kv_write";
    case ProjGroup::kO: return "add_rms_norm";
    case ProjGroup::kGateUp: return "silu_mul";
    case ProjGroup::kDown: return "add_rms_norm";
  }
  return "?";
}

std::string StepPlan::describe() const {
  std::string s = "n=";
  s += std::to_string(tokens);
  for (int i = 0; i < kNumProjGroups; ++i) {
    const GroupPlan& g = group[i];
    const auto pg = static_cast<ProjGroup>(i);
    s += ' ';
    s += to_string(pg);
    s += '=';
    s += to_string(g.matmul);
    if (g.x_type != DType::kF32) {
      s += '(';
      s += dtype_name(g.x_type);
      s += ')';
    }
    if (!g.lora()) continue;
    s += '+';
    s += to_string(g.shrink);
    s += g.expand_in_next_op() ? '>' : '/';
    s += g.expand_in_next_op() ? next_op(pg) : to_string(g.expand);
  }
  return s;
}

void check_dispatch_table(const DispatchTable& t) {
  check(t.gemv_max_n >= 0 && t.gemv_max_n <= 16 && t.skinny_max_n >= 0 && t.skinny_max_n <= 16 &&
            t.skinny_lora_max_n >= 0 && t.skinny_lora_max_n <= 16 && t.fp8_skinny_max_n >= 0 &&
            t.fp8_skinny_max_n <= 16,
        "dispatch table: gemv_max_n, skinny_max_n, skinny_lora_max_n and fp8_skinny_max_n must be in [0, 16]");
  check(t.cublas_small_max_n >= 0 && t.expand_next_op_max_n >= 0 && t.lora_mma_min_n >= 0 &&
            t.lora_mma_expand_min_rank >= 0 && t.fp8_outer_min_n >= 0,
        "dispatch table: thresholds must be >= 0");
}

GroupPlan plan_device_matmul(const DispatchTable& table, int64_t n, int64_t in, DType weights, bool split) {
  StepShape s;
  s.tokens = n;
  s.weights = weights;
  GroupShape g;
  g.count = 1;
  g.in = in;
  return plan_group(table, s, g, split);
}

StepPlan plan_device_step(const DispatchTable& table, const StepShape& shape, bool split_activations) {
  check_dispatch_table(table);
  StepPlan p;
  p.tokens = shape.tokens;
  for (int i = 0; i < kNumProjGroups; ++i) p.group[i] = plan_group(table, shape, shape.group[i], split_activations);
  return p;
}

StepPlan plan_host_step(const StepShape& shape, bool round_x16) {
  StepPlan p;
  p.tokens = shape.tokens;
  for (GroupPlan& g : p.group) {
    g.matmul = MatmulKernel::kHost;
    if (round_x16 && host_x_is_bf16(shape.weights, shape.weights_source)) g.x_type = DType::kBF16;
    if (shape.lora && shape.rank > 0) {
      g.shrink = ShrinkKernel::kHost;
      g.expand = ExpandKernel::kHost;
    }
  }
  return p;
}

}  // namespace quiver
