// Safetensors checkpoints, memory-mapped and validated: single files and sharded
// folders (model.safetensors.index.json). Tensors stay in their file dtype; callers get
// views into the mapping, never copies.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "io/mapped_file.h"
#include "io/tensor_info.h"

namespace quiver {

// One mmap'd .safetensors file. Validation at open: file at least 8 bytes, header length
// within the file and <= 100 MB, header is a JSON object, every entry has a known dtype
// (F32/F16/BF16, and I32/I64/U8/BOOL/F64 recognised but rejected at use), a shape of
// non-negative ints, data_offsets [begin, end] inside the data section with
// end - begin == numel * dtype size, and no two tensors overlap.
class SafetensorsFile {
 public:
  static Result<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  // The same from a descriptor the caller opened (and vetted); takes ownership of `fd`.
  // `path` names the file in messages.
  static Result<std::unique_ptr<SafetensorsFile>> open_fd(int fd, const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  MappedFile map_;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All weights of a checkpoint: a folder with model.safetensors, or with
// model.safetensors.index.json naming shards (every shard named is opened and each
// tensor must live in the shard the index says), or a single .safetensors path.
class Checkpoint {
 public:
  static Result<Checkpoint> open(const std::string& path);

  bool has(const std::string& name) const;
  // A view of tensor `name` whose shape must equal `shape`; errors name the tensor, the
  // file, and expected vs actual shape. Only F32/F16/BF16 are accepted, and F8_E4M3 where
  // allow_fp8 (an FP8 checkpoint's projection weights).
  // The view points into a read-only mapping (Tensor::data is void* for all uses, but
  // writing through it faults): weights are read-only. Views live as long as this object
  // or a copy of it (copies share the mappings).
  Result<Tensor> get(const std::string& name, const std::vector<int64_t>& shape, bool allow_fp8 = false) const;
  // The shape of tensor `name` (empty: no such tensor).
  std::optional<std::vector<int64_t>> shape_of(const std::string& name) const;
  std::vector<std::string> names() const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;  // what open() was given: a folder or a .safetensors file
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::pair<const SafetensorsFile*, const TensorInfo*>> index_;
};

}  // namespace quiver
