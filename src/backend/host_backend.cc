#include "backend/host_backend.h"

namespace quiver {

void HostBackend::add_pending(const GroupPlan& plan, const GroupLora& lora) {
  if (!plan.expand_in_next_op()) return;
  check(lora.count >= 1 && lora.count <= kMaxGroup, "lora: the plan leaves an expand, but the group has no LoRA");
  for (int g = 0; g < lora.count; ++g) lora_expand(lora.y[g], lora.t_of(g), lora.b_stack[g], lora.meta);
}

void HostBackend::write_copy(Tensor out16, Tensor out) {
  if (!out16.empty()) round_to_16bit(out16, out);  // which checks out16's type and size
}

void HostBackend::rms_norm(Tensor out, Tensor out16, Tensor x, Tensor w, float eps) {
  rms_norm_f32(out, x, w, eps);
  write_copy(out16, out);
}

void HostBackend::add_rms_norm(Tensor out, Tensor out16, Tensor residual, Tensor x, Tensor w, float eps,
                               const GroupPlan& plan, const GroupLora& lora) {
  add_pending(plan, lora);
  add_rms_norm_f32(out, residual, x, w, eps);
  write_copy(out16, out);
}

void HostBackend::project(const GroupPlan& plan, const MatmulGroup& g, const GroupLora& lora, Tensor x) {
  check(g.count >= 1 && g.count <= kMaxGroup, "project: 1..3 members");
  check(plan.matmul == MatmulKernel::kHost && (plan.x_type == DType::kF32 || plan.x_type == DType::kBF16),
        name() + " backend: the plan names a device kernel");
  Tensor x16;
  if (plan.x_type == DType::kBF16) {
    x16 = g.x16;
    if (x16.empty()) {  // o: the attention output, rounded here
      x16_.resize(static_cast<size_t>(x.numel()));
      x16 = Tensor(x16_.data(), DType::kBF16, {x.dim(0), x.dim(1)});
      round_to_16bit(x16, x);
    }
    check(x16.dtype == DType::kBF16 && x16.ndim == 2 && x16.dim(0) == x.dim(0) && x16.dim(1) == x.dim(1),
          "project: the plan multiplies bf16 x, and x16 must be x's bf16 copy");
  }
  if (plan.lora()) {
    check(lora.count == g.count, "project: the plan runs LoRA, but the group's LoRA has another member count");
    check(plan.shrink == ShrinkKernel::kHost &&
              (plan.expand == ExpandKernel::kHost || plan.expand == ExpandKernel::kNextOp),
          name() + " backend: the plan names a device LoRA kernel");
  }
  run_group(plan, g, lora, x, x16);
}

void HostBackend::lm_head(Tensor logits, Tensor x, Tensor w) {
  if (!round_x16_ || w.dtype != DType::kBF16) return matmul(logits, x, w, Tensor());
  x16_.resize(static_cast<size_t>(x.numel()));
  const Tensor x16(x16_.data(), DType::kBF16, {x.dim(0), x.dim(1)});
  round_to_16bit(x16, x);
  matmul_x16(logits, x16, w, Tensor());
}

void HostBackend::run_group(const GroupPlan& plan, const MatmulGroup& g, const GroupLora& lora, Tensor x, Tensor x16) {
  for (int i = 0; i < g.count; ++i) {
    if (x16.empty()) matmul(g.y[i], x, g.w[i], g.bias[i]);
    else matmul_x16(g.y[i], x16, g.w[i], g.bias[i]);
  }
  if (!plan.lora()) return;
  for (int i = 0; i < lora.count; ++i) {
    lora_shrink(lora.t_of(i), x, lora.a_stack[i], lora.meta);
    if (plan.expand == ExpandKernel::kHost) lora_expand(lora.y[i], lora.t_of(i), lora.b_stack[i], lora.meta);
  }
}

void HostBackend::rope_kv_write(Tensor q, Tensor k, Tensor v, Tensor positions, Tensor cos_sin, const KvLayer& cache,
                                Tensor slot_mapping, const GroupPlan& plan, const GroupLora& lora) {
  add_pending(plan, lora);
  rope(q, k, positions, cos_sin);
  kv_write(cache, k, v, slot_mapping);
}

void HostBackend::silu_mul(Tensor out, Tensor out16, Tensor gate, Tensor up, const GroupPlan& plan,
                           const GroupLora& lora) {
  add_pending(plan, lora);
  silu_mul_f32(out, gate, up);
  write_copy(out16, out);
}

bool HostBackend::vocab_lora_slots(Tensor token_slot, const VocabLora& lora, int which) {
  const int64_t n = token_slot.numel(), slots = lora.ranks.dim(0);
  const int32_t* in = token_slot.ptr<int32_t>();
  const int32_t* ranks = lora.ranks.ptr<int32_t>();
  vocab_slots_.assign(static_cast<size_t>(n), -1);
  bool any = false;
  for (int64_t i = 0; i < n; ++i) {
    check(in[i] < slots, "vocab LoRA: slot out of range");
    if (in[i] >= 0 && ranks[2 * in[i] + which] > 0) vocab_slots_[static_cast<size_t>(i)] = in[i], any = true;
  }
  return any;
}

void HostBackend::embedding_lora(Tensor out, Tensor ids, Tensor token_slot, const VocabLora& lora) {
  const int64_t n = out.dim(0), r = lora.max_rank(), w = lora.embed_a.empty() ? 0 : lora.embed_a.dim(1);
  check(out.dtype == DType::kF32 && ids.numel() == n && token_slot.numel() == n, "embedding_lora: shape mismatch");
  if (lora.empty() || n == 0 || !vocab_lora_slots(token_slot, lora, 0)) return;
  vocab_t_.assign(static_cast<size_t>(n * r), 0.f);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = vocab_slots_[static_cast<size_t>(i)], id = ids.ptr<int32_t>()[i];
    if (s < 0) continue;
    check(id >= 0 && id < w, "embedding_lora: id outside the LoRA's vocabulary");
    for (int64_t k = 0; k < r; ++k)
      vocab_t_[static_cast<size_t>(i * r + k)] = load_as_f32(lora.embed_a.data, lora.embed_a.dtype, (s * w + id) * r + k);
  }
  LoraMeta meta;
  meta.token_slot = Tensor(vocab_slots_.data(), DType::kI32, {n});
  lora_expand(out, Tensor(vocab_t_.data(), DType::kF32, {n, r}), lora.embed_b, meta);
}

void HostBackend::vocab_logits(Tensor out, Tensor base, Tensor x, Tensor row_slot, const VocabTables& t) {
  vocab_rows(out, base, x, row_slot, t);
  const VocabLora& lora = t.lora;
  const int64_t n = out.dim(0), r = lora.max_rank();
  if (lora.empty() || n == 0 || !vocab_lora_slots(row_slot, lora, 1)) return;
  vocab_t_.assign(static_cast<size_t>(n * r), 0.f);
  LoraMeta meta;
  meta.token_slot = Tensor(vocab_slots_.data(), DType::kI32, {n});
  const Tensor tt(vocab_t_.data(), DType::kF32, {n, r});
  lora_shrink(tt, x, lora.head_a, meta);
  lora_expand(out, tt, lora.head_b, meta);
}

}  // namespace quiver
