// link: qv_backend
// CpuBackend vs the scalar oracle RefBackend, op by op, on awkward shapes, for every
// kernel set this machine can run (scalar, AVX2, AVX-512) with 1 and 2 threads.
// Outputs are poisoned with NaN before each CpuBackend call so unwritten elements show.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/ref/ref_backend.h"

namespace quiver {
namespace {

// Host storage for one tensor of any dtype.
struct Buf {
  std::vector<uint8_t> bytes;
  Tensor t;
  Buf() = default;
  Buf(DType dt, std::initializer_list<int64_t> dims) {
    Tensor shape(nullptr, dt, dims);
    bytes.assign(shape.bytes() + 64, 0);
    t = Tensor(bytes.data(), dt, dims);
  }
  Buf(const Buf& o) : bytes(o.bytes), t(o.t) { t.data = bytes.data(); }
  Buf& operator=(const Buf&) = delete;
  Buf(Buf&&) = default;  // vector moves keep their storage, so t.data stays valid
  Buf& operator=(Buf&&) = default;
  float at(int64_t i) const { return load_as_f32(t.data, t.dtype, static_cast<size_t>(i)); }
  void set(int64_t i, float v) {
    switch (t.dtype) {
      case DType::kF32: t.ptr<float>()[i] = v; break;
      case DType::kF16: t.ptr<uint16_t>()[i] = f32_to_f16(v); break;
      case DType::kBF16: t.ptr<uint16_t>()[i] = f32_to_bf16(v); break;
      case DType::kI32: t.ptr<int32_t>()[i] = static_cast<int32_t>(v); break;
      case DType::kF8E4M3: t.ptr<uint8_t>()[i] = f32_to_e4m3(v); break;
      case DType::kI8: t.ptr<int8_t>()[i] = static_cast<int8_t>(v); break;
    }
  }
  int32_t* ints() { return t.ptr<int32_t>(); }
  float* f() { return t.ptr<float>(); }
};

Buf random_buf(std::mt19937& rng, DType dt, std::initializer_list<int64_t> dims, float lo = -1.f, float hi = 1.f) {
  Buf b(dt, dims);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < b.t.numel(); ++i) b.set(i, u(rng));
  return b;
}
Buf ints_buf(const std::vector<int32_t>& v) {
  Buf b(DType::kI32, {static_cast<int64_t>(v.size())});
  if (!v.empty()) std::memcpy(b.t.data, v.data(), v.size() * 4);
  return b;
}
void poison(Buf& b) {
  for (int64_t i = 0; i < b.t.numel(); ++i) b.f()[i] = NAN;
}

// |got - want| <= atol + rtol * |want| elementwise (NaN in got always fails).
void expect_close(const Buf& got, const Buf& want, double atol, double rtol, const std::string& what) {
  ASSERT_EQ(got.t.numel(), want.t.numel()) << what;
  int bad = 0;
  for (int64_t i = 0; i < got.t.numel() && bad < 5; ++i) {
    const double g = got.at(i), w = want.at(i);
    if (!(std::fabs(g - w) <= atol + rtol * std::fabs(w))) {
      ADD_FAILURE() << what << ": element " << i << " got " << g << " want " << w;
      ++bad;
    }
  }
}

struct Param {
  CpuIsa isa;
  int threads;
};

void PrintTo(const Param& p, std::ostream* os) { *os << cpu_isa_name(p.isa) << " x" << p.threads; }

class CpuOps : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    cpu_ = std::make_unique<CpuBackend>(GetParam().threads, GetParam().isa);
    if (cpu_->isa() != GetParam().isa) GTEST_SKIP() << "this CPU lacks " << cpu_isa_name(GetParam().isa);
  }
  std::unique_ptr<CpuBackend> cpu_;
  RefBackend ref_;
  std::mt19937 rng_{1234};
};

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return std::string(cpu_isa_name(info.param.isa)) + "_t" + std::to_string(info.param.threads);
}

INSTANTIATE_TEST_SUITE_P(Isa, CpuOps,
                         ::testing::Values(Param{CpuIsa::kScalar, 1}, Param{CpuIsa::kScalar, 2}, Param{CpuIsa::kAvx2, 1},
                                           Param{CpuIsa::kAvx2, 2}, Param{CpuIsa::kAvx512, 1},
                                           Param{CpuIsa::kAvx512, 2}),
                         param_name);

const DType kFloatTypes[] = {DType::kF32, DType::kF16, DType::kBF16};
const DType kKvTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3};

// Tolerance for a dot-product output: relative to the sum of |terms|, as f32 accumulation
// of k terms may differ from the reference's double accumulation by a few ulps of that.
Buf dot_tolerance(const Buf& x, const Buf& w, int64_t n, int64_t in, int64_t out) {
  Buf tol(DType::kF32, {n, out});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < out; ++o) {
      double s = 0;
      for (int64_t k = 0; k < in; ++k) s += std::fabs(x.at(i * in + k) * w.at(o * in + k));
      tol.f()[i * out + o] = static_cast<float>(2e-6 * s + 1e-6);
    }
  return tol;
}

void expect_within(const Buf& got, const Buf& want, const Buf& tol, const std::string& what) {
  int bad = 0;
  for (int64_t i = 0; i < got.t.numel() && bad < 5; ++i) {
    const double g = got.at(i), w = want.at(i);
    if (!(std::fabs(g - w) <= tol.at(i) + 1e-6 * std::fabs(w))) {
      ADD_FAILURE() << what << ": element " << i << " got " << g << " want " << w << " tol " << tol.at(i);
      ++bad;
    }
  }
}

// w's values times its row scales, in float32: what the oracle multiplies (for dot_tolerance).
Buf dequantized(const Buf& w) {
  const int64_t out = w.t.dim(0), in = w.t.dim(1);
  Buf d(DType::kF32, {out, in});
  for (int64_t o = 0; o < out; ++o)
    for (int64_t k = 0; k < in; ++k) d.f()[o * in + k] = w.at(o * in + k) * w.t.row_scale[o];
  return d;
}

// Each of `tokens` multiplied alone (matmul_x16) gives bitwise its row of the batch's `got`:
// a request's logits do not depend on what shares its step.
void expect_alone_as_batched(CpuBackend& cpu, const Buf& got, const Tensor& x16, const Tensor& w, const Tensor& bias,
                             std::initializer_list<int64_t> tokens, const std::string& what) {
  const int64_t out = w.dim(0);
  for (int64_t t : tokens) {
    Buf one(DType::kF32, {1, out});
    cpu.matmul_x16(one.t, x16.rows(t, 1), w, bias);
    ASSERT_EQ(0, std::memcmp(one.t.data, got.t.ptr<float>() + t * out, static_cast<size_t>(out) * 4))
        << what << ": token " << t << " alone differs from the batch";
  }
}

// pw, w packed, against the oracle on w (wd: w's values, for the bound) for random bf16 x:
// within the dot-product bound, and each token alone as in the batch. Returns x and what the
// packed kernel gave.
std::pair<Buf, Buf> expect_packed_agrees(CpuBackend& cpu, RefBackend& ref, std::mt19937& rng, const Buf& w,
                                         const Buf& wd, const Tensor& pw, const Tensor& bias, int64_t n,
                                         const std::string& what) {
  const int64_t out = w.t.dim(0), in = w.t.dim(1);
  Buf x = random_buf(rng, DType::kBF16, {n, in});
  Buf want(DType::kF32, {n, out}), got(DType::kF32, {n, out});
  ref.matmul_x16(want.t, x.t, w.t, bias);
  poison(got);
  cpu.matmul_x16(got.t, x.t, pw, bias);
  expect_within(got, want, dot_tolerance(x, wd, n, in, out), what);
  expect_alone_as_batched(cpu, got, x.t, pw, bias, {0, n / 2, n - 1}, what);
  return {std::move(x), std::move(got)};
}

