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

std::string AdapterWeights::pick(const std::string& dir) {
  for (const char* name : {"/adapter_model.safetensors", "/adapter_model.bin"})
    if (is_file(dir + name)) return dir + name;
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
