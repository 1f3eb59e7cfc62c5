// link: qv_io
// Safetensors reader: files are written byte by byte here (header JSON + data), so every
// malformed case is exactly the one named, and every error must name file, tensor and cause.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/safetensors.h"

namespace quiver {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// Raw bytes of a safetensors file: 8-byte little-endian length, header, data section.
std::string raw_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

template <typename T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

struct Spec {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string data;
};

// A well-formed file from tensor specs laid out back to back (offsets computed here).
std::string build(const std::vector<Spec>& specs, const Json& metadata = nullptr) {
  Json header = Json::object();
  std::string data;
  for (const Spec& s : specs) {
    header[s.name] = {
        {"dtype", s.dtype}, {"shape", s.shape}, {"data_offsets", {data.size(), data.size() + s.data.size()}}};
    data += s.data;
  }
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  while (text.size() % 8 != 0) text += ' ';  // as every writer does: the data stays aligned
  return raw_file(text, data);
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "quiver_st_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string write(const std::string& name, const std::string& bytes) {
    fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << bytes;
    return p.string();
  }
  // Opens `bytes` written as NAME and returns the error message (fails if it opened).
  std::string open_error(const std::string& bytes, const std::string& name = "bad.safetensors") {
    std::string path = write(name, bytes);
    auto r = SafetensorsFile::open(path);
    EXPECT_FALSE(r.is_ok()) << "expected an error for " << name;
    if (r.is_ok()) return "";
    EXPECT_NE(r.message().find(path), std::string::npos) << "error does not name the file: " << r.message();
    return r.message();
  }
  std::string open_header_error(const std::string& header, const std::string& data = std::string(16, '\0')) {
    return open_error(raw_file(header, data));
  }
  fs::path dir_;
};

#define EXPECT_HAS(haystack, needle) EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

const std::vector<float> kSix = {0.f, 1.f, -2.5f, 3.25f, 1e-3f, 65504.f};

// ---- good files ----------------------------------------------------------------------

TEST_F(SafetensorsTest, ReadsF32Values) {
  std::string path = write("m.safetensors", build({{"w", "F32", {2, 3}, bytes_of(kSix)}}));
  auto ck = Checkpoint::open(path);
  ASSERT_TRUE(ck.is_ok()) << ck.message();
  ASSERT_TRUE(ck->has("w"));
  auto t = ck->get("w", {2, 3});
  ASSERT_TRUE(t.is_ok()) << t.message();
  EXPECT_EQ(t->dtype, DType::kF32);
  EXPECT_EQ(t->device, Device::kCpu);
  EXPECT_EQ(t->ndim, 2);
  EXPECT_EQ(t->shape_string(), "[2, 3]");
  for (size_t i = 0; i < kSix.size(); ++i) EXPECT_EQ(t->ptr<float>()[i], kSix[i]);
}

TEST_F(SafetensorsTest, ReadsF16Values) {
  std::vector<uint16_t> h;
  for (float f : kSix) h.push_back(f32_to_f16(f));
  std::string path = write("m.safetensors", build({{"w", "F16", {3, 2}, bytes_of(h)}}));
  auto ck = Checkpoint::open(path);
  ASSERT_TRUE(ck.is_ok()) << ck.message();
  auto t = ck->get("w", {3, 2});
  ASSERT_TRUE(t.is_ok()) << t.message();
  EXPECT_EQ(t->dtype, DType::kF16);
  EXPECT_EQ(load_as_f32(t->data, t->dtype, 0), 0.f);
  EXPECT_EQ(load_as_f32(t->data, t->dtype, 2), -2.5f);
  EXPECT_EQ(load_as_f32(t->data, t->dtype, 3), 3.25f);
  EXPECT_NEAR(load_as_f32(t->data, t->dtype, 4), 1e-3f, 1e-6f);
  EXPECT_EQ(load_as_f32(t->data, t->dtype, 5), 65504.f);
}

