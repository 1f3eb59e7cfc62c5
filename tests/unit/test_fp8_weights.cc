// link: qv_model
// FP8 checkpoints' projection weights (model/fp8_weights.h): per-tensor and per-channel
// scales become bf16 values with row scales, per-block ones float32 dequantized values, each
// what the dequantized model holds; and the refusals name the tensor. --quantization fp8's
// per-channel quantization on the host backends.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/ref/ref_backend.h"
#include "e2e/scratch.h"
#include "io/safetensors_writer.h"
#include "model/fp8_weights.h"

namespace quiver {
namespace {

constexpr const char* kName = "model.layers.0.mlp.down_proj.weight";
#define EXPECT_HAS(haystack, needle) EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

// A [4, 6] e4m3 weight of values 0.5 * (i % 7 - 3) and a scale tensor; returns the opened file.
Checkpoint write(const std::string& tag, const std::string& scale_name, std::vector<int64_t> scale_shape,
                 std::vector<float> scale, bool nan = false) {
  std::vector<float> q(24);
  for (size_t i = 0; i < q.size(); ++i) q[i] = 0.5f * static_cast<float>(static_cast<int>(i % 7) - 3);
  std::vector<SafetensorsEntry> e = {make_safetensors_entry(kName, DType::kF8E4M3, {4, 6}, q),
                                     make_safetensors_entry(scale_name, DType::kF32, scale_shape, scale)};
  if (nan) e[0].bytes[5] = 0x7f;
  const auto path = testing::scratch("fp8_" + tag + ".safetensors");
  EXPECT_TRUE(write_safetensors(path.string(), e).is_ok());
  return Checkpoint::open(path.string()).value();
}

// load_fp8_projection of kName, as the loader calls it (the [4, 6] e4m3 tensor first).
Result<Tensor> load_fp8(const Checkpoint& ckpt, const Fp8Config& f, Backend* backend, std::vector<Buffer>* owned) {
  QV_ASSIGN_OR_RETURN(const Tensor q, ckpt.get(kName, {4, 6}, /*allow_fp8=*/true));
  return load_fp8_projection(ckpt, kName, q, f, backend, owned);
}

float q_value(int64_t i) { return 0.5f * static_cast<float>(static_cast<int>(i % 7) - 3); }

TEST(Fp8Weights, TensorAndChannelScalesAreRowScalesOnExactValues) {
  RefBackend ref;
  const std::string scale = "model.layers.0.mlp.down_proj.weight_scale";
  for (auto [kind, shape, values] :
       {std::tuple{Fp8Config::Scale::kTensor, std::vector<int64_t>{1}, std::vector<float>{0.25f}},
        {Fp8Config::Scale::kTensor, std::vector<int64_t>{}, std::vector<float>{0.25f}},
        {Fp8Config::Scale::kChannel, std::vector<int64_t>{4, 1}, std::vector<float>{1.f, 2.f, 0.f, 3.f}}}) {
    Fp8Config f;
    f.scale = kind;
    f.scale_suffix = "weight_scale";
    std::vector<Buffer> owned;
    auto w = load_fp8(write("rows", scale, shape, values), f, &ref, &owned);
    ASSERT_TRUE(w.is_ok()) << w.message();
    ASSERT_EQ(w->dtype, DType::kBF16);
    ASSERT_NE(w->row_scale, nullptr);
    for (int64_t r = 0; r < 4; ++r) {
      EXPECT_EQ(w->row_scale[r], values[kind == Fp8Config::Scale::kTensor ? 0 : static_cast<size_t>(r)]);
      for (int64_t k = 0; k < 6; ++k) EXPECT_EQ(load_as_f32(w->data, DType::kBF16, r * 6 + k), q_value(r * 6 + k));
    }
  }
}

TEST(Fp8Weights, BlockScalesDequantizeToFloat32) {
  RefBackend ref;
  Fp8Config f;
  f.scale = Fp8Config::Scale::kBlock;
  f.block_n = 2;
  f.block_k = 4;
  f.scale_suffix = "weight_scale_inv";
  const std::vector<float> s = {1.f, 2.f, 3.f, 0.1f};  // [2 row blocks, 2 column blocks]
  std::vector<Buffer> owned;
  auto w = load_fp8(write("block", "model.layers.0.mlp.down_proj.weight_scale_inv", {2, 2}, s),
                               f, &ref, &owned);
  ASSERT_TRUE(w.is_ok()) << w.message();
  ASSERT_EQ(w->dtype, DType::kF32);
  EXPECT_EQ(w->row_scale, nullptr);
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t k = 0; k < 6; ++k)
      EXPECT_EQ(w->ptr<float>()[r * 6 + k], q_value(r * 6 + k) * s[static_cast<size_t>(r / 2 * 2 + k / 4)]);
}

TEST(Fp8Weights, RefusalsNameTheTensor) {
  RefBackend ref;
  Fp8Config f;
  f.scale = Fp8Config::Scale::kChannel;
  f.scale_suffix = "weight_scale";
  f.method = "compressed-tensors";
  const std::string scale = "model.layers.0.mlp.down_proj.weight_scale";
  std::vector<Buffer> owned;
  EXPECT_HAS(load_fp8(write("missing", "other", {4, 1}, {1, 1, 1, 1}), f, &ref, &owned).message(),
             scale + " is missing");
  EXPECT_HAS(load_fp8(write("shape", scale, {1}, {1}), f, &ref, &owned).message(),
             "not a per-channel scale");
  EXPECT_HAS(load_fp8(write("neg", scale, {4, 1}, {1, -1, 1, 1}), f, &ref, &owned).message(),
             "finite and >= 0");
  EXPECT_HAS(load_fp8(write("inf", scale, {4, 1}, {1, INFINITY, 1, 1}), f, &ref, &owned).message(),
             "finite and >= 0");
  EXPECT_HAS(load_fp8(write("nan", scale, {4, 1}, {1, 1, 1, 1}, true), f, &ref, &owned).message(),
             "holds a NaN (element 5)");
}

// --quantization fp8: scale = the row's largest magnitude / 448 and each value the nearest
// e4m3 of w / scale (ties to even), held as exact bf16 values with the row scales on the host
// backends; a zero row keeps scale 0; a row holding a NaN or an infinity is refused by name.
TEST(Fp8Weights, OnlineQuantizationPerOutputChannel) {
  RefBackend ref;
  std::vector<float> v = {448.f, -1.f, 0.3f, 2.5f,   // row 0: scale 1, values as they round
                          0.f,   0.f,  0.f,  0.f,    // row 1: zeros
                          1.f,   -3.f, 0.5f, 0.01f}; // row 2: scale 3 / 448
  std::vector<Buffer> owned;
  auto t = quantize_fp8_projection(Tensor(v.data(), DType::kF32, {3, 4}), kName, &ref, &owned);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  ASSERT_EQ(t->dtype, DType::kBF16);
  ASSERT_NE(t->row_scale, nullptr);
  EXPECT_EQ(t->row_scale[0], 1.f);
  EXPECT_EQ(t->row_scale[1], 0.f);
  EXPECT_EQ(t->row_scale[2], 3.f / 448.f);
  const auto* w = static_cast<const uint16_t*>(t->data);
  for (int64_t i = 0; i < 12; ++i) {
    const float s = t->row_scale[i / 4];
    const float want = s > 0.f ? e4m3_to_f32(f32_to_e4m3(v[static_cast<size_t>(i)] / s)) : 0.f;
    EXPECT_EQ(bf16_to_f32(w[i]), want) << i;
  }
  EXPECT_EQ(bf16_to_f32(w[2]), 0.3125f);  // 0.3 between 0.28125 and 0.3125: nearest
  EXPECT_EQ(bf16_to_f32(w[3]), 2.5f);
  EXPECT_EQ(bf16_to_f32(w[9]), -448.f);  // the row's largest magnitude is e4m3's largest
  v[6] = std::nanf("");
  auto bad = quantize_fp8_projection(Tensor(v.data(), DType::kF32, {3, 4}), kName, &ref, &owned);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_HAS(bad.status().message(), std::string(kName) + " row 1 holds a NaN or an infinity");
}

}  // namespace
}  // namespace quiver
