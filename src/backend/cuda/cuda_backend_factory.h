// Entry point to the CUDA backend that CUDA-free code may include (no CUDA headers here).
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"

namespace quiver {

// nullptr and *error set when no usable GPU is present.
std::unique_ptr<Backend> make_cuda_backend(int device, std::string* error);

}  // namespace quiver