TEST_F(SafetensorsTest, ReadsBF16Values) {
  std::vector<uint16_t> h;
  for (float f : kSix) h.push_back(f32_to_bf16(f));
  std::string path = write("m.safetensors", build({{"w", "BF16", {6}, bytes_of(h)}}));
  auto ck = Checkpoint::open(path);
  ASSERT_TRUE(ck.is_ok()) << ck.message();
  auto t = ck->get("w", {6});
  ASSERT_TRUE(t.is_ok()) << t.message();
  EXPECT_EQ(t->dtype, DType::kBF16);
  EXPECT_EQ(load_as_f32(t->data, t->dtype, 1), 1.f);
  EXPECT_EQ(load_as_f32(t->data, t->dtype, 2), -2.5f);
  EXPECT_EQ(load_as_f32(t->data, t->dtype, 3), 3.25f);
  EXPECT_EQ(load_as_f32(t->data, t->dtype, 5), 65536.f);  // 65504 rounds to 2^16 in bf16
}

TEST_F(SafetensorsTest, FileLevelInfoAndMetadata) {
  std::vector<int32_t> ids = {7, 8};
  std::string bytes = build({{"a", "F32", {2}, bytes_of(std::vector<float>{1, 2})},
                             {"ids", "I32", {2}, bytes_of(ids)},
                             {"empty", "F32", {0, 4}, ""},
                             {"scalar", "F32", {}, bytes_of(std::vector<float>{9})}},
                            Json{{"format", "pt"}});
  std::string path = write("m.safetensors", bytes);
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.message();
  EXPECT_EQ((*f)->path(), path);
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  ASSERT_EQ((*f)->tensors().size(), 4u);
  const TensorInfo& a = (*f)->tensors().at("a");
  EXPECT_EQ(a.bytes, 8u);
  EXPECT_EQ(a.file_dtype, "F32");
  EXPECT_EQ(static_cast<const float*>(a.data)[1], 2.f);
  EXPECT_EQ((*f)->tensors().at("ids").dtype, DType::kI32);
  EXPECT_EQ((*f)->tensors().at("empty").bytes, 0u);
  EXPECT_EQ(static_cast<const float*>((*f)->tensors().at("scalar").data)[0], 9.f);

  auto ck = Checkpoint::open(path);
  ASSERT_TRUE(ck.is_ok()) << ck.message();
  auto s = ck->get("scalar", {});
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(s->ndim, 0);
  EXPECT_EQ(s->ptr<float>()[0], 9.f);
}

TEST_F(SafetensorsTest, HeaderPaddedWithSpacesIsAccepted) {
  // Writers pad the header with spaces so the data section is 8-byte aligned.
  Json h = {{"w", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0, 4}}}}};
  std::string header = h.dump() + " ";
  while (header.size() % 8 != 0) header += ' ';
  auto f = SafetensorsFile::open(write("m.safetensors", raw_file(header, bytes_of(std::vector<float>{4.f}))));
  ASSERT_TRUE(f.is_ok()) << f.message();
  EXPECT_EQ(static_cast<const float*>((*f)->tensors().at("w").data)[0], 4.f);
}

TEST_F(SafetensorsTest, UnalignedWeightViewsAreRefused) {
  Json h = {{"w", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0, 4}}}}};
  std::string header = h.dump();
  if (header.size() % 2 == 0) header += ' ';
  auto ck = Checkpoint::open(write("m.safetensors", raw_file(header, bytes_of(std::vector<float>{4.f}))));
  ASSERT_TRUE(ck.is_ok()) << ck.message();
  auto t = ck->get("w", {1});
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.message().find("not aligned"), std::string::npos) << t.message();
}

TEST_F(SafetensorsTest, FolderWithModelSafetensors) {
  write("model/model.safetensors", build({{"w", "F32", {2}, bytes_of(std::vector<float>{1, 2})}}));
  auto ck = Checkpoint::open((dir_ / "model").string());
  ASSERT_TRUE(ck.is_ok()) << ck.message();
  EXPECT_EQ(ck->names(), std::vector<std::string>{"w"});
}