TEST_P(CpuOps, Matmul) {
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1},   {17, 97},  {130, 17}, {97, 130},
                                                {64, 64}, {256, 48}, {512, 300}, {2048, 33}};
  for (DType wt : kFloatTypes) {
    for (int64_t n : {1, 3, 17, 97}) {
      for (auto [in, out] : shapes) {
        if (n * in * out > 4'000'000) continue;
        for (int bias_kind = 0; bias_kind < 3; ++bias_kind) {
          Buf x = random_buf(rng_, DType::kF32, {n, in});
          Buf w = random_buf(rng_, wt, {out, in});
          Buf bias = bias_kind == 0 ? Buf() : random_buf(rng_, bias_kind == 1 ? DType::kF32 : DType::kBF16, {out});
          Buf want(DType::kF32, {n, out}), got(DType::kF32, {n, out});
          ref_.matmul(want.t, x.t, w.t, bias.t);
          poison(got);
          cpu_->matmul(got.t, x.t, w.t, bias.t);
          expect_within(got, want, dot_tolerance(x, w, n, in, out),
                        "matmul " + std::string(dtype_name(wt)) + " n=" + std::to_string(n) + " in=" +
                            std::to_string(in) + " out=" + std::to_string(out) + " bias=" + std::to_string(bias_kind));
        }
      }
    }
  }
}

// int8 weights with a scale per row (--quantization int8): against the oracle's dequantized
// product (q * scale in f32, then the double-accumulated dot), with f32 activations and with
// activations rounded to bf16 (matmul_x16: AVX512-BF16 dot products on the weights widened
// to bf16 where the CPU has them), on shapes with every GEMV/tile height and masked k tails
// (16 int8 weights per f32 vector, 32 per dot product).
TEST_P(CpuOps, MatmulInt8) {
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1},   {17, 97},  {130, 17}, {97, 130},
                                                {64, 64}, {256, 48}, {512, 300}, {2048, 33}};
  std::uniform_int_distribution<int> q(-127, 127);
  std::uniform_real_distribution<float> scale(1e-4f, 2e-2f);
  for (int64_t n : {1, 3, 17, 97}) {
    for (auto [in, out] : shapes) {
      if (n * in * out > 4'000'000) continue;
      Buf w(DType::kI8, {out, in});
      std::vector<float> scales(static_cast<size_t>(out));
      for (int64_t o = 0; o < out; ++o) {
        scales[static_cast<size_t>(o)] = o % 7 == 3 ? 0.f : scale(rng_);  // a zero row keeps scale 0
        for (int64_t k = 0; k < in; ++k) w.set(o * in + k, static_cast<float>(q(rng_)));
      }
      w.t.row_scale = scales.data();
      const Buf wd = dequantized(w);
      for (bool bias_on : {false, true}) {
        Buf x = random_buf(rng_, DType::kF32, {n, in});
        Buf bias = bias_on ? random_buf(rng_, DType::kF32, {out}) : Buf();
        Buf want(DType::kF32, {n, out}), got(DType::kF32, {n, out});
        ref_.matmul(want.t, x.t, w.t, bias.t);
        poison(got);
        cpu_->matmul(got.t, x.t, w.t, bias.t);
        const std::string what = "I8 n=" + std::to_string(n) + " in=" + std::to_string(in) +
                                 " out=" + std::to_string(out) + (bias_on ? " bias" : "");
        expect_within(got, want, dot_tolerance(x, wd, n, in, out), "matmul " + what);
        Buf x16(DType::kBF16, {n, in});
        ref_.round_to_16bit(x16.t, x.t);
        ref_.matmul_x16(want.t, x16.t, w.t, bias.t);
        poison(got);
        cpu_->matmul_x16(got.t, x16.t, w.t, bias.t);
        expect_within(got, want, dot_tolerance(x16, wd, n, in, out), "matmul_x16 " + what);
        // With the dot-product kernel each output sums its pairs in one order in every
        // tile shape.
        if (cpu_->has_bf16_dot()) expect_alone_as_batched(*cpu_, got, x16.t, w.t, bias.t, {0, n - 1}, what);
      }
    }
  }
}

// bf16 weights with row scales (an FP8 checkpoint's e4m3 values, model/fp8_weights.h):
// f32 and bf16 activations, row-major and packed, against the oracle's dequantized product.
TEST_P(CpuOps, MatmulRowScales) {
  std::uniform_real_distribution<float> scale(1e-3f, 4.f);
  for (int64_t n : {1, 5, 17}) {
    for (auto [in, out] : {std::pair<int64_t, int64_t>{64, 48}, {130, 112}, {33, 97}}) {
      Buf w = random_buf(rng_, DType::kBF16, {out, in});
      std::vector<float> scales(static_cast<size_t>(out));
      for (float& s : scales) s = scale(rng_);
      w.t.row_scale = scales.data();
      const Buf wd = dequantized(w);
      Buf packed(DType::kBF16, {out, in});
      Tensor pw;
      if (cpu_->projection_layout(w.t) != WeightLayout::kRows) pw = cpu_->pack_projection(packed.t.data, w.t);
      for (bool bias_on : {false, true}) {
        Buf x = random_buf(rng_, DType::kF32, {n, in});
        Buf x16(DType::kBF16, {n, in});
        ref_.round_to_16bit(x16.t, x.t);
        Buf bias = bias_on ? random_buf(rng_, DType::kF32, {out}) : Buf();
        const std::string what = "row scales n=" + std::to_string(n) + " in=" + std::to_string(in) +
                                 " out=" + std::to_string(out) + (bias_on ? " bias" : "");
        Buf want(DType::kF32, {n, out}), got(DType::kF32, {n, out});
        ref_.matmul(want.t, x.t, w.t, bias.t);
        poison(got);
        cpu_->matmul(got.t, x.t, w.t, bias.t);
        expect_within(got, want, dot_tolerance(x, wd, n, in, out), "matmul " + what);
        ref_.matmul_x16(want.t, x16.t, w.t, bias.t);
        for (const Tensor& wt : {w.t, pw}) {
          if (wt.empty()) continue;
          ASSERT_EQ(wt.row_scale, scales.data()) << what;
          poison(got);
          cpu_->matmul_x16(got.t, x16.t, wt, bias.t);
          expect_within(got, want, dot_tolerance(x16, wd, n, in, out), "matmul_x16 " + what);
        }
      }
    }
  }
}

// The bf16-activation matmul (the plan's x_type bf16): on AVX-512 machines with
// AVX512-BF16 the dot-product kernel, elsewhere the f32 kernels on the widened copy; both
// against the oracle on the same rounded x. Token counts and widths cover every tile
// height, token tail and masked k tail of the dot-product kernel (32 pairs a step).
TEST_P(CpuOps, MatmulX16) {
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {31, 5}, {33, 97}, {130, 17}, {64, 64}, {2048, 33}, {4096, 9}};
  for (int64_t n : {1, 3, 5, 6, 7, 13, 97}) {
    for (auto [in, out] : shapes) {
      for (bool bias_on : {false, true}) {
        Buf x = random_buf(rng_, DType::kBF16, {n, in});
        Buf w = random_buf(rng_, DType::kBF16, {out, in});
        Buf bias = bias_on ? random_buf(rng_, DType::kBF16, {out}) : Buf();
        Buf want(DType::kF32, {n, out}), got(DType::kF32, {n, out});
        ref_.matmul_x16(want.t, x.t, w.t, bias.t);
        poison(got);
        cpu_->matmul_x16(got.t, x.t, w.t, bias.t);
        expect_within(got, want, dot_tolerance(x, w, n, in, out),
                      "matmul_x16 n=" + std::to_string(n) + " in=" + std::to_string(in) + " out=" +
                          std::to_string(out) + (bias_on ? " bias" : ""));
      }
    }
  }
}

