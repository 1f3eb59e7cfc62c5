// The weights file of a PEFT adapter folder. PEFT's save_pretrained writes
// adapter_model.safetensors, or adapter_model.bin (torch.save) with
// safe_serialization=False and in versions before safetensors became its default; like
// PEFT's own loader, the safetensors file wins when both are there.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "core/status.h"
#include "io/safetensors.h"
#include "io/torch_file.h"

namespace quiver {

class AdapterWeights {
 public:
  // The file at `path` (one of those two names, which picks the format) through a
  // descriptor the caller opened and checked; taken over and closed.
  static Result<AdapterWeights> open_fd(int fd, const std::string& path);
  // The weights file a folder would load: DIR/adapter_model.safetensors when it is a
  // regular file, else DIR/adapter_model.bin when that is one, else "".
  static std::string pick(const std::string& dir);

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorInfo>& tensors() const {
    return safetensors_ ? safetensors_->tensors() : torch_->tensors();
  }

 private:
  std::string path_;
  std::unique_ptr<SafetensorsFile> safetensors_;  // one of these two is set
  std::unique_ptr<TorchFile> torch_;
};

}  // namespace quiver
