// A copy of an F32 adapter whose lora_B weights are all 1e30: finite, so the loader takes
// it, but the first projection overflows, so its logits are non-finite on any backend.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

namespace quiver::testing {

// False when `src` is not an all-F32 adapter (the test should then fail loudly).
inline bool write_overflowing_adapter(const std::filesystem::path& src, const std::filesystem::path& dir) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(src / "adapter_config.json", dir / "adapter_config.json");
  std::ifstream in(src / "adapter_model.safetensors", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), {});
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(raw.substr(8, n));
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__" || name.find("lora_B") == std::string::npos) continue;
    if (info["dtype"] != "F32") return false;
    const size_t begin = 8 + n + info["data_offsets"][0].get<size_t>(), end = 8 + n + info["data_offsets"][1].get<size_t>();
    for (size_t off = begin; off < end; off += 4) {
      const float big = 1e30f;
      std::memcpy(raw.data() + off, &big, 4);
    }
  }
  std::ofstream(dir / "adapter_model.safetensors", std::ios::binary) << raw;
  return true;
}

}  // namespace quiver::testing
