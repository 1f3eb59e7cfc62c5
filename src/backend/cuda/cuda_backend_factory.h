// Entry point to the CUDA backend that CUDA-free code may include (no CUDA headers here).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "backend/backend.h"

namespace quiver {

// Knobs of the CUDA backend; the defaults are what the engine runs with. Tests and
// benchmarks move the thresholds to reach every kernel path at every size.
struct CudaBackendOptions {
  int device = 0;
  // matmul with n <= gemv_max_n tokens runs the memory-bound GEMV kernel (f32 activations,
  // each weight read once per call); larger n converts x to the weight's 16-bit type and
  // calls cuBLAS. At most 16; 0 sends every matmul to cuBLAS. 2: on the H200 the GEMV
  // wins at 1-2 tokens, ties at 4 and loses at 8 (25 vs 20 us for 4096x4096, 57 vs 30 us
  // for 11008x4096; bench_cuda_ops). In a whole 7B bf16 decode step of 4 tokens, cuBLAS
  // took 4.98 ms against 5.89 for the GEMV.
  int gemv_max_n = 2;
  // GEMV launch shape for 16-bit weights: 0 = 4 rows per block (default), 1 = 2 rows and
  // deeper load pipelining, 2 = 8 rows. A tuning knob for bench_cuda_ops, not for users.
  int gemv_variant = 0;
  // Matmuls of gemv_max_n + 1 .. skinny_max_n tokens (at most 16) with 16-bit weights run
  // gemm_skinny.cu's tensor-core kernel instead of cuBLAS; a decode projection with a LoRA
  // (its expand deferred) does so up to skinny_lora_max_n tokens, with the shrink in the
  // same launch instead of on the side stream. 0: off. On the H200 (7B bf16 decode step
  // p50): base b4 4.65 against cuBLAS 4.97 ms, b8 4.78 against 5.10, but b16
  // 5.62-5.69 against 5.45; with an adapter a request, b16 5.88-5.94 against 6.27.
  int skinny_max_n = 8;
  int skinny_lora_max_n = 16;
  // Programmatic dependent launch for the decode-path kernels on sm_90+: each may be
  // scheduled while its predecessor finishes, and the GEMV starts streaming its weights
  // before the previous kernel's output is ready (cuda_common.h, pdl_wait).
  bool pdl = true;
  // When true, the cuBLAS path splits x = hi + lo (two 16-bit GEMMs, twice the math) so
  // bf16/f16-weight matmuls keep ~f32 accuracy (rel. error ~1e-5 instead of ~3e-3).
  bool gemm_split_activations = false;
  // Fixed cuBLAS workspace, so cuBLAS never allocates while a graph is being captured.
  size_t cublas_workspace_bytes = size_t{32} << 20;
  // cuBLAS matmuls of up to this many tokens use a second handle without a workspace, so
  // cuBLAS cannot take its split-K kernels with a separate reduce kernel. 0: one handle.
  // On the H200 (bf16, µs alone) 4096 x 4096 took 16.0 / 16.0 / 16.3 at 16 / 32 / 64
  // tokens without one, against 19.1 / 19.3 / 17.0 with 32 MiB; a 7B decode step at batch
  // 32 with an adapter a request, 7.16-7.19 ms against 7.34-7.37.
  int cublas_no_workspace_max_n = 64;
};

// nullptr and *error set when no usable GPU is present.
std::unique_ptr<Backend> make_cuda_backend(int device, std::string* error);
std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options, std::string* error);

}  // namespace quiver
