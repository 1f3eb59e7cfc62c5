// Safetensors reading: one mmap per file, every header field validated before any
// pointer into the mapping is handed out, and sharded folders resolved through
// model.safetensors.index.json. Format: 8-byte little-endian header length N, N bytes of
// JSON header, then the data section that data_offsets are relative to.
#include "io/safetensors.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <bit>
#include <cstring>
#include <filesystem>
#include <tuple>

#include "io/json_util.h"

namespace quiver {

namespace fs = std::filesystem;

namespace {

static_assert(std::endian::native == std::endian::little, "safetensors lengths are little-endian");

// Headers of real checkpoints are well under 1 MB; the safetensors reference
// implementation refuses anything above 100 MB, so a corrupt length cannot make us parse
// gigabytes of tensor data as JSON.
constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;

struct FileDType {
  const char* name;
  size_t bytes;
  bool known;  // quiver has a DType for it
  DType dtype;
};

// Every fixed-width dtype the safetensors format defines. Sub-byte ones (F4, F6_*) have no
// whole-byte size and are treated as unknown.
constexpr FileDType kFileDTypes[] = {
    {"F32", 4, true, DType::kF32},      {"F16", 2, true, DType::kF16},      {"BF16", 2, true, DType::kBF16},
    {"I32", 4, true, DType::kI32},      {"F64", 8, false, DType::kF32},     {"I64", 8, false, DType::kF32},
    {"U64", 8, false, DType::kF32},     {"U32", 4, false, DType::kF32},     {"I16", 2, false, DType::kF32},
    {"U16", 2, false, DType::kF32},     {"I8", 1, false, DType::kF32},      {"U8", 1, false, DType::kF32},
    {"BOOL", 1, false, DType::kF32},    {"F8_E4M3", 1, true, DType::kF8E4M3}, {"F8_E5M2", 1, false, DType::kF32},
    {"F8_E8M0", 1, false, DType::kF32},
};

const FileDType* find_file_dtype(const std::string& name) {
  for (const FileDType& d : kFileDTypes)
    if (name == d.name) return &d;
  return nullptr;
}

// Parses one header entry into `info` (data pointer still unset); errors say what is wrong
// with the entry, the caller adds file and tensor name.
Status parse_entry(const Json& e, TensorInfo& info, uint64_t& begin, uint64_t& end, uint64_t data_bytes) {
  if (!e.is_object()) return Status::error("entry must be an object, got " + json_describe(e));
  QV_ASSIGN_OR_RETURN(std::string dtype, json_string(e, "dtype"));
  const FileDType* fd = find_file_dtype(dtype);
  if (!fd) return Status::error("unknown dtype \"" + dtype + "\"");
  info.file_dtype = dtype;
  info.dtype_known = fd->known;
  info.dtype = fd->dtype;

  auto shape_it = e.find("shape");
  if (shape_it == e.end() || !shape_it->is_array())
    return Status::error("'shape' must be a list of non-negative integers, got " +
                         (shape_it == e.end() ? std::string("nothing") : json_describe(*shape_it)));
  uint64_t numel = 1;
  bool overflow = false;
  for (const Json& d : *shape_it) {
    if (!d.is_number_integer() || (!d.is_number_unsigned() && d.get<int64_t>() < 0))
      return Status::error("'shape' must be a list of non-negative integers, got " + json_describe(*shape_it));
    uint64_t n = d.get<uint64_t>();
    if (n > static_cast<uint64_t>(INT64_MAX)) overflow = true;
    info.shape.push_back(static_cast<int64_t>(n));
    if (__builtin_mul_overflow(numel, n, &numel)) overflow = true;
  }
  uint64_t want_bytes = 0;
  if (overflow || __builtin_mul_overflow(numel, static_cast<uint64_t>(fd->bytes), &want_bytes))
    return Status::error("shape " + shape_text(info.shape) + " is too large");

  auto off_it = e.find("data_offsets");
  if (off_it == e.end() || !off_it->is_array() || off_it->size() != 2 || !(*off_it)[0].is_number_unsigned() ||
      !(*off_it)[1].is_number_unsigned())
    return Status::error("'data_offsets' must be two non-negative integers [begin, end], got " +
                         (off_it == e.end() ? std::string("nothing") : json_describe(*off_it)));
  begin = (*off_it)[0].get<uint64_t>();
  end = (*off_it)[1].get<uint64_t>();
  if (begin > end)
    return Status::error("data_offsets begin " + std::to_string(begin) + " > end " + std::to_string(end));
  if (end > data_bytes)
    return Status::error("data_offsets end " + std::to_string(end) + " is beyond the data section (" +
                         std::to_string(data_bytes) + " bytes)");
  if (end - begin != want_bytes)
    return Status::error("data_offsets span " + std::to_string(end - begin) + " bytes but " + dtype + " " +
                         shape_text(info.shape) + " needs " + std::to_string(want_bytes));
  info.bytes = static_cast<size_t>(want_bytes);
  return Status::ok();
}

}  // namespace

SafetensorsFile::~SafetensorsFile() = default;

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::error(path + ": cannot open: " + std::strerror(errno));
  return open_fd(fd, path);
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open_fd(int fd, const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  QV_ASSIGN_OR_RETURN(f->map_, MappedFile::open_fd(fd, path));
  const uint64_t file_bytes = f->map_.size();
  if (file_bytes < 8)
    return Status::error(path + ": file is " + std::to_string(file_bytes) +
                         " bytes, shorter than the 8-byte header length; truncated or not safetensors");
  const char* bytes = reinterpret_cast<const char*>(f->map_.data());

  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes, 8);
  if (header_bytes > kMaxHeaderBytes)
    return Status::error(path + ": header length " + std::to_string(header_bytes) +
                         " bytes exceeds the 100 MB limit; corrupt or not safetensors");
  if (header_bytes > file_bytes - 8)
    return Status::error(path + ": header length " + std::to_string(header_bytes) + " runs past the end of the " +
                         std::to_string(file_bytes) + "-byte file; truncated?");

