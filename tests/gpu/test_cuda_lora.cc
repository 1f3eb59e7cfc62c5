// link: qv_backend
// CUDA LoRA shrink/expand vs the reference, on both kernels (per-token BGMV and the tiled
// one, forced through CudaBackendOptions::lora_tiled_min_n): ranks 1..100, slot -1 rows
// that must stay untouched, mixed slots in runs of every length, awkward in/out sizes.
// Tolerance 1e-4 of max |ref|. Skips without a GPU.
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

  // One shrink + expand case on `gpu` (whose thresholds pick the kernel).
  void run(Backend* gpu, const std::string& path, int64_t n, int64_t in, int64_t out, int64_t rank,
           const std::vector<int32_t>& slots, DType stack_type = DType::kF32) {
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

    DeviceTensor gx = upload(gpu, x), ga = upload(gpu, a), gb = upload(gpu, b), gt = upload(gpu, t), gy = upload(gpu, y);
    DeviceTensor gs = upload(gpu, hslots), gstart = upload(gpu, hstart), gseg = upload(gpu, hseg);
    LoraMeta hmeta{hslots.view(), hstart.view(), hseg.view(), static_cast<int>(num_segments)};
    LoraMeta gmeta{gs.t, gstart.t, gseg.t, static_cast<int>(num_segments)};

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

  void sweep(Backend* gpu, const std::string& path) {
    for (auto [in, out] : {std::pair<int64_t, int64_t>{17, 97}, {130, 33}, {512, 1024}, {4096, 256}})
      for (int64_t rank : {1, 16, 64})
        for (int64_t n : {1, 3, 13, 17, 33, 97}) run(gpu, path, n, in, out, rank, random_slots(n, 3));
    // Rank above one shared-memory tile (tiled kernels loop over rank chunks), 16-bit stacks.
    run(gpu, path, 40, 300, 200, 100, random_slots(40, 3));
    run(gpu, path, 40, 256, 128, 16, random_slots(40, 3), DType::kBF16);
    run(gpu, path, 40, 256, 128, 16, random_slots(40, 3), DType::kF16);
    // Edge slot patterns: all -1, all one slot, alternating.
    run(gpu, path, 17, 64, 64, 8, std::vector<int32_t>(17, -1));
    run(gpu, path, 33, 64, 64, 8, std::vector<int32_t>(33, 2));
    std::vector<int32_t> alt(33);
    for (size_t i = 0; i < alt.size(); ++i) alt[i] = i % 2 ? -1 : static_cast<int32_t>(i % 3);
    run(gpu, path, 33, 64, 64, 8, alt);
    run(gpu, path, 1, 64, 64, 8, {-1});
  }
};

TEST_F(CudaLora, GatherKernel) {
  CudaBackendOptions o;
  o.lora_tiled_min_n = 1 << 30;
  auto gpu = variant_backend(o);
  ASSERT_NE(gpu, nullptr);
  sweep(gpu.get(), "bgmv");
}

TEST_F(CudaLora, TiledKernel) {
  CudaBackendOptions o;
  o.lora_tiled_min_n = 0;
  auto gpu = variant_backend(o);
  ASSERT_NE(gpu, nullptr);
  sweep(gpu.get(), "tiled");
}

TEST_F(CudaLora, DefaultThresholdLargeBatch) {
  // Default backend: n = 200 takes the tiled kernel, n = 64 the gather kernel.
  run(gpu_.get(), "default", 200, 4096, 4096, 16, random_slots(200, 3));
  run(gpu_.get(), "default", 64, 4096, 11008, 16, random_slots(64, 3));
}

}  // namespace
}  // namespace quiver::test
