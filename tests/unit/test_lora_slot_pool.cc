// link: qv_lora qv_io qv_backend
// LoraSlotPool on the RefBackend: slot hand-out, pins, LRU eviction, and the contents of
// the stacks (rank padding zeros, no stale weights after a slot is reused).
#include <gtest/gtest.h>

#include "backend/ref/ref_backend.h"
#include "lora/slot_pool.h"
#include "unit/lora_test_util.h"

namespace quiver {
namespace {

constexpr int kMaxRank = 4;
using Ranks = std::array<int, kNumLoraTargets>;
constexpr Ranks kAllRank3 = {3, 3, 3, 3, 3, 3, 3};
constexpr Ranks kOnlyQ = {2, 0, 0, 0, 0, 0, 0};

class SlotPoolTest : public ::testing::Test {
 protected:
  SlotPoolTest() : pool_(&backend_, config_, /*max_loras=*/3, kMaxRank) {}

  LoraAdapter adapter(const Ranks& ranks, uint32_t seed) { return lora_test::make_adapter(config_, ranks, seed); }

  // The [max_rank, in] region of `slot` in a stack as a host copy.
  std::vector<float> a_region(int layer, LoraTarget t, int slot) {
    Tensor a = pool_.a_stack(layer, t);
    const int64_t n = a.dim(1) * a.dim(2);
    return std::vector<float>(a.ptr<float>() + slot * n, a.ptr<float>() + (slot + 1) * n);
  }
  std::vector<float> b_region(int layer, LoraTarget t, int slot) {
    Tensor b = pool_.b_stack(layer, t);
    const int64_t n = b.dim(1) * b.dim(2);
    return std::vector<float>(b.ptr<float>() + slot * n, b.ptr<float>() + (slot + 1) * n);
  }
  static bool all_zero(const std::vector<float>& v) {
    for (float x : v)
      if (x != 0.f) return false;
    return true;
  }

