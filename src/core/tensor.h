// Tensor: a non-owning view of a contiguous array on some device, row-major unless a
// backend packed it (WeightLayout). Ownership lives elsewhere (mmap'd files, backend
// buffers); views are cheap to copy.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/check.h"
#include "core/dtype.h"

namespace quiver {

enum class Device : uint8_t { kCpu, kCuda };

// The element order of a 2-D weight. kRows: row-major. kBlock16: the CPU backend's
// AVX512-BF16 order for bf16 or int8 elements (backend/cpu/packed_weights.h); only that
// backend reads it, and only through its matmul.
enum class WeightLayout : uint8_t { kRows, kBlock16 };

struct Tensor {
  static constexpr int kMaxDims = 4;

  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device = Device::kCpu;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  WeightLayout layout = WeightLayout::kRows;
  // A quantized weight's dequantization scales, one per row (row r is q[r, :] *
  // row_scale[r]): int8 weights, and the FP8 values of an FP8 checkpoint held in bf16;
  // null for every other tensor.
  const float* row_scale = nullptr;

  Tensor() = default;
  Tensor(void* d, DType t, std::initializer_list<int64_t> dims, Device dev = Device::kCpu)
      : data(d), dtype(t), device(dev), ndim(static_cast<int>(dims.size())) {
    check(dims.size() <= kMaxDims, "tensor rank above 4");
    int i = 0;
    for (int64_t s : dims) shape[i++] = s;
  }

  int64_t dim(int i) const { return shape[i < 0 ? ndim + i : i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  bool empty() const { return data == nullptr; }

  template <typename T>
  T* ptr() const { return static_cast<T*>(data); }

  // Rows [begin, begin + count) along the first dimension.
  Tensor rows(int64_t begin, int64_t count) const {
    check(layout == WeightLayout::kRows, "rows() of a packed weight");
    Tensor t = *this;
    t.shape[0] = count;
    t.data = static_cast<char*>(data) + static_cast<size_t>(begin) * row_bytes();
    if (row_scale) t.row_scale = row_scale + begin;
    return t;
  }
  // Same bytes, new shape (numel must match).
  Tensor view(std::initializer_list<int64_t> dims) const {
    check(layout == WeightLayout::kRows && row_scale == nullptr, "view() of a packed or quantized weight");
    Tensor t(data, dtype, dims, device);
    check(t.numel() == numel(), "view changes the element count");
    return t;
  }
  size_t row_bytes() const { return ndim == 0 ? dtype_size(dtype) : bytes() / static_cast<size_t>(shape[0]); }

  std::string shape_string() const {
    std::string s = "[";
    for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
  }
};

}  // namespace quiver
