// link: qv_kv
// BlockPool: allocation and ref counts, the chained prefix hash (tokens, parent, adapter),
// publishing and matching, and eviction order (unpublished first, then LRU of cached).
#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "kv/block_pool.h"

namespace quiver {
namespace {

constexpr int kBs = 4;

std::vector<int32_t> iota_tokens(int n, int32_t first = 100) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Publishes consecutive full blocks of `tokens` into `blocks`, as the scheduler's commit() does.
void publish_chain(BlockPool& pool, const std::vector<int>& blocks, const std::vector<int32_t>& tokens, uint64_t uid) {
  uint64_t h = 0;
  for (size_t k = 0; k < blocks.size(); ++k) {
    h = BlockPool::hash_block(h, std::span<const int32_t>(tokens).subspan(k * kBs, kBs), uid);
    pool.publish(blocks[k], h);
  }
}

std::vector<int> alloc_n(BlockPool& pool, int n) {
  std::vector<int> out;
  for (int i = 0; i < n; ++i) {
    auto b = pool.allocate();
    EXPECT_TRUE(b.has_value());
    out.push_back(*b);
  }
  return out;
}

TEST(BlockPool, AllocateUntilEmptyThenFreeAll) {
  BlockPool pool(5, kBs, false);
  EXPECT_EQ(pool.num_free(), 5);
  std::vector<int> got = alloc_n(pool, 5);
  EXPECT_EQ(std::set<int>(got.begin(), got.end()).size(), 5u);
  for (int b : got) {
    EXPECT_GE(b, 0);
    EXPECT_LT(b, 5);
    EXPECT_EQ(pool.ref_count(b), 1);
  }
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_EQ(pool.num_used(), 5);
  EXPECT_FALSE(pool.allocate().has_value());
  for (int b : got) pool.free(b);
  EXPECT_EQ(pool.num_free(), 5);
  for (int b = 0; b < 5; ++b) EXPECT_EQ(pool.ref_count(b), 0);
}

TEST(BlockPool, FreeingAnUnusedBlockIsAProgrammerBug) {
  BlockPool pool(2, kBs, false);
  EXPECT_DEATH(pool.free(0), "not in use");
  int b = *pool.allocate();
  pool.free(b);
  EXPECT_DEATH(pool.free(b), "not in use");
}

TEST(BlockPool, HashDependsOnParentTokensAndAdapter) {
  const std::vector<int32_t> t = {1, 2, 3, 4};
  const std::vector<int32_t> u = {1, 2, 3, 5};
  const uint64_t h = BlockPool::hash_block(0, t, 0);
  EXPECT_NE(h, 0u);
  EXPECT_EQ(h, BlockPool::hash_block(0, t, 0));
  EXPECT_NE(h, BlockPool::hash_block(0, u, 0));
  EXPECT_NE(h, BlockPool::hash_block(7, t, 0));
  EXPECT_NE(h, BlockPool::hash_block(0, t, 1));
  EXPECT_NE(BlockPool::hash_block(0, t, 1), BlockPool::hash_block(0, t, 2));
}

TEST(BlockPool, CachingOffNeverMatches) {
  BlockPool pool(4, kBs, false);
  auto tokens = iota_tokens(8);
  auto blocks = alloc_n(pool, 2);
  publish_chain(pool, blocks, tokens, 0);
  EXPECT_EQ(pool.published_hash(blocks[0]), 0u);
  EXPECT_TRUE(pool.match_prefix(tokens, 0).empty());
  EXPECT_EQ(pool.hits(), 0);
}

TEST(BlockPool, MatchesLongestRunOfFullBlocks) {
  BlockPool pool(8, kBs, true);
  auto tokens = iota_tokens(12);
  auto blocks = alloc_n(pool, 3);
  publish_chain(pool, {blocks[0], blocks[1]}, tokens, 0);  // third block left unpublished

  // The same 10 tokens: two full blocks cached, the partial third never matches.
  auto m = pool.match_prefix(std::span<const int32_t>(tokens).first(10), 0);
  EXPECT_EQ(m, (std::vector<int>{blocks[0], blocks[1]}));
  EXPECT_EQ(pool.ref_count(blocks[0]), 2);
  EXPECT_EQ(pool.ref_count(blocks[1]), 2);
  EXPECT_EQ(pool.hits(), 0);  // a match may be handed back; the user counts what it keeps
  pool.record_hits(static_cast<int>(m.size()));
  EXPECT_EQ(pool.hits(), 2);

  // Shorter than one block: nothing.
  EXPECT_TRUE(pool.match_prefix(std::span<const int32_t>(tokens).first(3), 0).empty());
  // A different second block: only the first matches.
  auto other = tokens;
  other[5] = 9;
  auto m2 = pool.match_prefix(other, 0);
  EXPECT_EQ(m2, (std::vector<int>{blocks[0]}));
  // A different first block: the chain breaks at once even though block 2's tokens agree.
  other = tokens;
  other[0] = 9;
  EXPECT_TRUE(pool.match_prefix(other, 0).empty());
  // Another adapter never shares.
  EXPECT_TRUE(pool.match_prefix(tokens, 42).empty());

  for (int b : m) pool.free(b);
  pool.free(m2[0]);
  for (int b : blocks) pool.free(b);
  EXPECT_EQ(pool.num_free(), 8);
}

TEST(BlockPool, FreedCachedBlocksStayMatchableUntilEvicted) {
  BlockPool pool(4, kBs, true);
  auto tokens = iota_tokens(8);
  auto blocks = alloc_n(pool, 2);
  publish_chain(pool, blocks, tokens, 3);
  pool.free(blocks[1]);
  pool.free(blocks[0]);
  EXPECT_EQ(pool.num_free(), 4);  // cached-unreferenced blocks count as free

  auto m = pool.match_prefix(tokens, 3);
  EXPECT_EQ(m, blocks);
  EXPECT_EQ(pool.num_free(), 2);  // matched blocks left the free list
  for (int b : m) EXPECT_EQ(pool.ref_count(b), 1);
  pool.free(m[1]);
  pool.free(m[0]);

  // Taking all four blocks evicts both cached ones; their hashes are gone.
  auto all = alloc_n(pool, 4);
  EXPECT_FALSE(pool.allocate().has_value());
  for (int b : all) EXPECT_EQ(pool.published_hash(b), 0u);
  for (int b : all) pool.free(b);
  EXPECT_TRUE(pool.match_prefix(tokens, 3).empty());
}

TEST(BlockPool, UnpublishedBlocksAreReusedBeforeCachedOnes) {
  BlockPool pool(4, kBs, true);
  auto tokens = iota_tokens(8);
  auto blocks = alloc_n(pool, 4);
  publish_chain(pool, {blocks[0], blocks[1]}, tokens, 0);
  for (int b : blocks) pool.free(b);
  // Two allocations take the unpublished blocks, so the cached prefix survives.
  auto a = alloc_n(pool, 2);
  EXPECT_EQ(std::set<int>(a.begin(), a.end()), (std::set<int>{blocks[2], blocks[3]}));
  auto m = pool.match_prefix(tokens, 0);
  EXPECT_EQ(m, (std::vector<int>{blocks[0], blocks[1]}));
  for (int b : m) pool.free(b);
  for (int b : a) pool.free(b);
  EXPECT_EQ(pool.num_free(), 4);
}

TEST(BlockPool, CachedBlocksAreEvictedLeastRecentlyFreedFirst) {
  BlockPool pool(3, kBs, true);
  auto ta = iota_tokens(4, 10);
  auto tb = iota_tokens(4, 20);
  auto tc = iota_tokens(4, 30);
  int a = *pool.allocate(), b = *pool.allocate(), c = *pool.allocate();
  publish_chain(pool, {a}, ta, 0);
  publish_chain(pool, {b}, tb, 0);
  publish_chain(pool, {c}, tc, 0);
  pool.free(b);
  pool.free(a);
  pool.free(c);
  // Touch b again: it becomes the most recently freed.
  auto mb = pool.match_prefix(tb, 0);
  ASSERT_EQ(mb.size(), 1u);
  pool.free(mb[0]);
  // Eviction order now: a, c, b.
  EXPECT_EQ(*pool.allocate(), a);
  EXPECT_TRUE(pool.match_prefix(ta, 0).empty());
  EXPECT_EQ(pool.match_prefix(tb, 0).size(), 1u);
  EXPECT_EQ(pool.match_prefix(tc, 0).size(), 1u);
}

TEST(BlockPool, PublishingADuplicateKeepsTheFirstBlock) {
  BlockPool pool(4, kBs, true);
  auto tokens = iota_tokens(4);
  const uint64_t h = BlockPool::hash_block(0, tokens, 0);
  int first = *pool.allocate(), second = *pool.allocate();
  pool.publish(first, h);
  pool.publish(second, h);
  EXPECT_EQ(pool.published_hash(first), h);
  EXPECT_EQ(pool.published_hash(second), 0u);
  pool.publish(first, h + 1);  // already published: no-op
  EXPECT_EQ(pool.published_hash(first), h);
  auto m = pool.match_prefix(tokens, 0);
  EXPECT_EQ(m, (std::vector<int>{first}));
  pool.free(m[0]);
  pool.free(first);
  pool.free(second);
  EXPECT_EQ(pool.num_free(), 4);
}

TEST(BlockPool, ResetForgetsPublishedBlocksOnlyWhenNoneIsInUse) {
  BlockPool pool(4, kBs, true);
  auto tokens = iota_tokens(8);
  auto blocks = alloc_n(pool, 2);
  publish_chain(pool, blocks, tokens, 0);
  EXPECT_FALSE(pool.reset_prefix_cache());  // in use: nothing changes
  for (int b : blocks) pool.free(b);
  auto m = pool.match_prefix(tokens, 0);
  EXPECT_EQ(m.size(), 2u);
  for (int b : m) pool.free(b);
  EXPECT_TRUE(pool.reset_prefix_cache());
  EXPECT_TRUE(pool.match_prefix(tokens, 0).empty());
  for (int b : blocks) EXPECT_EQ(pool.published_hash(b), 0u);
  EXPECT_EQ(pool.num_free(), 4);
  // Publishing works as before afterwards.
  auto again = alloc_n(pool, 2);
  publish_chain(pool, again, tokens, 0);
  for (int b : again) pool.free(b);
  EXPECT_EQ(pool.match_prefix(tokens, 0).size(), 2u);
}

TEST(BlockPool, SharedBlockIsFreedOnlyByItsLastOwner) {
  BlockPool pool(2, kBs, true);
  auto tokens = iota_tokens(4);
  int b = *pool.allocate();
  publish_chain(pool, {b}, tokens, 0);
  auto m1 = pool.match_prefix(tokens, 0);
  auto m2 = pool.match_prefix(tokens, 0);
  EXPECT_EQ(pool.ref_count(b), 3);
  EXPECT_EQ(pool.num_free(), 1);
  pool.free(b);
  pool.free(m1[0]);
  EXPECT_EQ(pool.num_free(), 1);
  pool.free(m2[0]);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(pool.ref_count(b), 0);
}

}  // namespace
}  // namespace quiver
