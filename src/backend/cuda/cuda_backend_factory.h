// Entry point to the CUDA backend that CUDA-free code may include (no CUDA headers here).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/communicator.h"

namespace quiver {

// Knobs of the CUDA backend; the defaults are what the engine runs with. Which kernel runs
// at which token count is the dispatch table's (step_plan.h); tests reach every kernel by
// handing project() the plan they want.
struct CudaBackendOptions {
  int device = 0;
  DispatchTable dispatch;
  // Programmatic dependent launch for the decode-path kernels on sm_90+: each may be
  // scheduled while its predecessor finishes, and the GEMV starts streaming its weights
  // before the previous kernel's output is ready (cuda_common.h, pdl_wait).
  bool pdl = true;
  // When true, the cuBLAS path splits x = hi + lo (two 16-bit GEMMs, twice the math) so
  // bf16/f16-weight matmuls keep ~f32 accuracy (rel. error ~1e-5 instead of ~3e-3).
  bool gemm_split_activations = false;
  // Fixed cuBLAS workspace, so cuBLAS never allocates while a graph is being captured.
  size_t cublas_workspace_bytes = size_t{32} << 20;
};

// nullptr and *error set when no usable GPU is present.
std::unique_ptr<Backend> make_cuda_backend(int device, std::string* error);
std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options, std::string* error);

// One NCCL communicator per CUDA backend (each on its own GPU, rank i on backends[i]),
// made together with ncclCommInitAll; empty, with *error set, where NCCL is missing from
// the build or fails to start.
std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(const std::vector<Backend*>& backends,
                                                                   std::string* error);

}  // namespace quiver
