// HostBackend: what the ref and cpu backends share. Their memory is plain aligned host
// memory, and they build the contract ops of Backend from a few primitives, which each
// implements (the ref backend as the oracle; tests compare the cpu backend's primitives
// against it one by one). Host backends run every projection group the same way at every
// size (plan_host_step).
#pragma once

#include <cstdlib>
#include <cstring>

#include "backend/backend.h"

namespace quiver {

class HostBackend : public Backend {
 public:
  Device device() const override { return Device::kCpu; }
  void* alloc(size_t bytes) override {
    size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    check(p != nullptr, "host allocation failed");
    return p;
  }
  void free(void* ptr) override { std::free(ptr); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { std::memmove(dst, src, bytes); }
  void fill_zero(void* dst, size_t bytes) override { std::memset(dst, 0, bytes); }
  Tensor import_weight(const Tensor& host) override { return host; }

  StepPlan plan(const StepShape& shape) const override { return plan_host_step(shape); }

  // The contract ops, from the primitives below (host_backend.cc).
  void rms_norm(Tensor out, Tensor out16, Tensor x, Tensor w, float eps) override;
  void add_rms_norm(Tensor out, Tensor out16, Tensor residual, Tensor x, Tensor w, float eps, const GroupPlan& plan,
                    const GroupLora& lora) override;
  void project(const GroupPlan& plan, const MatmulGroup& g, const GroupLora& lora, Tensor x) override;
  void rope_kv_write(Tensor q, Tensor k, Tensor v, Tensor positions, Tensor cos_sin, Tensor k_cache, Tensor v_cache,
                     Tensor slot_mapping, const GroupPlan& plan, const GroupLora& lora) override;
  void silu_mul(Tensor out, Tensor out16, Tensor gate, Tensor up, const GroupPlan& plan,
                const GroupLora& lora) override;

  // ---- primitives (f32 outputs only, no 16-bit copies, no LoRA terms) ----
  virtual void rms_norm_f32(Tensor out, Tensor x, Tensor w, float eps) = 0;
  // residual += x; out = rms_norm(residual, w)
  virtual void add_rms_norm_f32(Tensor out, Tensor residual, Tensor x, Tensor w, float eps) = 0;
  virtual void silu_mul_f32(Tensor out, Tensor gate, Tensor up) = 0;
  // Rotate-half RoPE of q [n, heads, hd] and k [n, kv_heads, hd] in place.
  virtual void rope(Tensor q, Tensor k, Tensor positions, Tensor cos_sin) = 0;
  // Token i's k/v into cache slot slot_mapping[i]; -1 skips it.
  virtual void kv_write(Tensor k_cache, Tensor v_cache, Tensor k, Tensor v, Tensor slot_mapping) = 0;
  // LoRA shrink: t[i, :] = a_stack[slot_i] @ x[i, :]; rows with slot -1 are left untouched.
  // t: [n, max_rank] f32; x: [n, in] f32; a_stack: [num_slots, max_rank, in]
  virtual void lora_shrink(Tensor t, Tensor x, Tensor a_stack, const LoraMeta& meta) = 0;
  // LoRA expand: y[i, :] += b_stack[slot_i] @ t[i, :]; rows with slot -1 are untouched.
  // y: [n, out] f32; t: [n, max_rank] f32; b_stack: [num_slots, out, max_rank]
  virtual void lora_expand(Tensor y, Tensor t, Tensor b_stack, const LoraMeta& meta) = 0;

 private:
  // lora's expand into its y, where plan leaves it to the op reading y.
  void add_pending(const GroupPlan& plan, const GroupLora& lora);
};

}  // namespace quiver
