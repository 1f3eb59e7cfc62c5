// link: qv_backend
// Grouped ops on CUDA (one launch for q/k/v or gate/up) vs the reference's member-by-member
// defaults: matmul_group on the GEMV path (every token bucket, with and without biases,
// members of different sizes as in GQA) and on cuBLAS; lora_group with 1..3 members,
// slot-sorted token order, slot -1 rows untouched. Skips without a GPU.
#include "gpu/cuda_test_util.h"

namespace quiver::test {
namespace {

const DType kFloatTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

class CudaGroups : public CudaTest {
 protected:
  void check_matmul_group(Backend* gpu, const std::string& path, int64_t n, int64_t in,
                          const std::vector<int64_t>& outs, DType wt) {
    HostTensor x = random_tensor(rng_, DType::kF32, {n, in});
    std::vector<HostTensor> w, b, y;
    for (size_t i = 0; i < outs.size(); ++i) {
      w.push_back(random_tensor(rng_, wt, {outs[i], in}, 0.5f));
      b.push_back(random_tensor(rng_, wt, {outs[i]}));
      y.push_back(random_tensor(rng_, DType::kF32, {n, outs[i]}));
    }
    DeviceTensor gx = upload(gpu, x);
    std::vector<DeviceTensor> gw, gb, gy;
    MatmulGroup hg, dg;
    hg.count = dg.count = static_cast<int>(outs.size());
    for (size_t i = 0; i < outs.size(); ++i) {
      gw.push_back(upload(gpu, w[i]));
      gb.push_back(upload(gpu, b[i]));
      gy.push_back(upload(gpu, y[i]));
      const bool bias = i != 1;  // the middle member without bias
      hg.y[i] = y[i].view();
      hg.w[i] = w[i].view();
      hg.bias[i] = bias ? b[i].view() : Tensor();
      dg.y[i] = gy[i].t;
      dg.w[i] = gw[i].t;
      dg.bias[i] = bias ? gb[i].t : Tensor();
    }
    ref_.matmul_group(hg, x.view());
    gpu->matmul_group(dg, gx.t);
    const double tol = (path == "gemv" || wt == DType::kF32) ? 1e-4 : 1e-2;
    for (size_t i = 0; i < outs.size(); ++i) {
      char tag[160];
      std::snprintf(tag, sizeof tag, "matmul_group[%s] %s n=%lld in=%lld member %zu/%zu out=%lld", path.c_str(),
                    name_of(wt), static_cast<long long>(n), static_cast<long long>(in), i, outs.size(),
                    static_cast<long long>(outs[i]));
      expect_close(tag, download(gpu, gy[i].t), y[i].as_f32(), tol);
    }
  }

  void check_lora_group(int64_t n, int64_t in, const std::vector<int64_t>& outs, int64_t rank, DType st) {
    const int64_t num_slots = 4;
    std::vector<int32_t> slots(static_cast<size_t>(n));
    for (auto& s : slots) s = static_cast<int32_t>(rng_() % (num_slots + 1)) - 1;
    std::vector<int32_t> order;
    lora_sorted_tokens(slots, &order);
    HostTensor x = random_tensor(rng_, DType::kF32, {n, in});
    HostTensor hslots = host_i32({n}, slots), horder = host_i32({n}, order);
    HostTensor t = random_tensor(rng_, DType::kF32, {n, rank});
    std::vector<HostTensor> a, b, y;
    for (int64_t out : outs) {
      a.push_back(random_tensor(rng_, st, {num_slots, rank, in}, 0.5f));
      b.push_back(random_tensor(rng_, st, {num_slots, out, rank}, 0.5f));
      y.push_back(random_tensor(rng_, DType::kF32, {n, out}, 9.f));
    }
    Backend* gpu = gpu_.get();
    DeviceTensor gx = upload(gpu, x), gs = upload(gpu, hslots), go = upload(gpu, horder), gt = upload(gpu, t);
    std::vector<DeviceTensor> ga, gb, gy;
    LoraGroup hg, dg;
    hg.count = dg.count = static_cast<int>(outs.size());
    for (size_t i = 0; i < outs.size(); ++i) {
      ga.push_back(upload(gpu, a[i]));
      gb.push_back(upload(gpu, b[i]));
      gy.push_back(upload(gpu, y[i]));
      hg.y[i] = y[i].view();
      hg.a_stack[i] = a[i].view();
      hg.b_stack[i] = b[i].view();
      dg.y[i] = gy[i].t;
      dg.a_stack[i] = ga[i].t;
      dg.b_stack[i] = gb[i].t;
    }
    LoraMeta hmeta, dmeta;
    hmeta.token_slot = hslots.view();
    dmeta.token_slot = gs.t;
    dmeta.sorted_tokens = go.t;
    ref_.lora_group(hg, x.view(), t.view(), hmeta);
    gpu->lora_group(dg, gx.t, gt.t, dmeta);
    for (size_t i = 0; i < outs.size(); ++i) {
      char tag[160];
      std::snprintf(tag, sizeof tag, "lora_group %s n=%lld in=%lld r=%lld member %zu/%zu out=%lld", name_of(st),
                    static_cast<long long>(n), static_cast<long long>(in), static_cast<long long>(rank), i,
                    outs.size(), static_cast<long long>(outs[i]));
      expect_close(tag, download(gpu, gy[i].t), y[i].as_f32(), 1e-4);
    }
  }
};

TEST_F(CudaGroups, MatmulGroupGemvEveryBucket) {
  CudaBackendOptions o;
  o.gemv_max_n = 16;
  auto gemv = variant_backend(o);
  ASSERT_NE(gemv, nullptr);
  for (DType wt : kFloatTypes)
    for (int64_t n : {1, 2, 3, 5, 8, 13, 16}) {
      check_matmul_group(gemv.get(), "gemv", n, 256, {256, 64, 64}, wt);  // q, k, v under GQA
      check_matmul_group(gemv.get(), "gemv", n, 136, {97, 33}, wt);      // gate, up; odd sizes
      check_matmul_group(gemv.get(), "gemv", n, 4096, {8}, wt);
    }
}

TEST_F(CudaGroups, MatmulGroupCublas) {
  for (DType wt : kFloatTypes)
    for (int64_t n : {17, 97}) check_matmul_group(gpu_.get(), "cublas", n, 256, {256, 64, 64}, wt);
}

TEST_F(CudaGroups, LoraGroup) {
  for (DType st : {DType::kF32, DType::kBF16})
    for (int64_t n : {1, 3, 16, 33, 256})
      for (int64_t rank : {1, 16, 64}) {
        check_lora_group(n, 512, {512, 128, 128}, rank, st);
        check_lora_group(n, 300, {700, 700}, rank, st);
        check_lora_group(n, 1100, {300}, rank, st);
      }
}

}  // namespace
}  // namespace quiver::test
