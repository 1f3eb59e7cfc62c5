// link: qv_backend
// CUDA LoRA shrink/expand vs the reference: ranks 1..100, slot -1 rows that must stay
// untouched, mixed slots in runs of every length, awkward in/out sizes, token counts from
// 1 to 600 (tiles of 16 sorted tokens, `in` split 4 to 16 ways; from 512 tokens with bf16
// stacks the tensor-core expand of one-run tiles), with the tokens in their own order and
// walked through a slot-sorted permutation (LoraMeta::sorted_tokens, as the engine passes).
// Tolerance 1e-4 of max |ref|. Skips without a GPU.
#include <algorithm>

#include "gpu/cuda_test_util.h"

namespace quiver::test {
namespace {

class CudaLora : public CudaTest {
 protected:
  // Slots in runs of 1..7 tokens, drawn from {-1, 0 .. num_slots - 1}.
  std::vector<int32_t> random_slots(int64_t n, int64_t num_slots) {
    std::vector<int32_t> slots;
    while (static_cast<int64_t>(slots.size()) < n) {
      const int32_t s = static_cast<int32_t>(rng_() % (num_slots + 1)) - 1;
      const int64_t run = 1 + rng_() % 7;
      for (int64_t i = 0; i < run && static_cast<int64_t>(slots.size()) < n; ++i) slots.push_back(s);
    }
    return slots;
  }

  // One shrink + expand case; sorted: pass the slot-sorted token order.
  void run(Backend* gpu, bool sorted, int64_t n, int64_t in, int64_t out, int64_t rank,
           const std::vector<int32_t>& slots, DType stack_type = DType::kF32) {
    const std::string path = sorted ? "sorted" : "in order";
    const int64_t num_slots = 3;
    HostTensor x = random_tensor(rng_, DType::kF32, {n, in});
    HostTensor a = random_tensor(rng_, stack_type, {num_slots, rank, in}, 0.5f);
    HostTensor b = random_tensor(rng_, stack_type, {num_slots, out, rank}, 0.5f);
    HostTensor t = random_tensor(rng_, DType::kF32, {n, rank}, 9.f);  // rows with -1 keep these
    HostTensor y = random_tensor(rng_, DType::kF32, {n, out}, 9.f);
    HostTensor hslots = host_i32({n}, slots);
    // Segments as the host computes them (the kernels may ignore them).
    std::vector<int32_t> seg_start{0}, seg_slot;
    for (int64_t i = 1; i <= n; ++i)
      if (i == n || slots[static_cast<size_t>(i)] != slots[static_cast<size_t>(i - 1)]) {
        seg_slot.push_back(slots[static_cast<size_t>(i - 1)]);
        seg_start.push_back(static_cast<int32_t>(i));
      }
    const int64_t num_segments = static_cast<int64_t>(seg_slot.size());
    HostTensor hstart = host_i32({num_segments + 1}, seg_start), hseg = host_i32({num_segments}, seg_slot);
    std::vector<int32_t> order;
    lora_sorted_tokens(slots, &order);
    HostTensor horder = host_i32({n}, order);

    DeviceTensor gx = upload(gpu, x), ga = upload(gpu, a), gb = upload(gpu, b), gt = upload(gpu, t), gy = upload(gpu, y);
    DeviceTensor gs = upload(gpu, hslots), gstart = upload(gpu, hstart), gseg = upload(gpu, hseg);
    DeviceTensor gorder = upload(gpu, horder);
    LoraMeta hmeta{hslots.view(), hstart.view(), hseg.view(), static_cast<int>(num_segments), Tensor()};
    LoraMeta gmeta{gs.t, gstart.t, gseg.t, static_cast<int>(num_segments), sorted ? gorder.t : Tensor()};

    ref_.lora_shrink(t.view(), x.view(), a.view(), hmeta);
    gpu->lora_shrink(gt.t, gx.t, ga.t, gmeta);
    const std::vector<float> t_gpu = download(gpu, gt.t);
    // Expand from the reference's t on both sides, so the two checks are independent.
    gpu->copy_from_host(gt.t.data, t.bytes.data(), static_cast<size_t>(n * rank) * 4);
    ref_.lora_expand(y.view(), t.view(), b.view(), hmeta);
    gpu->lora_expand(gy.t, gt.t, gb.t, gmeta);

    int64_t active = 0;
    for (int32_t s : slots) active += s >= 0;
    char tag[200];
    std::snprintf(tag, sizeof tag, "[%s] %s n=%lld in=%lld out=%lld r=%lld active=%lld", path.c_str(),
                  name_of(stack_type), static_cast<long long>(n), static_cast<long long>(in),
                  static_cast<long long>(out), static_cast<long long>(rank), static_cast<long long>(active));
    expect_close(std::string("lora_shrink") + tag, t_gpu, t.as_f32(), 1e-4);
    expect_close(std::string("lora_expand") + tag, download(gpu, gy.t), y.as_f32(), 1e-4);
  }

