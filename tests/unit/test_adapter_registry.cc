// link: qv_lora qv_io qv_backend
// AdapterRegistry: names, uids, the host LRU (max_cpu_loras) and reloads after eviction.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "lora/adapter_registry.h"
#include "unit/lora_test_util.h"

namespace quiver {
namespace {

constexpr int kMaxRank = 8;

class AdapterRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = lora_test::make_temp_dir("registry");
    ASSERT_FALSE(root_.empty());
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  // A valid adapter folder: q_proj and v_proj of rank `rank`, weights from `seed`.
  std::string write(const std::string& name, int rank, uint32_t seed) {
    std::string dir = root_ + "/" + name;
    std::filesystem::create_directories(dir);
    lora_test::write_adapter(dir, lora_test::lora_config(rank, rank, {"q_proj", "v_proj"}),
                             lora_test::adapter_tensors(base_, {LoraTarget::kQ, LoraTarget::kV}, rank, seed));
    return dir;
  }

  ModelConfig base_ = lora_test::tiny_config();
  std::string root_;
};

TEST_F(AdapterRegistryTest, AddFindListRemove) {
  AdapterRegistry reg(base_, kMaxRank, 4);
  auto a = reg.add("sql", write("sql", 4, 1));
  ASSERT_TRUE(a.is_ok()) << a.message();
  auto b = reg.add("chat", write("chat", 2, 2));
  ASSERT_TRUE(b.is_ok()) << b.message();
  EXPECT_NE(a->uid, 0u);
  EXPECT_NE(a->uid, b->uid);
  EXPECT_EQ(a->max_rank, 4);
  EXPECT_EQ(b->path, root_ + "/chat");

  auto f = reg.find("chat");
  ASSERT_TRUE(f.is_ok());
  EXPECT_EQ(f->uid, b->uid);
  auto all = reg.list();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].name, "sql");  // registration order
  EXPECT_EQ(all[1].name, "chat");

  ASSERT_TRUE(reg.remove("sql").is_ok());
  EXPECT_FALSE(reg.find("sql").is_ok());
  EXPECT_EQ(reg.list().size(), 1u);
  EXPECT_FALSE(reg.get(a->uid).is_ok());  // its uid is gone too
  EXPECT_FALSE(reg.remove("sql").is_ok());
}

TEST_F(AdapterRegistryTest, UnknownNameListsKnownNames) {
  AdapterRegistry reg(base_, kMaxRank, 4);
  auto none = reg.find("x");
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.message().find("'x'"), std::string::npos) << none.message();
  EXPECT_NE(none.message().find("no adapters"), std::string::npos) << none.message();
  ASSERT_TRUE(reg.add("sql", write("sql", 2, 1)).is_ok());
  ASSERT_TRUE(reg.add("chat", write("chat", 2, 2)).is_ok());
  auto r = reg.find("sqll");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("unknown LoRA adapter 'sqll'"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("sql, chat"), std::string::npos) << r.message();
}

TEST_F(AdapterRegistryTest, DuplicateNameAndInvalidAdapterAreRefused) {
  AdapterRegistry reg(base_, kMaxRank, 4);
  ASSERT_TRUE(reg.add("sql", write("sql", 2, 1)).is_ok());
  auto dup = reg.add("sql", write("other", 2, 2));
  ASSERT_FALSE(dup.is_ok());
  EXPECT_NE(dup.message().find("already registered"), std::string::npos) << dup.message();

  auto big = reg.add("big", write("big", 16, 3));  // rank above max_lora_rank
  ASSERT_FALSE(big.is_ok());
  EXPECT_NE(big.message().find("--max-lora-rank"), std::string::npos) << big.message();
  EXPECT_FALSE(reg.find("big").is_ok());  // never became visible
  EXPECT_FALSE(reg.add("missing", root_ + "/does_not_exist").is_ok());
  EXPECT_EQ(reg.list().size(), 1u);
}

