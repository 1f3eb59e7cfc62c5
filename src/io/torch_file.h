// PyTorch checkpoints written by torch.save (>= 1.6, the zip format) holding a flat state
// dict of float tensors, such as PEFT's adapter_model.bin. Read without Python: the zip
// directory, then data.pkl through a restricted unpickler, then every tensor is checked
// against its storage record. Tensors come out as TensorInfo views, as from safetensors.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/mapped_file.h"
#include "io/tensor_info.h"

namespace quiver {

class TorchFile {
 public:
  // Memory-maps `path` and parses it. Errors start with the path and name the zip entry or
  // tensor at fault. The legacy (pre-1.6, non-zip) format is refused by name.
  static Result<std::unique_ptr<TorchFile>> open(const std::string& path);
  // The same for a descriptor the caller opened (and checked); taken over and closed.
  static Result<std::unique_ptr<TorchFile>> open_fd(int fd, const std::string& path);
  // Parses an archive already in memory, which must outlive the result; `path` only names
  // it in messages.
  static Result<std::unique_ptr<TorchFile>> parse(const uint8_t* bytes, size_t size, const std::string& path);
  ~TorchFile();
  TorchFile(const TorchFile&) = delete;
  TorchFile& operator=(const TorchFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }

 private:
  TorchFile() = default;
  static Result<std::unique_ptr<TorchFile>> from_map(MappedFile map, const std::string& path);
  Status load(const uint8_t* bytes, size_t size);

  std::string path_;
  MappedFile map_;  // empty for parse()
  // Storages whose bytes are not aligned to their element size in the file, copied so that
  // tensor views can be read as typed arrays.
  std::vector<std::vector<uint32_t>> realigned_;
  std::map<std::string, TensorInfo> tensors_;
};

}  // namespace quiver
