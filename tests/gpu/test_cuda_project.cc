// link: qv_backend
// CUDA project() under every plan that can run a group, against the reference: for each
// shape (q/k/v-, gate/up- and o/down-like groups, awkward widths, 7B widths), each token
// count from 1 to 600 and each stack type, every matmul kernel that takes the shape and
// every LoRA shrink/expand pairing (fused into the GEMV or skinny launch, token rows beside
// the matmul, tiled, tiled on tensor cores) runs on the same operands. Where the plan
// leaves the expand to the next op, y must be the base product and t the shrink (rows
// with an adapter); otherwise y must be the whole projection. Slots include -1 and one past
// the stack (no adapter), or one adapter for all; tiled kernels walk the tokens in their own
// order and slot-sorted, with the host's count of one-adapter run tokens.
// The ops that take the left expand (rope_kv_write, add_rms_norm, silu_mul) are
// test_cuda_lora_delta.cc's. Tolerance: 1e-4 of max |ref| with f32 activations, 1e-2 where
// the plan multiplies x in 16 bits. fp8 weights are random ones quantized per row (the
// host's quantize_fp8_rows), the reference multiplying their exact values and row scales;
// cuBLASLt's FP8 GEMM is held to 1e-3 of the reference on x quantized per token as it
// quantizes x (shapes it does not take run the GEMV, held to the f32 reference), with x
// handed over as the norms' fp8 copy or not. Skips without a GPU.
#include <string>
#include <vector>

#include "gpu/cuda_test_util.h"

namespace quiver::test {
namespace {

constexpr int64_t kSlots = 4;

struct Case {
  int64_t n, in;
  std::vector<int64_t> outs;
  int64_t rank;
  DType wt, st;
  // The members' weights back to back (256-byte aligned) and their outputs at a stride of
  // n + 5 rows, as the loader and the model's workspace place them: members of one width
  // then run as one strided-batched GEMM on cuBLAS.
  bool adjacent = false;
  // Every token on one adapter (a prefill chunk), instead of random runs.
  bool one_adapter = false;
};

// Every plan the CUDA kernels can run this case with (the dispatch table picks one of them).
std::vector<GroupPlan> candidate_plans(const Case& c) {
  const int64_t n = c.n;
  const bool fp8 = c.wt == DType::kF8E4M3;
  std::vector<MatmulKernel> matmuls;
  if (n <= 16) matmuls.push_back(MatmulKernel::kGemv);
  if (n >= 3 && n <= 16 && (is_16bit_float(c.wt) || fp8) && c.in % 8 == 0) matmuls.push_back(MatmulKernel::kSkinny);
  if (fp8) {
    matmuls.push_back(MatmulKernel::kCublasFp8);
    matmuls.push_back(MatmulKernel::kCublasFp8Outer);
  } else {
    matmuls.push_back(MatmulKernel::kCublasSmall);
    if (n > 16) matmuls.push_back(MatmulKernel::kCublas);
  }
  auto x_type = [&](MatmulKernel m) { return matmul_input_type(m, c.wt, false); };
  const bool rows_ok = c.rank >= 1 && c.rank <= 512 && c.in >= 8 && c.in % 8 == 0;
  bool outs16 = c.rank % 16 == 0;
  for (int64_t o : c.outs) outs16 &= o % 16 == 0;
  std::vector<GroupPlan> plans;
  auto add = [&](MatmulKernel m, ShrinkKernel s, ExpandKernel e) { plans.push_back({m, s, e, x_type(m)}); };
  for (MatmulKernel m : matmuls) add(m, ShrinkKernel::kNone, ExpandKernel::kNone);
  if (n <= 2 && rows_ok && (c.st == c.wt || c.st == DType::kF32 || (fp8 && c.st == DType::kBF16)))
    add(MatmulKernel::kGemv, ShrinkKernel::kFused, ExpandKernel::kNextOp);
  if (n >= 3 && n <= 16 && (fp8 ? is_16bit_float(c.st) : is_16bit_float(c.wt) && c.st == c.wt) && c.in % 8 == 0 &&
      rows_ok)
    add(MatmulKernel::kSkinny, ShrinkKernel::kFused, ExpandKernel::kNextOp);
  for (MatmulKernel m : {matmuls.front(), matmuls.back()}) {
    if (rows_ok) add(m, ShrinkKernel::kTokenRows, ExpandKernel::kNextOp);
    add(m, ShrinkKernel::kTiled, ExpandKernel::kTiled);
    const bool x_bf16 = x_type(m) == DType::kBF16 || is_cublas_fp8(m);  // project() makes the copy
    const bool mma_shrink = c.st == DType::kBF16 && x_bf16 && c.in % 8 == 0;
    const bool mma_expand = c.st == DType::kBF16 && outs16;
    if (mma_shrink) add(m, ShrinkKernel::kTiledMma, ExpandKernel::kTiled);
    if (mma_expand) add(m, ShrinkKernel::kTiled, ExpandKernel::kTiledMma);
    if (mma_shrink && mma_expand) add(m, ShrinkKernel::kTiledMma, ExpandKernel::kTiledMma);
  }
  return plans;
}

class CudaProject : public CudaTest {
 protected:
  // Slots -1 .. kSlots (kSlots: past the stack) in runs of 1..40 tokens, token 0 on slot 1.
  std::vector<int32_t> slots_for(int64_t n) {
    std::vector<int32_t> s;
    while (static_cast<int64_t>(s.size()) < n) {
      const int32_t slot = static_cast<int32_t>(rng_() % (kSlots + 2)) - 1;
      const int64_t run = 1 + rng_() % (rng_() % 2 ? 40 : 3);
      for (int64_t i = 0; i < run && static_cast<int64_t>(s.size()) < n; ++i) s.push_back(slot);
    }
    s[0] = 1;
    return s;
  }

