// Picks and opens the weights file of a PEFT adapter folder.
#include "io/adapter_weights.h"

#include "io/mapped_file.h"

namespace quiver {

std::string AdapterWeights::pick(const std::string& dir) {
  for (const char* name : {"/adapter_model.safetensors", "/adapter_model.bin"})
    if (is_regular_file(dir + name)) return dir + name;
  return "";
}

Result<AdapterWeights> AdapterWeights::open_fd(int fd, const std::string& path) {
  AdapterWeights w;
  w.path_ = path;
  if (path.ends_with(".bin")) {
    QV_ASSIGN_OR_RETURN(w.torch_, TorchFile::open_fd(fd, path));
  } else {
    QV_ASSIGN_OR_RETURN(w.safetensors_, SafetensorsFile::open_fd(fd, path));
  }
  return w;
}

}  // namespace quiver
