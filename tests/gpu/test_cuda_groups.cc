// link: qv_backend
// Grouped ops on CUDA (one launch for q/k/v or gate/up) vs the reference's member-by-member
// defaults: matmul_group on the GEMV path (every token bucket, with and without biases,
// members of different sizes as in GQA), on the tensor-core path of 3..16 tokens and on
// cuBLAS; lora_group with 1..3 members,
// slot-sorted token order, slot -1 rows untouched; project() with the tensor-core shrink of
// prefill tiles from x's bf16 copy, and project() on decode batches of 1..65 tokens, with
// and without a deferred expand (LoraDelta, applied after: at 1 token the GEMV whose extra
// blocks compute the shrink, at 3..16 the tensor-core matmul whose first blocks do, up to 64
// the token shrink beside the matmul, gemv_lora.cu; otherwise the GEMV or cuBLAS + gather or
// tiled kernels). Skips without a GPU.
#include <initializer_list>

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

  // project() on a decode batch (matmul + biases + LoRA) against the reference's matmul_group
  // then lora_group, three times on the same operands with new slots (read at run time;
  // token 0 has an adapter, then another, then none). Slots include -1 and one past the
  // stack (no adapter). With `defer`, project() may leave the expand in a LoraDelta (one
  // token: gemv_lora.cu), which apply_lora_delta then adds; deferred says whether it must.
  void check_project_decode(int64_t n, int64_t in, const std::vector<int64_t>& outs, int64_t rank, DType wt,
                            DType st, bool defer = false, bool deferred = false) {
    const int64_t num_slots = 4;
    HostTensor x = random_tensor(rng_, DType::kF32, {n, in});
    std::vector<HostTensor> a, b, w, bias;
    for (int64_t out : outs) {
      a.push_back(random_tensor(rng_, st, {num_slots, rank, in}, 0.5f));
      b.push_back(random_tensor(rng_, st, {num_slots, out, rank}, 0.5f));
      w.push_back(random_tensor(rng_, wt, {out, in}, 0.5f));
      bias.push_back(random_tensor(rng_, wt, {out}));
    }
    Backend* gpu = decode_gpu_ != nullptr ? decode_gpu_ : gpu_.get();
    DeviceTensor gx = upload(gpu, x);
    std::vector<DeviceTensor> ga, gb, gw, gbias, gy;
    for (size_t i = 0; i < outs.size(); ++i) {
      ga.push_back(upload(gpu, a[i]));
      gb.push_back(upload(gpu, b[i]));
      gw.push_back(upload(gpu, w[i]));
      gbias.push_back(upload(gpu, bias[i]));
      gy.push_back(upload(gpu, random_tensor(rng_, DType::kF32, {n, outs[i]}, 9.f)));  // overwritten
    }
    for (int round = 0; round < 3; ++round) {
      std::vector<int32_t> slots(static_cast<size_t>(n));
      for (auto& s : slots) s = static_cast<int32_t>(rng_() % (num_slots + 2)) - 1;  // -1 .. num_slots
      slots[0] = round < 2 ? round : -1;
      std::vector<int32_t> ref_slots = slots;  // the reference rejects a slot past the stack
      for (auto& s : ref_slots) s = s < num_slots ? s : -1;
      HostTensor hslots = host_i32({n}, ref_slots), t = random_tensor(rng_, DType::kF32, {n, rank});
      DeviceTensor gs = upload(gpu, host_i32({n}, slots)), gt = upload(gpu, t);
      std::vector<HostTensor> y;
      MatmulGroup hm, dm;
      LoraGroup hl, dl;
      hm.count = dm.count = hl.count = dl.count = static_cast<int>(outs.size());
      for (size_t i = 0; i < outs.size(); ++i) {
        y.push_back(host_f32({n, outs[i]}, std::vector<float>(static_cast<size_t>(n * outs[i]), 0.f)));
        const bool has_bias = i != 1;  // the middle member without bias
        hm.y[i] = hl.y[i] = y[i].view();
        hm.w[i] = w[i].view();
        hm.bias[i] = has_bias ? bias[i].view() : Tensor();
        hl.a_stack[i] = a[i].view();
        hl.b_stack[i] = b[i].view();
        dm.y[i] = dl.y[i] = gy[i].t;
        dm.w[i] = gw[i].t;
        dm.bias[i] = has_bias ? gbias[i].t : Tensor();
        dl.a_stack[i] = ga[i].t;
        dl.b_stack[i] = gb[i].t;
      }
      LoraMeta hmeta, dmeta;
      hmeta.token_slot = hslots.view();
      dmeta.token_slot = gs.t;
      ref_.matmul_group(hm, x.view());
      ref_.lora_group(hl, x.view(), t.view(), hmeta);
      LoraDelta delta;
      delta.count = -1;  // project() must set it
      gpu->project(dm, &dl, gx.t, gt.t, dmeta, defer ? &delta : nullptr);
      if (defer) {
        EXPECT_EQ(delta.count, deferred ? dm.count : 0);
        gpu->apply_lora_delta(delta);
      }
      for (size_t i = 0; i < outs.size(); ++i) {
        char tag[200];
        std::snprintf(tag, sizeof tag, "project decode%s w %s stacks %s n=%lld in=%lld r=%lld round %d member %zu/%zu",
                      defer ? " deferred" : "", name_of(wt), name_of(st), static_cast<long long>(n),
                      static_cast<long long>(in), static_cast<long long>(rank), round, i, outs.size());
        // Above the GEMV's tokens 16-bit weights go to the skinny kernel or cuBLAS, with x
        // rounded to their type.
        const bool rounded = n > CudaBackendOptions{}.gemv_max_n && wt != DType::kF32;
        expect_close(tag, download(gpu, gy[i].t), y[i].as_f32(), rounded ? 1e-2 : 1e-4);
      }
    }
  }
  Backend* decode_gpu_ = nullptr;  // check_project_decode's backend when set (else gpu_)

  // check_matmul_group on decode-sized groups, every weight type and token count in ns.
  void check_decode_groups(Backend* gpu, const std::string& path, std::initializer_list<int64_t> ns) {
    for (DType wt : kFloatTypes)
      for (int64_t n : ns) {
        check_matmul_group(gpu, path, n, 256, {256, 64, 64}, wt);  // q, k, v under GQA
        check_matmul_group(gpu, path, n, 136, {97, 33}, wt);      // gate, up; odd sizes
        check_matmul_group(gpu, path, n, 4096, {8}, wt);
      }
  }

  // project() on a prefill-sized batch with bf16 stacks and bf16 matmul weights: from 512
  // tokens the shrink of one-run tiles reads x's bf16 copy on tensor cores (handed over as
  // MatmulGroup::x16, or made by project() when none is), the other tiles stay on CUDA
  // cores. The weights are zero, so y is the LoRA term alone; x holds bf16 values, so the
  // reference on f32 x is the same sum. slots: per token, in token order.
  void check_project_x16(int64_t in, const std::vector<int64_t>& outs, int64_t rank, const std::vector<int32_t>& slots,
                         bool give_x16, DType st = DType::kBF16) {
    const int64_t n = static_cast<int64_t>(slots.size()), num_slots = 3;
    std::vector<int32_t> order;
    lora_sorted_tokens(slots, &order);
    const HostTensor x16 = random_tensor(rng_, DType::kBF16, {n, in});
    HostTensor x = host_f32({n, in}, x16.as_f32());
    HostTensor hslots = host_i32({n}, slots), horder = host_i32({n}, order);
    HostTensor t = random_tensor(rng_, DType::kF32, {n, rank});
    std::vector<HostTensor> a, b, y, w;
    for (int64_t out : outs) {
      a.push_back(random_tensor(rng_, st, {num_slots, rank, in}, 0.5f));
      b.push_back(random_tensor(rng_, st, {num_slots, out, rank}, 0.5f));
      y.push_back(host_f32({n, out}, std::vector<float>(static_cast<size_t>(n * out), 0.f)));
      w.push_back(host_f32({out, in}, std::vector<float>(static_cast<size_t>(out * in), 0.f), DType::kBF16));
    }
    Backend* gpu = gpu_.get();
    DeviceTensor gx = upload(gpu, x), gx16 = upload(gpu, x16), gs = upload(gpu, hslots), go = upload(gpu, horder);
    DeviceTensor gt = upload(gpu, t);
    std::vector<DeviceTensor> ga, gb, gy, gw;
    LoraGroup hg, dg;
    MatmulGroup mg;
    hg.count = dg.count = mg.count = static_cast<int>(outs.size());
    for (size_t i = 0; i < outs.size(); ++i) {
      ga.push_back(upload(gpu, a[i]));
      gb.push_back(upload(gpu, b[i]));
      gy.push_back(upload(gpu, random_tensor(rng_, DType::kF32, {n, outs[i]}, 9.f)));  // the matmul overwrites
      gw.push_back(upload(gpu, w[i]));
      hg.y[i] = y[i].view();
      hg.a_stack[i] = a[i].view();
      hg.b_stack[i] = b[i].view();
      dg.y[i] = mg.y[i] = gy[i].t;
      dg.a_stack[i] = ga[i].t;
      dg.b_stack[i] = gb[i].t;
      mg.w[i] = gw[i].t;
    }
    if (give_x16) mg.x16 = gx16.t;
    LoraMeta hmeta, dmeta;
    hmeta.token_slot = hslots.view();
    dmeta.token_slot = gs.t;
    dmeta.sorted_tokens = go.t;
    ref_.lora_group(hg, x.view(), t.view(), hmeta);
    gpu->project(mg, &dg, gx.t, gt.t, dmeta, nullptr);
    for (size_t i = 0; i < outs.size(); ++i) {
      char tag[200];
      std::snprintf(tag, sizeof tag, "project %s x16 %s n=%lld in=%lld r=%lld member %zu/%zu out=%lld", name_of(st),
                    give_x16 ? "given" : "made", static_cast<long long>(n), static_cast<long long>(in),
                    static_cast<long long>(rank), i, outs.size(), static_cast<long long>(outs[i]));
      expect_close(tag, download(gpu, gy[i].t), y[i].as_f32(), 1e-4);
    }
  }
};

