// Helpers for the CUDA-vs-reference op tests: host tensors with random contents in any
// dtype, upload to the GPU backend, NaN poisoning, and a comparison that prints the
// error of every case (so a failing GPU run explains itself in the log).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend_factory.h"
#include "backend/ref/ref_backend.h"

namespace quiver::test {

inline Tensor make_view(void* data, DType t, const std::vector<int64_t>& shape, Device dev) {
  Tensor v;
  v.data = data;
  v.dtype = t;
  v.device = dev;
  v.ndim = static_cast<int>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) v.shape[i] = shape[i];
  return v;
}

// A host tensor that owns its bytes; view() is what RefBackend ops take.
struct HostTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
  Tensor view() { return make_view(bytes.data(), dtype, shape, Device::kCpu); }
  float get(int64_t i) const { return load_as_f32(bytes.data(), dtype, static_cast<size_t>(i)); }
  std::vector<float> as_f32() const {
    std::vector<float> v(static_cast<size_t>(numel()));
    for (int64_t i = 0; i < numel(); ++i) v[static_cast<size_t>(i)] = get(i);
    return v;
  }
};

inline HostTensor host_f32(const std::vector<int64_t>& shape, const std::vector<float>& values, DType t = DType::kF32) {
  HostTensor h;
  h.dtype = t;
  h.shape = shape;
  h.bytes.resize(static_cast<size_t>(h.numel()) * dtype_size(t) + 1);  // +1: never empty
  for (size_t i = 0; i < values.size(); ++i) {
    switch (t) {
      case DType::kF32: std::memcpy(h.bytes.data() + 4 * i, &values[i], 4); break;
      case DType::kF16: {
        uint16_t b = f32_to_f16(values[i]);
        std::memcpy(h.bytes.data() + 2 * i, &b, 2);
        break;
      }
      case DType::kBF16: {
        uint16_t b = f32_to_bf16(values[i]);
        std::memcpy(h.bytes.data() + 2 * i, &b, 2);
        break;
      }
      case DType::kI32: {
        int32_t v = static_cast<int32_t>(values[i]);
        std::memcpy(h.bytes.data() + 4 * i, &v, 4);
        break;
      }
      case DType::kF8E4M3: h.bytes[i] = f32_to_e4m3(values[i]); break;
      case DType::kI8: h.bytes[i] = static_cast<uint8_t>(static_cast<int8_t>(values[i])); break;
    }
  }
  return h;
}

inline HostTensor host_i32(const std::vector<int64_t>& shape, const std::vector<int32_t>& values) {
  HostTensor h;
  h.dtype = DType::kI32;
  h.shape = shape;
  h.bytes.resize(values.size() * 4 + 1);
  std::memcpy(h.bytes.data(), values.data(), values.size() * 4);
  return h;
}

// Uniform in [-scale, scale], rounded to dtype t. Never zeros: they hide unwritten outputs.
inline HostTensor random_tensor(std::mt19937& rng, DType t, const std::vector<int64_t>& shape, float scale = 1.f) {
  HostTensor h;
  h.shape = shape;
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(static_cast<size_t>(h.numel()));
  for (float& x : v) x = dist(rng);
  return host_f32(shape, v, t);
}

// A GPU copy of a host tensor (owning buffer + view).
struct DeviceTensor {
  Buffer buffer;
  Tensor t;
};

inline DeviceTensor upload(Backend* gpu, const HostTensor& h) {
  DeviceTensor d;
  const size_t bytes = static_cast<size_t>(h.numel()) * dtype_size(h.dtype);
  d.buffer = Buffer(gpu, bytes + 64);
  d.t = make_view(d.buffer.data(), h.dtype, h.shape, gpu->device());
  gpu->copy_from_host(d.buffer.data(), h.bytes.data(), bytes);
  return d;
}

inline std::vector<float> download(Backend* gpu, const Tensor& t) {
  HostTensor h;
  h.dtype = t.dtype;
  h.shape.assign(t.shape.begin(), t.shape.begin() + t.ndim);
  h.bytes.resize(t.bytes() + 1);
  gpu->copy_to_host(h.bytes.data(), t.data, t.bytes());
  return h.as_f32();
}

// Fills an f32 device tensor with NaN so that unwritten outputs fail the comparison.
inline void poison(Backend* gpu, const Tensor& t) {
  std::vector<float> nan(static_cast<size_t>(t.numel()), std::numeric_limits<float>::quiet_NaN());
  gpu->copy_from_host(t.data, nan.data(), nan.size() * sizeof(float));
}

struct ErrorStats {
  double max_abs = 0, max_ref = 0;
  size_t bad = 0;  // NaN/inf in the result, or a non-finite mismatch
  double rel() const { return max_ref > 0 ? max_abs / max_ref : max_abs; }
};

// max |got - want| relative to max |want| (errors of dot products scale with the operand
// magnitudes, not with each output's own value, which may cancel to ~0).
inline ErrorStats compare(const std::vector<float>& got, const std::vector<float>& want) {
  ErrorStats s;
  EXPECT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(want[i])) {
      if (!(std::isnan(got[i]) && std::isnan(want[i]))) ++s.bad;
      continue;
    }
    s.max_abs = std::max(s.max_abs, static_cast<double>(std::fabs(got[i] - want[i])));
    s.max_ref = std::max(s.max_ref, static_cast<double>(std::fabs(want[i])));
  }
  return s;
}

// Prints one line per case and checks rel <= tol and no NaN.
inline void expect_close(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                         double tol) {
  ErrorStats s = compare(got, want);
  std::printf("  %-72s max_abs=%.3e max_ref=%.3e rel=%.3e bad=%zu %s\n", what.c_str(), s.max_abs, s.max_ref, s.rel(),
              s.bad, (s.bad == 0 && s.rel() <= tol) ? "ok" : "FAIL");
  EXPECT_EQ(s.bad, 0u) << what;
  EXPECT_LE(s.rel(), tol) << what;
}

inline const char* name_of(DType t) { return dtype_name(t).data(); }

// Fixture: a CUDA backend (skips when none), the reference, a seeded generator.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string err;
    gpu_ = make_gpu(CudaBackendOptions{}, &err);
    if (!gpu_) GTEST_SKIP() << err;
  }

  static std::unique_ptr<Backend> make_gpu(const CudaBackendOptions& options, std::string* err) {
#if defined(QUIVER_HAS_CUDA)
    return make_cuda_backend(options, err);
#else
    (void)options;
    *err = "built without CUDA";
    return nullptr;
#endif
  }

  // A second backend with other thresholds (GEMV / cuBLAS / LoRA paths).
  std::unique_ptr<Backend> variant_backend(const CudaBackendOptions& options) {
    std::string err;
    auto b = make_gpu(options, &err);
    EXPECT_NE(b, nullptr) << err;
    return b;
  }

  RefBackend ref_;
  std::unique_ptr<Backend> gpu_;
  std::mt19937 rng_{20251129};
};

}  // namespace quiver::test
