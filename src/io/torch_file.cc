// torch.save's zip layout: every record lives under one top-level folder (the archive
// name, "archive" in recent PyTorch, the file's stem in older ones): data.pkl (the pickled
// object), data/<key> (the raw bytes of each storage, named by the key in the pickle's
// persistent ids), byteorder ("little"), version, and bookkeeping records this reader
// does not need (.format_version, .storage_alignment, .data/...).
#include "io/torch_file.h"

#include <cstring>
#include <map>

#include "io/torch_pickle.h"
#include "io/zip_reader.h"

namespace quiver {

namespace {

constexpr int kMaxDims = 8;

bool starts_with(const uint8_t* b, size_t size, std::string_view magic) {
  return size >= magic.size() && std::memcmp(b, magic.data(), magic.size()) == 0;
}

// What a non-zip file is, for the refusal message.
Status not_zip(const uint8_t* b, size_t size) {
  const bool tar = size > 262 && std::memcmp(b + 257, "ustar", 5) == 0;
  if (starts_with(b, size, "\x80") || tar)
    return Status::error("legacy torch.save format (PyTorch < 1.6, or _use_new_zipfile_serialization=False) is not "
                         "supported; re-save it with a current torch.save, or as safetensors");
  return Status::error("not a PyTorch checkpoint (torch.save writes a zip archive)");
}

// Checks one tensor against its storage record and returns where its first element is.
Result<uint64_t> check_view(const PickledTensor& t, uint64_t record_bytes) {
  const uint64_t elem = dtype_size(t.dtype);
  uint64_t storage_bytes = 0;
  if (__builtin_mul_overflow(t.storage_numel, elem, &storage_bytes) || storage_bytes != record_bytes)
    return Status::error("storage '" + t.storage_key + "' holds " + std::to_string(record_bytes) + " bytes but the "
                         "pickle says " + std::to_string(t.storage_numel) + " " + t.dtype_name + " elements");
  if (t.shape.size() > kMaxDims)
    return Status::error("has " + std::to_string(t.shape.size()) + " dimensions (at most " +
                         std::to_string(kMaxDims) + " are supported)");
  uint64_t numel = 1, expect_stride = 1;
  for (size_t k = t.shape.size(); k-- > 0;) {
    const uint64_t n = static_cast<uint64_t>(t.shape[k]);
    // A dimension of size 1 (or an empty tensor) never steps, so its stride does not matter.
    if (n > 1 && static_cast<uint64_t>(t.stride[k]) != expect_stride)
      return Status::error("has stride " + shape_text(t.stride) + " for size " + shape_text(t.shape) +
                           ": not contiguous (only contiguous tensors are supported; save t.contiguous())");
    if (__builtin_mul_overflow(numel, n, &numel) || __builtin_mul_overflow(expect_stride, n, &expect_stride))
      return Status::error("size " + shape_text(t.shape) + " is too large");
  }
  if (numel > 0 && (t.storage_offset > t.storage_numel || numel > t.storage_numel - t.storage_offset))
    return Status::error("size " + shape_text(t.shape) + " at offset " + std::to_string(t.storage_offset) +
                         " runs past its storage '" + t.storage_key + "' of " + std::to_string(t.storage_numel) +
                         " elements");
  return numel;
}

}  // namespace

TorchFile::~TorchFile() = default;

Result<std::unique_ptr<TorchFile>> TorchFile::open(const std::string& path) {
  QV_ASSIGN_OR_RETURN(MappedFile map, MappedFile::open(path));
  return from_map(std::move(map), path);
}

Result<std::unique_ptr<TorchFile>> TorchFile::open_fd(int fd, const std::string& path) {
  QV_ASSIGN_OR_RETURN(MappedFile map, MappedFile::open_fd(fd, path));
  return from_map(std::move(map), path);
}

Result<std::unique_ptr<TorchFile>> TorchFile::from_map(MappedFile map, const std::string& path) {
  std::unique_ptr<TorchFile> f(new TorchFile());
  f->path_ = path;
  f->map_ = std::move(map);
  if (f->map_.size() == 0) return Status::error(path + ": empty file");
  Status s = f->load(f->map_.data(), f->map_.size());
  if (!s) return s.with_context(path);
  return f;
}

Result<std::unique_ptr<TorchFile>> TorchFile::parse(const uint8_t* bytes, size_t size, const std::string& path) {
  std::unique_ptr<TorchFile> f(new TorchFile());
  f->path_ = path;
  Status s = f->load(bytes, size);
  if (!s) return s.with_context(path);
  return f;
}

Status TorchFile::load(const uint8_t* bytes, size_t size) {
  if (!starts_with(bytes, size, "PK\x03\x04") && !starts_with(bytes, size, "PK\x05\x06")) return not_zip(bytes, size);
  QV_ASSIGN_OR_RETURN(std::vector<ZipEntry> entries, read_zip_directory(bytes, size));
  if (entries.empty()) return Status::error("empty zip archive");
  const std::string& first = entries.front().name;
  const std::string prefix = first.substr(0, first.find('/') + 1);
  if (prefix.empty()) return Status::error("zip entry '" + first + "' is not inside an archive folder");
  std::map<std::string, const ZipEntry*> records;  // name below the archive folder -> entry
  for (const ZipEntry& e : entries) {
    if (e.name.compare(0, prefix.size(), prefix) != 0)
      return Status::error("zip entries '" + first + "' and '" + e.name + "' are in different archive folders");
    records[e.name.substr(prefix.size())] = &e;
  }
  auto text = [&](const ZipEntry& e) { return std::string_view(reinterpret_cast<const char*>(bytes + e.offset), e.size); };
  if (auto it = records.find("byteorder"); it != records.end() && text(*it->second) != "little")
    return Status::error(prefix + "byteorder is '" + std::string(text(*it->second).substr(0, 16)) +
                         "'; only little-endian checkpoints are supported");
  auto pkl = records.find("data.pkl");
  if (pkl == records.end()) return Status::error("no " + prefix + "data.pkl: not a torch.save checkpoint");

  Result<std::vector<PickledTensor>> pickled = unpickle_state_dict(text(*pkl->second));
  if (!pickled) return pickled.status().with_context(prefix + "data.pkl");
  std::map<std::string, const PickledTensor*> storages;  // key -> first tensor using it
  std::map<std::string, const uint8_t*> realigned;       // key -> aligned copy of its bytes
  for (const PickledTensor& t : pickled.value()) {
    const std::string what = "tensor '" + t.name + "'";
    auto rec = records.find("data/" + t.storage_key);
    if (rec == records.end())
      return Status::error(what + ": storage record " + prefix + "data/" + t.storage_key + " is missing");
    auto [seen, fresh] = storages.emplace(t.storage_key, &t);
    if (!fresh && (seen->second->dtype != t.dtype || seen->second->storage_numel != t.storage_numel))
      return Status::error(what + " and tensor '" + seen->second->name + "' describe storage '" + t.storage_key +
                           "' differently");
    Result<uint64_t> numel = check_view(t, rec->second->size);
    if (!numel) return numel.status().with_context(what);
    const size_t elem = dtype_size(t.dtype);
    const uint8_t* base = bytes + rec->second->offset;
    if (reinterpret_cast<uintptr_t>(base) % elem != 0) {
      auto [copy, made] = realigned.emplace(t.storage_key, nullptr);
      if (made) {
        realigned_.emplace_back((rec->second->size + 3) / 4);
        std::memcpy(realigned_.back().data(), base, rec->second->size);
        copy->second = reinterpret_cast<const uint8_t*>(realigned_.back().data());
      }
      base = copy->second;
    }
    TensorInfo info;
    info.dtype = t.dtype;
    info.file_dtype = t.dtype_name;
    info.shape = t.shape;
    info.bytes = static_cast<size_t>(numel.value()) * elem;
    info.data = numel.value() == 0 ? base : base + t.storage_offset * elem;
    tensors_.emplace(t.name, std::move(info));
  }
  return Status::ok();
}

}  // namespace quiver
