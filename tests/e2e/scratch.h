// Per-process scratch file names for e2e tests: ctest runs test binaries (and other
// people's runs of the same tests) in parallel, so fixed names in /tmp would collide.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace quiver::testing {

inline std::filesystem::path scratch(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("quiver_" + std::to_string(::getpid()) + "_" + name);
}

}  // namespace quiver::testing