TEST_F(SafetensorsTest, ShardedCheckpoint) {
  write("m/model-00001-of-00002.safetensors", build({{"a", "F32", {2}, bytes_of(std::vector<float>{1, 2})},
                                                     {"b", "F32", {1}, bytes_of(std::vector<float>{3})}}));
  std::vector<uint16_t> c = {f32_to_bf16(5.f), f32_to_bf16(6.f)};
  write("m/model-00002-of-00002.safetensors", build({{"c", "BF16", {1, 2}, bytes_of(c)}}));
  Json index = {{"metadata", {{"total_size", 16}}},
                {"weight_map",
                 {{"a", "model-00001-of-00002.safetensors"},
                  {"b", "model-00001-of-00002.safetensors"},
                  {"c", "model-00002-of-00002.safetensors"}}}};
  write("m/model.safetensors.index.json", index.dump());
  // An index wins over a stray single file in the same folder.
  write("m/model.safetensors", "garbage");
  auto ck = Checkpoint::open((dir_ / "m").string());
  ASSERT_TRUE(ck.is_ok()) << ck.message();
  EXPECT_EQ(ck->names(), (std::vector<std::string>{"a", "b", "c"}));
  auto b = ck->get("b", {1});
  ASSERT_TRUE(b.is_ok()) << b.message();
  EXPECT_EQ(b->ptr<float>()[0], 3.f);
  auto t = ck->get("c", {1, 2});
  ASSERT_TRUE(t.is_ok()) << t.message();
  EXPECT_EQ(load_as_f32(t->data, t->dtype, 1), 6.f);

  // Copies share the mappings: views stay valid after the original is gone.
  Tensor view;
  {
    Checkpoint copy = ck.value();
    ck = Status::error("dropped");
    view = copy.get("a", {2}).value();
    EXPECT_EQ(view.ptr<float>()[1], 2.f);
  }
}

// ---- malformed files -------------------------------------------------------------------

TEST_F(SafetensorsTest, TruncatedFileShorterThan8Bytes) {
  EXPECT_HAS(open_error("abc"), "shorter than the 8-byte header length");
}

TEST_F(SafetensorsTest, HeaderLengthPastEndOfFile) {
  std::string bytes = raw_file("{}", "");
  uint64_t n = 1000;
  std::memcpy(bytes.data(), &n, 8);
  EXPECT_HAS(open_error(bytes), "runs past the end");
}

TEST_F(SafetensorsTest, HeaderLengthAbove100MB) {
  std::string bytes = raw_file("{}", "");
  uint64_t n = 200ull * 1000 * 1000;
  std::memcpy(bytes.data(), &n, 8);
  EXPECT_HAS(open_error(bytes), "exceeds the 100 MB limit");
}

TEST_F(SafetensorsTest, HeaderNotValidJson) { EXPECT_HAS(open_header_error("{\"w\": {\"dtype\": "), "not valid JSON"); }

TEST_F(SafetensorsTest, HeaderNumberOutOfRange) {
  EXPECT_HAS(open_header_error("{\"__metadata__\": {}, \"w\": {\"data_offsets\": [0, 11e1111111111111111111111111]}}"),
             "header is not valid JSON (a number out of range)");
}

TEST_F(SafetensorsTest, HeaderNotAnObject) { EXPECT_HAS(open_header_error("[1, 2]"), "header must be a JSON object"); }

TEST_F(SafetensorsTest, EntryNotAnObject) {
  std::string msg = open_header_error(R"({"w": [1, 2]})");
  EXPECT_HAS(msg, "tensor 'w'");
  EXPECT_HAS(msg, "entry must be an object");
}

TEST_F(SafetensorsTest, UnknownDtype) {
  std::string msg = open_header_error(R"({"w": {"dtype": "F12", "shape": [1], "data_offsets": [0, 4]}})");
  EXPECT_HAS(msg, "tensor 'w'");
  EXPECT_HAS(msg, "unknown dtype \"F12\"");
}

TEST_F(SafetensorsTest, ShapeNotListOfNonNegativeInts) {
  for (const char* shape : {"[-1]", "[2.0]", "\"2\"", "[[2]]"}) {
    std::string h = std::string(R"({"w": {"dtype": "F32", "shape": )") + shape + R"(, "data_offsets": [0, 8]}})";
    std::string msg = open_header_error(h);
    EXPECT_HAS(msg, "tensor 'w'");
    EXPECT_HAS(msg, "'shape' must be a list of non-negative integers");
  }
}

