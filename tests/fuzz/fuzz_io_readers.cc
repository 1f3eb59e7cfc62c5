// libFuzzer target for the readers of model files: the safetensors header, config.json and
// adapter_config.json. The first input byte picks the reader. Every input must end in a
// value or an error Status; a crash, a sanitizer report or an exception is a finding.
// Built and run for a bounded time by tools/fuzz.sh io (CTest: fuzz_io).
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "io/model_config.h"
#include "io/peft_adapter.h"
#include "io/safetensors.h"
#include "fuzz/fuzz_scratch.h"
#include "unit/lora_test_util.h"

namespace {

namespace fs = std::filesystem;

// The adapter reader wants a folder: one per process, holding a valid two-layer adapter's
// weights, whose adapter_config.json each input replaces.
const std::string& adapter_dir() {
  static const std::string dir = [] {
    const fs::path d = quiver::fuzz::process_dir("adapter");
    // q_proj only, rank 1, of lora_test::tiny_config (hidden 8, q_size 12): A [1, 8], B [12, 1].
    std::string header = R"({"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight":)"
                         R"({"dtype":"F32","shape":[1,8],"data_offsets":[0,32]},)"
                         R"("base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight":)"
                         R"({"dtype":"F32","shape":[12,1],"data_offsets":[32,80]}})";
    while (header.size() % 8) header += ' ';
    const uint64_t n = header.size();
    std::ofstream out(d / "adapter_model.safetensors", std::ios::binary);
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << header << std::string(80, '\0');
    return d.string();
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {  // a whole .safetensors file, from memory
      const int fd = memfd_create("fuzz.safetensors", MFD_CLOEXEC);
      if (fd < 0) return 0;
      if (write(fd, body.data(), body.size()) != static_cast<ssize_t>(body.size())) {
        close(fd);
        return 0;
      }
      auto f = quiver::SafetensorsFile::open_fd(fd, "fuzz.safetensors");
      if (f.is_ok())
        for (const auto& [name, t] : f.value()->tensors())
          if (t.dtype_known && t.bytes > 0) (void)quiver::load_as_f32(t.data, t.dtype, 0);
      break;
    }
    case 1:
      (void)quiver::parse_model_config(body, "");
      break;
    case 2: {
      std::ofstream(adapter_dir() + "/adapter_config.json", std::ios::binary) << body;
      (void)quiver::load_peft_adapter(adapter_dir(), "fuzz", quiver::lora_test::tiny_config(), 8);
      break;
    }
  }
  return 0;
}
