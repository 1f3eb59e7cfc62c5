// The files of a PEFT adapter folder, opened under an optional allow-list. Each load
// from disk (first registration and every reload after host-cache eviction) goes through
// here, so a folder swapped for a link to somewhere else is refused on the next load.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/adapter_weights.h"

namespace quiver {

struct AdapterFiles {
  std::string config_text;  // adapter_config.json
  AdapterWeights weights;   // adapter_model.safetensors, else adapter_model.bin
};

// adapter_config.json is refused past this size: real ones are a few KiB.
constexpr size_t kMaxAdapterConfigBytes = 1 << 20;

// Errors name the missing or refused file, never its contents. An empty `allowlist`
// restricts nothing (adapters named on the command line by the operator).
Result<AdapterFiles> open_adapter_files(const std::string& dir, const std::vector<std::string>& allowlist);

}  // namespace quiver