  Json header;
  try {
    header = Json::parse(bytes + 8, bytes + 8 + header_bytes);
  } catch (const Json::exception& e) {
    return Status::error(path + ": header is not valid JSON (" + json_error_text(e) + ")");
  }
  if (!header.is_object()) return Status::error(path + ": header must be a JSON object, got " + json_describe(header));

  const char* data = bytes + 8 + header_bytes;
  const uint64_t data_bytes = file_bytes - 8 - header_bytes;
  std::vector<std::tuple<uint64_t, uint64_t, std::string>> spans;  // (begin, end, name)
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) return Status::error(path + ": __metadata__ must be an object, got " + json_describe(*it));
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string())
          return Status::error(path + ": __metadata__ value '" + m.key() + "' must be a string, got " +
                               json_describe(*m));
        f->metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    TensorInfo info;
    uint64_t begin = 0, end = 0;
    Status s = parse_entry(*it, info, begin, end, data_bytes);
    if (!s) return s.with_context(path + ": tensor '" + it.key() + "'");
    info.data = data + begin;
    if (end > begin) spans.emplace_back(begin, end, it.key());
    f->tensors_.emplace(it.key(), std::move(info));
  }

  // Overlap check: after sorting by begin, each non-empty span must start at or after the
  // furthest end seen so far. Gaps are tolerated (some writers pad for alignment).
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) {
    const auto& [pb, pe, pname] = spans[i - 1];
    const auto& [b, e, name] = spans[i];
    if (b < pe)
      return Status::error(path + ": tensors '" + pname + "' [" + std::to_string(pb) + ", " + std::to_string(pe) +
                           ") and '" + name + "' [" + std::to_string(b) + ", " + std::to_string(e) + ") overlap");
  }
  return f;
}

// ---- Checkpoint ---------------------------------------------------------------------

namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

// A shard name from an index must stay inside the checkpoint folder. Checked lexically,
// not by resolving symlinks: Hugging Face cache snapshots are folders of symlinks into a
// sibling blobs/ folder, and those must keep working.
Status check_shard_name(const std::string& shard) {
  fs::path p(shard);
  if (shard.empty() || p.is_absolute() || p.has_root_name() || p.has_root_directory())
    return Status::error("shard path \"" + shard + "\" must be a relative file name inside the checkpoint folder");
  for (const fs::path& part : p)
    if (part == "..") return Status::error("shard path \"" + shard + "\" escapes the checkpoint folder");
  return Status::ok();
}

// The error for a folder without safetensors weights; says what to do when it holds
// PyTorch pickles instead.
Status no_weights_error(const fs::path& dir) {
  std::error_code ec;
  bool has_bin = fs::exists(dir / "pytorch_model.bin", ec) || fs::exists(dir / "pytorch_model.bin.index.json", ec);
  std::string msg = dir.string() + ": no " + kSingleName + " or " + kIndexName + " found";
  if (has_bin)
    msg +=
        "; only pytorch_model.bin weights are present: convert to safetensors (e.g. load with transformers and "
        "save_pretrained(..., safe_serialization=True)); quiver does not read pickled .bin files";
  return Status::error(msg);
}

}  // namespace

