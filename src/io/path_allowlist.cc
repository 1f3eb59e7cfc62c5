// Allow-list checks on canonical paths; see path_allowlist.h.
#include "io/path_allowlist.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace quiver {

namespace fs = std::filesystem;

bool path_is_inside(const std::string& child, const std::string& parent) {
  const fs::path c_path(child), p_path(parent);
  auto c = c_path.begin();
  for (auto p = p_path.begin(); p != p_path.end(); ++p, ++c) {
    if (p->empty()) continue;  // trailing separator component
    if (c == c_path.end() || *c != *p) return false;
  }
  return true;
}

Status check_allowed(const std::string& real, const std::vector<std::string>& allowlist, const std::string& what) {
  for (const auto& dir : allowlist) {
    std::error_code ec;
    const fs::path allowed = fs::canonical(fs::path(dir), ec);
    if (ec) continue;
    if (path_is_inside(real, allowed.string())) return Status::ok();
  }
  return Status::error(what + " is outside the allowed folders (--lora-path-allowlist)");
}

Result<OpenedFile> open_allowed(const std::string& path, const std::vector<std::string>& allowlist,
                                const std::string& what) {
  // O_NONBLOCK: opening a FIFO planted in the folder must not wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Status::error(what + ": cannot open: " + std::strerror(errno));
  OpenedFile f{fd, path};
  std::error_code ec;
  const fs::path real = fs::read_symlink("/proc/self/fd/" + std::to_string(fd), ec);
  if (!ec) f.real_path = real.string();
  if (!allowlist.empty()) {
    Status st = ec ? Status::error(what + ": cannot tell where the opened file lies")
                   : check_allowed(f.real_path, allowlist, what);
    if (!st.is_ok()) {
      ::close(fd);
      return st;
    }
  }
  return f;
}

}  // namespace quiver