// Projection weights packed for the AVX512-BF16 kernel (packed_weights.h), where this
// kernel set packs them: against the oracle on the row-major weight, over every tile
// shape (3 and fewer blocks, 1-8 tokens, the GEMV's 8/4/2/1 blocks) and several token
// blocks; and each token's outputs bitwise equal to that token multiplied alone, so a
// request's logits do not depend on what shares its step.
TEST_P(CpuOps, MatmulX16Packed) {
  const std::pair<int64_t, int64_t> shapes[] = {{2, 16}, {34, 48}, {64, 64}, {130, 112}, {258, 240}, {2048, 32},
                                                {4096, 16}};
  for (int64_t n : {1, 2, 7, 8, 9, 17, 97, 140}) {
    for (auto [in, out] : shapes) {
      Buf w = random_buf(rng_, DType::kBF16, {out, in});
      if (cpu_->projection_layout(w.t) != WeightLayout::kBlock16) GTEST_SKIP() << "no packed layout here";
      Buf packed(DType::kBF16, {out, in});
      const Tensor pw = cpu_->pack_projection(packed.t.data, w.t);
      ASSERT_EQ(pw.layout, WeightLayout::kBlock16);
      for (bool bias_on : {false, true}) {
        Buf bias = bias_on ? random_buf(rng_, DType::kF32, {out}) : Buf();
        expect_packed_agrees(*cpu_, ref_, rng_, w, w, pw, bias.t, n,
                             "packed n=" + std::to_string(n) + " in=" + std::to_string(in) +
                                 " out=" + std::to_string(out) + (bias_on ? " bias" : ""));
      }
    }
  }
}

// int8 weights packed like bf16 ones (--quantization int8 on AVX512-BF16 machines, in the
// order and sign-magnitude form of packed_weights.h; odd pair counts check the last group's
// own path): against
// the oracle's dequantized product, each token alone as in the batch, and bitwise the bf16
// packed kernel's result on the same values (int8 widens exactly to bf16, and both add the
// same products in the same order) with the scales applied alike.
TEST_P(CpuOps, MatmulInt8Packed) {
  const std::pair<int64_t, int64_t> shapes[] = {{2, 16}, {34, 48}, {130, 112}, {258, 240}, {2048, 32}, {96, 160}};
  std::uniform_int_distribution<int> q(-127, 127);
  std::uniform_real_distribution<float> scale(1e-4f, 2e-2f);
  for (int64_t n : {1, 2, 8, 9, 17, 140}) {
    for (auto [in, out] : shapes) {
      Buf w(DType::kI8, {out, in}), wb(DType::kBF16, {out, in});
      std::vector<float> scales(static_cast<size_t>(out));
      for (int64_t o = 0; o < out; ++o) {
        scales[static_cast<size_t>(o)] = o % 7 == 3 ? 0.f : scale(rng_);
        for (int64_t k = 0; k < in; ++k) {
          const float v = static_cast<float>(q(rng_));
          w.set(o * in + k, v);
          wb.set(o * in + k, v);
        }
      }
      w.t.row_scale = wb.t.row_scale = scales.data();
      if (cpu_->projection_layout(w.t) != WeightLayout::kBlock16) GTEST_SKIP() << "no packed layout here";
      Buf packed(DType::kI8, {out, in}), packed_b(DType::kBF16, {out, in});
      const Tensor pw = cpu_->pack_projection(packed.t.data, w.t);
      const Tensor pwb = cpu_->pack_projection(packed_b.t.data, wb.t);
      ASSERT_EQ(pw.layout, WeightLayout::kBlock16);
      ASSERT_EQ(pw.row_scale, scales.data());
      const Buf wd = dequantized(w);
      for (bool bias_on : {false, true}) {
        Buf bias = bias_on ? random_buf(rng_, DType::kF32, {out}) : Buf();
        const std::string what = "int8 packed n=" + std::to_string(n) + " in=" + std::to_string(in) +
                                 " out=" + std::to_string(out) + (bias_on ? " bias" : "");
        const auto [x, got] = expect_packed_agrees(*cpu_, ref_, rng_, w, wd, pw, bias.t, n, what);
        Buf as_bf16(DType::kF32, {n, out});
        cpu_->matmul_x16(as_bf16.t, x.t, pwb, bias.t);
        EXPECT_EQ(0, std::memcmp(got.t.data, as_bf16.t.data, got.t.bytes())) << what << ": differs from bf16 packed";
      }
    }
  }
}

// lm_head as a group of n tokens: bf16 weights (packed like the projections where the
// backend packs them) multiply x rounded to bf16, as the oracle's lm_head does; float32
// weights keep f32 x.
TEST_P(CpuOps, LmHeadRoundsXLikeAGroup) {
  for (int64_t n : {1, 3, 17}) {
    const int64_t in = 64, out = 4096;
    Buf w = random_buf(rng_, DType::kBF16, {out, in});
    Buf packed(DType::kBF16, {out, in});
    const Tensor pw = cpu_->projection_layout(w.t) == WeightLayout::kBlock16
                          ? cpu_->pack_projection(packed.t.data, w.t)
                          : w.t;
    Buf x = random_buf(rng_, DType::kF32, {n, in});
    Buf x16(DType::kBF16, {n, in});
    ref_.round_to_16bit(x16.t, x.t);
    Buf want(DType::kF32, {n, out}), rounded(DType::kF32, {n, out}), got(DType::kF32, {n, out});
    ref_.lm_head(want.t, x.t, w.t);
    ref_.matmul_x16(rounded.t, x16.t, w.t, Tensor());
    EXPECT_EQ(std::memcmp(want.t.data, rounded.t.data, want.t.bytes()), 0) << "the oracle rounds x, n=" << n;
    poison(got);
    cpu_->lm_head(got.t, x.t, pw);
    expect_within(got, want, dot_tolerance(x16, w, n, in, out), "lm_head n=" + std::to_string(n));
    Buf w32 = random_buf(rng_, DType::kF32, {out, in});
    ref_.lm_head(want.t, x.t, w32.t);
    ref_.matmul(rounded.t, x.t, w32.t, Tensor());
    EXPECT_EQ(std::memcmp(want.t.data, rounded.t.data, want.t.bytes()), 0) << "f32 weights keep f32 x, n=" << n;
  }
}

