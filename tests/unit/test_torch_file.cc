// link: qv_io
// torch.save checkpoints: the small files in tests/fuzz/torch_bin_seeds (written by
// tools/make_torch_bin.py seeds) must each load to the stated tensors or fail with the
// stated reason; hand-written pickles and zips probe the unpickler's and the zip reader's
// limits; and the .bin twin of a fixture adapter must load to the same weights.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/model_config.h"
#include "io/peft_adapter.h"
#include "io/torch_file.h"
#include "io/torch_pickle.h"
#include "io/zip_reader.h"

namespace quiver {
namespace {

namespace fs = std::filesystem;
using namespace std::string_literals;

fs::path seed(const std::string& name) { return fs::path(QUIVER_SOURCE_DIR) / "tests/fuzz/torch_bin_seeds" / name; }

std::vector<float> values(const TensorInfo& t) {
  size_t n = 1;
  for (int64_t d : t.shape) n *= static_cast<size_t>(d);
  std::vector<float> out;
  for (size_t i = 0; i < n; ++i) out.push_back(load_as_f32(t.data, t.dtype, i));
  return out;
}

// Asserts `file` holds a = [2, 3] 0.5 * i and b = [4] {-1, 2, -3, 4}, as in make_seeds().
void expect_two(const std::string& file) {
  SCOPED_TRACE(file);
  auto r = TorchFile::open(seed(file).string());
  ASSERT_TRUE(r.is_ok()) << r.message();
  const auto& t = r.value()->tensors();
  ASSERT_EQ(t.size(), 2u);
  ASSERT_TRUE(t.count("a") && t.count("b"));
  EXPECT_EQ(t.at("a").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t.at("a").file_dtype, "F32");
  EXPECT_EQ(t.at("a").bytes, 24u);
  EXPECT_EQ(values(t.at("a")), (std::vector<float>{0, 0.5, 1, 1.5, 2, 2.5}));
  EXPECT_EQ(t.at("b").shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(values(t.at("b")), (std::vector<float>{-1, 2, -3, 4}));
}

TEST(TorchFile, LoadsTheLayoutsTorchSaveWrites) {
  for (const char* f : {"ok_f32.bin", "ok_protocol4.bin", "ok_unaligned.bin", "ok_legacy_calls.bin",
                        "ok_ordered_dict.bin"})
    expect_two(f);
}

TEST(TorchFile, UnalignedStoragesAreCopiedToAlignedMemory) {
  auto r = TorchFile::open(seed("ok_unaligned.bin").string());
  ASSERT_TRUE(r.is_ok()) << r.message();
  for (const auto& [name, t] : r.value()->tensors()) EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 4, 0u) << name;
}

TEST(TorchFile, HalfAndBFloat16) {
  auto r = TorchFile::open(seed("ok_f16_bf16.bin").string());
  ASSERT_TRUE(r.is_ok()) << r.message();
  const auto& t = r.value()->tensors();
  EXPECT_EQ(t.at("h").dtype, DType::kF16);
  EXPECT_EQ(t.at("h").file_dtype, "F16");
  EXPECT_EQ(values(t.at("h")), (std::vector<float>{1, 2, -3}));
  EXPECT_EQ(t.at("g").dtype, DType::kBF16);
  EXPECT_EQ(t.at("g").shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(values(t.at("g")), (std::vector<float>{1, -3}));
}

TEST(TorchFile, ViewsIntoOneStorage) {
  auto r = TorchFile::open(seed("ok_shared_storage.bin").string());
  ASSERT_TRUE(r.is_ok()) << r.message();
  const auto& t = r.value()->tensors();
  EXPECT_EQ(values(t.at("row0")), (std::vector<float>{0, 0.5, 1}));
  EXPECT_EQ(values(t.at("row1")), (std::vector<float>{1.5, 2, 2.5}));
  EXPECT_EQ(t.at("row1").shape, (std::vector<int64_t>{1, 3}));
}

TEST(TorchFile, RefusesEachBrokenSeedWithItsReason) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"bad_byteorder.bin", {"byteorder is 'big'"}},
      {"bad_compressed.bin", {"zip entry 'archive/data/0'", "compressed"}},
      {"bad_crc.bin", {"zip entry 'archive/data/0'", "CRC-32 mismatch"}},
      {"bad_global.bin", {"global 'os.system' is not allowed"}},
      {"bad_hooks.bin", {"backward hooks"}},
      {"bad_legacy.bin", {"legacy torch.save format"}},
      {"bad_missing_storage.bin", {"tensor 'b'", "archive/data/1 is missing"}},
      {"bad_nested.bin", {"'outer' is a dict, not a tensor"}},
      {"bad_offset.bin", {"tensor 'a'", "at offset 3 runs past its storage '0' of 6 elements"}},
      {"bad_opcode.bin", {"opcode 0x5d is not supported"}},
      {"bad_overlap.bin", {"zip entries overlap at offset 39"}},
      {"bad_storage_size.bin", {"tensor 'a'", "storage '0' holds 24 bytes", "7 F32 elements"}},
      {"bad_storage_type.bin", {"torch.LongStorage is not supported"}},
      {"bad_stride.bin", {"tensor 'a'", "stride [1, 3] for size [3, 2]", "not contiguous"}},
      {"bad_truncated.bin", {"no end-of-central-directory record"}},
  };
  size_t seen = 0;
  for (const auto& entry : fs::directory_iterator(seed("").parent_path()))
    seen += entry.path().filename().string().rfind("bad_", 0) == 0;
  EXPECT_EQ(seen, cases.size()) << "every broken seed needs an expected reason here";
  for (const auto& [file, parts] : cases) {
    auto r = TorchFile::open(seed(file).string());
    ASSERT_FALSE(r.is_ok()) << file;
    EXPECT_EQ(r.message().rfind(seed(file).string(), 0), 0u) << r.message();
    for (const auto& p : parts) EXPECT_NE(r.message().find(p), std::string::npos) << file << ": " << r.message();
  }
}

