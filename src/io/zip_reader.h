// Directory of a zip archive held in memory, restricted to what torch.save writes: stored
// (uncompressed) entries on one disk, optionally with zip64 records. Every offset and size
// is checked against the buffer before it is used, and every entry's CRC-32 is verified.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace quiver {

struct ZipEntry {
  std::string name;
  uint64_t offset = 0;  // of the entry's bytes within the archive
  uint64_t size = 0;    // stored == uncompressed size
};

// Lists the entries of the archive `data[0, size)` in central-directory order. Refuses, naming
// the entry: compressed or encrypted entries, split archives, sizes or offsets outside the
// buffer, local headers that disagree with the central directory, duplicate names,
// overlapping entries and CRC mismatches.
Result<std::vector<ZipEntry>> read_zip_directory(const uint8_t* data, size_t size);

// CRC-32 (IEEE 802.3, as zip uses).
uint32_t crc32(const uint8_t* data, size_t size);

}  // namespace quiver
