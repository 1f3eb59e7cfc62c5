// The avx2 kernel table: AVX2 + FMA + F16C; compiled with those -m flags by CMake.
// Everything here has internal linkage (see cpu_kernels.h for why).
#include "backend/cpu/simd_avx2.h"
#include "backend/cpu/kernel_table.h"

namespace quiver::cpu {

const CpuKernels& avx2_kernels() { return KernelTable<avx2::Simd>::value; }

}  // namespace quiver::cpu
