// Picks and opens the weights file of a PEFT adapter folder.
#include "io/adapter_weights.h"

#include <sys/stat.h>

namespace quiver {

namespace {

bool is_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

Result<AdapterWeights> AdapterWeights::open(const std::string& dir) {
  AdapterWeights w;
  w.path_ = dir + "/adapter_model.safetensors";
  if (is_file(w.path_)) {
    QV_ASSIGN_OR_RETURN(w.safetensors_, SafetensorsFile::open(w.path_));
    return w;
  }
  w.path_ = dir + "/adapter_model.bin";
  if (is_file(w.path_)) {
    QV_ASSIGN_OR_RETURN(w.torch_, TorchFile::open(w.path_));
    return w;
  }
  return Status::error("neither adapter_model.safetensors nor adapter_model.bin found");
}

}  // namespace quiver