// Rounding to the 16-bit copies is bitwise the oracle's (nearest even), and the norms and
// silu_mul write a given out16 as out rounded.
TEST_P(CpuOps, RoundTo16BitAndCopies) {
  for (DType t : {DType::kBF16, DType::kF16}) {
    Buf x = random_buf(rng_, DType::kF32, {7, 1000}, -70000.f, 70000.f);
    Buf want(t, {7, 1000}), got(t, {7, 1000});
    ref_.round_to_16bit(want.t, x.t);
    cpu_->round_to_16bit(got.t, x.t);
    EXPECT_EQ(std::memcmp(got.t.data, want.t.data, want.t.bytes()), 0) << dtype_name(t);
  }
  Buf x = random_buf(rng_, DType::kF32, {5, 256}, -3.f, 3.f);
  Buf w = random_buf(rng_, DType::kBF16, {256}, 0.5f, 1.5f);
  Buf out(DType::kF32, {5, 256}), out16(DType::kBF16, {5, 256}), want16(DType::kBF16, {5, 256});
  cpu_->rms_norm(out.t, out16.t, x.t, w.t, 1e-5f);
  ref_.round_to_16bit(want16.t, out.t);
  EXPECT_EQ(std::memcmp(out16.t.data, want16.t.data, want16.t.bytes()), 0);
}

TEST_P(CpuOps, RmsNormAndAddRmsNorm) {
  for (DType wt : {DType::kF32, DType::kBF16}) {
    for (int64_t n : {1, 3, 17, 97}) {
      for (int64_t d : {1, 17, 130, 2048}) {
        Buf x = random_buf(rng_, DType::kF32, {n, d}, -3.f, 3.f);
        Buf w = random_buf(rng_, wt, {d}, 0.5f, 1.5f);
        Buf want(DType::kF32, {n, d}), got(DType::kF32, {n, d});
        ref_.rms_norm_f32(want.t, x.t, w.t, 1e-5f);
        poison(got);
        cpu_->rms_norm_f32(got.t, x.t, w.t, 1e-5f);
        expect_close(got, want, 1e-6, 2e-6, "rms_norm d=" + std::to_string(d));

        Buf res = random_buf(rng_, DType::kF32, {n, d}, -3.f, 3.f);
        Buf res_ref(res), res_cpu(res);
        ref_.add_rms_norm_f32(want.t, res_ref.t, x.t, w.t, 1e-6f);
        poison(got);
        cpu_->add_rms_norm_f32(got.t, res_cpu.t, x.t, w.t, 1e-6f);
        expect_close(res_cpu, res_ref, 0, 0, "add_rms_norm residual");
        expect_close(got, want, 1e-6, 2e-6, "add_rms_norm d=" + std::to_string(d));
      }
    }
  }
}

// Dummy weights: the pool's split of fill_uniform writes exactly the reference's bytes.
TEST_P(CpuOps, FillUniformBitwise) {
  for (DType tt : kFloatTypes) {
    const int64_t n = 300007;
    Buf want(tt, {n}), got(tt, {n});
    ref_.fill_uniform(want.t, 0.5f, 0.25f, 99);
    std::memset(got.t.data, 0xff, got.t.bytes());
    cpu_->fill_uniform(got.t, 0.5f, 0.25f, 99);
    EXPECT_EQ(std::memcmp(got.t.data, want.t.data, want.t.bytes()), 0) << dtype_name(tt);
  }
}

// Host allocations are 64-byte aligned at every size, alloc_zeroed's bytes are 0 (the KV
// cache relies on it instead of a fill that would commit every page), and both free alike.
TEST_P(CpuOps, AllocationsAreAlignedAndZeroedWhereAsked) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{63}, size_t{4096}, size_t{3} << 20}) {
    for (bool zeroed : {false, true}) {
      void* p = zeroed ? cpu_->alloc_zeroed(bytes) : cpu_->alloc(bytes);
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
      const auto* b = static_cast<const unsigned char*>(p);
      for (size_t i = 0; zeroed && i < bytes; i += 997) EXPECT_EQ(b[i], 0) << bytes << " at " << i;
      std::memset(p, 0xab, bytes);  // every byte is writable
      cpu_->free(p);
    }
  }
  cpu_->free(nullptr);
}

// The bench's ceiling probe streams 1 GiB on every kernel set and thread count and gives a
// rate a memory system can have (bench/RESULTS.md quotes what it measures).
TEST_P(CpuOps, ReadRateProbe) {
  const double gbs = cpu_->measure_read_gbs();
  EXPECT_GT(gbs, 0.1);
  EXPECT_LT(gbs, 10000.0);
}

TEST_P(CpuOps, Embedding) {
  for (DType tt : kFloatTypes) {
    for (int64_t d : {1, 17, 130, 256}) {
      const int64_t vocab = 50;
      Buf table = random_buf(rng_, tt, {vocab, d});
      std::vector<int32_t> idv;
      for (int i = 0; i < 97; ++i) idv.push_back(static_cast<int32_t>((i * 37) % vocab));
      idv[0] = 0;
      idv[1] = static_cast<int32_t>(vocab - 1);
      Buf ids = ints_buf(idv);
      Buf want(DType::kF32, {97, d}), got(DType::kF32, {97, d});
      ref_.embedding(want.t, table.t, Tensor(), ids.t);
      poison(got);
      cpu_->embedding(got.t, table.t, Tensor(), ids.t);
      expect_close(got, want, 0, 0, "embedding " + std::string(dtype_name(tt)));
    }
  }
}

// Ids past the table read a LoRA slot's rows (VocabTables::embed_rows), in their own dtype.
TEST_P(CpuOps, EmbeddingExtraRows) {
  for (DType tt : kFloatTypes) {
    for (DType et : {DType::kF32, DType::kBF16}) {
      const int64_t vocab = 40, rows = 9, d = 33;
      Buf table = random_buf(rng_, tt, {vocab, d});
      Buf extra = random_buf(rng_, et, {rows, d});
      std::vector<int32_t> idv = {0, 39, 40, 48, 7, 44, 40};
      Buf ids = ints_buf(idv);
      const int64_t n = static_cast<int64_t>(idv.size());
      Buf want(DType::kF32, {n, d}), got(DType::kF32, {n, d});
      ref_.embedding(want.t, table.t, extra.t, ids.t);
      poison(got);
      cpu_->embedding(got.t, table.t, extra.t, ids.t);
      expect_close(got, want, 0, 0, "embedding extra " + std::string(dtype_name(tt)) + "/" + std::string(dtype_name(et)));
      for (int64_t j = 0; j < d; ++j) {
        ASSERT_EQ(want.at(2 * d + j), extra.at(j));             // id 40: extra row 0
        ASSERT_EQ(want.at(5 * d + j), extra.at(4 * d + j));     // id 44: extra row 4
        ASSERT_EQ(want.at(1 * d + j), table.at(39 * d + j));
      }
    }
  }
}

