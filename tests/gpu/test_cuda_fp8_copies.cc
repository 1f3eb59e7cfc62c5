// link: qv_backend
// The fp8 copies that the norms and silu_mul write beside their f32 outputs for cuBLASLt's
// FP8 GEMM (GroupPlan::x_type e4m3, fp8_copy): the f32 outputs are bitwise those without a
// copy, the codes and row scales bitwise the host's quantize_fp8_rows of those outputs (a
// zero row's scale is 1 and its zeros keep their signs, as for every activation), and a
// projection handed the copy gives bitwise the y of quantizing x itself. Widths cover the
// scalar rows (17), the norm's register rows (132, 4,096) and its two-pass rows (11,008).
// Skips without a GPU.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/cuda_test_util.h"

namespace quiver::test {
namespace {

class CudaFp8Copies : public CudaTest {
 protected:
  // A device fp8 copy of an [n, d] x.
  struct Copy {
    Buffer buf;
    Tensor t;
  };
  Copy make_copy(int64_t n, int64_t d) {
    Copy c{Buffer(gpu_.get(), fp8_copy_bytes(n, d)), Tensor()};
    c.t = c.buf.fp8_copy_view(n, d);
    return c;
  }

  // copy holds out's codes and scales, as the host quantizes them.
  void expect_copy_of(const std::string& what, const Tensor& copy, const std::vector<float>& out, int64_t n,
                      int64_t d) {
    HostTensor q = host_f32({n, d}, {}, DType::kF8E4M3);
    std::vector<float> scale(static_cast<size_t>(n));
    ref_.quantize_fp8_rows(q.view(), make_view(scale.data(), DType::kF32, {n}, Device::kCpu),
                           host_f32({n, d}, out).view());
    std::vector<uint8_t> codes(static_cast<size_t>(n * d));
    std::vector<float> got_scale(static_cast<size_t>(n));
    gpu_->copy_to_host(codes.data(), copy.data, codes.size());
    gpu_->copy_to_host(got_scale.data(), copy.row_scale, got_scale.size() * sizeof(float));
    size_t differ = 0;
    for (int64_t r = 0; r < n; ++r) {
      const float want = scale[static_cast<size_t>(r)] == 0.f ? 1.f : scale[static_cast<size_t>(r)];
      EXPECT_EQ(got_scale[static_cast<size_t>(r)], want) << what << " row " << r;
    }
    // A zero row: the host's scale 0 writes +0 codes, the activations' scale 1 keeps each
    // zero's sign (e4m3 of -0 is 0x80), as cuBLASLt's own quantization of x does.
    for (size_t i = 0; i < codes.size(); ++i) {
      const bool zero_row = scale[i / static_cast<size_t>(d)] == 0.f;
      const uint8_t want = zero_row ? (std::signbit(out[i]) ? 0x80 : 0x00) : q.bytes[i];
      differ += codes[i] != want;
    }
    EXPECT_EQ(differ, 0u) << what << ": codes differ from the host's";
    std::printf("%s: %lld rows, codes and scales as the host's\n", what.c_str(), static_cast<long long>(n));
  }
};

TEST_F(CudaFp8Copies, PlanAsksForThemOnCublasFp8) {
  auto x_type = [](Backend* b, int64_t n) {
    StepShape s;
    s.tokens = n;
    s.weights = DType::kF8E4M3;
    s.group[0] = {1, 512, {512}};
    return b->plan(s).group[0].x_type;
  };
  const DispatchTable t;
  EXPECT_EQ(x_type(gpu_.get(), t.gemv_max_n), DType::kF32);
  EXPECT_EQ(x_type(gpu_.get(), t.fp8_skinny_max_n), DType::kF16);
  EXPECT_EQ(x_type(gpu_.get(), t.fp8_skinny_max_n + 1), DType::kF8E4M3);
  EXPECT_EQ(x_type(gpu_.get(), t.fp8_outer_min_n), DType::kF8E4M3);
  CudaBackendOptions o;
  o.gemm_split_activations = true;
  auto split = variant_backend(o);
  ASSERT_NE(split, nullptr);
  EXPECT_EQ(x_type(split.get(), 1000), DType::kF32);  // the f32-x GEMV at every size
}

TEST_F(CudaFp8Copies, NormsAndSiluMulWriteTheHostsCodes) {
  for (int64_t d : {17, 132, 4096, 11008})
    for (int64_t n : {3, 40}) {
      const std::string tag = "d=" + std::to_string(d) + " n=" + std::to_string(n);
      HostTensor x = random_tensor(rng_, DType::kF32, {n, d}, 3.f);
      std::vector<float> xv = x.as_f32();
      std::fill(xv.begin() + d, xv.begin() + 2 * d, 0.f);  // row 1: zeros, scale 1
      x = host_f32({n, d}, xv);
      HostTensor w = random_tensor(rng_, DType::kBF16, {d}), res = random_tensor(rng_, DType::kF32, {n, d}, 2.f);
      DeviceTensor gx = upload(gpu_.get(), x), gw = upload(gpu_.get(), w);
      DeviceTensor plain = upload(gpu_.get(), res), with = upload(gpu_.get(), res);
      Copy c = make_copy(n, d);

      gpu_->rms_norm(plain.t, Tensor(), gx.t, gw.t, 1e-5f);
      gpu_->rms_norm(with.t, c.t, gx.t, gw.t, 1e-5f);
      std::vector<float> want = download(gpu_.get(), plain.t);
      expect_close("rms_norm with an fp8 copy: out " + tag, download(gpu_.get(), with.t), want, 0);
      expect_copy_of("rms_norm " + tag, c.t, want, n, d);

      DeviceTensor r1 = upload(gpu_.get(), res), r2 = upload(gpu_.get(), res);
      gpu_->add_rms_norm(plain.t, Tensor(), r1.t, gx.t, gw.t, 1e-6f, GroupPlan(), GroupLora());
      gpu_->add_rms_norm(with.t, c.t, r2.t, gx.t, gw.t, 1e-6f, GroupPlan(), GroupLora());
      want = download(gpu_.get(), plain.t);
      expect_close("add_rms_norm with an fp8 copy: out " + tag, download(gpu_.get(), with.t), want, 0);
      expect_close("add_rms_norm with an fp8 copy: residual " + tag, download(gpu_.get(), r2.t),
                   download(gpu_.get(), r1.t), 0);
      expect_copy_of("add_rms_norm " + tag, c.t, want, n, d);

      // silu_mul in place on its gate, as the model calls it; row 1 of gate is zeros.
      DeviceTensor g1 = upload(gpu_.get(), x), g2 = upload(gpu_.get(), x), up = upload(gpu_.get(), res);
      gpu_->silu_mul(g1.t, Tensor(), g1.t, up.t, GroupPlan(), GroupLora());
      gpu_->silu_mul(g2.t, c.t, g2.t, up.t, GroupPlan(), GroupLora());
      want = download(gpu_.get(), g1.t);
      expect_close("silu_mul with an fp8 copy: out " + tag, download(gpu_.get(), g2.t), want, 0);
      expect_copy_of("silu_mul " + tag, c.t, want, n, d);
    }
}

// q/k/v-like groups on cuBLASLt with the unit-scale GEMM and the scales in its epilogue:
// y with the copy handed over is y with x quantized by the matmul, bit for bit.
TEST_F(CudaFp8Copies, ProjectionReadsTheCopyAsItsOwnQuantization) {
  const int64_t in = 4096;
  const std::vector<int64_t> outs = {512, 128, 128};
  std::vector<Buffer> wq, ws;
  std::vector<Tensor> w;
  for (int64_t out : outs) {
    DeviceTensor wf = upload(gpu_.get(), random_tensor(rng_, DType::kBF16, {out, in}, 0.5f));
    wq.emplace_back(gpu_.get(), static_cast<size_t>(out * in));
    ws.emplace_back(gpu_.get(), static_cast<size_t>(out) * sizeof(float));
    Tensor q = make_view(wq.back().data(), DType::kF8E4M3, {out, in}, Device::kCuda);
    gpu_->quantize_fp8_rows(q, make_view(ws.back().data(), DType::kF32, {out}, Device::kCuda), wf.t);
    q.row_scale = static_cast<const float*>(ws.back().data());
    w.push_back(q);
  }
  for (int64_t n : {40, 600}) {
    HostTensor x = random_tensor(rng_, DType::kF32, {n, in}, 2.f);
    DeviceTensor gx = upload(gpu_.get(), x), normed = upload(gpu_.get(), x);
    HostTensor nw = random_tensor(rng_, DType::kBF16, {in});
    DeviceTensor gnw = upload(gpu_.get(), nw);
    Copy c = make_copy(n, in);
    gpu_->rms_norm(normed.t, c.t, gx.t, gnw.t, 1e-5f);
    for (MatmulKernel k : {MatmulKernel::kCublasFp8, MatmulKernel::kCublasFp8Outer}) {
      const GroupPlan plan{k, ShrinkKernel::kNone, ExpandKernel::kNone, DType::kF8E4M3};
      std::vector<std::vector<float>> ys[2];
      for (int with = 0; with < 2; ++with) {
        std::vector<DeviceTensor> y;
        MatmulGroup g;
        g.count = static_cast<int>(outs.size());
        for (size_t i = 0; i < outs.size(); ++i) {
          y.push_back(upload(gpu_.get(), random_tensor(rng_, DType::kF32, {n, outs[i]})));
          poison(gpu_.get(), y.back().t);
          g.y[i] = y.back().t;
          g.w[i] = w[i];
        }
        g.x16 = with ? c.t : Tensor();
        gpu_->project(plan, g, GroupLora(), normed.t);
        for (const DeviceTensor& t : y) ys[with].push_back(download(gpu_.get(), t.t));
      }
      for (size_t i = 0; i < outs.size(); ++i)
        expect_close("project " + to_string(k) + " n=" + std::to_string(n) + " member " + std::to_string(i) +
                         " with the fp8 copy",
                     ys[1][i], ys[0][i], 0);
    }
  }
}

}  // namespace
}  // namespace quiver::test
