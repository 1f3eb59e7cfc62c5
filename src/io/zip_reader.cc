// Zip directory reading (PKWARE APPNOTE 6.3): end-of-central-directory record, its zip64
// variant, central directory entries and the local headers they point to. Only the fields
// a stored archive needs are read; anything that would need decompression, decryption or
// another disk is refused rather than guessed at.
#include "io/zip_reader.h"

#include <algorithm>
#include <array>
#include <set>

namespace quiver {

namespace {

constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50;
constexpr uint32_t kEnd64Sig = 0x06064b50, kEnd64LocatorSig = 0x07064b50;
constexpr size_t kLocalBytes = 30, kCentralBytes = 46, kEndBytes = 22, kEnd64Bytes = 56, kLocatorBytes = 20;
constexpr uint16_t kZip64ExtraId = 0x0001;

uint64_t le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

constexpr std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrcTable = make_crc_table();

struct End {
  uint64_t entries = 0, dir_size = 0, dir_offset = 0;
};

// The end record sits in the last 22 + 65535 bytes (its comment is at most 65535 bytes);
// the last signature whose comment length reaches exactly the end of the file is it.
Result<End> find_end(const uint8_t* d, size_t size) {
  if (size < kEndBytes) return Status::error("file is " + std::to_string(size) + " bytes, too short for a zip archive");
  const size_t lowest = size - kEndBytes > 65535 ? size - kEndBytes - 65535 : 0;
  for (size_t pos = size - kEndBytes + 1; pos-- > lowest;) {
    if (le(d + pos, 4) != kEndSig || pos + kEndBytes + le(d + pos + 20, 2) != size) continue;
    if (le(d + pos + 4, 2) != 0 || le(d + pos + 6, 2) != 0)
      return Status::error("split (multi-disk) zip archives are not supported");
    End e{le(d + pos + 10, 2), le(d + pos + 12, 4), le(d + pos + 16, 4)};
    if (e.entries != 0xffff && e.dir_size != 0xffffffff && e.dir_offset != 0xffffffff) return e;
    // zip64: a locator right before the end record points to the zip64 end record.
    if (pos < kLocatorBytes || le(d + pos - kLocatorBytes, 4) != kEnd64LocatorSig)
      return Status::error("zip64 end-of-central-directory locator missing");
    const uint64_t at = le(d + pos - kLocatorBytes + 8, 8);
    if (size < kEnd64Bytes || at > size - kEnd64Bytes || le(d + at, 4) != kEnd64Sig)
      return Status::error("zip64 end-of-central-directory record missing or outside the file");
    if (le(d + at + 16, 4) != 0 || le(d + at + 20, 4) != 0)
      return Status::error("split (multi-disk) zip archives are not supported");
    return End{le(d + at + 32, 8), le(d + at + 40, 8), le(d + at + 48, 8)};
  }
  return Status::error("no end-of-central-directory record: not a zip archive, or truncated");
}

// Replaces the 0xffffffff placeholders of a central entry with its zip64 extra field values,
// which appear in the order uncompressed size, compressed size, local header offset.
Status apply_zip64(const uint8_t* extra, size_t extra_bytes, uint64_t& usize, uint64_t& csize, uint64_t& local) {
  if (usize != 0xffffffff && csize != 0xffffffff && local != 0xffffffff) return Status::ok();
  for (size_t p = 0; p + 4 <= extra_bytes;) {
    const uint64_t id = le(extra + p, 2), len = le(extra + p + 2, 2);
    if (p + 4 + len > extra_bytes) break;
    if (id == kZip64ExtraId) {
      size_t q = p + 4;
      for (uint64_t* f : {&usize, &csize, &local}) {
        if (*f != 0xffffffff) continue;
        if (q + 8 > p + 4 + len) return Status::error("zip64 extra field too short");
        *f = le(extra + q, 8);
        q += 8;
      }
      return Status::ok();
    }
    p += 4 + len;
  }
  return Status::error("sizes need a zip64 extra field, which is missing");
}

}  // namespace

uint32_t crc32(const uint8_t* data, size_t size) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < size; ++i) c = kCrcTable[(c ^ data[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

Result<std::vector<ZipEntry>> read_zip_directory(const uint8_t* d, size_t size) {
  QV_ASSIGN_OR_RETURN(End end, find_end(d, size));
  if (end.dir_offset > size || end.dir_size > size - end.dir_offset)
    return Status::error("central directory [" + std::to_string(end.dir_offset) + ", +" + std::to_string(end.dir_size) +
                         ") lies outside the " + std::to_string(size) + "-byte file");
  // Each central entry takes at least 46 bytes, which bounds the count before reserving.
  if (end.entries > end.dir_size / kCentralBytes)
    return Status::error(std::to_string(end.entries) + " entries cannot fit a " + std::to_string(end.dir_size) +
                         "-byte central directory");
  std::vector<ZipEntry> entries;
  entries.reserve(end.entries);
  std::set<std::string> names;
  std::vector<std::pair<uint64_t, uint64_t>> spans;  // [local header, end of data) per entry
  std::vector<uint32_t> crcs;
  const uint8_t* dir = d + end.dir_offset;
  size_t p = 0;
  for (uint64_t i = 0; i < end.entries; ++i) {
    if (p + kCentralBytes > end.dir_size || le(dir + p, 4) != kCentralSig)
      return Status::error("central directory entry " + std::to_string(i) + " is malformed or truncated");
    const uint64_t flags = le(dir + p + 8, 2), method = le(dir + p + 10, 2), crc = le(dir + p + 16, 4);
    uint64_t csize = le(dir + p + 20, 4), usize = le(dir + p + 24, 4), local = le(dir + p + 42, 4);
    const size_t name_len = le(dir + p + 28, 2), extra_len = le(dir + p + 30, 2), comment_len = le(dir + p + 32, 2);
    if (p + kCentralBytes + name_len + extra_len + comment_len > end.dir_size)
      return Status::error("central directory entry " + std::to_string(i) + " runs past the directory");
    ZipEntry e;
    e.name.assign(reinterpret_cast<const char*>(dir + p + kCentralBytes), name_len);
    const std::string what = "zip entry '" + e.name + "'";
    Status z64 = apply_zip64(dir + p + kCentralBytes + name_len, extra_len, usize, csize, local);
    if (!z64) return z64.with_context(what);
    if (flags & 0x1) return Status::error(what + " is encrypted");
    if (method != 0)
      return Status::error(what + " is compressed (method " + std::to_string(method) +
                           "); torch.save writes stored entries only");
    if (csize != usize)
      return Status::error(what + " is stored but its sizes differ (" + std::to_string(csize) + " vs " +
                           std::to_string(usize) + ")");
    if (!names.insert(e.name).second) return Status::error(what + " appears twice");
    if (local > size || size - local < kLocalBytes || le(d + local, 4) != kLocalSig)
      return Status::error(what + ": no local header at offset " + std::to_string(local));
    const uint64_t lname = le(d + local + 26, 2), lextra = le(d + local + 28, 2);
    if (lname != name_len || size - local - kLocalBytes < lname || std::char_traits<char>::compare(reinterpret_cast<const char*>(d + local + kLocalBytes),
                                                             e.name.data(), name_len) != 0)
      return Status::error(what + ": local header names a different entry");
    e.offset = local + kLocalBytes + lname + lextra;
    e.size = usize;
    // Entries live before the central directory, which is itself inside the file.
    if (e.offset > end.dir_offset || e.size > end.dir_offset - e.offset)
      return Status::error(what + ": data [" + std::to_string(e.offset) + ", +" + std::to_string(e.size) +
                           ") runs into the central directory or past the file");
    crcs.push_back(static_cast<uint32_t>(crc));
    spans.emplace_back(local, e.offset + e.size);
    entries.push_back(std::move(e));
    p += kCentralBytes + name_len + extra_len + comment_len;
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].first < spans[i - 1].second)
      return Status::error("zip entries overlap at offset " + std::to_string(spans[i].first));
  // Only after the overlap check: entries sharing bytes could make the checksums cost many
  // times the file's size.
  for (size_t i = 0; i < entries.size(); ++i)
    if (crc32(d + entries[i].offset, entries[i].size) != crcs[i])
      return Status::error("zip entry '" + entries[i].name + "': CRC-32 mismatch (corrupt file)");
  return entries;
}

}  // namespace quiver