// The logits of each row's own vocabulary: base logits copied, columns past the row's
// vocabulary -inf, the slot's lm_head rows' dot products at their ids.
TEST_P(CpuOps, VocabLogits) {
  for (DType rt : {DType::kF32, DType::kBF16}) {
    const int64_t v = 37, extra = 5, w = v + extra, h = 19, slots = 3, r = 6, n = 7;
    Buf base = random_buf(rng_, DType::kF32, {n, v});
    Buf x = random_buf(rng_, DType::kF32, {n, h});
    Buf rows = random_buf(rng_, rt, {slots * r, h});
    // slot 0: two new tokens (37, 38) and a replaced base row (4); slot 1: none; slot 2:
    // every row of its table: 36, 0, 37, 38, 39, 41 (five new tokens).
    Buf ids = ints_buf({4, 37, 38, 0, 0, 0, 0, 0, 0, 0, 0, 0, 36, 0, 37, 38, 39, 41});
    Buf counts = ints_buf({3, 0, 6});
    Buf sizes = ints_buf({39, 37, 42});
    Buf slot = ints_buf({-1, 0, 2, 1, 0, -1, 2});
    VocabTables t;
    t.embed_rows = rows.t;
    t.lm_head_rows = rows.t;
    t.lm_head_ids = ids.t;
    t.row_counts = counts.t;
    t.vocab_sizes = sizes.t;
    t.rows_per_slot = r;
    t.base_vocab = v;
    t.width = w;
    Buf want(DType::kF32, {n, w}), got(DType::kF32, {n, w});
    ref_.vocab_logits(want.t, base.t, x.t, slot.t, t);
    poison(got);
    cpu_->vocab_logits(got.t, base.t, x.t, slot.t, t);
    const double tol = 1e-5;
    for (int64_t i = 0; i < n * w; ++i) {
      if (std::isinf(want.at(i))) {
        ASSERT_TRUE(std::isinf(got.at(i)) && got.at(i) < 0) << i;
        continue;
      }
      ASSERT_NEAR(got.at(i), want.at(i), tol * (1 + std::fabs(want.at(i)))) << i;
    }
    auto dot = [&](int64_t i, int64_t row) {
      double acc = 0;
      for (int64_t k = 0; k < h; ++k) acc += double(x.at(i * h + k)) * rows.at(row * h + k);
      return acc;
    };
    for (int64_t c = v; c < w; ++c) ASSERT_TRUE(std::isinf(want.at(0 * w + c)));   // base row
    EXPECT_NEAR(want.at(1 * w + 4), dot(1, 0), 1e-5);                              // slot 0 replaced row
    EXPECT_NEAR(want.at(1 * w + 38), dot(1, 2), 1e-5);
    EXPECT_TRUE(std::isinf(want.at(1 * w + 39)));                                   // past slot 0's 39
    EXPECT_EQ(want.at(1 * w + 5), base.at(1 * v + 5));
    EXPECT_NEAR(want.at(2 * w + 41), dot(2, 2 * r + 5), 1e-5);
    EXPECT_EQ(want.at(2 * w + 40), 0.f);  // a new id the adapter gives no row: its logit is 0
    EXPECT_TRUE(std::isinf(want.at(3 * w + 37)));                                   // slot 1: base vocabulary
  }
}

// The slots' embed_tokens / lm_head LoRA (VocabLora), padded past each slot's rank with
// zeros as the slot pool writes it: the oracle against the formula, the cpu backend against
// the oracle. Slot 1 has no vocabulary LoRA (rank 0), slot 0 embed rank 2 / lm_head 3.
TEST_P(CpuOps, VocabLora) {
  for (DType st : {DType::kF32, DType::kBF16}) {
    const int64_t v = 37, w = 42, h = 19, slots = 3, R = 4, n = 7;
    const int32_t ranks_v[] = {2, 3, 0, 0, 4, 4};
    Buf ranks = ints_buf({2, 3, 0, 0, 4, 4});
    auto padded = [&](std::initializer_list<int64_t> dims, int rank_dim, int which) {
      Buf b = random_buf(rng_, st, dims);
      const std::vector<int64_t> d(dims);
      for (int64_t i = 0; i < b.t.numel(); ++i) {
        int64_t idx = i, k = 0;
        for (int a = 2; a >= 0; --a) {
          if (a == rank_dim) k = idx % d[a];
          idx /= d[a];
        }
        const int64_t s = i / (d[1] * d[2]);
        if (k >= ranks_v[2 * s + which]) b.set(i, 0.f);
      }
      return b;
    };
    VocabLora l;
    Buf ea = padded({slots, w, R}, 2, 0), eb = padded({slots, h, R}, 2, 0);
    Buf ha = padded({slots, R, h}, 1, 1), hb = padded({slots, w, R}, 2, 1);
    l.embed_a = ea.t, l.embed_b = eb.t, l.head_a = ha.t, l.head_b = hb.t, l.ranks = ranks.t;
    Buf slot = ints_buf({-1, 0, 2, 1, 0, -1, 2});
    Buf ids = ints_buf({3, 41, 0, 5, 36, 40, 38});

    Buf start = random_buf(rng_, DType::kF32, {n, h});
    Buf want = start, got = start;
    ref_.embedding_lora(want.t, ids.t, slot.t, l);
    cpu_->embedding_lora(got.t, ids.t, slot.t, l);
    for (int64_t i = 0; i < n; ++i) {
      const int32_t s = slot.ints()[i];
      for (int64_t d = 0; d < h; ++d) {
        double f = start.at(i * h + d);
        if (s >= 0)
          for (int64_t k = 0; k < ranks_v[2 * s]; ++k)
            f += double(eb.at((s * h + d) * R + k)) * ea.at((s * w + ids.ints()[i]) * R + k);
        ASSERT_NEAR(want.at(i * h + d), f, 1e-5) << "embedding_lora oracle, token " << i;
      }
    }
    expect_close(got, want, 1e-5, 1e-5, "embedding_lora " + std::string(dtype_name(st)));

    Buf base = random_buf(rng_, DType::kF32, {n, v});
    Buf x = random_buf(rng_, DType::kF32, {n, h});
    Buf sizes = ints_buf({37, 37, 37});
    Buf counts = ints_buf({0, 0, 0});
    VocabTables t;
    t.row_counts = counts.t;
    t.vocab_sizes = sizes.t;
    t.base_vocab = v;
    t.width = w;
    t.lora = l;
    Buf lw(DType::kF32, {n, w}), lg(DType::kF32, {n, w});
    ref_.vocab_logits(lw.t, base.t, x.t, slot.t, t);
    poison(lg);
    cpu_->vocab_logits(lg.t, base.t, x.t, slot.t, t);
    for (int64_t i = 0; i < n; ++i) {
      const int32_t s = slot.ints()[i];
      for (int64_t c = 0; c < w; ++c) {
        double f = c < v ? base.at(i * v + c) : 0.0;
        if (s >= 0)
          for (int64_t k = 0; k < ranks_v[2 * s + 1]; ++k) {
            double tk = 0;
            for (int64_t j = 0; j < h; ++j) tk += double(ha.at((s * R + k) * h + j)) * x.at(i * h + j);
            f += double(hb.at((s * w + c) * R + k)) * tk;
          }
        const float want_c = lw.at(i * w + c), got_c = lg.at(i * w + c);
        if (c >= v) {  // no slot rows (rows_per_slot 0): every row's vocabulary is the base's
          ASSERT_TRUE(std::isinf(want_c) && want_c < 0 && std::isinf(got_c) && got_c < 0) << i << " " << c;
          continue;
        }
        ASSERT_NEAR(want_c, f, 1e-4 * (1 + std::fabs(f))) << "vocab_logits oracle, row " << i << " col " << c;
        ASSERT_NEAR(got_c, want_c, 1e-5 * (1 + std::fabs(want_c))) << "row " << i << " col " << c;
      }
    }
  }
}

TEST_P(CpuOps, Rope) {
  for (int64_t hd : {2, 18, 64, 128}) {
    for (int64_t n : {1, 3, 17, 97}) {
      const int64_t max_pos = 300, half = hd / 2;
      Buf cs(DType::kF32, {max_pos, hd});
      for (int64_t p = 0; p < max_pos; ++p)
        for (int64_t j = 0; j < half; ++j) {
          const double f = std::pow(10000.0, -2.0 * static_cast<double>(j) / static_cast<double>(hd));
          cs.f()[p * hd + j] = static_cast<float>(std::cos(p * f));
          cs.f()[p * hd + half + j] = static_cast<float>(std::sin(p * f));
        }
      std::vector<int32_t> pv;
      for (int64_t i = 0; i < n; ++i) pv.push_back(static_cast<int32_t>((i * 53 + 7) % max_pos));
      Buf pos = ints_buf(pv);
      Buf q = random_buf(rng_, DType::kF32, {n, 4, hd}), k = random_buf(rng_, DType::kF32, {n, 2, hd});
      Buf q_ref(q), k_ref(k);
      ref_.rope(q_ref.t, k_ref.t, pos.t, cs.t);
      cpu_->rope(q.t, k.t, pos.t, cs.t);
      expect_close(q, q_ref, 1e-6, 1e-6, "rope q hd=" + std::to_string(hd));
      expect_close(k, k_ref, 1e-6, 1e-6, "rope k hd=" + std::to_string(hd));
    }
  }
}