TEST_F(SafetensorsTest, DataOffsetsNotTwoInts) {
  for (const char* off : {"[0]", "[0, 4, 8]", "[0, 4.0]", "[-4, 0]", "\"0,4\""}) {
    std::string h = std::string(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": )") + off + "}}";
    std::string msg = open_header_error(h);
    EXPECT_HAS(msg, "tensor 'w'");
    EXPECT_HAS(msg, "'data_offsets' must be two non-negative integers");
  }
}

TEST_F(SafetensorsTest, DataOffsetsBeginAfterEnd) {
  std::string msg = open_header_error(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})");
  EXPECT_HAS(msg, "tensor 'w'");
  EXPECT_HAS(msg, "begin 8 > end 4");
}

TEST_F(SafetensorsTest, DataOffsetsOutsideDataSection) {
  std::string msg = open_header_error(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [12, 20]}})");
  EXPECT_HAS(msg, "tensor 'w'");
  EXPECT_HAS(msg, "beyond the data section (16 bytes)");
}

TEST_F(SafetensorsTest, ByteSizeMismatch) {
  std::string msg = open_header_error(R"({"w": {"dtype": "F16", "shape": [2, 3], "data_offsets": [0, 16]}})");
  EXPECT_HAS(msg, "tensor 'w'");
  EXPECT_HAS(msg, "span 16 bytes but F16 [2, 3] needs 12");
}

TEST_F(SafetensorsTest, OverlappingTensors) {
  std::string msg = open_header_error(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                         "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})");
  EXPECT_HAS(msg, "'a' [0, 8)");
  EXPECT_HAS(msg, "'b' [4, 12)");
  EXPECT_HAS(msg, "overlap");
}

TEST_F(SafetensorsTest, MetadataMustBeStringMap) {
  EXPECT_HAS(open_header_error(R"({"__metadata__": {"format": 1}})"), "__metadata__ value 'format' must be a string");
  EXPECT_HAS(open_header_error(R"({"__metadata__": "pt"})"), "__metadata__ must be an object");
}

// ---- Checkpoint-level errors -------------------------------------------------------------

TEST_F(SafetensorsTest, MissingTensor) {
  std::string path = write("m.safetensors", build({{"w", "F32", {1}, bytes_of(std::vector<float>{1})}}));
  auto ck = Checkpoint::open(path);
  ASSERT_TRUE(ck.is_ok()) << ck.message();
  EXPECT_FALSE(ck->has("model.norm.weight"));
  auto t = ck->get("model.norm.weight", {1});
  ASSERT_FALSE(t.is_ok());
  EXPECT_HAS(t.message(), "tensor 'model.norm.weight' not found");
  EXPECT_HAS(t.message(), path);
}

TEST_F(SafetensorsTest, WrongShapeNamesTensorAndBothShapes) {
  std::string path = write("m.safetensors", build({{"w", "F32", {2, 3}, bytes_of(kSix)}}));
  auto ck = Checkpoint::open(path);
  ASSERT_TRUE(ck.is_ok()) << ck.message();
  auto t = ck->get("w", {3, 2});
  ASSERT_FALSE(t.is_ok());
  EXPECT_HAS(t.message(), path + ": tensor 'w' has shape [2, 3], expected [3, 2]");
}

TEST_F(SafetensorsTest, NonFloatDtypeRejectedAtGet) {
  std::vector<int64_t> ids = {1, 2};
  std::string path =
      write("m.safetensors",
            build({{"ids", "I64", {2}, bytes_of(ids)}, {"i32", "I32", {1}, bytes_of(std::vector<int32_t>{1})}}));
  auto ck = Checkpoint::open(path);
  ASSERT_TRUE(ck.is_ok()) << ck.message();
  auto t = ck->get("ids", {2});
  ASSERT_FALSE(t.is_ok());
  EXPECT_HAS(t.message(), "tensor 'ids' has dtype I64; weights must be F32, F16 or BF16");
  EXPECT_HAS(ck->get("i32", {1}).message(), "dtype I32");
}

TEST_F(SafetensorsTest, MoreThanFourDimsRejectedAtGet) {
  std::string path = write("m.safetensors", build({{"w", "F32", {1, 1, 1, 1, 1}, bytes_of(std::vector<float>{1})}}));
  auto ck = Checkpoint::open(path);
  ASSERT_TRUE(ck.is_ok()) << ck.message();
  EXPECT_HAS(ck->get("w", {1, 1, 1, 1, 1}).message(), "at most 4");
}

