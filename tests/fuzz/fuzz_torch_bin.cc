// libFuzzer target for the torch.save reader: the zip directory, the restricted unpickler
// and the tensor checks (src/io/zip_reader.cc, torch_pickle.cc, torch_file.cc). Each input
// is read both as a whole checkpoint and as a bare data.pkl, since the archive's CRC-32s
// reject nearly every mutation of a pickle that sits inside one. Not part of the CMake
// build: tools/fuzz.sh torch_bin compiles it with -fsanitize=fuzzer,address,undefined.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "io/torch_file.h"
#include "io/torch_pickle.h"

namespace {

// Every accepted tensor must be readable in full: ASan reports any view past its bytes.
void check_tensors(const quiver::TorchFile& f) {
  for (const auto& [name, t] : f.tensors()) {
    size_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) __builtin_trap();
      numel *= static_cast<size_t>(d);
    }
    if (numel * quiver::dtype_size(t.dtype) != t.bytes) __builtin_trap();
    volatile float sink = 0;
    for (size_t i = 0; i < numel; ++i) sink = sink + quiver::load_as_f32(t.data, t.dtype, i);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = quiver::TorchFile::parse(data, size, "fuzz.bin");
  if (file.is_ok()) {
    check_tensors(*file.value());
  } else if (file.message().empty()) {
    __builtin_trap();
  }
  auto pickled = quiver::unpickle_state_dict(std::string_view(reinterpret_cast<const char*>(data), size));
  if (pickled.is_ok()) {
    for (const auto& t : pickled.value())
      if (t.shape.size() != t.stride.size()) __builtin_trap();
  } else if (pickled.message().empty()) {
    __builtin_trap();
  }
  return 0;
}
