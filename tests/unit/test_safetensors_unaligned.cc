// link: qv_io
// A safetensors header of odd length leaves every tensor at an odd address: the values
// must still read correctly (and, in the sanitizer build, without misaligned loads).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "io/safetensors.h"

namespace quiver {
namespace {

TEST(SafetensorsUnaligned, OddHeaderLengthReadsEveryDtype) {
  const std::string path = (std::filesystem::temp_directory_path() / "quiver_unaligned.safetensors").string();
  const std::vector<float> values = {1.0f, -2.5f, 0.375f};
  std::string data;
  nlohmann::ordered_json header;
  for (const char* dtype : {"BF16", "F16", "F32"}) {
    const size_t begin = data.size();
    for (float v : values) {
      if (std::string(dtype) == "F32") {
        data.append(reinterpret_cast<const char*>(&v), 4);
      } else {
        const uint16_t h = std::string(dtype) == "BF16" ? f32_to_bf16(v) : f32_to_f16(v);
        data.append(reinterpret_cast<const char*>(&h), 2);
      }
    }
    header[std::string("t_") + dtype] = {{"dtype", dtype}, {"shape", {3}}, {"data_offsets", {begin, data.size()}}};
  }
  std::string h = header.dump();
  if (h.size() % 2 == 0) h += ' ';  // odd on purpose
  const uint64_t n = h.size();
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << h << data;
  }
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.is_ok()) << file.message();
  for (const char* dtype : {"BF16", "F16", "F32"}) {
    auto it = file.value()->tensors().find(std::string("t_") + dtype);
    ASSERT_NE(it, file.value()->tensors().end()) << dtype;
    const TensorInfo* t = &it->second;
    EXPECT_NE(reinterpret_cast<uintptr_t>(t->data) % 2, 0u) << "the test must produce an odd address";
    for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(load_as_f32(t->data, t->dtype, i), values[i]) << dtype << " " << i;
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace quiver