TEST_F(CudaGroups, MatmulGroupGemvEveryBucket) {
  CudaBackendOptions o;
  o.gemv_max_n = 16;
  auto gemv = variant_backend(o);
  ASSERT_NE(gemv, nullptr);
  check_decode_groups(gemv.get(), "gemv", {1, 2, 3, 5, 8, 13, 16});
}

// The tensor-core matmul of 3..16 tokens (gemm_skinny.cu), x rounded to the weights' type
// as on cuBLAS; `in` 136 ends in a partial step.
TEST_F(CudaGroups, MatmulGroupSkinny) {
  CudaBackendOptions o;
  o.skinny_max_n = 16;
  auto skinny = variant_backend(o);
  ASSERT_NE(skinny, nullptr);
  check_decode_groups(skinny.get(), "skinny", {3, 5, 8, 9, 13, 16});
}

TEST_F(CudaGroups, ProjectDecodeSkinny) {
  CudaBackendOptions o;
  o.skinny_max_n = 16;
  o.skinny_lora_max_n = 16;
  auto skinny = variant_backend(o);
  ASSERT_NE(skinny, nullptr);
  decode_gpu_ = skinny.get();
  // Stacks in the weights' type take the shrink blocks of the same launch; f32 stacks the
  // token shrink beside it; 17 tokens cuBLAS.
  const std::pair<DType, DType> types[] = {{DType::kBF16, DType::kBF16}, {DType::kF16, DType::kF16},
                                           {DType::kBF16, DType::kF32}};
  for (const auto& [wt, st] : types)
    for (int64_t n : {3, 8, 9, 16, 17})
      for (int64_t rank : {1, 16, 40})
        for (bool defer : {false, true}) {
          check_project_decode(n, 512, {512, 128, 128}, rank, wt, st, defer, defer);
          check_project_decode(n, 304, {700, 700}, rank, wt, st, defer, defer);
        }
  check_project_decode(8, 4096, {4096, 1024, 1024}, 16, DType::kBF16, DType::kBF16, true, true);
  decode_gpu_ = nullptr;
}

