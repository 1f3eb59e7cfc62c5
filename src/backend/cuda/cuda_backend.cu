#include <cuda_runtime.h>

#include "backend/cuda/cuda_backend_factory.h"

namespace quiver {

std::unique_ptr<Backend> make_cuda_backend(int device, std::string* error) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count <= device) {
    *error = "no CUDA device available";
    return nullptr;
  }
  *error = "CUDA backend under construction";
  return nullptr;
}

}  // namespace quiver
