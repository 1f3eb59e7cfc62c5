// link: qv_io
// Safetensors writer: files written here must read back through SafetensorsFile /
// Checkpoint with the same names, dtypes, shapes, values and metadata; the data section
// starts 8-byte aligned; malformed entries are refused with a message naming the tensor.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"

namespace quiver {
namespace {

namespace fs = std::filesystem;

class SafetensorsWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "quiver_stw_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }
  std::string dir_;
};

std::vector<float> ramp(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * (static_cast<float>(i) - static_cast<float>(n) / 3.f);
  return v;
}

TEST_F(SafetensorsWriterTest, RoundTripsEveryDtypeShapeAndMetadata) {
  // Odd element counts of 2-byte dtypes put later tensors at offsets that are not
  // multiples of 4: the reader must still see the bytes exactly.
  const std::vector<float> a = ramp(3 * 5, 0.25f), b = ramp(7, 0.5f), c = ramp(4 * 2, 1.f / 64), d = {3, -1, 7, 0};
  std::vector<SafetensorsEntry> entries;
  entries.push_back(make_safetensors_entry("layer.a", DType::kBF16, {3, 5}, a));
  entries.push_back(make_safetensors_entry("layer.b", DType::kF16, {7}, b));
  entries.push_back(make_safetensors_entry("layer.c", DType::kF32, {4, 2}, c));
  entries.push_back(make_safetensors_entry("ids", DType::kI32, {2, 2}, d));
  entries.push_back(make_safetensors_entry("empty", DType::kF32, {0, 4}, std::vector<float>{}));
  ASSERT_TRUE(write_safetensors(path("m.safetensors"), entries, {{"format", "pt"}, {"by", "test"}}).is_ok());

  auto f = SafetensorsFile::open(path("m.safetensors"));
  ASSERT_TRUE(f.is_ok()) << f.message();
  const auto& t = f.value()->tensors();
  ASSERT_EQ(t.size(), 5u);
  EXPECT_EQ(f.value()->metadata().at("format"), "pt");
  EXPECT_EQ(f.value()->metadata().at("by"), "test");

  const TensorInfo& ta = t.at("layer.a");
  EXPECT_EQ(ta.dtype, DType::kBF16);
  EXPECT_EQ(ta.shape, (std::vector<int64_t>{3, 5}));
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(load_as_f32(ta.data, DType::kBF16, i), bf16_to_f32(f32_to_bf16(a[i]))) << i;
  const TensorInfo& tb = t.at("layer.b");
  EXPECT_EQ(tb.dtype, DType::kF16);
  for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(load_as_f32(tb.data, DType::kF16, i), f16_to_f32(f32_to_f16(b[i]))) << i;
  const TensorInfo& tc = t.at("layer.c");
  EXPECT_EQ(tc.dtype, DType::kF32);
  EXPECT_EQ(tc.shape, (std::vector<int64_t>{4, 2}));
  for (size_t i = 0; i < c.size(); ++i) EXPECT_EQ(load_as_f32(tc.data, DType::kF32, i), c[i]) << i;
  const TensorInfo& td = t.at("ids");
  EXPECT_EQ(td.dtype, DType::kI32);
  for (size_t i = 0; i < d.size(); ++i) EXPECT_EQ(static_cast<const int32_t*>(td.data)[i], static_cast<int32_t>(d[i]));
  EXPECT_EQ(t.at("empty").bytes, 0u);

  // The same file through Checkpoint (what model and adapter loading use).
  auto ckpt = Checkpoint::open(path("m.safetensors"));
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.message();
  auto view = ckpt->get("layer.c", {4, 2});
  ASSERT_TRUE(view.is_ok()) << view.message();
  EXPECT_EQ(std::memcmp(view->data, entries[2].bytes.data(), entries[2].bytes.size()), 0);
}

TEST_F(SafetensorsWriterTest, DataSectionStartsEightByteAligned) {
  for (size_t name_len = 1; name_len <= 9; ++name_len) {
    std::vector<SafetensorsEntry> e{make_safetensors_entry(std::string(name_len, 'w'), DType::kF32, {1}, std::vector<float>{2.f})};
    auto bytes = serialize_safetensors(e);
    ASSERT_TRUE(bytes.is_ok()) << bytes.message();
    uint64_t header_len = 0;
    std::memcpy(&header_len, bytes->data(), 8);
    EXPECT_EQ(header_len % 8, 0u) << name_len;
    EXPECT_EQ(bytes->size(), 8 + header_len + 4);
  }
}

TEST_F(SafetensorsWriterTest, BigTensorRoundTripsBitExact) {
  std::vector<float> v(1 << 16);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<float>(i)) * 3.f;
  std::vector<SafetensorsEntry> e{make_safetensors_entry("w", DType::kBF16, {256, 256}, v)};
  ASSERT_TRUE(write_safetensors(path("big.safetensors"), e).is_ok());
  auto f = SafetensorsFile::open(path("big.safetensors"));
  ASSERT_TRUE(f.is_ok()) << f.message();
  const TensorInfo& t = f.value()->tensors().at("w");
  ASSERT_EQ(t.bytes, e[0].bytes.size());
  EXPECT_EQ(std::memcmp(t.data, e[0].bytes.data(), t.bytes), 0);
}

TEST_F(SafetensorsWriterTest, RefusesMalformedEntries) {
  auto msg = [](const std::vector<SafetensorsEntry>& e) {
    auto r = serialize_safetensors(e);
    return r.is_ok() ? std::string("ok") : r.message();
  };
  const std::vector<float> one = {1.f};
  auto good = make_safetensors_entry("x", DType::kF32, {1}, one);
  EXPECT_NE(msg({good, good}).find("'x' is given twice"), std::string::npos);
  auto meta = good;
  meta.name = "__metadata__";
  EXPECT_NE(msg({meta}).find("reserved"), std::string::npos);
  auto unnamed = good;
  unnamed.name.clear();
  EXPECT_NE(msg({unnamed}).find("empty name"), std::string::npos);
  auto short_bytes = good;
  short_bytes.shape = {2};
  EXPECT_NE(msg({short_bytes}).find("'x' has 4 bytes"), std::string::npos);
  auto negative = good;
  negative.shape = {-1};
  EXPECT_NE(msg({negative}).find("negative"), std::string::npos);
  EXPECT_FALSE(write_safetensors(path("no/such/dir/m.safetensors"), {good}).is_ok());
}

}  // namespace
}  // namespace quiver
