// A whole file mapped read-only into memory, unmapped when the object goes away. Weights
// files are read in place through such a mapping: pages are shared with the page cache, so
// opening a checkpoint costs no copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace quiver {

class MappedFile {
 public:
  // Errors start with `path`: it cannot be opened, is not a regular file, or mmap failed.
  // An empty file gives size() == 0 and data() == nullptr.
  static Result<MappedFile> open(const std::string& path);
  // The same for a descriptor already opened (and checked) by the caller, which this takes
  // over and closes; `path` names it in errors.
  static Result<MappedFile> open_fd(int fd, const std::string& path);
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return static_cast<const uint8_t*>(map_); }
  size_t size() const { return bytes_; }

 private:
  void* map_ = nullptr;
  size_t bytes_ = 0;
};

// Whether `path` names a regular file, following symlinks (stat(2)).
bool is_regular_file(const std::string& path);

}  // namespace quiver
