#include "model/fp8_weights.h"

#include <cmath>

namespace quiver {

namespace {

// The scale tensor's shape for each kind of scale, with the spellings writers use (a scalar
// or [1] per tensor; [rows, 1] or [rows] per channel).
bool scale_shape_ok(const std::vector<int64_t>& s, const Fp8Config& f, int64_t rows, int64_t k) {
  switch (f.scale) {
    case Fp8Config::Scale::kTensor: return s.empty() || s == std::vector<int64_t>{1};
    case Fp8Config::Scale::kChannel: return s == std::vector<int64_t>{rows, 1} || s == std::vector<int64_t>{rows};
    case Fp8Config::Scale::kBlock:
      return s == std::vector<int64_t>{(rows + f.block_n - 1) / f.block_n, (k + f.block_k - 1) / f.block_k};
    case Fp8Config::Scale::kNone: break;
  }
  return false;
}

}  // namespace

Result<Tensor> load_fp8_projection(const Checkpoint& ckpt, const std::string& name, const Tensor& q,
                                   const Fp8Config& f, Backend* backend, std::vector<Buffer>* owned) {
  check(backend->device() == Device::kCpu, "FP8 weights are prepared in host memory");
  check(q.dtype == DType::kF8E4M3 && q.ndim == 2, "load_fp8_projection: an F8_E4M3 matrix");
  const int64_t rows = q.dim(0), k = q.dim(1);
  const std::string base = name.substr(0, name.size() - std::string("weight").size());
  const std::string scale_name = base + f.scale_suffix;
  const auto shape = ckpt.shape_of(scale_name);
  if (!shape)
    return Status::error(name + " is F8_E4M3 but " + scale_name + " is missing (quant_method " + f.method + ")");
  if (!scale_shape_ok(*shape, f, rows, k))
    return Status::error(scale_name + " has shape " + shape_text(*shape) + ", which is not a " +
                         (f.scale == Fp8Config::Scale::kTensor    ? "per-tensor"
                          : f.scale == Fp8Config::Scale::kChannel ? "per-channel"
                                                                  : "per-block") +
                         " scale of the " + shape_text({rows, k}) + " weight");
  QV_ASSIGN_OR_RETURN(const Tensor st, ckpt.get(scale_name, *shape));
  std::vector<float> scale(static_cast<size_t>(st.numel()));
  for (size_t i = 0; i < scale.size(); ++i) {
    scale[i] = load_as_f32(st.data, st.dtype, i);
    if (!(scale[i] >= 0.f) || !std::isfinite(scale[i]))
      return Status::error(scale_name + " holds " + std::to_string(scale[i]) + "; a scale must be finite and >= 0");
  }
  const auto* bytes = static_cast<const uint8_t*>(q.data);
  for (int64_t i = 0; i < rows * k; ++i)
    if ((bytes[i] & 0x7f) == 0x7f)
      return Status::error(name + " holds a NaN (element " + std::to_string(i) + ")");

  if (f.scale == Fp8Config::Scale::kBlock) {
    Buffer buf(backend, static_cast<size_t>(rows * k) * sizeof(float));
    auto* w = static_cast<float*>(buf.data());
    const int64_t blocks_k = (*shape)[1];
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < k; ++j)
        w[r * k + j] = e4m3_to_f32(bytes[r * k + j]) * scale[static_cast<size_t>(r / f.block_n * blocks_k + j / f.block_k)];
    Tensor t(w, DType::kF32, {rows, k});
    owned->push_back(std::move(buf));
    return t;
  }
  // Per tensor or channel: the e4m3 values in bf16, and one float scale per row in a buffer
  // of its own (packing replaces the values' buffer, llama_weights.cc).
  Buffer buf(backend, static_cast<size_t>(rows * k) * 2);
  Buffer scales(backend, static_cast<size_t>(rows) * sizeof(float));
  auto* w = static_cast<uint16_t*>(buf.data());
  auto* row_scale = static_cast<float*>(scales.data());
  for (int64_t i = 0; i < rows * k; ++i) w[i] = f32_to_bf16(e4m3_to_f32(bytes[i]));  // exact
  for (int64_t r = 0; r < rows; ++r) row_scale[r] = scale[f.scale == Fp8Config::Scale::kTensor ? 0 : static_cast<size_t>(r)];
  Tensor t(w, DType::kBF16, {rows, k});
  t.row_scale = row_scale;
  owned->push_back(std::move(buf));
  owned->push_back(std::move(scales));
  return t;
}

}  // namespace quiver