TEST_F(SafetensorsTest, ShardedIndexPointsToMissingShard) {
  write("m/model-00001-of-00002.safetensors", build({{"a", "F32", {1}, bytes_of(std::vector<float>{1})}}));
  Json index = {{"weight_map", {{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00002-of-00002.safetensors"}}}};
  write("m/model.safetensors.index.json", index.dump());
  auto ck = Checkpoint::open((dir_ / "m").string());
  ASSERT_FALSE(ck.is_ok());
  EXPECT_HAS(ck.message(), "model.safetensors.index.json: shard \"model-00002-of-00002.safetensors\"");
  EXPECT_HAS(ck.message(), "cannot open");
}

TEST_F(SafetensorsTest, ShardedTensorNotInItsShard) {
  write("m/s1.safetensors", build({{"a", "F32", {1}, bytes_of(std::vector<float>{1})}}));
  write("m/s2.safetensors", build({{"b", "F32", {1}, bytes_of(std::vector<float>{2})}}));
  Json index = {{"weight_map", {{"a", "s1.safetensors"}, {"b", "s1.safetensors"}}}};
  write("m/model.safetensors.index.json", index.dump());
  auto ck = Checkpoint::open((dir_ / "m").string());
  ASSERT_FALSE(ck.is_ok());
  EXPECT_HAS(ck.message(), "tensor 'b' is listed in shard \"s1.safetensors\" but that file does not contain it");
}

TEST_F(SafetensorsTest, ShardPathMustStayInsideFolder) {
  write("outside.safetensors", build({{"a", "F32", {1}, bytes_of(std::vector<float>{1})}}));
  for (std::string shard : {std::string("../outside.safetensors"), (dir_ / "outside.safetensors").string(),
                            std::string("sub/../../outside.safetensors")}) {
    Json index = {{"weight_map", {{"a", shard}}}};
    write("m/model.safetensors.index.json", index.dump());
    auto ck = Checkpoint::open((dir_ / "m").string());
    ASSERT_FALSE(ck.is_ok()) << shard;
    EXPECT_HAS(ck.message(), "tensor 'a'");
    EXPECT_HAS(ck.message(), "shard path");
  }
}

TEST_F(SafetensorsTest, IndexWithoutWeightMap) {
  write("m/model.safetensors.index.json", R"({"metadata": {}})");
  auto ck = Checkpoint::open((dir_ / "m").string());
  ASSERT_FALSE(ck.is_ok());
  EXPECT_HAS(ck.message(), "'weight_map' must be an object");
}

TEST_F(SafetensorsTest, BadShardErrorNamesIndexAndShard) {
  write("m/s1.safetensors", "tiny");
  write("m/model.safetensors.index.json", Json{{"weight_map", {{"a", "s1.safetensors"}}}}.dump());
  auto ck = Checkpoint::open((dir_ / "m").string());
  ASSERT_FALSE(ck.is_ok());
  EXPECT_HAS(ck.message(), "shard \"s1.safetensors\"");
  EXPECT_HAS(ck.message(), "shorter than the 8-byte header length");
}

TEST_F(SafetensorsTest, FolderWithoutWeights) {
  fs::create_directories(dir_ / "empty");
  auto ck = Checkpoint::open((dir_ / "empty").string());
  ASSERT_FALSE(ck.is_ok());
  EXPECT_HAS(ck.message(), "no model.safetensors or model.safetensors.index.json found");
}

TEST_F(SafetensorsTest, FolderWithOnlyPytorchBinSaysConvert) {
  write("pt/pytorch_model.bin", "pickle");
  auto ck = Checkpoint::open((dir_ / "pt").string());
  ASSERT_FALSE(ck.is_ok());
  EXPECT_HAS(ck.message(), "convert to safetensors");
  EXPECT_HAS(Checkpoint::open((dir_ / "pt/pytorch_model.bin").string()).message(), "convert to safetensors");
}

TEST_F(SafetensorsTest, MissingPath) {
  auto ck = Checkpoint::open((dir_ / "nope").string());
  ASSERT_FALSE(ck.is_ok());
  EXPECT_HAS(ck.message(), "no such file or directory");
}

}  // namespace
}  // namespace quiver