// fp8 caches divide by the layer's scales (0.75 and 1.5 here) before rounding.
TEST_P(CpuOps, KvWrite) {
  for (DType ct : kKvTypes) {
    for (int64_t hd : {17, 64}) {
      const int64_t blocks = 6, bs = 4, kvh = 3, n = 17;
      Buf kc = random_buf(rng_, ct, {blocks, bs, kvh, hd}), vc = random_buf(rng_, ct, {blocks, bs, kvh, hd});
      Buf kc_ref(kc), vc_ref(vc);
      Buf k = random_buf(rng_, DType::kF32, {n, kvh, hd}, -5.f, 5.f), v = random_buf(rng_, DType::kF32, {n, kvh, hd});
      // Rounding edge cases: f16 subnormals, overflow to inf, round-to-even ties.
      // fp8: 336 and 348 are 448 and 464 after the scale (saturation), 1e-3 a subnormal.
      const float specials[] = {1e-6f, -3e-7f, 6.1e-5f, 7e4f, -65519.f, 65520.f, 1.00048828125f, 1.00146484375f,
                                1.00390625f, 1.01171875f, 0.f, -0.f, 1e30f, -1e-40f, 3.4e38f, 2049.f,
                                336.f, 348.f, -1e-3f, 0.0029296875f};
      for (size_t i = 0; i < std::size(specials); ++i) k.f()[i] = v.f()[i + 20] = specials[i];
      std::vector<int32_t> sv(n);
      std::iota(sv.begin(), sv.end(), 2);
      sv[3] = -1;
      sv[n - 1] = -1;
      sv[5] = static_cast<int32_t>(blocks * bs - 1);
      Buf slots = ints_buf(sv);
      ref_.kv_write(KvLayer{kc_ref.t, vc_ref.t, 0.75f, 1.5f}, k.t, v.t, slots.t);
      cpu_->kv_write(KvLayer{kc.t, vc.t, 0.75f, 1.5f}, k.t, v.t, slots.t);
      EXPECT_EQ(kc.bytes, kc_ref.bytes) << "k cache " << dtype_name(ct);
      EXPECT_EQ(vc.bytes, vc_ref.bytes) << "v cache " << dtype_name(ct);
    }
  }
}

TEST_P(CpuOps, SiluMulGather) {
  for (int64_t n : {1, 17, 97 * 130, 100003}) {
    Buf g = random_buf(rng_, DType::kF32, {n}, -12.f, 12.f), u = random_buf(rng_, DType::kF32, {n});
    Buf want(DType::kF32, {n}), got(DType::kF32, {n});
    ref_.silu_mul_f32(want.t, g.t, u.t);
    poison(got);
    cpu_->silu_mul_f32(got.t, g.t, u.t);
    expect_close(got, want, 1e-7, 1e-6, "silu_mul n=" + std::to_string(n));

  }
  Buf x = random_buf(rng_, DType::kF32, {97, 130});
  Buf rows = ints_buf({96, 0, 5, 5, 17});
  Buf want(DType::kF32, {5, 130}), got(DType::kF32, {5, 130});
  ref_.gather_rows(want.t, x.t, rows.t);
  poison(got);
  cpu_->gather_rows(got.t, x.t, rows.t);
  expect_close(got, want, 0, 0, "gather_rows");
}

// ---- attention -------------------------------------------------------------------------

struct SeqSpec {
  int q_len;
  int len;
};

struct AttentionCase {
  DType cache_type;
  int block_size, num_kv, group, head_dim;
  std::vector<SeqSpec> seqs;
  float k_scale = 1.f, v_scale = 1.f;  // fp8 caches
};

// Runs one batch through `backend` (out poisoned first) with caches and tables built from
// a fixed seed, so every backend sees the same inputs.
Buf run_attention(Backend& backend, const AttentionCase& c) {
  std::mt19937 rng(99);
  const int64_t bs = c.block_size, heads = c.num_kv * c.group, hd = c.head_dim;
  int64_t n = 0, max_blocks = 1, num_blocks = 2;
  for (const auto& s : c.seqs) {
    n += s.q_len;
    max_blocks = std::max<int64_t>(max_blocks, (s.len + bs - 1) / bs);
    num_blocks += (s.len + bs - 1) / bs;
  }
  Buf kc = random_buf(rng, c.cache_type, {num_blocks, bs, c.num_kv, hd});
  Buf vc = random_buf(rng, c.cache_type, {num_blocks, bs, c.num_kv, hd});
  std::vector<int32_t> phys(static_cast<size_t>(num_blocks));
  std::iota(phys.begin(), phys.end(), 0);
  std::shuffle(phys.begin(), phys.end(), rng);  // blocks of a sequence are scattered
  const int64_t num_seqs = static_cast<int64_t>(c.seqs.size());
  Buf tables(DType::kI32, {num_seqs, max_blocks});
  std::vector<int32_t> qs{0}, lens;
  size_t next = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const SeqSpec& sp = c.seqs[static_cast<size_t>(s)];
    for (int64_t b = 0; b < (sp.len + bs - 1) / bs; ++b) tables.ints()[s * max_blocks + b] = phys[next++];
    qs.push_back(qs.back() + sp.q_len);
    lens.push_back(sp.len);
  }
  Buf q = random_buf(rng, DType::kF32, {n, heads, hd}, -3.f, 3.f);
  Buf qsb = ints_buf(qs), lensb = ints_buf(lens);
  AttentionMeta meta;
  meta.query_start = qsb.t;
  meta.seq_lens = lensb.t;
  meta.block_tables = tables.t;
  meta.num_seqs = static_cast<int>(num_seqs);
  for (const auto& s : c.seqs) {
    meta.max_query_len = std::max(meta.max_query_len, s.q_len);
    meta.max_seq_len = std::max(meta.max_seq_len, s.len);
  }
  Buf out(DType::kF32, {n, heads, hd});
  poison(out);
  backend.attention(out.t, q.t, KvLayer{kc.t, vc.t, c.k_scale, c.v_scale}, meta, 1.0f / std::sqrt(static_cast<float>(hd)));
  return out;
}

std::string describe(const AttentionCase& c) {
  std::string s = std::string(dtype_name(c.cache_type)) + " bs=" + std::to_string(c.block_size) +
                  " kv=" + std::to_string(c.num_kv) + " group=" + std::to_string(c.group) +
                  " hd=" + std::to_string(c.head_dim) + " seqs=";
  for (const auto& q : c.seqs) {
    s += '(';
    s += std::to_string(q.q_len);
    s += '/';
    s += std::to_string(q.len);
    s += ')';
  }
  return s;
}

// Decodes, a prefill chunk starting mid-sequence, a whole prefill, a length-1 sequence
// and a chunk longer than one 16-row tile, all in one batch.
const std::vector<SeqSpec> kMixedSeqs = {{1, 37}, {17, 50}, {20, 20}, {1, 1}, {40, 61}, {5, 21}};

