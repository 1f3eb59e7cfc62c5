// A scratch copy of an HF fixture whose config.json allows longer contexts: the weights and
// adapters are links to the fixture's, only max_position_embeddings changes. Random-weight
// checks (against the same model elsewhere, not against HF) run past the fixture's 256.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace quiver::testing {

inline std::filesystem::path longer_fixture(const std::string& model, int max_positions) {
  namespace fs = std::filesystem;
  const fs::path src = fs::path(QUIVER_SOURCE_DIR) / "tests/fixtures" / model;
  const fs::path dst = fs::temp_directory_path() / ("quiver_" + model + "_" + std::to_string(max_positions) + "_" +
                                                    std::to_string(::getpid()));
  fs::create_directories(dst);
  for (const auto& e : fs::directory_iterator(src)) {
    const std::string name = e.path().filename().string();
    if (name == "config.json" || name == "requests.jsonl" || name == "expected.jsonl") continue;
    std::error_code ec;
    fs::create_symlink(e.path(), dst / name, ec);
  }
  nlohmann::json config = nlohmann::json::parse(std::ifstream(src / "config.json"));
  config["max_position_embeddings"] = max_positions;
  std::ofstream(dst / "config.json") << config.dump();
  return dst;
}

}  // namespace quiver::testing
