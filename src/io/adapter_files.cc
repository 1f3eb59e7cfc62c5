// Opening an adapter folder's files; see adapter_files.h.
#include "io/adapter_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "io/mapped_file.h"
#include "io/path_allowlist.h"

namespace quiver {

namespace {

Result<std::string> read_small(int fd, const std::string& what) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return Status::error(what + " is not a regular file");
  if (static_cast<uint64_t>(st.st_size) > kMaxAdapterConfigBytes)
    return Status::error(what + " is " + std::to_string(st.st_size) + " bytes, above the " +
                         std::to_string(kMaxAdapterConfigBytes) + "-byte limit");
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::error(what + ": read failed" + (n < 0 ? std::string(": ") + std::strerror(errno) : ""));
    got += static_cast<size_t>(n);
  }
  return text;
}

}  // namespace

Result<AdapterFiles> open_adapter_files(const std::string& dir, const std::vector<std::string>& allowlist) {
  std::error_code ec;
  const std::filesystem::path real_dir = std::filesystem::canonical(dir, ec);
  if (ec || !std::filesystem::is_directory(real_dir, ec)) return Status::error("not a directory");
  if (!allowlist.empty()) QV_RETURN_IF_ERROR(check_allowed(real_dir.string(), allowlist, "the adapter folder"));
  const std::string config_path = dir + "/adapter_config.json";
  if (!is_regular_file(config_path)) return Status::error("adapter_config.json not found");
  const std::string weights_path = AdapterWeights::pick(dir);
  if (weights_path.empty()) return Status::error("neither adapter_model.safetensors nor adapter_model.bin found");
  // The added-vocabulary files are read by path (io/adapter_vocab.h): they must resolve
  // inside the allow-list too.
  for (const char* name : {"/added_tokens.json", "/new_embeddings.safetensors"}) {
    const std::filesystem::path extra = std::filesystem::canonical(dir + name, ec);
    if (!ec && !allowlist.empty()) QV_RETURN_IF_ERROR(check_allowed(extra.string(), allowlist, name + 1));
  }

  AdapterFiles files;
  QV_ASSIGN_OR_RETURN(OpenedFile config, open_allowed(config_path, allowlist, "adapter_config.json"));
  Result<std::string> text = read_small(config.fd, "adapter_config.json");
  ::close(config.fd);
  if (!text) return text.status();
  files.config_text = std::move(text).value();

  const std::string weights_name = weights_path.substr(weights_path.rfind('/') + 1);
  QV_ASSIGN_OR_RETURN(OpenedFile weights, open_allowed(weights_path, allowlist, weights_name));
  QV_ASSIGN_OR_RETURN(files.weights, AdapterWeights::open_fd(weights.fd, weights_path));
  return files;
}

}  // namespace quiver