TEST_P(CpuOps, AttentionMixedBatch) {
  for (DType ct : kFloatTypes)
    for (int bs : {1, 4, 16})
      for (int group : {1, 2, 4}) {
        AttentionCase c{ct, bs, 2, group, 64, kMixedSeqs};
        expect_close(run_attention(*cpu_, c), run_attention(ref_, c), 2e-5, 1e-4, describe(c));
      }
}

TEST_P(CpuOps, AttentionFp8CacheWithScales) {
  for (int hd : {8, 64, 72})
    for (int group : {1, 4}) {
      AttentionCase c{DType::kF8E4M3, 16, 2, group, hd, kMixedSeqs, 0.5f, 3.f};
      expect_close(run_attention(*cpu_, c), run_attention(ref_, c), 2e-5, 1e-4, describe(c));
    }
  AttentionCase d{DType::kF8E4M3, 16, 1, 4, 64, {{1, 1000}, {3, 700}}, 2.f, 0.25f};
  expect_close(run_attention(*cpu_, d), run_attention(ref_, d), 2e-5, 1e-4, describe(d));
}

TEST_P(CpuOps, AttentionHeadDims) {
  for (int hd : {8, 40, 72, 130})
    for (int bs : {1, 16}) {
      AttentionCase c{DType::kBF16, bs, 3, 2, hd, kMixedSeqs};
      expect_close(run_attention(*cpu_, c), run_attention(ref_, c), 2e-5, 1e-4, describe(c));
    }
}

TEST_P(CpuOps, AttentionLongContextSplit) {
  // Few items over long contexts: with 2 threads the KV axis is split and merged.
  for (DType ct : {DType::kF32, DType::kF16}) {
    AttentionCase c{ct, 16, 1, 4, 64, {{1, 1000}, {3, 700}}};
    expect_close(run_attention(*cpu_, c), run_attention(ref_, c), 2e-5, 1e-4, describe(c));
    AttentionCase d{ct, 4, 1, 8, 64, {{1, 1500}}};
    expect_close(run_attention(*cpu_, d), run_attention(ref_, d), 2e-5, 1e-4, describe(d));
  }
}

// ---- LoRA --------------------------------------------------------------------------------

struct LoraCase {
  int64_t n, in, out, max_rank;
  std::vector<int32_t> slots;  // per token, -1 = base model
  bool with_segments;
  DType stack_dtype = DType::kF32;  // A and B stacks: f32 or bf16 (--lora-dtype)
};

LoraMeta lora_meta(const std::vector<int32_t>& slots, bool with_segments, Buf* token_slot, Buf* seg_start, Buf* seg_slot) {
  *token_slot = ints_buf(slots);
  std::vector<int32_t> starts{0}, ss;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (i + 1 == slots.size() || slots[i + 1] != slots[i]) {
      ss.push_back(slots[i]);
      starts.push_back(static_cast<int32_t>(i + 1));
    }
  }
  *seg_start = ints_buf(starts);
  *seg_slot = ints_buf(ss);
  LoraMeta meta;
  meta.token_slot = token_slot->t;
  if (with_segments) {
    meta.seg_start = seg_start->t;
    meta.seg_slot = seg_slot->t;
    meta.num_segments = static_cast<int>(ss.size());
  }
  return meta;
}

void run_lora_case(CpuBackend& cpu, RefBackend& ref, std::mt19937& rng, const LoraCase& c) {
  const int64_t num_slots = 3, n = c.n, r = c.max_rank;
  const std::string what = "lora n=" + std::to_string(n) + " in=" + std::to_string(c.in) + " out=" +
                           std::to_string(c.out) + " rank=" + std::to_string(r) + " seg=" + std::to_string(c.with_segments) +
                           " stacks=" + std::string(dtype_name(c.stack_dtype));
  Buf x = random_buf(rng, DType::kF32, {n, c.in});
  Buf a = random_buf(rng, c.stack_dtype, {num_slots, r, c.in});
  Buf b = random_buf(rng, c.stack_dtype, {num_slots, c.out, r});
  // Slot 1 holds a lower-rank adapter: rank-padding rows/columns are zero.
  for (int64_t j = r / 2 + 1; j < r; ++j) {
    for (int64_t k = 0; k < c.in; ++k) a.set((1 * r + j) * c.in + k, 0);
    for (int64_t o = 0; o < c.out; ++o) b.set((1 * c.out + o) * r + j, 0);
  }
  Buf ts, ss, sl;
  LoraMeta meta = lora_meta(c.slots, c.with_segments, &ts, &ss, &sl);

  // Rows with slot -1 hold a sentinel that must survive; the others are poisoned.
  Buf t_cpu(DType::kF32, {n, r});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < r; ++j) t_cpu.f()[i * r + j] = c.slots[static_cast<size_t>(i)] < 0 ? 7.0f : NAN;
  Buf t_ref(t_cpu);
  ref.lora_shrink(t_ref.t, x.t, a.t, meta);
  cpu.lora_shrink(t_cpu.t, x.t, a.t, meta);

  Buf y0 = random_buf(rng, DType::kF32, {n, c.out});
  Buf y_cpu(y0), y_ref(y0);
  ref.lora_expand(y_ref.t, t_ref.t, b.t, meta);
  cpu.lora_expand(y_cpu.t, t_ref.t, b.t, meta);

  int bad = 0;
  for (int64_t i = 0; i < n && bad < 5; ++i) {
    const int32_t s = c.slots[static_cast<size_t>(i)];
    for (int64_t j = 0; j < r; ++j) {
      const float g = t_cpu.f()[i * r + j], w = t_ref.f()[i * r + j];
      double tol = 1e-6;
      if (s >= 0)
        for (int64_t k = 0; k < c.in; ++k) tol += 2e-6 * std::fabs(x.f()[i * c.in + k] * a.at((s * r + j) * c.in + k));
      const bool ok = s < 0 ? g == 7.0f : std::fabs(g - w) <= tol;
      if (!ok && bad++ < 5) ADD_FAILURE() << what << " shrink row " << i << " slot " << s << " col " << j << ": " << g << " vs " << w;
    }
    for (int64_t o = 0; o < c.out; ++o) {
      const float g = y_cpu.f()[i * c.out + o], w = y_ref.f()[i * c.out + o];
      double tol = 1e-6 * (1 + std::fabs(w));
      if (s >= 0)
        for (int64_t j = 0; j < r; ++j) tol += 2e-6 * std::fabs(t_ref.f()[i * r + j] * b.at((s * c.out + o) * r + j));
      const bool ok = s < 0 ? g == y0.f()[i * c.out + o] : std::fabs(g - w) <= tol;
      if (!ok && bad++ < 5) ADD_FAILURE() << what << " expand row " << i << " slot " << s << " out " << o << ": " << g << " vs " << w;
    }
  }
}

