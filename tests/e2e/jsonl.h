// JSON Lines files as `quiver generate` reads and writes them: one object a line.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace quiver::testing {

inline std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& p) {
  std::vector<nlohmann::json> out;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace quiver::testing
