// Adapter path allow-listing for runtime loads: the requested folder is canonicalised
// (every symlink and `..` resolved) and judged by where it really points (io/path_allowlist.h).
#include "server/lora_paths.h"

#include <filesystem>
#include <system_error>

#include "io/path_allowlist.h"

namespace quiver {

namespace fs = std::filesystem;

Result<std::string> resolve_allowed_lora_path(const std::string& requested, const std::vector<std::string>& allowlist) {
  if (requested.empty()) return Status::error("lora_path must not be empty");
  if (requested.find('\0') != std::string::npos) return Status::error("lora_path contains a NUL byte");
  if (allowlist.empty())
    return Status::error("no folder is allow-listed for runtime adapters (start the server with --lora-path-allowlist DIR)");
  std::error_code ec;
  const fs::path real = fs::canonical(fs::path(requested), ec);
  if (ec) return Status::error("lora_path '" + requested + "' does not exist or cannot be read");
  if (!fs::is_directory(real, ec)) return Status::error("lora_path '" + requested + "' is not a folder");
  QV_RETURN_IF_ERROR(check_allowed(real.string(), allowlist, "lora_path '" + requested + "'"));
  return real.string();
}

}  // namespace quiver
