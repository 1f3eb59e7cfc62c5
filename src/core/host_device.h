// QV_HOST_DEVICE marks small pure inline functions that CUDA code calls too (the sampling
// math, the hash behind dummy weights), so host and device compute them from one
// definition. Under nvcc it adds __host__ __device__; elsewhere it is plain `inline`. No
// CUDA header is involved.
#pragma once

#if defined(__CUDACC__)
#define QV_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define QV_HOST_DEVICE inline
#endif