Result<std::vector<PickledTensor>> unpickle(const std::string& body) {
  return unpickle_state_dict(std::string("\x80\x02", 2) + body);
}

TEST(TorchPickle, EmptyStateDict) {
  auto r = unpickle("}q\x00."s);
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_TRUE(r.value().empty());
}

TEST(TorchPickle, RefusesMalformedAndHostilePickles) {
  std::string deep = ")";
  for (int i = 0; i < 40; ++i) deep += "\x85";
  std::string many, refs = "X\x01\x00\x00\x00" "a" "q\x00"s, marks, long_key = "}X\x00\x08\x00\x00"s;
  for (int i = 0; i < 300000; ++i) many += "K\x01", refs += "h\x00"s, marks += "(";
  long_key += std::string(2048, 'k') + "K\x01s."s;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"}X\xff\xff\xff\x7f"s, "truncated"},
      {"}"s, "ends without STOP"},
      {"h\x05"s, "memo entry 5 was never stored"},
      {"s"s, "stack underflow"},
      {"(u."s, "stack underflow"},
      {"t"s, "no MARK"},
      {"}}."s, "STOP with 2 values"},
      {"K\x01."s, "holds a int, not a state dict"},
      {"\x8a\x09"s + std::string(9, '\0'), "integer of 9 bytes"},
      {"cbuiltins\neval\n"s, "global 'builtins.eval' is not allowed"},
      {"ctorch\nload\n"s, "global 'torch.load' is not allowed"},
      {"\x8c\x05posix\x8c\x06system\x93"s, "global 'posix.system' is not allowed"},
      {"ccollections\nOrderedDict\nK\x01\x85R"s, "OrderedDict called with arguments"},
      {"K\x01)R"s, "REDUCE on a int"},
      // A dict made to contain itself (a reference cycle) is refused, as is one changed after use.
      {"}q\x00X\x01\x00\x00\x00kh\x00s."s, "already part of another value"},
      {"}q\x00\x85h\x00X\x01\x00\x00\x00kK\x01s."s, "already part of another value"},
      {deep, "nested deeper than 32"},
      {many, "more than 262144 values"},
      {refs, "more than 262144 values on the stack"},
      {marks, "more than 262144 open MARKs"},
      {long_key, "dict key longer than 1024 bytes"},
      {"\x80\x07"s, "pickle protocol 7"},
  };
  for (const auto& [body, part] : cases) {
    auto r = unpickle(body);
    ASSERT_FALSE(r.is_ok()) << part;
    EXPECT_NE(r.message().find(part), std::string::npos) << r.message();
  }
}

TEST(ZipReader, RefusesBuffersThatAreNotArchives) {
  std::vector<uint8_t> buf(100, 0);
  auto r = read_zip_directory(buf.data(), 10);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("too short"), std::string::npos) << r.message();
  r = read_zip_directory(buf.data(), buf.size());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("no end-of-central-directory"), std::string::npos) << r.message();
  // An end record claiming 65535 entries in a 0-byte directory.
  const uint8_t end[22] = {0x50, 0x4b, 0x05, 0x06, 0, 0, 0, 0, 0xff, 0xfe, 0xff, 0xfe, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  r = read_zip_directory(end, sizeof(end));
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("cannot fit"), std::string::npos) << r.message();
  EXPECT_EQ(crc32(reinterpret_cast<const uint8_t*>("123456789"), 9), 0xcbf43926u);
}

TEST(TorchFile, RefusesFilesThatAreNotCheckpoints) {
  const std::string body = "just text";
  auto r = TorchFile::parse(reinterpret_cast<const uint8_t*>(body.data()), body.size(), "x.bin");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("x.bin: not a PyTorch checkpoint"), std::string::npos) << r.message();
}

// The .bin twin (tools/make_torch_bin.py adapter) of a fixture adapter gives the same weights.
TEST(TorchFile, AdapterBinMatchesItsSafetensorsTwin) {
  const fs::path fixtures = fs::path(QUIVER_SOURCE_DIR) / "tests/fixtures";
  auto base = load_model_config((fixtures / "llama_gqa").string());
  ASSERT_TRUE(base.is_ok()) << base.message();
  auto st = load_peft_adapter((fixtures / "llama_gqa/adapters/r8_all").string(), "st", base.value(), 64);
  auto bin = load_peft_adapter((fixtures / "torch_bin/llama_gqa_r8_all").string(), "bin", base.value(), 64);
  ASSERT_TRUE(st.is_ok()) << st.message();
  ASSERT_TRUE(bin.is_ok()) << bin.message();
  ASSERT_EQ(st->layers.size(), bin->layers.size());
  int modules = 0;
  for (size_t l = 0; l < st->layers.size(); ++l)
    for (int t = 0; t < kNumLoraTargets; ++t) {
      ASSERT_EQ(st->layers[l][t].has_value(), bin->layers[l][t].has_value());
      if (!st->layers[l][t]) continue;
      EXPECT_EQ(st->layers[l][t]->a, bin->layers[l][t]->a);
      EXPECT_EQ(st->layers[l][t]->b, bin->layers[l][t]->b);
      ++modules;
    }
  EXPECT_EQ(modules, 3 * kNumLoraTargets);
}

}  // namespace
}  // namespace quiver
