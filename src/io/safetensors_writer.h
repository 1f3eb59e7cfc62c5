// Safetensors writing: header JSON padded with spaces to a multiple of 8 bytes (so the
// data section starts 8-byte aligned, as the reference writer does), then the tensors'
// bytes back to back in the order given — the format allows no holes in the data section.
// Used by `quiver bench` to synthesize adapters, and by tests to build checkpoints.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace quiver {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // numel(shape) * dtype_size(dtype), little-endian
};

// An entry holding `values` converted to `dtype` (F32/F16/BF16: round to nearest even;
// I32: truncated). values.size() must equal the product of `shape`.
SafetensorsEntry make_safetensors_entry(std::string name, DType dtype, std::vector<int64_t> shape,
                                        std::span<const float> values);

// The whole file as bytes. Errors: duplicate or empty names, "__metadata__" as a tensor
// name, negative dims, or bytes that do not match the shape and dtype.
Result<std::string> serialize_safetensors(const std::vector<SafetensorsEntry>& tensors,
                                          const std::map<std::string, std::string>& metadata = {});

// serialize_safetensors, then writes `path` (replacing it). Errors name the path.
Status write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace quiver
