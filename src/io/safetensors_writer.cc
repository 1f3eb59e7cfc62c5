// Safetensors writing (see safetensors_writer.h for the layout).
#include "io/safetensors_writer.h"

#include <bit>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/check.h"

namespace quiver {

namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

// Header lengths are 8-byte aligned so that the data section (and every 8-byte-multiple
// tensor after it) can be used in place from an mmap.
constexpr size_t kHeaderAlign = 8;

Result<uint64_t> checked_numel(const SafetensorsEntry& e) {
  uint64_t n = 1;
  for (int64_t d : e.shape) {
    if (d < 0) return Status::error("tensor '" + e.name + "' has a negative dimension");
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

}  // namespace

SafetensorsEntry make_safetensors_entry(std::string name, DType dtype, std::vector<int64_t> shape,
                                        std::span<const float> values) {
  SafetensorsEntry e;
  e.name = std::move(name);
  e.dtype = dtype;
  e.shape = std::move(shape);
  uint64_t numel = 1;
  for (int64_t d : e.shape) numel *= static_cast<uint64_t>(d < 0 ? 0 : d);
  check(numel == values.size(), "make_safetensors_entry: values do not match the shape");
  e.bytes.resize(values.size() * dtype_size(dtype));
  uint8_t* out = e.bytes.data();
  for (size_t i = 0; i < values.size(); ++i) {
    switch (dtype) {
      case DType::kF32: std::memcpy(out + 4 * i, &values[i], 4); break;
      case DType::kF16: {
        const uint16_t h = f32_to_f16(values[i]);
        std::memcpy(out + 2 * i, &h, 2);
        break;
      }
      case DType::kBF16: {
        const uint16_t h = f32_to_bf16(values[i]);
        std::memcpy(out + 2 * i, &h, 2);
        break;
      }
      case DType::kF8E4M3: out[i] = f32_to_e4m3(values[i]); break;
      case DType::kI8: out[i] = static_cast<uint8_t>(static_cast<int8_t>(values[i])); break;
      case DType::kI32: {
        const int32_t v = static_cast<int32_t>(values[i]);
        std::memcpy(out + 4 * i, &v, 4);
        break;
      }
    }
  }
  return e;
}

Result<std::string> serialize_safetensors(const std::vector<SafetensorsEntry>& tensors,
                                          const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps the header in the order the tensors are written, which makes files
  // easy to read with a hex dump; readers do not care.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const SafetensorsEntry& e : tensors) {
    if (e.name.empty()) return Status::error("a tensor has an empty name");
    if (e.name == "__metadata__") return Status::error("'__metadata__' is reserved, not a tensor name");
    if (!seen.insert(e.name).second) return Status::error("tensor '" + e.name + "' is given twice");
    QV_ASSIGN_OR_RETURN(uint64_t numel, checked_numel(e));
    if (numel * dtype_size(e.dtype) != e.bytes.size())
      return Status::error("tensor '" + e.name + "' has " + std::to_string(e.bytes.size()) + " bytes, its shape and " +
                           std::string(dtype_name(e.dtype)) + " need " + std::to_string(numel * dtype_size(e.dtype)));
    header[e.name] = {{"dtype", std::string(dtype_name(e.dtype))},
                      {"shape", e.shape},
                      {"data_offsets", {offset, offset + e.bytes.size()}}};
    offset += e.bytes.size();
  }
  std::string h = header.dump();
  h.append((kHeaderAlign - h.size() % kHeaderAlign) % kHeaderAlign, ' ');
  std::string out;
  out.reserve(8 + h.size() + offset);
  const uint64_t n = h.size();
  out.append(reinterpret_cast<const char*>(&n), 8);
  out += h;
  for (const SafetensorsEntry& e : tensors) out.append(reinterpret_cast<const char*>(e.bytes.data()), e.bytes.size());
  return out;
}

Status write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  QV_ASSIGN_OR_RETURN(std::string bytes, serialize_safetensors(tensors, metadata));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::error("cannot write " + path);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return Status::error("writing " + path + " failed");
  return Status::ok();
}

}  // namespace quiver
