#include "model/int8_weights.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <vector>

#include "core/thread_pool.h"

namespace quiver {

int64_t quantize_rows_int8(const Tensor& w, int64_t row_begin, int64_t row_end, int8_t* q, float* scale) {
  check(w.ndim == 2 && w.layout == WeightLayout::kRows && w.device == Device::kCpu &&
            (w.dtype == DType::kF32 || is_16bit_float(w.dtype)),
        "quantize_rows_int8: a row-major float weight in host memory");
  const int64_t k = w.dim(1);
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t r = row_begin; r < row_end; ++r) {
    float amax = 0.f;
    for (int64_t j = 0; j < k; ++j) {
      const float v = load_as_f32(w.data, w.dtype, static_cast<size_t>(r * k + j));
      if (!std::isfinite(v)) return r;  // (std::max would pass a NaN over)
      row[static_cast<size_t>(j)] = v;
      amax = std::max(amax, std::fabs(v));
    }
    const float s = amax / 127.f;
    scale[r] = s;
    int8_t* qr = q + r * k;
    for (int64_t j = 0; j < k; ++j) {
      // nearbyint rounds half to even in the default rounding mode; |w / s| <= 127 up to
      // the division's rounding, so the clamp only guards that last ulp.
      const float v = s > 0.f ? std::nearbyint(row[static_cast<size_t>(j)] / s) : 0.f;
      qr[j] = static_cast<int8_t>(std::clamp(v, -127.f, 127.f));
    }
  }
  return -1;
}

namespace {

// The quantized copy of one weight: q in *q_buf and its scales in *scale_buf, buffers of the
// backend's; the scales have their own so that packing q (Backend::pack_projection) keeps them.
Result<Tensor> quantize_tensor(const Tensor& w, const std::string& name, Backend* backend, Buffer* q_buf,
                               Buffer* scale_buf) {
  const int64_t rows = w.dim(0), k = w.dim(1);
  *q_buf = Buffer(backend, static_cast<size_t>(rows * k));
  *scale_buf = Buffer(backend, static_cast<size_t>(rows) * sizeof(float));
  auto* q = static_cast<int8_t*>(q_buf->data());
  auto* scale = static_cast<float*>(scale_buf->data());
  // Rows in chunks over the machine's cores: a 1.1B model's 1e9 weights take ~1 s a core.
  std::atomic<int64_t> bad{-1};
  ThreadPool(0).parallel_for(rows, [&](int64_t b, int64_t e, int) {
    const int64_t r = quantize_rows_int8(w, b, e, q, scale);
    if (r >= 0) bad = r;
  }, 16);
  if (bad >= 0)
    return Status::error(name + " row " + std::to_string(bad.load()) +
                         " holds a NaN or an infinity, which int8 quantization cannot represent");
  Tensor t(q, DType::kI8, {rows, k}, w.device);
  t.row_scale = scale;
  return t;
}

}  // namespace

Status quantize_projections_int8(LlamaWeights& w, Backend* backend) {
  check(backend->device() == Device::kCpu, "int8 weights are quantized in host memory");
  static constexpr const char* kNames[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                           "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                           "mlp.down_proj"};
  if (!w.layers.empty()) w.quantized_from = w.layers[0].wq.dtype;
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const auto members = w.layers[l].projections();
    for (size_t i = 0; i < members.size(); ++i) {
      const std::string name = "model.layers." + std::to_string(l) + "." + kNames[i] + ".weight";
      Buffer q, scales;
      QV_ASSIGN_OR_RETURN(const Tensor quantized, quantize_tensor(*members[i], name, backend, &q, &scales));
      w.replace(members[i], quantized, std::move(q));
      w.owned.push_back(std::move(scales));
    }
  }
  return Status::ok();
}

}  // namespace quiver
