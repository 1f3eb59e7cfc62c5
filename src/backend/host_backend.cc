#include "backend/host_backend.h"

namespace quiver {

namespace {
void check_no_copy(const Tensor& out16, const std::string& backend) {
  check(out16.empty(), backend + " backend multiplies float32 activations: no 16-bit copy to write");
}
}  // namespace

void HostBackend::add_pending(const GroupPlan& plan, const GroupLora& lora) {
  if (!plan.expand_in_next_op()) return;
  check(lora.count >= 1 && lora.count <= kMaxGroup, "lora: the plan leaves an expand, but the group has no LoRA");
  for (int g = 0; g < lora.count; ++g) lora_expand(lora.y[g], lora.t_of(g), lora.b_stack[g], lora.meta);
}

void HostBackend::rms_norm(Tensor out, Tensor out16, Tensor x, Tensor w, float eps) {
  check_no_copy(out16, name());
  rms_norm_f32(out, x, w, eps);
}

void HostBackend::add_rms_norm(Tensor out, Tensor out16, Tensor residual, Tensor x, Tensor w, float eps,
                               const GroupPlan& plan, const GroupLora& lora) {
  check_no_copy(out16, name());
  add_pending(plan, lora);
  add_rms_norm_f32(out, residual, x, w, eps);
}

void HostBackend::project(const GroupPlan& plan, const MatmulGroup& g, const GroupLora& lora, Tensor x) {
  check(g.count >= 1 && g.count <= kMaxGroup, "project: 1..3 members");
  check(plan.matmul == MatmulKernel::kHost && plan.x_type == DType::kF32,
        name() + " backend: the plan names a device kernel");
  for (int i = 0; i < g.count; ++i) matmul(g.y[i], x, g.w[i], g.bias[i]);
  if (!plan.lora()) return;
  check(lora.count == g.count, "project: the plan runs LoRA, but the group's LoRA has another member count");
  check(plan.shrink == ShrinkKernel::kHost &&
            (plan.expand == ExpandKernel::kHost || plan.expand == ExpandKernel::kNextOp),
        name() + " backend: the plan names a device LoRA kernel");
  for (int i = 0; i < lora.count; ++i) {
    lora_shrink(lora.t_of(i), x, lora.a_stack[i], lora.meta);
    if (plan.expand == ExpandKernel::kHost) lora_expand(lora.y[i], lora.t_of(i), lora.b_stack[i], lora.meta);
  }
}

void HostBackend::rope_kv_write(Tensor q, Tensor k, Tensor v, Tensor positions, Tensor cos_sin, Tensor k_cache,
                                Tensor v_cache, Tensor slot_mapping, const GroupPlan& plan, const GroupLora& lora) {
  add_pending(plan, lora);
  rope(q, k, positions, cos_sin);
  kv_write(k_cache, v_cache, k, v, slot_mapping);
}

void HostBackend::silu_mul(Tensor out, Tensor out16, Tensor gate, Tensor up, const GroupPlan& plan,
                           const GroupLora& lora) {
  check_no_copy(out16, name());
  add_pending(plan, lora);
  silu_mul_f32(out, gate, up);
}

}  // namespace quiver
