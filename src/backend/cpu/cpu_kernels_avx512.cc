// The avx512 kernel table: AVX-512 (F/BW/VL/DQ) + FMA + F16C; compiled with those -m flags by CMake.
// Everything here has internal linkage (see cpu_kernels.h for why).
// GCC 12's AVX-512 intrinsics use self-initialised "undefined" vectors that trip
// -Wuninitialized at every inlining site (GCC PR 105593); the code is fine.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "backend/cpu/simd_avx512.h"
#include "backend/cpu/kernel_table.h"

namespace quiver::cpu {

const CpuKernels& avx512_kernels() { return KernelTable<avx512::Simd>::value; }

}  // namespace quiver::cpu