// 17 and 64 tokens on the cuBLAS handle without a workspace, 65 and 97 on the other
// (CudaBackendOptions::cublas_no_workspace_max_n).
TEST_F(CudaGroups, MatmulGroupCublas) {
  for (DType wt : kFloatTypes)
    for (int64_t n : {17, 64, 65, 97}) check_matmul_group(gpu_.get(), "cublas", n, 256, {256, 64, 64}, wt);
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

TEST_F(CudaGroups, ProjectDecode) {
  // Decode batches with a deferred expand: at 1 token, stacks in the weights' type or f32
  // take gemv_lora.cu's launch (the shrink as extra GEMV blocks); other stacks and up to 64
  // tokens take its token shrink beside the matmul. `in` not a multiple of 8, and 65
  // tokens, take the split shrink and apply the expand.
  const std::pair<DType, DType> types[] = {{DType::kF32, DType::kF32},  {DType::kF16, DType::kF16},
                                           {DType::kBF16, DType::kBF16}, {DType::kBF16, DType::kF32},
                                           {DType::kF16, DType::kF32},  {DType::kBF16, DType::kF16}};
  for (const auto& [wt, st] : types)
    for (int64_t n : {1, 2, 3, 4})
      for (int64_t rank : {1, 5, 16, 40})
        for (bool defer : {false, true}) {
          const bool deferred = defer;  // `in` is a multiple of 8
          check_project_decode(n, 512, {512, 128, 128}, rank, wt, st, defer, deferred);  // q, k, v
          check_project_decode(n, 304, {700, 700}, rank, wt, st, defer, deferred);       // gate, up
        }
  for (int64_t n : {1, 4, 13, 33, 64}) {
    check_project_decode(n, 1104, {300}, 64, DType::kBF16, DType::kBF16, true, true);
    check_project_decode(n, 300, {200}, 16, DType::kBF16, DType::kBF16, true, false);  // in % 8 != 0
    check_project_decode(n, 256, {96}, 512, DType::kBF16, DType::kF32, true, true);    // the largest rank
  }
  for (int64_t n : {1, 64}) {  // 7B shapes (the reference takes seconds here)
    check_project_decode(n, 4096, {4096, 1024, 1024}, 16, DType::kBF16, DType::kBF16, true, true);  // q/k/v
    check_project_decode(n, 11008, {4096}, 16, DType::kBF16, DType::kBF16, true, true);  // down
  }
  check_project_decode(65, 512, {256}, 16, DType::kBF16, DType::kBF16, true, false);  // past kDeferMaxN
}

TEST_F(CudaGroups, ProjectPrefillShrinkFromX16) {
  // Runs of one adapter (tiles that are one run, and tiles where runs meet), base-model
  // tokens, and a tail of short runs; tokens interleaved so the slot-sorted walk matters.
  std::vector<int32_t> slots;
  for (int i = 0; i < 600; ++i) slots.push_back(i < 250 ? (i % 2 ? 0 : 2) : i < 300 ? -1 : i < 560 ? 1 : i % 3);
  check_project_x16(4096, {512, 128, 128}, 16, slots, true);  // q/k/v
  check_project_x16(1096, {300}, 100, slots, true);           // in not a multiple of 32, 4 rank passes
  check_project_x16(256, {256}, 64, slots, false);            // o: project() makes the copy
  check_project_x16(512, {200, 200}, 8, slots, true, DType::kF32);  // f32 stacks: CUDA cores only
  // Every tile one run: four requests of 128 tokens.
  std::vector<int32_t> four(512);
  for (size_t i = 0; i < four.size(); ++i) four[i] = static_cast<int32_t>(i / 128) % 3;
  check_project_x16(2048, {256, 256}, 32, four, true);
}

}  // namespace
}  // namespace quiver::test
