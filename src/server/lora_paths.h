// Which adapter folders a client may load at run time: only those inside an allow-listed
// folder, compared as canonical paths so neither `..` nor a symlink can escape.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace quiver {

// Returns the canonical path of `requested` if it exists and lies inside (or is) one of
// the canonical `allowlist` folders; an error otherwise. An empty allowlist allows nothing.
Result<std::string> resolve_allowed_lora_path(const std::string& requested, const std::vector<std::string>& allowlist);

}  // namespace quiver
