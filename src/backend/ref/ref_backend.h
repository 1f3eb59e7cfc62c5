// RefBackend: the scalar oracle. Plain loops, float32 accumulation (double where a sum
// runs long), no threads, no tricks. Every other backend is tested against it.
#pragma once

#include "backend/host_backend.h"

namespace quiver {

class RefBackend : public HostBackend {
 public:
  explicit RefBackend(bool round_x16 = true) : HostBackend(round_x16) {}
  std::string name() const override { return "ref"; }

  void embedding(Tensor out, Tensor table, Tensor extra, Tensor ids) override;
  void rms_norm_f32(Tensor out, Tensor x, Tensor w, float eps) override;
  void add_rms_norm_f32(Tensor out, Tensor residual, Tensor x, Tensor w, float eps) override;
  void matmul(Tensor y, Tensor x, Tensor w, Tensor bias) override;
  void matmul_x16(Tensor y, Tensor x16, Tensor w, Tensor bias) override;  // x16 widened, then matmul
  void round_to_16bit(Tensor out16, Tensor x) override;
  void rope(Tensor q, Tensor k, Tensor positions, Tensor cos_sin) override;
  void kv_write(const KvLayer& cache, Tensor k, Tensor v, Tensor slot_mapping) override;
  void attention(Tensor out, Tensor q, const KvLayer& cache, const AttentionMeta& meta, float scale) override;
  void silu_mul_f32(Tensor out, Tensor gate, Tensor up) override;
  void gather_rows(Tensor out, Tensor x, Tensor rows) override;
  void vocab_rows(Tensor out, Tensor base, Tensor x, Tensor row_slot, const VocabTables& t) override;
  void lora_shrink(Tensor t, Tensor x, Tensor a_stack, const LoraMeta& meta) override;
  void lora_expand(Tensor y, Tensor t, Tensor b_stack, const LoraMeta& meta) override;
  // ref_sampling.cc
  void sample(const SampleOutputs& out, Tensor logits, const SampleInputs& in) override;
};

}  // namespace quiver
