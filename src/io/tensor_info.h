// A tensor inside a weights file, as the file readers (safetensors, torch.save) hand it out:
// dtype, shape and a read-only view of its bytes. Kept apart from core/tensor.h so that the
// readers build on their own (the fuzz targets compile them without the rest of quiver).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace quiver {

// A shape as error messages print it: "[4096, 11008]".
inline std::string shape_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

struct TensorInfo {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // read-only: into the file's mapping (PROT_READ) or a copy the reader owns
  size_t bytes = 0;
  // The dtype string as written in the header ("F32", "I64", ...). Files may hold dtypes
  // quiver has no DType for (I64, U8, BOOL, F64, ...): then dtype_known is false, `dtype`
  // is meaningless, and Checkpoint::get refuses the tensor.
  std::string file_dtype;
  bool dtype_known = true;
};

}  // namespace quiver
