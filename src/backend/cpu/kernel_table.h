// Builds the CpuKernels table of one instruction set from the kernel templates.
// Included only by the cpu_kernels_*.cc files, after their simd_*.h.
#pragma once

#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/pointwise_kernels.h"

namespace quiver::cpu {
namespace {

// constexpr so the table is constant-initialised: no start-up code runs from a file
// compiled for an instruction set the CPU may lack.
template <class S>
struct KernelTable {
  static constexpr CpuKernels value = {
      .name = S::kName,
      .matmul = {&matmul_kernel<S, kElemF32>, &matmul_kernel<S, kElemF16>, &matmul_kernel<S, kElemBF16>},
      .matmul_i8 = &matmul_kernel<S, kElemI8>,
      .attention = {&attention_kernel<S, kElemF32>, &attention_kernel<S, kElemF16>,
                    &attention_kernel<S, kElemBF16>},
      .attention_f8 = &attention_kernel<S, kElemF8>,
      .to_f32 = {&to_f32_kernel<S, kElemF32>, &to_f32_kernel<S, kElemF16>, &to_f32_kernel<S, kElemBF16>},
      .from_f32 = {&from_f32_kernel<S, kElemF32>, &from_f32_kernel<S, kElemF16>, &from_f32_kernel<S, kElemBF16>},
      .sum_squares = &sum_squares_kernel<S>,
      .stream_sum = &stream_sum_kernel<S>,
      .scale_mul = &scale_mul_kernel<S>,
      .add = &add_kernel<S>,
      .silu_mul = &silu_mul_kernel<S>,
      .rope = &rope_kernel<S>,
  };
};

}  // namespace
}  // namespace quiver::cpu