  ModelConfig config_ = lora_test::tiny_config();
  RefBackend backend_;
  LoraSlotPool pool_;
};

TEST_F(SlotPoolTest, StackShapes) {
  Tensor a = pool_.a_stack(1, LoraTarget::kO);
  EXPECT_EQ(a.shape_string(), "[3, 4, 12]");
  Tensor b = pool_.b_stack(1, LoraTarget::kO);
  EXPECT_EQ(b.shape_string(), "[3, 8, 4]");
  EXPECT_EQ(pool_.b_stack(0, LoraTarget::kK).shape_string(), "[3, 6, 4]");
  EXPECT_EQ(pool_.a_stack(0, LoraTarget::kDown).shape_string(), "[3, 4, 10]");
  EXPECT_EQ(a.dtype, DType::kF32);
  // Fresh stacks read as "no LoRA".
  for (int s = 0; s < 3; ++s) EXPECT_TRUE(all_zero(a_region(1, LoraTarget::kO, s)));
}

TEST_F(SlotPoolTest, AcquireReleaseAndReuseResident) {
  LoraAdapter x = adapter(kAllRank3, 1);
  auto s1 = pool_.acquire(11, x);
  ASSERT_TRUE(s1.is_ok()) << s1.message();
  EXPECT_EQ(pool_.slot_of(11), *s1);
  EXPECT_EQ(pool_.uid_in_slot(*s1), 11u);
  EXPECT_EQ(pool_.num_pinned(), 1);
  EXPECT_EQ(pool_.loads(), 1);
  auto s2 = pool_.acquire(11, x);  // resident: same slot, no copy
  ASSERT_TRUE(s2.is_ok());
  EXPECT_EQ(*s2, *s1);
  EXPECT_EQ(pool_.loads(), 1);
  pool_.release(*s1);
  EXPECT_EQ(pool_.num_pinned(), 1);  // still pinned once
  pool_.release(*s1);
  EXPECT_EQ(pool_.num_pinned(), 0);
  EXPECT_EQ(pool_.slot_of(11), *s1);  // stays resident until evicted
  EXPECT_EQ(pool_.slot_of(99), -1);
  EXPECT_EQ(pool_.uid_in_slot(2), 0u);
}

TEST_F(SlotPoolTest, AllSlotsPinnedIsAnError) {
  LoraAdapter x = adapter(kOnlyQ, 1);
  for (uint64_t uid = 1; uid <= 3; ++uid) ASSERT_TRUE(pool_.acquire(uid, x).is_ok());
  EXPECT_EQ(pool_.num_pinned(), 3);
  EXPECT_FALSE(pool_.can_acquire(4));
  EXPECT_TRUE(pool_.can_acquire(2));  // resident adapters can always be pinned again
  auto r = pool_.acquire(4, x);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("pinned"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("--max-loras"), std::string::npos) << r.message();
  pool_.release(pool_.slot_of(2));
  EXPECT_TRUE(pool_.can_acquire(4));
  auto s = pool_.acquire(4, x);
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(pool_.slot_of(2), -1);  // the only unpinned one was evicted
  EXPECT_EQ(pool_.uid_in_slot(*s), 4u);
}

TEST_F(SlotPoolTest, EvictsLeastRecentlyUsedUnpinned) {
  LoraAdapter x = adapter(kOnlyQ, 1);
  int s1 = *pool_.acquire(1, x);
  int s2 = *pool_.acquire(2, x);
  int s3 = *pool_.acquire(3, x);
  pool_.release(s1);
  pool_.release(s2);
  pool_.release(s3);
  // Use 1 again, so 2 is now the least recently used.
  pool_.release(*pool_.acquire(1, x));
  int s4 = *pool_.acquire(4, x);
  EXPECT_EQ(s4, s2);
  EXPECT_EQ(pool_.slot_of(2), -1);
  EXPECT_EQ(pool_.slot_of(1), s1);
  EXPECT_EQ(pool_.slot_of(3), s3);
  // Pinned slots are skipped even when older: pin 3 (oldest unpinned), next victim is 1.
  int again3 = *pool_.acquire(3, x);
  EXPECT_EQ(again3, s3);
  pool_.release(s4);
  int s5 = *pool_.acquire(5, x);
  EXPECT_EQ(s5, s1);
  EXPECT_EQ(pool_.loads(), 5);
}

TEST_F(SlotPoolTest, WeightsAreRankPaddedWithZeros) {
  LoraAdapter x = adapter(Ranks{2, 1, 4, 3, 2, 1, 3}, 7);
  int s = *pool_.acquire(42, x);
  for (int l = 0; l < 2; ++l)
    for (int t = 0; t < kNumLoraTargets; ++t) {
      const auto target = static_cast<LoraTarget>(t);
      const LoraModule& m = *x.layers[l][t];
      const int64_t in = lora_target_in(config_, target), out = lora_target_out(config_, target);
      auto a = a_region(l, target, s);
      auto b = b_region(l, target, s);
      for (int64_t r = 0; r < kMaxRank; ++r)
        for (int64_t k = 0; k < in; ++k)
          EXPECT_EQ(a[r * in + k], r < m.rank ? m.a[r * in + k] : 0.f) << l << " " << t << " " << r << " " << k;
      for (int64_t o = 0; o < out; ++o)
        for (int64_t r = 0; r < kMaxRank; ++r)
          EXPECT_EQ(b[o * kMaxRank + r], r < m.rank ? m.b[o * m.rank + r] : 0.f) << l << " " << t << " " << o;
    }
  // Other slots untouched.
  for (int other = 0; other < 3; ++other) {
    if (other == s) continue;
    EXPECT_TRUE(all_zero(b_region(1, LoraTarget::kDown, other)));
  }
}

TEST_F(SlotPoolTest, ReusedSlotHasNoStaleWeights) {
  LoraSlotPool one(&backend_, config_, /*max_loras=*/1, kMaxRank);
  LoraAdapter x = adapter(Ranks{4, 4, 4, 4, 4, 4, 4}, 3);
  int s = *one.acquire(1, x);
  ASSERT_EQ(s, 0);
  one.release(s);
  LoraAdapter y = adapter(kOnlyQ, 5);  // rank 2, q_proj only
  ASSERT_EQ(*one.acquire(2, y), 0);
  EXPECT_EQ(one.slot_of(1), -1);
  for (int l = 0; l < 2; ++l) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      const auto target = static_cast<LoraTarget>(t);
      Tensor a = one.a_stack(l, target), b = one.b_stack(l, target);
      std::vector<float> av(a.ptr<float>(), a.ptr<float>() + a.numel());
      std::vector<float> bv(b.ptr<float>(), b.ptr<float>() + b.numel());
      if (target != LoraTarget::kQ) {
        EXPECT_TRUE(all_zero(av)) << "stale A in " << lora_target_name(target) << " layer " << l;
        EXPECT_TRUE(all_zero(bv)) << "stale B in " << lora_target_name(target) << " layer " << l;
        continue;
      }
      // q_proj: rows 2..3 of A and columns 2..3 of B held X's rank-4 weights; now zero.
      const int64_t in = a.dim(2), out = b.dim(1);
      for (int64_t r = 2; r < kMaxRank; ++r)
        for (int64_t k = 0; k < in; ++k) EXPECT_EQ(av[r * in + k], 0.f);
      for (int64_t o = 0; o < out; ++o) {
        for (int64_t r = 2; r < kMaxRank; ++r) EXPECT_EQ(bv[o * kMaxRank + r], 0.f);
        for (int64_t r = 0; r < 2; ++r) EXPECT_EQ(bv[o * kMaxRank + r], y.layers[l][0]->b[o * 2 + r]);
      }
    }
  }
}