// load() reads and validates without registering; register_loaded() then makes the name
// visible, unless another registration took it meanwhile.
TEST_F(AdapterRegistryTest, LoadThenRegister) {
  AdapterRegistry reg(base_, kMaxRank, 4);
  auto loaded = reg.load("sql", write("sql", 2, 1));
  ASSERT_TRUE(loaded.is_ok()) << loaded.message();
  EXPECT_EQ(loaded->info.uid, 0u);
  EXPECT_EQ(loaded->info.max_rank, 2);
  EXPECT_FALSE(reg.find("sql").is_ok());
  EXPECT_EQ(reg.loads(), 0);
  auto twin = reg.load("sql", write("sql2", 2, 2));
  ASSERT_TRUE(twin.is_ok());
  auto info = reg.register_loaded(std::move(loaded).value());
  ASSERT_TRUE(info.is_ok()) << info.message();
  EXPECT_NE(info->uid, 0u);
  EXPECT_EQ(reg.find("sql")->uid, info->uid);
  EXPECT_EQ(reg.num_cached(), 1);
  auto late = reg.register_loaded(std::move(twin).value());
  ASSERT_FALSE(late.is_ok());
  EXPECT_NE(late.message().find("already registered"), std::string::npos) << late.message();
  EXPECT_FALSE(reg.load("sql", write("sql3", 2, 3)).is_ok());
}

TEST_F(AdapterRegistryTest, ReAddAfterRemoveGetsNewUid) {
  AdapterRegistry reg(base_, kMaxRank, 4);
  std::string dir = write("sql", 2, 1);
  auto first = reg.add("sql", dir);
  ASSERT_TRUE(first.is_ok());
  auto held = reg.get(first->uid);  // a running request keeps its weights
  ASSERT_TRUE(held.is_ok());
  ASSERT_TRUE(reg.remove("sql").is_ok());
  auto second = reg.add("sql", write("sql", 4, 9));  // new weights, same name
  ASSERT_TRUE(second.is_ok());
  EXPECT_NE(second->uid, first->uid);
  EXPECT_EQ(second->max_rank, 4);
  EXPECT_EQ((*held)->max_rank, 2);  // the old shared_ptr is untouched
  auto now = reg.get(second->uid);
  ASSERT_TRUE(now.is_ok());
  EXPECT_EQ((*now)->max_rank, 4);
}

TEST_F(AdapterRegistryTest, LruCapacityAndReloadAfterEviction) {
  AdapterRegistry reg(base_, kMaxRank, /*max_cpu_loras=*/2);
  auto a = *reg.add("a", write("a", 2, 1));
  auto b = *reg.add("b", write("b", 2, 2));
  EXPECT_EQ(reg.num_cached(), 2);
  EXPECT_EQ(reg.loads(), 2);

  auto a_ptr = *reg.get(a.uid);  // cached: no disk read, a becomes most recent
  EXPECT_EQ(reg.loads(), 2);
  auto c = *reg.add("c", write("c", 2, 3));  // evicts b, the least recently used
  EXPECT_EQ(reg.num_cached(), 2);
  EXPECT_EQ(reg.loads(), 3);

  auto a_again = *reg.get(a.uid);
  EXPECT_EQ(reg.loads(), 3);
  EXPECT_EQ(a_again.get(), a_ptr.get());  // same host copy

  auto b_ptr = reg.get(b.uid);  // evicted: read from disk again, evicts c
  ASSERT_TRUE(b_ptr.is_ok()) << b_ptr.message();
  EXPECT_EQ(reg.loads(), 4);
  EXPECT_EQ(reg.num_cached(), 2);
  EXPECT_EQ((*b_ptr)->name, "b");
  EXPECT_EQ((*b_ptr)->layers[0][0]->a, lora_test::module_a(base_, 0, LoraTarget::kQ, 2, 2).values);

  ASSERT_TRUE(reg.get(c.uid).is_ok());  // c was evicted by b's reload
  EXPECT_EQ(reg.loads(), 5);
}

TEST_F(AdapterRegistryTest, ReloadFailureIsReported) {
  AdapterRegistry reg(base_, kMaxRank, 1);
  auto a = *reg.add("a", write("a", 2, 1));
  ASSERT_TRUE(reg.add("b", write("b", 2, 2)).is_ok());  // evicts a
  std::filesystem::remove(root_ + "/a/adapter_model.safetensors");
  auto r = reg.get(a.uid);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("'a'"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("adapter_model.safetensors"), std::string::npos) << r.message();
}

TEST_F(AdapterRegistryTest, ConcurrentGets) {
  AdapterRegistry reg(base_, kMaxRank, 2);
  const std::vector<std::string> names = {"a0", "a1", "a2", "a3"};
  std::vector<uint64_t> uids;
  for (int i = 0; i < 4; ++i) uids.push_back(reg.add(names[i], write(names[i], 2, i))->uid);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        auto r = reg.get(uids[(t + i) % 4]);
        if (!r.is_ok() || (*r)->name != names[(t + i) % 4]) ++failures;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LE(reg.num_cached(), 2);
}

}  // namespace
}  // namespace quiver
