// Adapter path allow-listing. Canonicalisation (std::filesystem::canonical) resolves every
// symlink and `..` component, so a path is judged by where it really points; prefix
// checks are made component by component, so "/srv/lora-evil" is not inside "/srv/lora".
#include "server/lora_paths.h"

#include <filesystem>
#include <system_error>

namespace quiver {

namespace {

namespace fs = std::filesystem;

bool is_inside(const fs::path& child, const fs::path& parent) {
  auto c = child.begin();
  for (auto p = parent.begin(); p != parent.end(); ++p, ++c) {
    if (p->empty()) continue;  // trailing separator component
    if (c == child.end() || *c != *p) return false;
  }
  return true;
}

}  // namespace

Result<std::string> resolve_allowed_lora_path(const std::string& requested, const std::vector<std::string>& allowlist) {
  if (requested.empty()) return Status::error("lora_path must not be empty");
  if (requested.find('\0') != std::string::npos) return Status::error("lora_path contains a NUL byte");
  if (allowlist.empty())
    return Status::error("no folder is allow-listed for runtime adapters (start the server with --lora-path-allowlist DIR)");
  std::error_code ec;
  const fs::path real = fs::canonical(fs::path(requested), ec);
  if (ec) return Status::error("lora_path '" + requested + "' does not exist or cannot be read");
  if (!fs::is_directory(real, ec)) return Status::error("lora_path '" + requested + "' is not a folder");
  for (const auto& dir : allowlist) {
    std::error_code ec2;
    const fs::path allowed = fs::canonical(fs::path(dir), ec2);
    if (ec2) continue;  // a missing allow-listed folder allows nothing
    if (is_inside(real, allowed)) return real.string();
  }
  return Status::error("lora_path '" + requested + "' is outside the allowed folders (--lora-path-allowlist)");
}

}  // namespace quiver
