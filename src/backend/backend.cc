#include "backend/backend.h"

#include <algorithm>

#include "backend/cpu/cpu_backend.h"
#include "backend/ref/ref_backend.h"
#include "core/splitmix.h"
#if defined(QUIVER_HAS_CUDA)
#include "backend/cuda/cuda_backend_factory.h"
#endif

namespace quiver {

void fill_uniform_range(Tensor t, float center, float scale, uint64_t seed, int64_t begin, int64_t end) {
  check(t.device == Device::kCpu, "fill_uniform: host memory only");
  for (int64_t i = begin; i < end; ++i) {
    const float v = hash_uniform(seed, static_cast<uint64_t>(i), center, scale);
    switch (t.dtype) {
      case DType::kF32: static_cast<float*>(t.data)[i] = v; break;
      case DType::kF16: static_cast<uint16_t*>(t.data)[i] = f32_to_f16(v); break;
      case DType::kBF16: static_cast<uint16_t*>(t.data)[i] = f32_to_bf16(v); break;
      case DType::kI32: check(false, "fill_uniform: float tensors only"); break;
    }
  }
}

void lora_sorted_tokens(std::span<const int32_t> token_slot, std::vector<int32_t>* order) {
  order->resize(token_slot.size());
  for (size_t i = 0; i < order->size(); ++i) (*order)[i] = static_cast<int32_t>(i);
  std::stable_sort(order->begin(), order->end(), [&](int32_t x, int32_t y) {
    return static_cast<uint32_t>(token_slot[static_cast<size_t>(x)]) <
           static_cast<uint32_t>(token_slot[static_cast<size_t>(y)]);  // -1 becomes the largest
  });
}

void Backend::fill_uniform(Tensor t, float center, float scale, uint64_t seed) {
  fill_uniform_range(t, center, scale, seed, 0, t.numel());
}

void Backend::matmul_group(const MatmulGroup& g, Tensor x) {
  check(g.count >= 1 && g.count <= kMaxGroup, "matmul_group: 1..3 members");
  for (int i = 0; i < g.count; ++i) matmul(g.y[i], x, g.w[i], g.bias[i]);
}

DType Backend::gemm_input_type(int64_t /*n*/, DType /*w*/) const { return DType::kF32; }

// Without the copy these are the plain ops, on every backend; only backends whose
// gemm_input_type can be 16-bit write one.
void Backend::rope_kv_write(Tensor q, Tensor k, Tensor v, Tensor positions, Tensor cos_sin, Tensor k_cache,
                            Tensor v_cache, Tensor slot_mapping, const LoraDelta& delta) {
  apply_lora_delta(delta);
  rope(q, k, positions, cos_sin);
  kv_write(k_cache, v_cache, k, v, slot_mapping);
}

void Backend::rms_norm_x16(Tensor out, Tensor out16, Tensor x, Tensor w, float eps) {
  check(out16.empty(), name() + " backend has no 16-bit GEMM inputs (gemm_input_type is float32)");
  rms_norm(out, x, w, eps);
}

void Backend::add_rms_norm_x16(Tensor out, Tensor out16, Tensor residual, Tensor x, Tensor w, float eps,
                               const LoraDelta& delta) {
  check(out16.empty(), name() + " backend has no 16-bit GEMM inputs (gemm_input_type is float32)");
  apply_lora_delta(delta);
  add_rms_norm(out, residual, x, w, eps);
}

void Backend::silu_mul_x16(Tensor out, Tensor out16, Tensor gate, Tensor up, const LoraDelta& delta) {
  check(out16.empty(), name() + " backend has no 16-bit GEMM inputs (gemm_input_type is float32)");
  apply_lora_delta(delta);
  silu_mul(out, gate, up);
}

void Backend::project(const MatmulGroup& g, const LoraGroup* lora, Tensor x, Tensor t, const LoraMeta& meta,
                      LoraDelta* defer) {
  if (defer != nullptr) defer->count = 0;
  matmul_group(g, x);
  if (lora != nullptr) lora_group(*lora, x, t, meta);
}

void Backend::apply_lora_delta(const LoraDelta& delta) {
  check(delta.count >= 0 && delta.count <= kMaxGroup, "lora delta: 0..3 members");
  for (int i = 0; i < delta.count; ++i) lora_expand(delta.y[i], delta.t[i], delta.b_stack[i], delta.meta);
}

void Backend::lora_group(const LoraGroup& g, Tensor x, Tensor t, const LoraMeta& meta) {
  check(g.count >= 1 && g.count <= kMaxGroup, "lora_group: 1..3 members");
  for (int i = 0; i < g.count; ++i) {
    lora_shrink(t, x, g.a_stack[i], meta);
    lora_expand(g.y[i], t, g.b_stack[i], meta);
  }
}

std::unique_ptr<Backend> make_backend(const BackendOptions& options, std::string* error) {
  if (options.kind == "ref") return std::make_unique<RefBackend>();
  if (options.kind == "cpu") return std::make_unique<CpuBackend>(options.num_threads);
  if (options.kind == "cuda") {
#if defined(QUIVER_HAS_CUDA)
    CudaBackendOptions cuda_options;
    cuda_options.device = options.cuda_device;
    cuda_options.gemm_split_activations = options.cuda_split_activations;
    return make_cuda_backend(cuda_options, error);
#else
    *error = "this quiver was built without CUDA (configure with -DQUIVER_CUDA=ON and a CUDA toolkit)";
    return nullptr;
#endif
  }
  *error = "unknown device '" + options.kind + "' (supported: cpu, ref, cuda)";
  return nullptr;
}

}  // namespace quiver
