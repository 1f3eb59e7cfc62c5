// CpuBackend: SIMD (AVX-512 / AVX2, picked at run time) and multi-threaded ops.
// Ops not yet specialised fall back to the scalar RefBackend.
#pragma once

#include <memory>

#include "backend/ref/ref_backend.h"
#include "core/thread_pool.h"

namespace quiver {

class CpuBackend : public RefBackend {
 public:
  explicit CpuBackend(int num_threads) : pool_(std::make_unique<ThreadPool>(num_threads)) {}
  std::string name() const override { return "cpu"; }
  ThreadPool& pool() { return *pool_; }

 private:
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace quiver
