// link: qv_lora qv_io qv_backend
// Batched LoRA (slot stacks + RefBackend::lora_shrink / lora_expand) against a per-token
// loop over the adapters' own host weights: y = W x + B_scaled (A x), or W x for slot -1.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/ref/ref_backend.h"
#include "lora/slot_pool.h"
#include "unit/lora_test_util.h"

namespace quiver {
namespace {

constexpr int kMaxRank = 4;
constexpr int kMaxLoras = 4;
using Ranks = std::array<int, kNumLoraTargets>;

// Host-side LoraMeta: token_slot plus the segments (maximal runs of one slot).
struct HostLoraMeta {
  std::vector<int32_t> token_slot, seg_start, seg_slot;
  LoraMeta meta;
  explicit HostLoraMeta(std::vector<int32_t> slots) : token_slot(std::move(slots)) {
    for (size_t i = 0; i < token_slot.size(); ++i) {
      if (i == 0 || token_slot[i] != token_slot[i - 1]) {
        seg_start.push_back(static_cast<int32_t>(i));
        seg_slot.push_back(token_slot[i]);
      }
    }
    seg_start.push_back(static_cast<int32_t>(token_slot.size()));
    const auto n = static_cast<int64_t>(token_slot.size());
    const auto s = static_cast<int64_t>(seg_slot.size());
    meta.token_slot = Tensor(token_slot.data(), DType::kI32, {n});
    meta.seg_start = Tensor(seg_start.data(), DType::kI32, {s + 1});
    meta.seg_slot = Tensor(seg_slot.data(), DType::kI32, {s});
    meta.num_segments = static_cast<int>(s);
  }
};

class LoraBatchedTest : public ::testing::Test {
 protected:
  LoraBatchedTest() : pool_(&backend_, config_, kMaxLoras, kMaxRank) {
    adapters_.push_back(lora_test::make_adapter(config_, Ranks{1, 1, 1, 1, 1, 1, 1}, 11, "rank1"));
    adapters_.push_back(lora_test::make_adapter(config_, Ranks{4, 4, 4, 4, 4, 4, 4}, 12, "rank4"));
    adapters_.push_back(lora_test::make_adapter(config_, Ranks{2, 3, 1, 4, 2, 3, 1}, 13, "mixed"));
    adapters_.push_back(lora_test::make_adapter(config_, Ranks{3, 0, 0, 0, 0, 0, 2}, 14, "q_and_down"));
    adapters_.push_back(lora_test::make_adapter(config_, Ranks{0, 2, 2, 0, 0, 4, 0}, 15, "k_v_up"));
  }

  // Runs every (layer, target) of the model on `token_adapter` (index into adapters_, -1 for
  // the base model) and compares with the per-token reference.
  void check_batch(const std::vector<int>& token_adapter) {
    const auto n = static_cast<int64_t>(token_adapter.size());
    std::vector<int32_t> slots;
    for (int a : token_adapter) {
      if (a < 0) {
        slots.push_back(-1);
        continue;
      }
      int s = pool_.slot_of(uid(a));
      ASSERT_GE(s, 0) << "adapter " << a << " is not resident";
      slots.push_back(s);
    }
    HostLoraMeta meta(slots);
    for (int l = 0; l < config_.num_layers; ++l) {
      for (int t = 0; t < kNumLoraTargets; ++t) {
        const auto target = static_cast<LoraTarget>(t);
        const int64_t in = lora_target_in(config_, target), out = lora_target_out(config_, target);
        std::vector<float> w(out * in), x(n * in), y(n * out), tmp(n * kMaxRank, 0.f);
        for (int64_t i = 0; i < out * in; ++i) w[i] = lora_test::test_value(900 + l * 7 + t, i);
        for (int64_t i = 0; i < n * in; ++i) x[i] = lora_test::test_value(500 + l * 7 + t, i);
        Tensor wt(w.data(), DType::kF32, {out, in}), xt(x.data(), DType::kF32, {n, in});
        Tensor yt(y.data(), DType::kF32, {n, out}), tt(tmp.data(), DType::kF32, {n, kMaxRank});
        backend_.matmul(yt, xt, wt, Tensor());
        backend_.lora_shrink(tt, xt, pool_.a_stack(l, target), meta.meta);
        backend_.lora_expand(yt, tt, pool_.b_stack(l, target), meta.meta);

        for (int64_t i = 0; i < n; ++i) {
          const float* xi = x.data() + i * in;
          const LoraModule* m = nullptr;
          if (token_adapter[i] >= 0 && adapters_[token_adapter[i]].layers[l][t])
            m = &*adapters_[token_adapter[i]].layers[l][t];
          std::vector<double> ax(m ? m->rank : 0, 0.0);
          for (size_t r = 0; r < ax.size(); ++r)
            for (int64_t k = 0; k < in; ++k) ax[r] += static_cast<double>(m->a[r * in + k]) * xi[k];
          for (int64_t o = 0; o < out; ++o) {
            double ref = 0;
            for (int64_t k = 0; k < in; ++k) ref += static_cast<double>(w[o * in + k]) * xi[k];
            for (size_t r = 0; r < ax.size(); ++r) ref += static_cast<double>(m->b[o * m->rank + r]) * ax[r];
            EXPECT_NEAR(y[i * out + o], ref, 1e-6 + 1e-4 * std::abs(ref))
                << "token " << i << " adapter " << token_adapter[i] << " layer " << l << " "
                << lora_target_name(target) << " out " << o;
          }
        }
      }
    }
  }

  static uint64_t uid(int adapter) { return 100 + static_cast<uint64_t>(adapter); }

  ModelConfig config_ = lora_test::tiny_config();
  RefBackend backend_;
  LoraSlotPool pool_;
  std::vector<LoraAdapter> adapters_;
};

TEST_F(LoraBatchedTest, MixedSlotsMatchPerTokenReference) {
  for (int a = 0; a < 4; ++a) ASSERT_TRUE(pool_.acquire(uid(a), adapters_[a]).is_ok());
  // 17 tokens: runs and singletons, base-model tokens between and at both ends.
  check_batch({-1, 0, 0, 1, -1, 2, 2, 2, 3, 1, 0, -1, -1, 3, 3, 2, -1});
}

TEST_F(LoraBatchedTest, DecodeShapedBatch) {
  for (int a = 0; a < 4; ++a) ASSERT_TRUE(pool_.acquire(uid(a), adapters_[a]).is_ok());
  check_batch({3});
  check_batch({-1});
  check_batch({2, 0, 3, 1, -1});
}

TEST_F(LoraBatchedTest, AfterEvictionAndReload) {
  // Fill the pool, free two slots, bring in an adapter with a different target set and
  // then an old one again: results must match the adapters now resident.
  for (int a = 0; a < 4; ++a) ASSERT_TRUE(pool_.acquire(uid(a), adapters_[a]).is_ok());
  pool_.release(pool_.slot_of(uid(1)));  // rank4, all modules
  pool_.release(pool_.slot_of(uid(3)));
  ASSERT_TRUE(pool_.acquire(uid(4), adapters_[4]).is_ok());  // takes rank4's slot (LRU)
  EXPECT_EQ(pool_.slot_of(uid(1)), -1);
  check_batch({4, 0, -1, 4, 2, 3, 4});
  pool_.release(pool_.slot_of(uid(4)));
  ASSERT_TRUE(pool_.acquire(uid(1), adapters_[1]).is_ok());  // evicts 3, the oldest unpinned
  EXPECT_EQ(pool_.slot_of(uid(3)), -1);
  check_batch({1, 4, 1, 0, -1, 2});
}

}  // namespace
}  // namespace quiver
