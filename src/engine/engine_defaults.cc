#include "engine/engine_defaults.h"

namespace quiver {

int default_max_num_batched_tokens(const std::string& device_name, int64_t device_memory_bytes, EngineUsage usage) {
  const bool serving = usage == EngineUsage::kServer;
  if (device_memory_bytes <= 0) return 2048;
  const bool large = device_memory_bytes >= (int64_t{70} << 30) && device_name.find("A100") == std::string::npos;
  if (large) return serving ? 8192 : 16384;
  return serving ? 2048 : 8192;
}

}  // namespace quiver
