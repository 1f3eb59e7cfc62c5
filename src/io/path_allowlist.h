// Folder allow-lists for files a client names (runtime LoRA adapters): a path is judged by
// where it really points, after every symlink and `..` is resolved, and files are opened
// first and judged by what was opened, so a swap between check and read cannot redirect it.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace quiver {

// True when canonical `child` is `parent` or lies under it, compared component by
// component ("/srv/lora-evil" is not inside "/srv/lora").
bool path_is_inside(const std::string& child, const std::string& parent);

// OK when canonical `real` lies inside one of `allowlist` (canonicalised now; a missing
// folder allows nothing). `what` names the path in the error.
Status check_allowed(const std::string& real, const std::vector<std::string>& allowlist, const std::string& what);

// An open read-only descriptor and the real path of the file behind it.
struct OpenedFile {
  int fd = -1;
  std::string real_path;
};

// Opens `path` read-only; with a non-empty `allowlist` the opened file must lie inside it
// (checked through /proc/self/fd, i.e. on the file actually opened). The caller owns fd.
Result<OpenedFile> open_allowed(const std::string& path, const std::vector<std::string>& allowlist,
                                const std::string& what);

}  // namespace quiver