// --lora-dtype bfloat16: the stacks are bf16, each value the round-to-nearest-even of the
// adapter's f32 value, padding and untargeted modules zero (also after slot reuse).
TEST_F(SlotPoolTest, Bf16StacksHoldRoundedValues) {
  LoraSlotPool pool(&backend_, config_, /*max_loras=*/2, kMaxRank, DType::kBF16);
  EXPECT_EQ(pool.dtype(), DType::kBF16);
  EXPECT_EQ(pool.a_stack(0, LoraTarget::kQ).dtype, DType::kBF16);
  EXPECT_EQ(pool.b_stack(1, LoraTarget::kDown).dtype, DType::kBF16);
  EXPECT_EQ(pool.b_stack(1, LoraTarget::kO).shape_string(), "[2, 8, 4]");
  LoraAdapter full = adapter(Ranks{4, 4, 4, 4, 4, 4, 4}, 3);
  pool.release(*pool.acquire(1, full));
  pool.release(*pool.acquire(2, full));
  LoraAdapter x = adapter(Ranks{2, 1, 4, 3, 0, 1, 3}, 7);  // no gate_proj
  // The helper's values are exact in bf16; scale them so most need rounding.
  for (auto& layer : x.layers)
    for (auto& m : layer)
      if (m) {
        for (float& v : m->a) v *= 1.0f / 3.0f;
        for (float& v : m->b) v *= 1.0f / 3.0f;
      }
  const int s = *pool.acquire(3, x);  // evicts 1 (LRU): reuses a slot that held rank 4 everywhere
  auto bf = [](float v) { return bf16_to_f32(f32_to_bf16(v)); };
  int inexact = 0;  // the test values must really need rounding
  for (int l = 0; l < 2; ++l)
    for (int t = 0; t < kNumLoraTargets; ++t) {
      const auto target = static_cast<LoraTarget>(t);
      const auto& m = x.layers[l][t];
      Tensor a = pool.a_stack(l, target), b = pool.b_stack(l, target);
      const int64_t in = a.dim(2), out = b.dim(1), rank = m ? m->rank : 0;
      const size_t a0 = static_cast<size_t>(s * kMaxRank * in), b0 = static_cast<size_t>(s * out * kMaxRank);
      for (int64_t r = 0; r < kMaxRank; ++r)
        for (int64_t k = 0; k < in; ++k) {
          const float want = r < rank ? bf(m->a[r * in + k]) : 0.f;
          EXPECT_EQ(load_as_f32(a.data, a.dtype, a0 + r * in + k), want) << l << " " << t << " " << r << " " << k;
          if (r < rank && want != m->a[r * in + k]) ++inexact;
        }
      for (int64_t o = 0; o < out; ++o)
        for (int64_t r = 0; r < kMaxRank; ++r)
          EXPECT_EQ(load_as_f32(b.data, b.dtype, b0 + o * kMaxRank + r), r < rank ? bf(m->b[o * rank + r]) : 0.f)
              << l << " " << t << " " << o << " " << r;
    }
  EXPECT_GT(inexact, 0);
}

TEST_F(SlotPoolTest, StacksNeverReallocate) {
  void* a = pool_.a_stack(0, LoraTarget::kQ).data;
  void* b = pool_.b_stack(1, LoraTarget::kDown).data;
  LoraAdapter x = adapter(kAllRank3, 1);
  for (uint64_t uid = 1; uid <= 10; ++uid) pool_.release(*pool_.acquire(uid, x));
  EXPECT_EQ(pool_.a_stack(0, LoraTarget::kQ).data, a);
  EXPECT_EQ(pool_.b_stack(1, LoraTarget::kDown).data, b);
}

TEST_F(SlotPoolTest, RankAbovePoolRankIsAnError) {
  LoraAdapter big = adapter(Ranks{6, 0, 0, 0, 0, 0, 0}, 1);
  auto r = pool_.acquire(1, big);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("--max-lora-rank"), std::string::npos) << r.message();
  EXPECT_EQ(pool_.slot_of(1), -1);
}

}  // namespace
}  // namespace quiver
