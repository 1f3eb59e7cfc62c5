// link: qv_model
// Where the backend multiplies a group's members of one width as one product
// (Backend::batches_adjacent_members: the CUDA backend's strided-batched GEMM), the loader
// places each layer's q/k/v and gate/up weights back to back, each member a multiple of
// 256 bytes after the one before, with the same values; elsewhere each weight keeps its
// own memory. Weights with row scales (fp8) are left where they are. Checked on the
// reference backend, told to batch, with dummy weights (owned buffers, freed once moved)
// and a checkpoint's (mapped file views, left to the mapping).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <memory>

#include "backend/ref/ref_backend.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "model/llama_weights.h"

namespace quiver {
namespace {

class BatchingRef : public RefBackend {
 public:
  bool batches_adjacent_members() const override { return true; }
};

size_t padded(size_t bytes) { return (bytes + 255) / 256 * 256; }

bool same_values(const Tensor& a, const Tensor& b) {
  return a.dtype == b.dtype && a.shape == b.shape && std::memcmp(a.data, b.data, a.bytes()) == 0;
}

// Each group's members follow each other at their padded sizes, with the plain load's values.
void expect_grouped(const LlamaWeights& grouped, const LlamaWeights& plain) {
  ASSERT_EQ(grouped.layers.size(), plain.layers.size());
  for (size_t l = 0; l < grouped.layers.size(); ++l) {
    const LayerWeights &g = grouped.layers[l], &p = plain.layers[l];
    for (auto members : {std::initializer_list<const Tensor*>{&g.wq, &g.wk, &g.wv}, {&g.w_gate, &g.w_up}}) {
      const Tensor* prev = nullptr;
      for (const Tensor* t : members) {
        EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % 64, 0u) << "layer " << l;  // Backend::alloc's
        if (prev != nullptr) {
          EXPECT_EQ(static_cast<const char*>(prev->data) + padded(prev->bytes()), t->data) << "layer " << l;
        }
        prev = t;
      }
    }
    for (auto [a, b] : {std::pair{&g.wq, &p.wq}, {&g.wk, &p.wk}, {&g.wv, &p.wv}, {&g.wo, &p.wo},
                        {&g.w_gate, &p.w_gate}, {&g.w_up, &p.w_up}, {&g.w_down, &p.w_down}})
      EXPECT_TRUE(same_values(*a, *b)) << "layer " << l;
  }
}

ModelConfig small_gqa() {
  ModelConfig c;
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  return c;
}

TEST(WeightGroups, DummyWeightsArePlacedBackToBackAndTheirOldBuffersFreed) {
  const ModelConfig c = small_gqa();
  RefBackend ref;
  BatchingRef batching;
  const LlamaWeights plain = dummy_llama_weights(c, DType::kBF16, &ref, 7);
  const LlamaWeights grouped = dummy_llama_weights(c, DType::kBF16, &batching, 7);
  expect_grouped(grouped, plain);
  // Five buffers a layer become two: q/k/v's and gate/up's.
  EXPECT_EQ(grouped.owned.size() + 3 * c.num_layers, plain.owned.size());
  EXPECT_EQ(grouped.weight_bytes(), plain.weight_bytes());
}

TEST(WeightGroups, CheckpointWeightsArePlacedWithTheirValues) {
  const std::filesystem::path model = std::filesystem::path(QUIVER_SOURCE_DIR) / "tests/fixtures/llama_gqa";
  const ModelConfig c = load_model_config(model.string()).value();
  auto ckpt = std::make_shared<Checkpoint>(Checkpoint::open(model.string()).value());
  RefBackend ref;
  BatchingRef batching;
  const LlamaWeights plain = load_llama_weights(c, ckpt, &ref).value();
  const LlamaWeights grouped = load_llama_weights(c, ckpt, &batching).value();
  expect_grouped(grouped, plain);
}

TEST(WeightGroups, Fp8WeightsStayWhereTheyAre) {
  const ModelConfig c = small_gqa();
  RefBackend ref;
  BatchingRef batching;
  const LlamaWeights plain = dummy_llama_weights(c, DType::kBF16, &ref, 7, WeightQuantization::kFp8);
  const LlamaWeights grouped = dummy_llama_weights(c, DType::kBF16, &batching, 7, WeightQuantization::kFp8);
  EXPECT_EQ(grouped.owned.size(), plain.owned.size());
  for (size_t l = 0; l < grouped.layers.size(); ++l) {
    ASSERT_NE(grouped.layers[l].wk.row_scale, nullptr);
    EXPECT_TRUE(same_values(grouped.layers[l].wk, plain.layers[l].wk));
  }
}

TEST(WeightGroups, BackendsThatDoNotBatchKeepEachWeightApart) {
  const ModelConfig c = small_gqa();
  RefBackend ref;
  const LlamaWeights w = dummy_llama_weights(c, DType::kBF16, &ref, 7);
  // One buffer per tensor: the embedding, the final norm, lm_head, and per layer two norms
  // and seven projections.
  EXPECT_EQ(w.owned.size(), 3 + 9 * static_cast<size_t>(c.num_layers));
}

}  // namespace
}  // namespace quiver
