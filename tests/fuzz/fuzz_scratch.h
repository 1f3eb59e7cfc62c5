// A folder of this fuzzing process's own under the temp directory, for readers that take a
// folder rather than bytes (made once; its files are rewritten per input).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace quiver::fuzz {

inline std::filesystem::path process_dir(const std::string& name) {
  const std::filesystem::path d =
      std::filesystem::temp_directory_path() / ("quiver_fuzz_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace quiver::fuzz
