#include "model/fp8_weights.h"

#include <cmath>

#include "io/peft_adapter.h"

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

// e4m3 rows q ([rows, k], host memory) as the host backends' weight: exact bf16 values in a
// buffer of its own (packing replaces it, llama_weights.cc) with row_scale as the rows' scales.
Tensor fp8_in_bf16(const uint8_t* q, int64_t rows, int64_t k, const float* row_scale, Backend* backend,
                   std::vector<Buffer>* owned) {
  Buffer buf(backend, static_cast<size_t>(rows * k) * 2);
  auto* w = static_cast<uint16_t*>(buf.data());
  for (int64_t i = 0; i < rows * k; ++i) w[i] = f32_to_bf16(e4m3_to_f32(q[i]));  // exact
  Tensor t(w, DType::kBF16, {rows, k});
  t.row_scale = row_scale;
  owned->push_back(std::move(buf));
  return t;
}

// One float scale per row, from host memory, into a buffer of the backend's.
const float* upload_scales(const std::vector<float>& scale, Backend* backend, std::vector<Buffer>* owned) {
  Buffer buf(backend, scale.size() * sizeof(float));
  backend->copy_from_host(buf.data(), scale.data(), scale.size() * sizeof(float));
  const auto* p = static_cast<const float*>(buf.data());
  owned->push_back(std::move(buf));
  return p;
}

}  // namespace

Result<Tensor> quantize_fp8_projection(const Tensor& w, const std::string& name, Backend* backend,
                                       std::vector<Buffer>* owned) {
  check(w.ndim == 2 && (w.dtype == DType::kF32 || is_16bit_float(w.dtype)), "quantize_fp8_projection: a float matrix");
  const int64_t rows = w.dim(0), k = w.dim(1);
  const bool device = backend->device() != Device::kCpu;
  // A mapped checkpoint's tensor goes to the device first (freed once quantized).
  Buffer staged;
  Tensor src = w;
  if (device && w.device == Device::kCpu) {
    staged = Buffer(backend, w.bytes());
    backend->copy_from_host(staged.data(), w.data, w.bytes());
    src = Tensor(staged.data(), w.dtype, {rows, k}, backend->device());
  }
  Buffer q(backend, static_cast<size_t>(rows * k));
  Buffer scales(backend, static_cast<size_t>(rows) * sizeof(float));
  const Tensor qt(q.data(), DType::kF8E4M3, {rows, k}, backend->device());
  const Tensor st(scales.data(), DType::kF32, {rows}, backend->device());
  backend->quantize_fp8_rows(qt, st, src);
  std::vector<float> host_scale(static_cast<size_t>(rows));
  backend->copy_to_host(host_scale.data(), scales.data(), host_scale.size() * sizeof(float));
  for (int64_t r = 0; r < rows; ++r)
    if (!std::isfinite(host_scale[static_cast<size_t>(r)]))
      return Status::error(name + " row " + std::to_string(r) +
                           " holds a NaN or an infinity, which fp8 quantization cannot represent");
  const auto* row_scale = static_cast<const float*>(scales.data());
  owned->push_back(std::move(scales));
  if (!device) return fp8_in_bf16(static_cast<const uint8_t*>(q.data()), rows, k, row_scale, backend, owned);
  Tensor t = qt;
  t.row_scale = row_scale;
  owned->push_back(std::move(q));
  return t;
}

Status quantize_projections_fp8(LlamaWeights& w, Backend* backend) {
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const auto projections = w.layers[l].projections();
    for (size_t p = 0; p < projections.size(); ++p) {
      Tensor* t = projections[p];
      std::vector<Buffer> memory;
      // projections() is in LoraTarget order (q, k, v, o, gate, up, down).
      const std::string name = "layer " + std::to_string(l) + " " + lora_target_name(static_cast<LoraTarget>(p));
      QV_ASSIGN_OR_RETURN(const Tensor q, quantize_fp8_projection(*t, name, backend, &memory));
      // quantize_fp8_projection appends the values' buffer last: the one that replaces the
      // float weight's; the scales' go to the weights' other buffers.
      for (size_t i = 0; i + 1 < memory.size(); ++i) w.owned.push_back(std::move(memory[i]));
      w.replace(t, q, std::move(memory.back()));
    }
  }
  return Status::ok();
}

Result<Tensor> load_fp8_projection(const Checkpoint& ckpt, const std::string& name, const Tensor& q,
                                   const Fp8Config& f, Backend* backend, std::vector<Buffer>* owned) {
  check(q.device == Device::kCpu, "load_fp8_projection: the checkpoint's tensor in host memory");
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

  const bool device = backend->device() != Device::kCpu;
  if (f.scale == Fp8Config::Scale::kBlock) {
    const int64_t blocks_k = (*shape)[1];
    const auto value = [&](int64_t r, int64_t j) {
      return e4m3_to_f32(bytes[r * k + j]) * scale[static_cast<size_t>(r / f.block_n * blocks_k + j / f.block_k)];
    };
    if (device) {  // bf16 on the GPU: its 16-bit kernels
      std::vector<uint16_t> w(static_cast<size_t>(rows * k));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < k; ++j) w[static_cast<size_t>(r * k + j)] = f32_to_bf16(value(r, j));
      Buffer buf(backend, w.size() * 2);
      backend->copy_from_host(buf.data(), w.data(), w.size() * 2);
      Tensor t(buf.data(), DType::kBF16, {rows, k}, backend->device());
      owned->push_back(std::move(buf));
      return t;
    }
    Buffer buf(backend, static_cast<size_t>(rows * k) * sizeof(float));
    auto* w = static_cast<float*>(buf.data());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < k; ++j) w[r * k + j] = value(r, j);
    Tensor t(w, DType::kF32, {rows, k});
    owned->push_back(std::move(buf));
    return t;
  }
  // Per tensor or channel: one float scale per row.
  std::vector<float> row_scale(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    row_scale[static_cast<size_t>(r)] = scale[f.scale == Fp8Config::Scale::kTensor ? 0 : static_cast<size_t>(r)];
  const float* scales = upload_scales(row_scale, backend, owned);
  if (!device) return fp8_in_bf16(bytes, rows, k, scales, backend, owned);
  Buffer buf(backend, static_cast<size_t>(rows * k));
  backend->copy_from_host(buf.data(), bytes, static_cast<size_t>(rows * k));
  Tensor t(buf.data(), DType::kF8E4M3, {rows, k}, backend->device());
  t.row_scale = scales;
  owned->push_back(std::move(buf));
  return t;
}

}  // namespace quiver
