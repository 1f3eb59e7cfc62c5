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
  // Opens DIR/adapter_model.safetensors, else DIR/adapter_model.bin.
  static Result<AdapterWeights> open(const std::string& dir);

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
