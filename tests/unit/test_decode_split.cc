// Decode attention's partition policy (src/backend/cuda/decode_split.h), checked on the
// CPU: the grid bound decode_max_splits covers every sequence it may meet, partitions are
// powers of two in range that cover each sequence exactly, and the batch's target follows
// the sizes measured on the H200 (8 partitions at batch 1, one per 256 keys from a few
// dozen sequences).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "backend/cuda/decode_split.h"

namespace quiver::cuda {
namespace {

TEST(DecodeSplit, PartitionsCoverEachSequenceExactly) {
  for (int target = 1; target <= kDecodeMaxTarget; ++target)
    for (int len = 1; len <= 9000; ++len) {
      const int part = decode_part_len(len, target), splits = decode_splits(len, target);
      ASSERT_GE(part, kDecodePartMin);
      ASSERT_LE(part, kDecodePartMax);
      ASSERT_EQ(part & (part - 1), 0) << "part " << part << " is not a power of two";
      ASSERT_GE(static_cast<int64_t>(splits) * part, len);  // every key in a partition
      ASSERT_LT(static_cast<int64_t>(splits - 1) * part, len) << "an empty last partition";
      // Never more partitions than the target asks for, unless they are already full size.
      if (part < kDecodePartMax) {
        ASSERT_LE(splits, target) << "len " << len << " target " << target;
      }
    }
}

TEST(DecodeSplit, GridBoundCoversEveryShorterSequence) {
  for (int target = 1; target <= kDecodeMaxTarget; ++target) {
    int most = 0;  // max of decode_splits over len <= m
    for (int m = 1; m <= 9000; ++m) {
      most = std::max(most, decode_splits(m, target));
      ASSERT_GE(decode_max_splits(m, target), most) << "max_len " << m << " target " << target;
      ASSERT_GE(decode_max_splits(m, kDecodeMaxTarget), decode_max_splits(m, target))
          << "the scratch reservation (largest target) must bound every target";
    }
  }
  EXPECT_EQ(decode_max_splits(0, 8), 1);
  EXPECT_EQ(decode_max_splits(4096, 8), 16);  // the graphs' bound for a 4,096-token model
}

TEST(DecodeSplit, GridTakesEveryPartitionOnceWithinTwiceTheTarget) {
  for (int target = 1; target <= kDecodeMaxTarget; ++target)
    for (int max_splits = 1; max_splits <= 40; ++max_splits) {
      const int grid = decode_grid_splits(max_splits, target);
      ASSERT_GE(grid, 1);
      ASSERT_LE(grid, max_splits);
      ASSERT_LE(grid, kDecodeGridPerTarget * target);
      // Partitions x, x + grid, ... of blocks x < grid: each of 0 .. max_splits - 1 once.
      std::vector<int> seen(static_cast<size_t>(max_splits), 0);
      for (int x = 0; x < grid; ++x)
        for (int split = x; split < max_splits; split += grid) ++seen[static_cast<size_t>(split)];
      for (int c : seen) ASSERT_EQ(c, 1);
    }
  // The (c) decode bucket: 256 sequences (target 1) under a 4,096-token bound take 2 blocks
  // per sequence and head, not 16; batch 1 (target 8) keeps all 16.
  EXPECT_EQ(decode_grid_splits(decode_max_splits(4096, 1), 1), 2);
  EXPECT_EQ(decode_grid_splits(decode_max_splits(4096, 8), 8), 16);
  EXPECT_EQ(decode_grid_splits(1, 8), 1);
}

TEST(DecodeSplit, TargetFollowsTheBatch) {
  const int sms = 132;  // H200
  EXPECT_EQ(decode_target(1, 32, sms), 8);   // Llama-2-7B at batch 1: 32 heads, 8 partitions
  EXPECT_EQ(decode_target(8, 32, sms), 5);   // batch 8: 256 (sequence, head) blocks
  EXPECT_EQ(decode_target(33, 32, sms), 1);  // from 33 sequences: one block each is enough
  EXPECT_EQ(decode_target(256, 32, sms), 1);
  EXPECT_EQ(decode_target(1, 8, sms), 8);    // GQA head groups count, not heads
  EXPECT_EQ(decode_target(0, 32, 0), 8);     // degenerate sizes stay in range
  for (int seqs = 1; seqs < 300; ++seqs) {
    const int t = decode_target(seqs, 32, sms);
    ASSERT_GE(t, 1);
    ASSERT_LE(t, kDecodeMaxTarget);
    ASSERT_LE(t, decode_target(seqs - 1 > 0 ? seqs - 1 : 1, 32, sms)) << "more sequences, fewer partitions";
  }
  // The batch-1 case the target is for: a 192-key context in 6 partitions of 32 keys.
  EXPECT_EQ(decode_part_len(192, 8), 32);
  EXPECT_EQ(decode_splits(192, 8), 6);
  // Large batches keep the 256-key partitions of before.
  EXPECT_EQ(decode_part_len(192, 1), 256);
  EXPECT_EQ(decode_splits(384, 1), 2);
}

}  // namespace
}  // namespace quiver::cuda
