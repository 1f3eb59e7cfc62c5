// The scalar kernel table: portable C++ (baseline x86-64 or any other target).
// Everything here has internal linkage (see cpu_kernels.h for why).
#include "backend/cpu/simd_scalar.h"
#include "backend/cpu/kernel_table.h"

namespace quiver::cpu {

const CpuKernels& scalar_kernels() { return KernelTable<scalar::Simd>::value; }

}  // namespace quiver::cpu
