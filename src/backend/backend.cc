#include "backend/backend.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/cpu_backend.h"
#include "backend/ref/ref_backend.h"
#include "core/thread_pool.h"
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
      case DType::kF8E4M3: static_cast<uint8_t*>(t.data)[i] = f32_to_e4m3(v); break;
      case DType::kI32:
      case DType::kI8: check(false, "fill_uniform: float tensors only"); break;
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

int64_t lora_run_tokens(std::span<const int32_t> token_slot, std::span<const int32_t> order) {
  constexpr size_t kTile = 16;
  int64_t runs = 0;
  for (size_t p0 = 0; p0 + kTile <= order.size(); p0 += kTile) {
    const int32_t t0 = order[p0], s0 = token_slot[static_cast<size_t>(t0)];
    bool run = s0 >= 0;
    for (size_t m = 1; m < kTile && run; ++m)
      run = order[p0 + m] == t0 + static_cast<int32_t>(m) && token_slot[static_cast<size_t>(order[p0 + m])] == s0;
    if (run) runs += kTile;
  }
  return runs;
}

void Backend::copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows) {
  for (size_t r = 0; r < rows; ++r)
    copy(static_cast<char*>(dst) + r * dst_pitch, static_cast<const char*>(src) + r * src_pitch, width);
}

void Backend::fill_uniform(Tensor t, float center, float scale, uint64_t seed) {
  fill_uniform_range(t, center, scale, seed, 0, t.numel());
}

void quantize_fp8_rows_range(Tensor q, Tensor scale, Tensor w, int64_t row_begin, int64_t row_end) {
  check(w.device == Device::kCpu && q.device == Device::kCpu && scale.device == Device::kCpu,
        "quantize_fp8_rows: host memory only");
  const int64_t k = w.dim(1);
  auto* qb = static_cast<uint8_t*>(q.data);
  auto* sc = static_cast<float*>(scale.data);
  for (int64_t r = row_begin; r < row_end; ++r) {
    float amax = 0.f;
    bool bad = false;
    for (int64_t j = 0; j < k; ++j) {
      const float v = load_as_f32(w.data, w.dtype, static_cast<size_t>(r * k + j));
      bad |= !std::isfinite(v);
      amax = std::max(amax, std::fabs(v));
    }
    const float s = amax / 448.f;
    sc[r] = bad ? std::numeric_limits<float>::quiet_NaN() : s;
    for (int64_t j = 0; j < k; ++j)
      qb[r * k + j] = s > 0.f ? f32_to_e4m3(load_as_f32(w.data, w.dtype, static_cast<size_t>(r * k + j)) / s) : 0;
  }
}

void Backend::quantize_fp8_rows(Tensor q, Tensor scale, Tensor w) {
  check(w.ndim == 2 && w.layout == WeightLayout::kRows && w.row_scale == nullptr &&
            (w.dtype == DType::kF32 || is_16bit_float(w.dtype)),
        "quantize_fp8_rows: w must be a row-major float matrix");
  const int64_t rows = w.dim(0), k = w.dim(1);
  check(q.dtype == DType::kF8E4M3 && q.numel() == rows * k && scale.dtype == DType::kF32 && scale.numel() == rows,
        "quantize_fp8_rows: q must be F8_E4M3 [rows, k] and scale f32 [rows]");
  // Rows in chunks over the machine's cores: a 1.1B model's 1e9 weights take ~2 s a core.
  ThreadPool(0).parallel_for(rows, [&](int64_t b, int64_t e, int) { quantize_fp8_rows_range(q, scale, w, b, e); }, 16);
}

Tensor GroupLora::t_of(int g) const {
  check(g >= 0 && g < count && t.ndim == 3 && t.dim(0) >= count, "lora: t must be [members, n, max_rank]");
  const int64_t n = t.dim(1), r = t.dim(2);
  return Tensor(static_cast<char*>(t.data) + sizeof(float) * static_cast<size_t>(g * n * r), DType::kF32, {n, r},
                t.device);
}

std::unique_ptr<Backend> make_backend(const BackendOptions& options, std::string* error) {
  const bool round_x16 = !options.highest_matmul_precision;
  if (options.kind == "ref") return std::make_unique<RefBackend>(round_x16);
  if (options.kind == "cpu") return std::make_unique<CpuBackend>(options.num_threads, CpuIsa::kAuto, round_x16);
  if (options.kind == "cuda") {
#if defined(QUIVER_HAS_CUDA)
    CudaBackendOptions cuda_options;
    cuda_options.device = options.cuda_device;
    cuda_options.gemm_split_activations = options.highest_matmul_precision;
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
