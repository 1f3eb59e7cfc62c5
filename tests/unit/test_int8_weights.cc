// link: qv_model
// --quantization int8 (model/int8_weights.h): the per-channel scheme on rows whose answer
// is known by hand, the refusal of non-finite rows, the oracle's int8 matmul equal to its
// matmul of the dequantized float32 weights, and dummy weights quantized in place.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "backend/ref/ref_backend.h"
#include "model/int8_weights.h"

namespace quiver {
namespace {

TEST(Int8Weights, RowsQuantizePerChannelSymmetric) {
  // Row 0: amax 63.5 -> scale 0.5; row 1: zeros keep scale 0; row 2: scale 1. Every
  // quotient is exact, so the ties show the rounding: half to even.
  std::vector<float> w = {63.5f, -31.75f, 0.25f, 0.75f, 0.f, 0.f, 0.f, 0.f, 127.f, 2.5f, -0.5f, 1.5f};
  Tensor t(w.data(), DType::kF32, {3, 4});
  std::vector<int8_t> q(12, 99);
  std::vector<float> scale(3, -1.f);
  ASSERT_EQ(quantize_rows_int8(t, 0, 3, q.data(), scale.data()), -1);
  EXPECT_EQ(scale[0], 0.5f);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], -64);  // -63.5
  EXPECT_EQ(q[2], 0);    // 0.5
  EXPECT_EQ(q[3], 2);    // 1.5
  EXPECT_EQ(scale[1], 0.f);
  for (int i = 4; i < 8; ++i) EXPECT_EQ(q[static_cast<size_t>(i)], 0);
  EXPECT_EQ(scale[2], 1.f);
  EXPECT_EQ(q[8], 127);
  EXPECT_EQ(q[9], 2);   // 2.5 -> 2 (even)
  EXPECT_EQ(q[10], 0);  // -0.5 -> 0 (even)
  EXPECT_EQ(q[11], 2);  // 1.5 -> 2 (even)
}

TEST(Int8Weights, BFloat16RowsAndNonFiniteRows) {
  std::vector<uint16_t> w = {f32_to_bf16(0.5f), f32_to_bf16(-1.f), f32_to_bf16(0.25f), f32_to_bf16(1.f),
                             f32_to_bf16(std::numeric_limits<float>::infinity()), 0, 0, 0};
  Tensor t(w.data(), DType::kBF16, {2, 4});
  std::vector<int8_t> q(8);
  std::vector<float> scale(2);
  ASSERT_EQ(quantize_rows_int8(t, 0, 1, q.data(), scale.data()), -1);
  EXPECT_FLOAT_EQ(scale[0], 1.f / 127.f);
  EXPECT_EQ(q[0], 64);  // 63.5 -> 64 (even)
  EXPECT_EQ(q[1], -127);
  EXPECT_EQ(q[2], 32);  // 31.75
  EXPECT_EQ(q[3], 127);
  EXPECT_EQ(quantize_rows_int8(t, 0, 2, q.data(), scale.data()), 1);
  std::vector<float> nan_row = {1.f, std::nanf("")};
  EXPECT_EQ(quantize_rows_int8(Tensor(nan_row.data(), DType::kF32, {1, 2}), 0, 1, q.data(), scale.data()), 0);
}

// The oracle multiplies an int8 weight as the float32 model whose weights are q * scale:
// the same outputs bit for bit, which is what makes that model the exact reference.
TEST(Int8Weights, OracleMatmulIsTheDequantizedModels) {
  const int64_t n = 3, in = 37, out = 11;
  std::vector<float> w(static_cast<size_t>(out * in)), x(static_cast<size_t>(n * in));
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.37f * static_cast<float>(i)) * (1.f + static_cast<float>(i % 5));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.11f * static_cast<float>(i));
  std::vector<int8_t> q(w.size());
  std::vector<float> scale(static_cast<size_t>(out)), deq(w.size());
  ASSERT_EQ(quantize_rows_int8(Tensor(w.data(), DType::kF32, {out, in}), 0, out, q.data(), scale.data()), -1);
  for (size_t i = 0; i < w.size(); ++i) deq[i] = static_cast<float>(q[i]) * scale[i / static_cast<size_t>(in)];
  Tensor qt(q.data(), DType::kI8, {out, in});
  qt.row_scale = scale.data();
  RefBackend ref;
  std::vector<float> y_q(static_cast<size_t>(n * out)), y_d(y_q.size());
  ref.matmul(Tensor(y_q.data(), DType::kF32, {n, out}), Tensor(x.data(), DType::kF32, {n, in}), qt, Tensor());
  ref.matmul(Tensor(y_d.data(), DType::kF32, {n, out}), Tensor(x.data(), DType::kF32, {n, in}),
             Tensor(deq.data(), DType::kF32, {out, in}), Tensor());
  EXPECT_EQ(y_q, y_d);
  // Rows of a quantized weight keep their scales.
  const Tensor rows = qt.rows(4, 2);
  EXPECT_EQ(rows.row_scale, scale.data() + 4);
}

TEST(Int8Weights, DummyWeightsAreQuantizedInPlace) {
  ModelConfig c;
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  RefBackend ref;
  const LlamaWeights f = dummy_llama_weights(c, DType::kBF16, &ref, 7);
  const LlamaWeights w = dummy_llama_weights(c, DType::kBF16, &ref, 7, WeightQuantization::kInt8);
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& a = f.layers[l];
    const LayerWeights& b = w.layers[l];
    for (auto [fw, qw] : {std::pair{&a.wq, &b.wq}, {&a.wk, &b.wk}, {&a.wv, &b.wv}, {&a.wo, &b.wo},
                          {&a.w_gate, &b.w_gate}, {&a.w_up, &b.w_up}, {&a.w_down, &b.w_down}}) {
      ASSERT_EQ(qw->dtype, DType::kI8);
      ASSERT_NE(qw->row_scale, nullptr);
      ASSERT_EQ(qw->shape, fw->shape);
      // Each dequantized weight is within half a step of the float one.
      for (int64_t r = 0; r < fw->dim(0); ++r)
        for (int64_t k = 0; k < fw->dim(1); ++k) {
          const size_t i = static_cast<size_t>(r * fw->dim(1) + k);
          const float want = load_as_f32(fw->data, fw->dtype, i);
          const float got = static_cast<float>(qw->ptr<int8_t>()[i]) * qw->row_scale[r];
          ASSERT_LE(std::fabs(got - want), 0.5f * qw->row_scale[r] * (1.f + 1e-5f)) << r << "," << k;
        }
    }
    EXPECT_EQ(b.attn_norm.dtype, DType::kBF16);  // norms, embedding and lm_head stay as they were
  }
  EXPECT_EQ(w.embed.dtype, DType::kBF16);
  // Projections at 1 byte a weight + 4 a row, the float copies freed.
  EXPECT_LT(w.weight_bytes(), f.weight_bytes());
  size_t owned = 0;
  for (const Buffer& b : w.owned) owned += b.bytes();
  EXPECT_LT(owned, f.weight_bytes());
}

}  // namespace
}  // namespace quiver