Result<Checkpoint> Checkpoint::open(const std::string& path) {
  Checkpoint ck;
  ck.path_ = path;
  std::error_code ec;
  fs::path p(path);
  fs::file_status st = fs::status(p, ec);
  if (ec || !fs::exists(st)) return Status::error(path + ": no such file or directory");

  fs::path index_path, single_path;
  if (fs::is_directory(st)) {
    if (fs::exists(p / kIndexName, ec)) {
      index_path = p / kIndexName;
    } else if (fs::exists(p / kSingleName, ec)) {
      single_path = p / kSingleName;
    } else {
      return no_weights_error(p);
    }
  } else if (path.ends_with(".safetensors.index.json")) {
    index_path = p;
  } else if (path.ends_with(".safetensors")) {
    single_path = p;
  } else if (path.ends_with(".bin")) {
    return Status::error(path + ": PyTorch .bin weights are not supported: convert to safetensors");
  } else {
    return Status::error(path + ": expected a folder, a .safetensors file or a .safetensors.index.json file");
  }

  if (!single_path.empty()) {
    QV_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::open(single_path.string()));
    std::shared_ptr<SafetensorsFile> shared(std::move(file));
    for (const auto& [name, info] : shared->tensors()) ck.index_[name] = {shared.get(), &info};
    ck.files_.push_back(std::move(shared));
    return ck;
  }

  const std::string index_name = index_path.string();
  QV_ASSIGN_OR_RETURN(std::string text, read_text_file(index_name));
  QV_ASSIGN_OR_RETURN(Json index, parse_json_object(text, index_name));
  auto wm = index.find("weight_map");
  if (wm == index.end() || !wm->is_object())
    return Status::error(index_name + ": 'weight_map' must be an object mapping tensor names to shard files, got " +
                         (wm == index.end() ? std::string("nothing") : json_describe(*wm)));
  if (wm->empty()) return Status::error(index_name + ": 'weight_map' is empty");

  // Each distinct shard is opened (and validated) once, in name order.
  std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it->is_string())
      return Status::error(index_name + ": weight_map entry for tensor '" + it.key() + "' must be a file name, got " +
                           json_describe(*it));
    std::string shard = it->get<std::string>();
    QV_RETURN_IF_ERROR(check_shard_name(shard).with_context(index_name + ": tensor '" + it.key() + "'"));
    shards.emplace(shard, nullptr);
  }
  const fs::path dir = index_path.parent_path();
  for (auto& [shard, file] : shards) {
    auto opened = SafetensorsFile::open((dir / shard).string());
    if (!opened) return opened.status().with_context(index_name + ": shard \"" + shard + "\"");
    file = std::shared_ptr<SafetensorsFile>(std::move(opened).value());
    ck.files_.push_back(file);
  }
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    const SafetensorsFile& file = *shards.at(it->get<std::string>());
    auto t = file.tensors().find(it.key());
    if (t == file.tensors().end())
      return Status::error(index_name + ": tensor '" + it.key() + "' is listed in shard \"" + it->get<std::string>() +
                           "\" but that file does not contain it");
    ck.index_[it.key()] = {&file, &t->second};
  }
  return ck;
}

bool Checkpoint::has(const std::string& name) const { return index_.count(name) != 0; }

std::optional<std::vector<int64_t>> Checkpoint::shape_of(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) return std::nullopt;
  return it->second.second->shape;
}

Result<Tensor> Checkpoint::get(const std::string& name, const std::vector<int64_t>& shape, bool allow_fp8) const {
  auto it = index_.find(name);
  if (it == index_.end()) return Status::error(path_ + ": tensor '" + name + "' not found in the checkpoint");
  const auto& [file, info] = it->second;
  const std::string where = file->path() + ": tensor '" + name + "'";
  if (!info->dtype_known || info->dtype == DType::kI32 || (info->dtype == DType::kF8E4M3 && !allow_fp8))
    return Status::error(where + " has dtype " + info->file_dtype + "; weights must be F32, F16 or BF16" +
                         (allow_fp8 ? ", or F8_E4M3" : ""));
  if (info->shape != shape)
    return Status::error(where + " has shape " + shape_text(info->shape) + ", expected " + shape_text(shape));
  if (shape.size() > static_cast<size_t>(Tensor::kMaxDims))
    return Status::error(where + " has " + std::to_string(shape.size()) + " dimensions; at most 4 are supported");
  // Kernels read weight views as float / uint16 arrays in place, which needs element
  // alignment; every safetensors writer pads the header to 8 bytes, so only a hand-made
  // file gets here.
  if (reinterpret_cast<uintptr_t>(info->data) % dtype_size(info->dtype) != 0)
    return Status::error(where + " is not aligned to its " + std::to_string(dtype_size(info->dtype)) +
                         "-byte elements (header length not a multiple of 8?); re-save it with the safetensors library");
  Tensor t;
  // The mapping is PROT_READ; Tensor::data is non-const only because the same struct also
  // describes writable buffers. Nothing may write through weight views.
  t.data = const_cast<void*>(info->data);
  t.dtype = info->dtype;
  t.device = Device::kCpu;
  t.ndim = static_cast<int>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) t.shape[i] = shape[i];
  return t;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [name, entry] : index_) out.push_back(name);
  return out;
}

}  // namespace quiver