  void sweep(Backend* gpu, bool sorted) {
    for (auto [in, out] : {std::pair<int64_t, int64_t>{17, 97}, {130, 33}, {512, 1024}, {4096, 256}})
      for (int64_t rank : {1, 16, 64})
        for (int64_t n : {1, 3, 13, 17, 33, 97}) run(gpu, sorted, n, in, out, rank, random_slots(n, 3));
    // Rank above 64, long `in` (43 chunks), many tokens, 16-bit stacks.
    run(gpu, sorted, 40, 300, 200, 100, random_slots(40, 3));
    run(gpu, sorted, 300, 11008, 96, 16, random_slots(300, 3));
    // Prefill-sized: long runs of one adapter (segments), 4 column splits, 16-bit stacks.
    std::vector<int32_t> runs(600, 2);
    std::fill(runs.begin(), runs.begin() + 250, 0);
    std::fill(runs.begin() + 250, runs.begin() + 300, -1);
    run(gpu, sorted, 600, 1100, 300, 16, runs);
    run(gpu, sorted, 600, 4096, 64, 32, runs, DType::kBF16);
    // From 512 tokens, bf16 stacks: one-run tiles on tensor cores (out not a multiple of the
    // 128-column block, 4 rank steps), beside tiles of short runs; out not a multiple of 16
    // keeps every tile on CUDA cores.
    run(gpu, sorted, 600, 512, 1040, 64, runs, DType::kBF16);
    std::vector<int32_t> mixed(300, 1);
    const std::vector<int32_t> tail = random_slots(220, 3);
    mixed.insert(mixed.end(), tail.begin(), tail.end());
    run(gpu, sorted, 520, 256, 208, 16, mixed, DType::kBF16);
    run(gpu, sorted, 520, 256, 200, 16, mixed, DType::kBF16);
    run(gpu, sorted, 40, 256, 128, 16, random_slots(40, 3), DType::kBF16);
    run(gpu, sorted, 40, 264, 128, 16, random_slots(40, 3), DType::kF16);  // rows not 16-byte multiples
    // Edge slot patterns: all -1, all one slot, alternating.
    run(gpu, sorted, 17, 64, 64, 8, std::vector<int32_t>(17, -1));
    run(gpu, sorted, 33, 64, 64, 8, std::vector<int32_t>(33, 2));
    std::vector<int32_t> alt(33);
    for (size_t i = 0; i < alt.size(); ++i) alt[i] = i % 2 ? -1 : static_cast<int32_t>(i % 3);
    run(gpu, sorted, 33, 64, 64, 8, alt);
    run(gpu, sorted, 1, 64, 64, 8, {-1});
  }
};

TEST_F(CudaLora, TokensInOrder) { sweep(gpu_.get(), false); }

TEST_F(CudaLora, TokensSortedBySlot) { sweep(gpu_.get(), true); }

}  // namespace
}  // namespace quiver::test
