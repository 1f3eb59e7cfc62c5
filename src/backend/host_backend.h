// HostBackend: what the ref and cpu backends share. Their memory is plain aligned host
// memory, and they build the contract ops of Backend from a few primitives, which each
// implements (the ref backend as the oracle; tests compare the cpu backend's primitives
// against it one by one). Host backends run every projection group the same way at every
// size (plan_host_step).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace quiver {

class HostBackend : public Backend {
 public:
  // round_x16: the plan rounds x to bf16 for bf16 weights (plan_host_step).
  explicit HostBackend(bool round_x16) : round_x16_(round_x16) {}
  Device device() const override { return Device::kCpu; }
  void* alloc(size_t bytes) override { return aligned(std::malloc(bytes + kPad), bytes); }
  // calloc leaves fresh pages from the OS untouched (glibc), so they stay uncommitted.
  void* alloc_zeroed(size_t bytes) override { return aligned(std::calloc(bytes + kPad, 1), bytes); }
  void free(void* ptr) override {
    if (ptr) std::free(static_cast<void**>(ptr)[-1]);
  }
  void copy_from_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { std::memmove(dst, src, bytes); }
  void fill_zero(void* dst, size_t bytes) override { std::memset(dst, 0, bytes); }
  Tensor import_weight(const Tensor& host) override { return host; }

  StepPlan plan(const StepShape& shape) const override { return plan_host_step(shape, round_x16_); }
  // Whether the plan rounds x to bf16 for bf16 weights (then projections call matmul_x16).
  bool rounds_x16() const { return round_x16_; }

  // The contract ops, from the primitives below (host_backend.cc).
  void rms_norm(Tensor out, Tensor out16, Tensor x, Tensor w, float eps) override;
  void add_rms_norm(Tensor out, Tensor out16, Tensor residual, Tensor x, Tensor w, float eps, const GroupPlan& plan,
                    const GroupLora& lora) override;
  void project(const GroupPlan& plan, const MatmulGroup& g, const GroupLora& lora, Tensor x) override;
  // As a group of x.dim(0) tokens: bf16 weights multiply x rounded to bf16 (matmul_x16)
  // where the plan rounds, f32 x otherwise (matmul).
  void lm_head(Tensor logits, Tensor x, Tensor w) override;
  void rope_kv_write(Tensor q, Tensor k, Tensor v, Tensor positions, Tensor cos_sin, const KvLayer& cache,
                     Tensor slot_mapping, const GroupPlan& plan, const GroupLora& lora) override;
  void silu_mul(Tensor out, Tensor out16, Tensor gate, Tensor up, const GroupPlan& plan,
                const GroupLora& lora) override;
  // The embed_tokens LoRA: each token's row of embed_a gathered into a [n, max_rank] t, then
  // lora_expand with embed_b.
  void embedding_lora(Tensor out, Tensor ids, Tensor token_slot, const VocabLora& lora) override;
  // vocab_rows, then the lm_head LoRA as lora_shrink with head_a and lora_expand with head_b.
  void vocab_logits(Tensor out, Tensor base, Tensor x, Tensor row_slot, const VocabTables& t) override;

  // A projection group once project has checked the plan: each member's product (matmul,
  // or matmul_x16 of x16 when it is not empty), then where the plan runs LoRA each
  // member's shrink, and its expand where the plan adds it here. This runs the primitives
  // one by one; a threaded backend may run them in fewer parallel regions.
  virtual void run_group(const GroupPlan& plan, const MatmulGroup& g, const GroupLora& lora, Tensor x, Tensor x16);

  // ---- primitives (f32 outputs, no LoRA terms) ----
  // y = x16 @ w^T (+ bias): x16 [n, in] bf16, x rounded (GroupPlan::x_type); w bf16 or
  // int8, scaled by its Tensor::row_scale where it has them.
  virtual void matmul_x16(Tensor y, Tensor x16, Tensor w, Tensor bias) = 0;
  // out16 = x rounded to nearest even in out16's type (bf16 or f16), same shape.
  virtual void round_to_16bit(Tensor out16, Tensor x) = 0;
  virtual void rms_norm_f32(Tensor out, Tensor x, Tensor w, float eps) = 0;
  // residual += x; out = rms_norm(residual, w)
  virtual void add_rms_norm_f32(Tensor out, Tensor residual, Tensor x, Tensor w, float eps) = 0;
  virtual void silu_mul_f32(Tensor out, Tensor gate, Tensor up) = 0;
  // Rotate-half RoPE of q [n, heads, hd] and k [n, kv_heads, hd] in place.
  virtual void rope(Tensor q, Tensor k, Tensor positions, Tensor cos_sin) = 0;
  // Token i's k/v into cache slot slot_mapping[i]; -1 skips it.
  // fp8 caches store k / cache.k_scale and v / cache.v_scale (KvLayer).
  virtual void kv_write(const KvLayer& cache, Tensor k, Tensor v, Tensor slot_mapping) = 0;
  // LoRA shrink: t[i, :] = a_stack[slot_i] @ x[i, :]; rows with slot -1 are left untouched.
  // t: [n, max_rank] f32; x: [n, in] f32; a_stack: [num_slots, max_rank, in]
  virtual void lora_shrink(Tensor t, Tensor x, Tensor a_stack, const LoraMeta& meta) = 0;
  // LoRA expand: y[i, :] += b_stack[slot_i] @ t[i, :]; rows with slot -1 are untouched.
  // y: [n, out] f32; t: [n, max_rank] f32; b_stack: [num_slots, out, max_rank]
  virtual void lora_expand(Tensor y, Tensor t, Tensor b_stack, const LoraMeta& meta) = 0;
  // Backend::vocab_logits without the lm_head LoRA: the widened base logits and the slots'
  // lm_head rows.
  virtual void vocab_rows(Tensor out, Tensor base, Tensor x, Tensor row_slot, const VocabTables& t) = 0;

 private:
  // Allocations are 64-byte aligned inside a block kPad bytes larger, the block's own
  // address stored in the 8 bytes before the aligned one (what free() passes on).
  static constexpr size_t kPad = 64 + sizeof(void*);
  static void* aligned(void* raw, size_t bytes) {
    check(raw != nullptr, "host allocation of " + std::to_string(bytes) + " bytes failed");
    const auto at = (reinterpret_cast<uintptr_t>(raw) + sizeof(void*) + 63) & ~uintptr_t{63};
    reinterpret_cast<void**>(at)[-1] = raw;
    return reinterpret_cast<void*>(at);
  }

  // lora's expand into its y, where plan leaves it to the op reading y.
  void add_pending(const GroupPlan& plan, const GroupLora& lora);
  // The op's 16-bit copy of out, when it was given one.
  void write_copy(Tensor out16, Tensor out);

  // token_slot with -1 where the slot's rank `which` (0: embed_tokens, 1: lm_head) is 0,
  // into vocab_slots_; false when no row is left.
  bool vocab_lora_slots(Tensor token_slot, const VocabLora& lora, int which);

  bool round_x16_;
  std::vector<uint16_t> x16_;  // project()'s copy of x where the group came without one (o)
  std::vector<int32_t> vocab_slots_;  // vocab_lora_slots' result
  std::vector<float> vocab_t_;        // the embed_tokens / lm_head LoRA's [n, max_rank] t
};

}  // namespace quiver