  void run(const Case& c) {
    Backend* gpu = gpu_.get();
    const int64_t n = c.n, in = c.in, R = c.rank;
    const int count = static_cast<int>(c.outs.size());
    const std::vector<int32_t> slots = c.one_adapter ? std::vector<int32_t>(static_cast<size_t>(n), 2) : slots_for(n);
    std::vector<int32_t> ref_slots = slots, order;
    for (auto& s : ref_slots) s = s < kSlots ? s : -1;
    lora_sorted_tokens(slots, &order);
    const bool fp8 = c.wt == DType::kF8E4M3;
    HostTensor x = random_tensor(rng_, DType::kF32, {n, in});
    HostTensor x16 = host_f32({n, in}, x.as_f32(), matmul_input_type(MatmulKernel::kSkinny, c.wt, false));  // x rounded
    HostTensor hslots = host_i32({n}, ref_slots);
    std::vector<HostTensor> w, bias, a, b, y;
    // fp8: w holds the e4m3 values in bf16 (exact) for the reference, wq the bytes the GPU
    // gets, wscale both's row scales.
    std::vector<HostTensor> wq;
    std::vector<std::vector<float>> wscale;
    for (int64_t out : c.outs) {
      if (fp8) {
        HostTensor wf = random_tensor(rng_, DType::kF32, {out, in}, 0.5f);
        HostTensor q = host_f32({out, in}, {}, DType::kF8E4M3);
        wscale.emplace_back(static_cast<size_t>(out) + 1);
        quantize_fp8_rows_range(q.view(), make_view(wscale.back().data(), DType::kF32, {out}, Device::kCpu), wf.view(),
                                0, out);
        w.push_back(host_f32({out, in}, q.as_f32(), DType::kBF16));
        wq.push_back(std::move(q));
      } else {
        w.push_back(random_tensor(rng_, c.wt, {out, in}, 0.5f));
      }
      bias.push_back(random_tensor(rng_, fp8 ? DType::kBF16 : c.wt, {out}));
      a.push_back(random_tensor(rng_, c.st, {kSlots, R, in}, 0.5f));
      b.push_back(random_tensor(rng_, c.st, {kSlots, out, R}, 0.5f));
      y.push_back(random_tensor(rng_, DType::kF32, {n, out}));
    }
    // The reference: matmuls, then the shrink into t (the base y and t kept), then the expand.
    HostTensor t = random_tensor(rng_, DType::kF32, {kMaxGroup, n, R});
    MatmulGroup hg;
    GroupLora hl;
    hg.count = hl.count = count;
    for (int i = 0; i < count; ++i) {
      hg.y[i] = hl.y[i] = y[static_cast<size_t>(i)].view();
      hg.w[i] = w[static_cast<size_t>(i)].view();
      if (fp8) hg.w[i].row_scale = wscale[static_cast<size_t>(i)].data();
      hg.bias[i] = i == 1 ? Tensor() : bias[static_cast<size_t>(i)].view();  // the middle member without
      hl.a_stack[i] = a[static_cast<size_t>(i)].view();
      hl.b_stack[i] = b[static_cast<size_t>(i)].view();
    }
    hl.t = t.view();
    hl.meta.token_slot = hslots.view();
    const GroupPlan host_defer{MatmulKernel::kHost, ShrinkKernel::kHost, ExpandKernel::kNextOp, DType::kF32};
    ref_.project(host_defer, hg, hl, x.view());
    std::vector<std::vector<float>> base_y, full_y, ref_t;
    const std::vector<float> t_all = t.as_f32();
    for (int i = 0; i < count; ++i) {
      base_y.push_back(y[static_cast<size_t>(i)].as_f32());
      ref_t.emplace_back(t_all.begin() + i * n * R, t_all.begin() + (i + 1) * n * R);
      ref_.lora_expand(hl.y[i], hl.t_of(i), hl.b_stack[i], hl.meta);
      full_y.push_back(y[static_cast<size_t>(i)].as_f32());
    }
    // What cuBLASLt's FP8 GEMM multiplies: x quantized per token (gemm_fp8.cu), where it
    // takes the shape; the base product on it, and the whole projection with the LoRA terms
    // of f32 x.
    bool lt_fits = in % 16 == 0;
    for (int64_t out : c.outs) lt_fits &= out % 16 == 0;
    std::vector<std::vector<float>> base_yq = base_y, full_yq = full_y;
    if (fp8 && lt_fits) {
      HostTensor q = host_f32({n, in}, {}, DType::kF8E4M3);
      std::vector<float> xs(static_cast<size_t>(n) + 1);
      quantize_fp8_rows_range(q.view(), make_view(xs.data(), DType::kF32, {n}, Device::kCpu), x.view(), 0, n);
      std::vector<float> xv = q.as_f32();
      for (int64_t i = 0; i < n * in; ++i) xv[static_cast<size_t>(i)] *= xs[static_cast<size_t>(i / in)];
      HostTensor xq = host_f32({n, in}, xv);
      for (int i = 0; i < count; ++i) {
        ref_.matmul(hg.y[i], xq.view(), hg.w[i], hg.bias[i]);
        base_yq[static_cast<size_t>(i)] = y[static_cast<size_t>(i)].as_f32();
        for (size_t e = 0; e < base_yq[static_cast<size_t>(i)].size(); ++e)
          full_yq[static_cast<size_t>(i)][e] += base_yq[static_cast<size_t>(i)][e] - base_y[static_cast<size_t>(i)][e];
      }
    }

    DeviceTensor gx = upload(gpu, x), gx16 = upload(gpu, x16), gs = upload(gpu, host_i32({n}, slots));
    DeviceTensor go = upload(gpu, host_i32({n}, order)), gt = upload(gpu, t);
    // x's fp8 copy, as the norms write it for the e4m3 plans (fp8_copy; no row of x is zero,
    // so the weights' quantizer gives the same codes and scales).
    Buffer gx8_buf(gpu, fp8_copy_bytes(n, in));
    const Tensor gx8 = gx8_buf.fp8_copy_view(n, in);
    gpu->quantize_fp8_rows(make_view(gx8.data, DType::kF8E4M3, {n, in}, Device::kCuda),
                           make_view(const_cast<float*>(gx8.row_scale), DType::kF32, {n}, Device::kCuda), gx.t);
    std::vector<DeviceTensor> gw, gscale, gbias, ga, gb, gy;
    Buffer w_all, y_all;  // c.adjacent: the members' weights and outputs
    std::vector<size_t> w_at, y_at;
    if (c.adjacent) {
      size_t wb = 0, yb = 0;
      for (int64_t out : c.outs) {
        w_at.push_back(wb);
        y_at.push_back(yb);
        wb += (static_cast<size_t>(out * in) * dtype_size(c.wt) + 255) / 256 * 256;
        yb += static_cast<size_t>((n + 5) * out) * sizeof(float);
      }
      w_all = Buffer(gpu, wb);
      y_all = Buffer(gpu, yb);
    }
    // A device copy of host tensor h at `at` bytes into `all`.
    const auto place = [&](const Buffer& all, size_t at, const HostTensor& h) {
      DeviceTensor d;
      d.t = make_view(static_cast<char*>(all.data()) + at, h.dtype, h.shape, gpu->device());
      gpu->copy_from_host(d.t.data, h.bytes.data(), static_cast<size_t>(h.numel()) * dtype_size(h.dtype));
      return d;
    };
    for (int i = 0; i < count; ++i) {
      if (c.adjacent) {
        gw.push_back(place(w_all, w_at[static_cast<size_t>(i)], w[static_cast<size_t>(i)]));
      } else if (fp8) {
        gw.push_back(upload(gpu, wq[static_cast<size_t>(i)]));
        gscale.push_back(upload(gpu, host_f32({c.outs[static_cast<size_t>(i)]}, wscale[static_cast<size_t>(i)])));
        gw.back().t.row_scale = gscale.back().t.ptr<float>();
      } else {
        gw.push_back(upload(gpu, w[static_cast<size_t>(i)]));
      }
      gbias.push_back(upload(gpu, bias[static_cast<size_t>(i)]));
      ga.push_back(upload(gpu, a[static_cast<size_t>(i)]));
      gb.push_back(upload(gpu, b[static_cast<size_t>(i)]));
      gy.push_back(c.adjacent ? place(y_all, y_at[static_cast<size_t>(i)], y[static_cast<size_t>(i)])
                              : upload(gpu, y[static_cast<size_t>(i)]));
    }
    for (const GroupPlan& p : candidate_plans(c)) {
      for (bool sorted : {false, true}) {
        if (sorted && p.shrink != ShrinkKernel::kTiled && p.shrink != ShrinkKernel::kTiledMma) continue;
        for (bool with_x16 : {false, true}) {
          if (with_x16 && p.x_type == DType::kF32) continue;
          MatmulGroup dg;
          GroupLora dl;
          dg.count = count;
          dl.count = p.lora() ? count : 0;
          for (int i = 0; i < count; ++i) {
            poison(gpu, gy[static_cast<size_t>(i)].t);
            dg.y[i] = dl.y[i] = gy[static_cast<size_t>(i)].t;
            dg.w[i] = gw[static_cast<size_t>(i)].t;
            dg.bias[i] = i == 1 ? Tensor() : gbias[static_cast<size_t>(i)].t;
            dl.a_stack[i] = ga[static_cast<size_t>(i)].t;
            dl.b_stack[i] = gb[static_cast<size_t>(i)].t;
          }
          if (with_x16) dg.x16 = p.x_type == DType::kF8E4M3 ? gx8 : gx16.t;
          poison(gpu, gt.t);
          dl.t = gt.t;
          dl.meta.token_slot = gs.t;
          dl.meta.sorted_tokens = sorted ? go.t : Tensor();
          // Sorted, the host's count of run tokens too, as the engine passes it (with all
          // tiles runs, the CUDA-core LoRA kernels are not launched).
          dl.meta.run_tokens = sorted ? lora_run_tokens(slots, order) : -1;
          gpu->project(p, dg, dl, gx.t);
          const bool lt = is_cublas_fp8(p.matmul) && lt_fits;
          const auto& want_base = lt ? base_yq : base_y;
          const auto& want_full = lt ? full_yq : full_y;
          const double tol = is_16bit_float(p.x_type) || p.shrink == ShrinkKernel::kTiledMma ? 1e-2 : lt ? 1e-3 : 1e-4;
          const std::vector<float> got_t = download(gpu, gt.t);
          for (int i = 0; i < count; ++i) {
            char tag[240];
            std::snprintf(tag, sizeof tag, "project %s w=%s stacks=%s n=%lld in=%lld out=%lld r=%lld member %d%s%s",
                          (to_string(p.matmul) + "+" + to_string(p.shrink) + "/" + to_string(p.expand)).c_str(),
                          name_of(c.wt), name_of(c.st), static_cast<long long>(n), static_cast<long long>(in),
                          static_cast<long long>(c.outs[static_cast<size_t>(i)]), static_cast<long long>(R), i,
                          sorted ? " sorted" : "", with_x16 ? " x16" : "");
            const std::vector<float> got_y = download(gpu, gy[static_cast<size_t>(i)].t);
            if (!p.lora()) {
              expect_close(std::string(tag) + " y", got_y, want_base[static_cast<size_t>(i)], tol);
            } else if (p.expand_in_next_op()) {
              expect_close(std::string(tag) + " y", got_y, want_base[static_cast<size_t>(i)], tol);
              std::vector<float> got, want;  // t's rows with an adapter
              for (int64_t tok = 0; tok < n; ++tok) {
                if (ref_slots[static_cast<size_t>(tok)] < 0) continue;
                for (int64_t r = 0; r < R; ++r) {
                  got.push_back(got_t[static_cast<size_t>((i * n + tok) * R + r)]);
                  want.push_back(ref_t[static_cast<size_t>(i)][static_cast<size_t>(tok * R + r)]);
                }
              }
              expect_close(std::string(tag) + " t", got, want, tol);
            } else {
              expect_close(std::string(tag) + " y", got_y, want_full[static_cast<size_t>(i)], tol);
            }
          }
        }
      }
    }
  }
};

const std::pair<DType, DType> kTypes[] = {{DType::kF32, DType::kF32},     {DType::kBF16, DType::kBF16},
                                          {DType::kF16, DType::kF16},     {DType::kBF16, DType::kF32},
                                          {DType::kF16, DType::kF32},     {DType::kBF16, DType::kF16},
                                          {DType::kF8E4M3, DType::kBF16}, {DType::kF8E4M3, DType::kF16},
                                          {DType::kF8E4M3, DType::kF32}};

TEST_F(CudaProject, DecodeSizes) {
  for (const auto& [wt, st] : kTypes)
    for (int64_t n : {1, 2, 3, 8, 9, 16, 17})
      for (int64_t rank : {1, 16, 40}) {
        run({n, 512, {512, 128, 128}, rank, wt, st});  // q, k, v
        run({n, 304, {700, 700}, rank, wt, st});       // gate, up
      }
  for (int64_t n : {1, 4, 33, 64, 65}) {
    run({n, 1104, {300}, 64, DType::kBF16, DType::kBF16});
    run({n, 300, {200}, 16, DType::kBF16, DType::kBF16});  // in % 8 != 0: tiled only
    run({n, 256, {96}, 512, DType::kBF16, DType::kF32});   // the largest rank
  }
}

// Members of one width placed back to back (one strided-batched GEMM on cuBLAS, gemm.cu):
// q/k/v without and with grouped-query attention (k and v alone batched), gate/up.
TEST_F(CudaProject, AdjacentMembers) {
  for (DType wt : {DType::kBF16, DType::kF16, DType::kF32})
    for (int64_t n : {2, 17, 64, 65, 80, 256}) {
      run({n, 512, {512, 512, 512}, 16, wt, wt, true});
      run({n, 512, {512, 128, 128}, 16, wt, wt, true});
      run({n, 304, {700, 700}, 16, wt, wt, true});
    }
}

TEST_F(CudaProject, SevenBWidths) {  // the reference takes seconds here
  for (int64_t n : {1, 8, 64}) {
    run({n, 4096, {4096, 1024, 1024}, 16, DType::kBF16, DType::kBF16});  // q/k/v
    run({n, 11008, {4096}, 16, DType::kBF16, DType::kBF16});             // down
    run({n, 4096, {4096, 1024, 1024}, 16, DType::kF8E4M3, DType::kBF16});
    run({n, 11008, {4096}, 16, DType::kF8E4M3, DType::kBF16});
  }
}

TEST_F(CudaProject, PrefillSizes) {
  // Long runs of one adapter (tiles that are one run, and tiles where runs meet), base-model
  // tokens; in not a multiple of 32; outputs off the 128-column block and off 16.
  for (int64_t n : {97, 300, 520, 600}) {
    run({n, 4096, {512, 128, 128}, 16, DType::kBF16, DType::kBF16});
    run({n, 1096, {300}, 96, DType::kBF16, DType::kBF16});
    run({n, 512, {1040}, 64, DType::kBF16, DType::kBF16});
    run({n, 256, {208, 200}, 16, DType::kBF16, DType::kBF16});
    run({n, 264, {128}, 16, DType::kF16, DType::kF16});  // rows not 16-byte multiples
    run({n, 1100, {300}, 16, DType::kF32, DType::kF32});
    run({n, 4096, {512, 128, 128}, 16, DType::kF8E4M3, DType::kBF16});
    run({n, 1096, {304}, 96, DType::kF8E4M3, DType::kBF16});  // in % 16 != 0: the GEMV, 16 tokens a pass
    run({n, 512, {1040}, 64, DType::kF8E4M3, DType::kF32});
  }
  // One adapter for every token: all tiles runs where n is a multiple of 16.
  for (int64_t n : {512, 520, 1024}) {
    run({n, 4096, {512, 128, 128}, 16, DType::kBF16, DType::kBF16, false, true});
    run({n, 512, {1040}, 64, DType::kBF16, DType::kBF16, false, true});
    run({n, 4096, {512, 128, 128}, 16, DType::kF8E4M3, DType::kBF16, false, true});
  }
}

}  // namespace
}  // namespace quiver::test
