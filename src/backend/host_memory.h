// Host memory for backends whose device is the CPU (ref, cpu): plain aligned allocations.
#pragma once

#include <cstdlib>
#include <cstring>

#include "backend/backend.h"

namespace quiver {

class HostMemoryBackend : public Backend {
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
};

}  // namespace quiver