// Every slot pattern x shape x rank x (segments or per-token gather) against ref:
// slot -1 everywhere, one slot, a mixed cycle, random slots.
void run_lora_sweep(CpuBackend& cpu, RefBackend& ref, std::mt19937& rng,
                    std::span<const std::pair<int64_t, int64_t>> dims, std::initializer_list<int64_t> ns, DType dtype) {
  for (int64_t n : ns) {
    std::vector<std::vector<int32_t>> patterns;
    patterns.push_back(std::vector<int32_t>(static_cast<size_t>(n), -1));
    patterns.push_back(std::vector<int32_t>(static_cast<size_t>(n), 2));
    std::vector<int32_t> mixed, random;
    const int32_t cycle[] = {0, 0, -1, 2, 2, 2, 1, -1, -1, 0, 1};
    for (int64_t i = 0; i < n; ++i) {
      mixed.push_back(cycle[i % 11]);
      random.push_back(static_cast<int32_t>(std::uniform_int_distribution<int>(-1, 2)(rng)));
    }
    patterns.push_back(mixed);
    patterns.push_back(random);
    for (auto [in, out] : dims)
      for (int64_t rank : {1, 16})
        for (const auto& p : patterns)
          for (bool seg : {true, false}) {
            if (n * in * 16 > 2'000'000 && !seg) continue;
            run_lora_case(cpu, ref, rng, {n, in, out, rank, p, seg, dtype});
          }
  }
}

TEST_P(CpuOps, LoraShrinkExpand) {
  const std::pair<int64_t, int64_t> dims[] = {{17, 130}, {64, 97}, {2048, 256}, {130, 2048}};
  run_lora_sweep(*cpu_, ref_, rng_, dims, {1, 3, 17, 97}, DType::kF32);
}

// bf16 stacks (--lora-dtype bfloat16): widened in registers like bf16 weights; same
// patterns, fewer shapes.
TEST_P(CpuOps, LoraShrinkExpandBf16Stacks) {
  const std::pair<int64_t, int64_t> dims[] = {{17, 130}, {2048, 256}, {130, 2048}};
  run_lora_sweep(*cpu_, ref_, rng_, dims, {1, 17, 97}, DType::kBF16);
}

// A projection group through project (its products and shrinks in one parallel region, its
// expands in another; without the bf16 dot-product kernel x16 widened once for every
// member) gives bitwise what the primitives give one by one: f32 and bf16 x, packed
// weights where this kernel set packs them, a bias, LoRA on some tokens or on none.
TEST_P(CpuOps, ProjectGroupEqualsItsPrimitives) {
  const int64_t in = 96, outs[3] = {64, 32, 48}, rank = 8, num_slots = 3;
  for (int64_t n : {1, 5, 40}) {
    for (DType x_type : {DType::kF32, DType::kBF16}) {
      for (bool lora_on : {false, true}) {
        for (bool all_base : {false, true}) {
          if (!lora_on && all_base) continue;
          const std::string what = "project n=" + std::to_string(n) + " x=" + std::string(dtype_name(x_type)) +
                                   (lora_on ? (all_base ? " lora, no adapter" : " lora") : "");
          Buf x = random_buf(rng_, DType::kF32, {n, in});
          Buf x16(DType::kBF16, {n, in});
          cpu_->round_to_16bit(x16.t, x.t);
          Buf bias = random_buf(rng_, DType::kF32, {outs[0]});
          std::vector<Buf> w, packed, a, b;
          MatmulGroup g;
          g.count = 3;
          for (int i = 0; i < 3; ++i) {
            w.push_back(random_buf(rng_, DType::kBF16, {outs[i], in}));
            a.push_back(random_buf(rng_, DType::kF32, {num_slots, rank, in}));
            b.push_back(random_buf(rng_, DType::kF32, {num_slots, outs[i], rank}));
          }
          for (int i = 0; i < 3; ++i) {
            g.w[i] = w[static_cast<size_t>(i)].t;
            if (x_type == DType::kBF16 && cpu_->projection_layout(g.w[i]) != WeightLayout::kRows) {
              packed.emplace_back(DType::kBF16, std::initializer_list<int64_t>{outs[i], in});
              g.w[i] = cpu_->pack_projection(packed.back().t.data, g.w[i]);
            }
          }
          g.bias[0] = bias.t;
          std::vector<int32_t> slots;
          for (int64_t i = 0; i < n; ++i) slots.push_back(all_base ? -1 : static_cast<int32_t>(i % 4) - 1);
          Buf ts, ss, sl;
          GroupPlan plan;
          plan.x_type = x_type;
          GroupLora lora;
          if (lora_on) {
            plan.shrink = ShrinkKernel::kHost;
            plan.expand = ExpandKernel::kHost;
            lora.count = 3;
            lora.meta = lora_meta(slots, true, &ts, &ss, &sl);
          }
          auto run = [&](bool group) {
            std::vector<Buf> y;
            for (int i = 0; i < 3; ++i) y.emplace_back(DType::kF32, std::initializer_list<int64_t>{n, outs[i]});
            Buf t(DType::kF32, {3, n, rank});
            for (int i = 0; i < 3; ++i) {
              poison(y[static_cast<size_t>(i)]);
              g.y[i] = y[static_cast<size_t>(i)].t;
              lora.y[i] = g.y[i];
              lora.a_stack[i] = a[static_cast<size_t>(i)].t;
              lora.b_stack[i] = b[static_cast<size_t>(i)].t;
            }
            lora.t = t.t;
            g.x16 = x_type == DType::kBF16 ? x16.t : Tensor();
            if (group) {
              cpu_->project(plan, g, lora, x.t);
            } else {
              for (int i = 0; i < 3; ++i) {
                if (x_type == DType::kBF16) cpu_->matmul_x16(g.y[i], x16.t, g.w[i], g.bias[i]);
                else cpu_->matmul(g.y[i], x.t, g.w[i], g.bias[i]);
              }
              for (int i = 0; lora_on && i < 3; ++i) {
                cpu_->lora_shrink(lora.t_of(i), x.t, lora.a_stack[i], lora.meta);
                cpu_->lora_expand(lora.y[i], lora.t_of(i), lora.b_stack[i], lora.meta);
              }
            }
            return y;
          };
          const auto got = run(true), want = run(false);
          for (int i = 0; i < 3; ++i)
            EXPECT_EQ(0, std::memcmp(got[static_cast<size_t>(i)].t.data, want[static_cast<size_t>(i)].t.data,
                                     static_cast<size_t>(n * outs[i]) * 4))
                << what << ": member " << i;
        }
      }
    }
  }
}

// The SIMD paths agree with the portable path on the same inputs (so the AVX2 path is
// exercised even on an AVX-512 machine).
TEST(CpuIsaDispatch, ForcedPathsAgree) {
  std::vector<std::unique_ptr<CpuBackend>> backends;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    auto b = std::make_unique<CpuBackend>(2, isa);
    if (b->isa() == isa) backends.push_back(std::move(b));
  }
  ASSERT_FALSE(backends.empty());
  EXPECT_EQ(backends.front()->isa(), CpuIsa::kScalar);
  std::mt19937 rng(5);
  Buf x = random_buf(rng, DType::kF32, {5, 300});
  Buf w = random_buf(rng, DType::kBF16, {77, 300});
  Buf bias = random_buf(rng, DType::kF32, {77});
  Buf base(DType::kF32, {5, 77});
  backends[0]->matmul(base.t, x.t, w.t, bias.t);
  AttentionCase c{DType::kBF16, 4, 2, 2, 64, kMixedSeqs};
  Buf att0 = run_attention(*backends[0], c);
  for (size_t i = 1; i < backends.size(); ++i) {
    Buf y(DType::kF32, {5, 77});
    poison(y);
    backends[i]->matmul(y.t, x.t, w.t, bias.t);
    expect_close(y, base, 1e-4, 1e-5, std::string("matmul ") + std::string(cpu_isa_name(backends[i]->isa())));
    expect_close(run_attention(*backends[i], c), att0, 2e-5, 1e-4,
                 std::string("attention ") + std::string(cpu_isa_name(backends[i]->isa())));
  }
}

}  // namespace
}  // namespace quiver
