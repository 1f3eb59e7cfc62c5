// link: qv_backend
// CUDA backend vs the scalar reference, op by op, on awkward shapes: memory and copies,
// dummy-weight fill (bitwise), a kernel chain with and without pdl (bitwise), embedding,
// rms_norm / add_rms_norm, rope, kv_write, rope_kv_write, silu_mul / add / gather_rows,
// the 16-bit GEMM input copies (bitwise), and matmul on every path (GEMV, cuBLAS, cuBLAS
// with split activations). Attention and LoRA have their own files. Every case prints its error;
// skips without a GPU.
#include <algorithm>
#include <numeric>

#include "gpu/cuda_test_util.h"

namespace quiver::test {
namespace {

const DType kFloatTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

// The logits columns both runs mask (-inf) set to 0 for expect_close; returns the columns
// only one of them masks.
size_t clear_masked(std::vector<float>& got, std::vector<float>& want) {
  size_t mismatch = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isinf(want[i]) || std::isinf(got[i])) {
      mismatch += !(std::isinf(want[i]) && std::isinf(got[i]) && want[i] < 0 && got[i] < 0);
      got[i] = want[i] = 0.f;
    }
  }
  return mismatch;
}

class CudaOps : public CudaTest {
 protected:
  // n distinct cache slots out of num_slots, shuffled, with every pad_step-th token from
  // first_pad on as padding (-1).
  std::vector<int32_t> shuffled_slots(int64_t num_slots, int64_t n, size_t first_pad, size_t pad_step) {
    std::vector<int32_t> slots(static_cast<size_t>(num_slots));
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), rng_);
    slots.resize(static_cast<size_t>(n));
    for (size_t i = first_pad; i < slots.size(); i += pad_step) slots[i] = -1;
    return slots;
  }
};

TEST_F(CudaOps, MemoryRoundTrip) {
  const size_t count = 1000;
  std::vector<float> src(count), back(count, 0.f);
  std::iota(src.begin(), src.end(), 1.f);
  Buffer a(gpu_.get(), count * 4), b(gpu_.get(), count * 4);
  gpu_->copy_from_host(a.data(), src.data(), count * 4);
  gpu_->copy(b.data(), a.data(), count * 4);
  gpu_->copy_to_host(back.data(), b.data(), count * 4);
  EXPECT_EQ(back, src);
  gpu_->fill_zero(b.data(), count * 4);
  gpu_->copy_to_host(back.data(), b.data(), count * 4);
  EXPECT_EQ(back, std::vector<float>(count, 0.f));
  HostTensor w = random_tensor(rng_, DType::kBF16, {7, 9});
  Tensor dw = gpu_->import_weight(w.view());
  EXPECT_EQ(dw.device, Device::kCuda);
  expect_close("import_weight bf16 [7, 9]", download(gpu_.get(), dw), w.as_f32(), 0);
}

// Dummy weights (--load-format dummy) filled on the GPU are bitwise the host backend's:
// every float dtype, centres and scales as the model uses them, a grid-stride tail.
TEST_F(CudaOps, FillUniformMatchesHostBitwise) {
  const int64_t n = (int64_t{1} << 20) + 77;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16})
    for (auto [center, scale] : {std::pair<float, float>{0.f, 1.f / 64}, {1.f, 0.1f}, {0.f, 1e-3f}}) {
      const size_t bytes = static_cast<size_t>(n) * dtype_size(t);
      std::vector<uint8_t> host(bytes), back(bytes);
      ref_.fill_uniform(make_view(host.data(), t, {n}, Device::kCpu), center, scale, 12345);
      Buffer d(gpu_.get(), bytes);
      gpu_->fill_uniform(make_view(d.data(), t, {n}, Device::kCuda), center, scale, 12345);
      gpu_->copy_to_host(back.data(), d.data(), bytes);
      size_t differ = 0;
      for (size_t i = 0; i < bytes; ++i) differ += host[i] != back[i];
      std::printf("fill_uniform %s center %g scale %g: %zu of %zu bytes differ\n", name_of(t), center, scale, differ,
                  bytes);
      EXPECT_EQ(differ, 0u);
    }
}

// --quantization fp8 gives the same bytes and scales on the GPU as on the host (the CPU and
// the GPU serve one model): rows of every float type and of awkward lengths, a zero row,
// tiny values (e4m3 subnormals), and rows holding a NaN or an infinity (scale NaN). f32
// rows of 4,096 / 5,000 / 11,008 take the register-resident kernel that kCublasFp8 runs on
// its activations (4 / 8 / 16 float4 a thread), 77 and 20,000 the two-pass one.
TEST_F(CudaOps, QuantizeFp8RowsMatchesHostBitwise) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16})
    for (const int64_t k : {int64_t{1}, int64_t{77}, int64_t{4096}, int64_t{5000}, int64_t{11008}, int64_t{20000}}) {
      const int64_t rows = 37;
      HostTensor w = random_tensor(rng_, t, {rows, k}, 3.f);
      std::vector<float> v = w.as_f32();
      for (int64_t j = 0; j < k; ++j) {
        v[static_cast<size_t>(2 * k + j)] = 0.f;                                   // row 2: zeros
        v[static_cast<size_t>(3 * k + j)] *= 1e-3f;                                // row 3: subnormal steps
        if (j == k / 2) v[static_cast<size_t>(4 * k + j)] = std::nanf("");          // row 4: a NaN
        if (j == 0) v[static_cast<size_t>(5 * k + j)] = std::numeric_limits<float>::infinity();  // row 5
      }
      w = host_f32({rows, k}, v, t);
      HostTensor q = host_f32({rows, k}, {}, DType::kF8E4M3);
      std::vector<float> scale(static_cast<size_t>(rows));
      ref_.quantize_fp8_rows(q.view(), make_view(scale.data(), DType::kF32, {rows}, Device::kCpu), w.view());
      DeviceTensor gw = upload(gpu_.get(), w);
      Buffer gq(gpu_.get(), static_cast<size_t>(rows * k)), gs(gpu_.get(), static_cast<size_t>(rows) * 4);
      gpu_->quantize_fp8_rows(make_view(gq.data(), DType::kF8E4M3, {rows, k}, Device::kCuda),
                              make_view(gs.data(), DType::kF32, {rows}, Device::kCuda), gw.t);
      std::vector<uint8_t> back(static_cast<size_t>(rows * k));
      std::vector<float> back_scale(static_cast<size_t>(rows));
      gpu_->copy_to_host(back.data(), gq.data(), back.size());
      gpu_->copy_to_host(back_scale.data(), gs.data(), back_scale.size() * 4);
      size_t differ = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const float hs = scale[static_cast<size_t>(r)], gs_r = back_scale[static_cast<size_t>(r)];
        if (r == 4 || r == 5) {
          EXPECT_TRUE(std::isnan(hs) && std::isnan(gs_r)) << "row " << r << " holds a non-finite value";
          continue;
        }
        EXPECT_EQ(hs, gs_r) << name_of(t) << " k=" << k << " row " << r;
        for (int64_t j = 0; j < k; ++j) differ += q.bytes[static_cast<size_t>(r * k + j)] != back[static_cast<size_t>(r * k + j)];
      }
      EXPECT_EQ(scale[2], 0.f);
      EXPECT_EQ(differ, 0u) << name_of(t) << " k=" << k;
    }
}

// Programmatic dependent launch changes when kernels may start, never what they compute:
// a decode-shaped chain (embedding, add_rms_norm, GEMV, rope_kv_write, silu_mul, GEMV), run
// 50 times back to back without a host sync, gives the same bits with and without pdl.
// A kernel reading its predecessor's output before pdl_wait() would show up here.
TEST_F(CudaOps, PdlChainMatchesPlainLaunches) {
  CudaBackendOptions plain_options;
  plain_options.pdl = false;
  auto plain = variant_backend(plain_options);
  ASSERT_NE(plain, nullptr);
  const int64_t n = 3, d = 512, f = 1376, heads = 4, hd = 128, vocab = 100, positions = 64;
  HostTensor table = random_tensor(rng_, DType::kBF16, {vocab, d});
  HostTensor norm_w = random_tensor(rng_, DType::kBF16, {d});
  HostTensor w_up = random_tensor(rng_, DType::kBF16, {2 * f, d}, 0.05f);
  HostTensor w_down = random_tensor(rng_, DType::kBF16, {d, f}, 0.05f);
  HostTensor cos_sin = random_tensor(rng_, DType::kF32, {positions, hd});
  HostTensor ids = host_i32({n}, {5, 77, 99});
  HostTensor pos = host_i32({n}, {0, 17, 63});
  HostTensor skip_slots = host_i32({n}, {-1, -1, -1});
  std::vector<std::vector<float>> results;
  for (Backend* b : {gpu_.get(), plain.get()}) {
    DeviceTensor t = upload(b, table), nw = upload(b, norm_w), up = upload(b, w_up), down = upload(b, w_down);
    DeviceTensor cs = upload(b, cos_sin), gid = upload(b, ids), gpos = upload(b, pos);
    // rope_kv_write's cache, never written: every slot -1.
    DeviceTensor kc = upload(b, random_tensor(rng_, DType::kF32, {1, 16, 1, hd})), skip = upload(b, skip_slots);
    Buffer x(b, n * d * 4), h(b, n * d * 4), res(b, n * d * 4), gu(b, n * 2 * f * 4), act(b, n * f * 4);
    Buffer vb(b, n * hd * 4);
    auto f32 = [](Buffer& buf, const std::vector<int64_t>& shape) {
      return make_view(buf.data(), DType::kF32, shape, Device::kCuda);
    };
    b->fill_zero(res.data(), n * d * 4);
    b->fill_zero(vb.data(), n * hd * 4);
    for (int rep = 0; rep < 50; ++rep) {
      b->embedding(f32(x, {n, d}), t.t, Tensor(), gid.t);
      b->add_rms_norm(f32(h, {n, d}), Tensor(), f32(res, {n, d}), f32(x, {n, d}), nw.t, 1e-5f, GroupPlan(),
                      GroupLora());
      b->matmul(f32(gu, {n, 2 * f}), f32(h, {n, d}), up.t, Tensor());
      Tensor q = make_view(gu.data(), DType::kF32, {n, heads, hd}, Device::kCuda);
      Tensor k = make_view(static_cast<float*>(gu.data()) + n * heads * hd, DType::kF32, {n, 1, hd}, Device::kCuda);
      b->rope_kv_write(q, k, f32(vb, {n, 1, hd}), gpos.t, cs.t, KvLayer{kc.t, kc.t}, skip.t, GroupPlan(), GroupLora());
      Tensor gate = make_view(gu.data(), DType::kF32, {n, f}, Device::kCuda);
      Tensor upv = make_view(static_cast<float*>(gu.data()) + n * f, DType::kF32, {n, f}, Device::kCuda);
      b->silu_mul(f32(act, {n, f}), Tensor(), gate, upv, GroupPlan(), GroupLora());
      b->matmul(f32(x, {n, d}), f32(act, {n, f}), down.t, Tensor());
    }
    results.push_back(download(b, f32(res, {n, d})));
  }
  size_t differ = 0;
  for (size_t i = 0; i < results[0].size(); ++i)
    differ += std::memcmp(&results[0][i], &results[1][i], sizeof(float)) != 0;
  std::printf("pdl chain: %zu of %zu values differ from plain launches\n", differ, results[0].size());
  EXPECT_EQ(differ, 0u);
}

TEST_F(CudaOps, Embedding) {
  const int64_t vocab = 61;
  for (DType t : kFloatTypes)
    for (int64_t d : {1, 17, 130, 512})
      for (int64_t n : {1, 13, 97}) {
        HostTensor table = random_tensor(rng_, t, {vocab, d});
        std::vector<int32_t> ids(static_cast<size_t>(n));
        for (auto& id : ids) id = static_cast<int32_t>(rng_() % vocab);
        HostTensor hid = host_i32({n}, ids), out = random_tensor(rng_, DType::kF32, {n, d});
        ref_.embedding(out.view(), table.view(), Tensor(), hid.view());
        DeviceTensor gt = upload(gpu_.get(), table), gi = upload(gpu_.get(), hid), go = upload(gpu_.get(), out);
        poison(gpu_.get(), go.t);
        gpu_->embedding(go.t, gt.t, Tensor(), gi.t);
        expect_close("embedding " + std::string(name_of(t)) + " d=" + std::to_string(d) + " n=" + std::to_string(n),
                     download(gpu_.get(), go.t), out.as_f32(), 0);
      }
}

// Ids past the table read a LoRA slot's rows, in the slot's dtype (f32 or bf16).
TEST_F(CudaOps, EmbeddingExtraRows) {
  const int64_t vocab = 61, rows = 12;
  for (DType t : kFloatTypes)
    for (DType e : {DType::kF32, DType::kBF16})
      for (int64_t d : {17, 512}) {
        HostTensor table = random_tensor(rng_, t, {vocab, d}), extra = random_tensor(rng_, e, {rows, d});
        std::vector<int32_t> ids = {0, 60, 61, 72, 5, 66, 61};
        const int64_t n = static_cast<int64_t>(ids.size());
        HostTensor hid = host_i32({n}, ids), out = random_tensor(rng_, DType::kF32, {n, d});
        ref_.embedding(out.view(), table.view(), extra.view(), hid.view());
        DeviceTensor gt = upload(gpu_.get(), table), ge = upload(gpu_.get(), extra), gi = upload(gpu_.get(), hid);
        DeviceTensor go = upload(gpu_.get(), out);
        poison(gpu_.get(), go.t);
        gpu_->embedding(go.t, gt.t, ge.t, gi.t);
        expect_close("embedding extra " + std::string(name_of(t)) + "/" + name_of(e) + " d=" + std::to_string(d),
                     download(gpu_.get(), go.t), out.as_f32(), 0);
      }
}

// vocab_logits against the reference: the widened base logits, -inf past each row's
// vocabulary, and the slots' rows (slot 2 with a whole replaced vocabulary).
TEST_F(CudaOps, VocabLogits) {
  for (DType rt : {DType::kF32, DType::kBF16})
    for (int64_t h : {19, 4096}) {
      const int64_t v = 300, extra = 8, w = v + extra, slots = 3, r = v + 4, n = 9;
      HostTensor base = random_tensor(rng_, DType::kF32, {n, v}), x = random_tensor(rng_, DType::kF32, {n, h});
      HostTensor rows = random_tensor(rng_, rt, {slots * r, h});
      std::vector<int32_t> ids(static_cast<size_t>(slots * r), 0), counts = {3, 0, static_cast<int32_t>(r)};
      ids[0] = 4, ids[1] = 300, ids[2] = 301;
      for (int64_t j = 0; j < r; ++j) ids[static_cast<size_t>(2 * r + j)] = static_cast<int32_t>(j);
      HostTensor hids = host_i32({slots * r}, ids), hcounts = host_i32({slots}, counts);
      HostTensor hsizes = host_i32({slots}, {302, 300, 304});
      HostTensor hslot = host_i32({n}, {-1, 0, 2, 1, 0, -1, 2, 2, 0});
      HostTensor out = random_tensor(rng_, DType::kF32, {n, w});
      VocabTables ht;
      ht.lm_head_rows = rows.view();
      ht.lm_head_ids = hids.view();
      ht.row_counts = hcounts.view();
      ht.vocab_sizes = hsizes.view();
      ht.rows_per_slot = r;
      ht.base_vocab = v;
      ht.width = w;
      ref_.vocab_logits(out.view(), base.view(), x.view(), hslot.view(), ht);
      DeviceTensor gb = upload(gpu_.get(), base), gx = upload(gpu_.get(), x), grows = upload(gpu_.get(), rows);
      DeviceTensor gids = upload(gpu_.get(), hids), gcounts = upload(gpu_.get(), hcounts);
      DeviceTensor gsizes = upload(gpu_.get(), hsizes), gslot = upload(gpu_.get(), hslot), go = upload(gpu_.get(), out);
      poison(gpu_.get(), go.t);
      VocabTables dt = ht;
      dt.lm_head_rows = grows.t;
      dt.lm_head_ids = gids.t;
      dt.row_counts = gcounts.t;
      dt.vocab_sizes = gsizes.t;
      gpu_->vocab_logits(go.t, gb.t, gx.t, gslot.t, dt);
      std::vector<float> got = download(gpu_.get(), go.t), want = out.as_f32();
      EXPECT_EQ(clear_masked(got, want), 0u);
      expect_close("vocab_logits " + std::string(name_of(rt)) + " h=" + std::to_string(h), got, want, 1e-5);
    }
}

// The slots' embed_tokens / lm_head LoRA against the reference, stacks padded with zeros past
// each slot's rank as the slot pool writes them: slot 1 has none (rank 0), slot 2 the whole
// max rank, and slot 0 also adds tokens (its vocabulary is 302 of the 308-wide rows).
TEST_F(CudaOps, VocabLora) {
  for (DType st : {DType::kF32, DType::kBF16})
    for (int64_t h : {19, 4096}) {
      const int64_t v = 300, w = 308, slots = 3, R = 16, n = 9, r = 4;
      const std::vector<int32_t> ranks_v = {2, 3, 0, 0, 16, 16};
      auto padded = [&](const std::vector<int64_t>& d, int rank_dim, int which) {
        HostTensor t = random_tensor(rng_, st, d);
        std::vector<float> f = t.as_f32();
        for (int64_t i = 0; i < t.numel(); ++i) {
          const int64_t k = rank_dim == 2 ? i % d[2] : (i / d[2]) % d[1], s = i / (d[1] * d[2]);
          if (k >= ranks_v[static_cast<size_t>(2 * s + which)]) f[static_cast<size_t>(i)] = 0.f;
        }
        return host_f32(d, f, st);
      };
      HostTensor ea = padded({slots, w, R}, 2, 0), eb = padded({slots, h, R}, 2, 0);
      HostTensor ha = padded({slots, R, h}, 1, 1), hb = padded({slots, w, R}, 2, 1);
      HostTensor ranks = host_i32({slots, 2}, ranks_v);
      HostTensor hslot = host_i32({n}, {-1, 0, 2, 1, 0, -1, 2, 2, 0});
      HostTensor hids = host_i32({n}, {3, 301, 0, 5, 299, 40, 307, 100, 7});
      VocabLora hl;
      hl.embed_a = ea.view(), hl.embed_b = eb.view(), hl.head_a = ha.view(), hl.head_b = hb.view();
      hl.ranks = ranks.view();
      DeviceTensor gea = upload(gpu_.get(), ea), geb = upload(gpu_.get(), eb), gha = upload(gpu_.get(), ha);
      DeviceTensor ghb = upload(gpu_.get(), hb), granks = upload(gpu_.get(), ranks);
      DeviceTensor gslot = upload(gpu_.get(), hslot), gids = upload(gpu_.get(), hids);
      VocabLora dl{gea.t, geb.t, gha.t, ghb.t, granks.t};
      const std::string tag = std::string(name_of(st)) + " h=" + std::to_string(h);

      HostTensor emb = random_tensor(rng_, DType::kF32, {n, h});
      DeviceTensor gemb = upload(gpu_.get(), emb);
      ref_.embedding_lora(emb.view(), hids.view(), hslot.view(), hl);
      gpu_->embedding_lora(gemb.t, gids.t, gslot.t, dl);
      expect_close("embedding_lora " + tag, download(gpu_.get(), gemb.t), emb.as_f32(), 1e-5);

      // Slot 0 adds two tokens (its rows: 300, 301) and replaces row 4.
      HostTensor base = random_tensor(rng_, DType::kF32, {n, v}), x = random_tensor(rng_, DType::kF32, {n, h});
      HostTensor rows = random_tensor(rng_, st, {slots * r, h});
      std::vector<int32_t> row_ids(static_cast<size_t>(slots * r), 0);
      row_ids[0] = 4, row_ids[1] = 300, row_ids[2] = 301;
      HostTensor hrow_ids = host_i32({slots * r}, row_ids), hcounts = host_i32({slots}, {3, 0, 0});
      HostTensor hsizes = host_i32({slots}, {302, 300, 300});
      HostTensor out = random_tensor(rng_, DType::kF32, {n, w});
      VocabTables ht;
      ht.lm_head_rows = rows.view(), ht.lm_head_ids = hrow_ids.view(), ht.row_counts = hcounts.view();
      ht.vocab_sizes = hsizes.view(), ht.rows_per_slot = r, ht.base_vocab = v, ht.width = w, ht.lora = hl;
      ref_.vocab_logits(out.view(), base.view(), x.view(), hslot.view(), ht);
      DeviceTensor gb = upload(gpu_.get(), base), gx = upload(gpu_.get(), x), grows = upload(gpu_.get(), rows);
      DeviceTensor grow_ids = upload(gpu_.get(), hrow_ids), gcounts = upload(gpu_.get(), hcounts);
      DeviceTensor gsizes = upload(gpu_.get(), hsizes), go = upload(gpu_.get(), out);
      poison(gpu_.get(), go.t);
      VocabTables dt = ht;
      dt.lm_head_rows = grows.t, dt.lm_head_ids = grow_ids.t, dt.row_counts = gcounts.t, dt.vocab_sizes = gsizes.t;
      dt.lora = dl;
      gpu_->vocab_logits(go.t, gb.t, gx.t, gslot.t, dt);
      std::vector<float> got = download(gpu_.get(), go.t), want = out.as_f32();
      EXPECT_EQ(clear_masked(got, want), 0u);
      expect_close("vocab_logits with lm_head LoRA " + tag, got, want, 1e-5);
    }
}

TEST_F(CudaOps, RmsNormAndAddRmsNorm) {
  for (DType t : kFloatTypes)
    for (int64_t d : {1, 17, 97, 130, 4096})
      for (int64_t n : {1, 3, 33}) {
        const std::string tag = std::string(name_of(t)) + " n=" + std::to_string(n) + " d=" + std::to_string(d);
        HostTensor x = random_tensor(rng_, DType::kF32, {n, d}, 3.f), w = random_tensor(rng_, t, {d});
        HostTensor res = random_tensor(rng_, DType::kF32, {n, d}, 2.f), out = random_tensor(rng_, DType::kF32, {n, d});
        DeviceTensor gx = upload(gpu_.get(), x), gw = upload(gpu_.get(), w), gr = upload(gpu_.get(), res);
        DeviceTensor go = upload(gpu_.get(), out);

        ref_.rms_norm_f32(out.view(), x.view(), w.view(), 1e-5f);
        poison(gpu_.get(), go.t);
        gpu_->rms_norm(go.t, Tensor(), gx.t, gw.t, 1e-5f);
        expect_close("rms_norm " + tag, download(gpu_.get(), go.t), out.as_f32(), 1e-5);

        ref_.add_rms_norm_f32(out.view(), res.view(), x.view(), w.view(), 1e-6f);
        poison(gpu_.get(), go.t);
        gpu_->add_rms_norm(go.t, Tensor(), gr.t, gx.t, gw.t, 1e-6f, GroupPlan(), GroupLora());
        expect_close("add_rms_norm out " + tag, download(gpu_.get(), go.t), out.as_f32(), 1e-5);
        expect_close("add_rms_norm residual " + tag, download(gpu_.get(), gr.t), res.as_f32(), 0);
      }
}

TEST_F(CudaOps, Rope) {
  const int64_t max_pos = 512;
  // 8, 16: the HF fixture models; 12: a pair a thread (rope_kv_write4_kernel takes head
  // sizes by 8)
  for (int64_t hd : {8, 12, 16, 32, 64, 80, 128, 256}) {
    // HF default RoPE table: row p = cos(p f_j), sin(p f_j), f_j = 10000^(-2j/hd)
    std::vector<float> cs(static_cast<size_t>(max_pos * hd));
    for (int64_t p = 0; p < max_pos; ++p)
      for (int64_t j = 0; j < hd / 2; ++j) {
        const double f = std::pow(10000.0, -2.0 * static_cast<double>(j) / static_cast<double>(hd));
        cs[static_cast<size_t>(p * hd + j)] = static_cast<float>(std::cos(static_cast<double>(p) * f));
        cs[static_cast<size_t>(p * hd + hd / 2 + j)] = static_cast<float>(std::sin(static_cast<double>(p) * f));
      }
    HostTensor table = host_f32({max_pos, hd}, cs);
    DeviceTensor gtable = upload(gpu_.get(), table);
    for (auto [h, kv] : {std::pair<int64_t, int64_t>{4, 4}, {8, 2}, {6, 1}})
      for (int64_t n : {1, 13, 40}) {
        std::vector<int32_t> pos(static_cast<size_t>(n));
        for (auto& p : pos) p = static_cast<int32_t>(rng_() % max_pos);
        HostTensor hp = host_i32({n}, pos);
        HostTensor q = random_tensor(rng_, DType::kF32, {n, h, hd}, 2.f), k = random_tensor(rng_, DType::kF32, {n, kv, hd});
        DeviceTensor gq = upload(gpu_.get(), q), gk = upload(gpu_.get(), k), gp = upload(gpu_.get(), hp);
        // rope_kv_write with every slot -1: the rotation alone.
        DeviceTensor gv = upload(gpu_.get(), random_tensor(rng_, DType::kF32, {n, kv, hd}));
        DeviceTensor gc = upload(gpu_.get(), random_tensor(rng_, DType::kF32, {1, 16, kv, hd}));
        DeviceTensor gskip = upload(gpu_.get(), host_i32({n}, std::vector<int32_t>(static_cast<size_t>(n), -1)));
        ref_.rope(q.view(), k.view(), hp.view(), table.view());
        gpu_->rope_kv_write(gq.t, gk.t, gv.t, gp.t, gtable.t, KvLayer{gc.t, gc.t}, gskip.t, GroupPlan(), GroupLora());
        const std::string tag = "hd=" + std::to_string(hd) + " heads=" + std::to_string(h) + "/" +
                                std::to_string(kv) + " n=" + std::to_string(n);
        expect_close("rope q " + tag, download(gpu_.get(), gq.t), q.as_f32(), 1e-5);
        expect_close("rope k " + tag, download(gpu_.get(), gk.t), k.as_f32(), 1e-5);
      }
  }
}

// fp8 caches: the device's saturating conversion of value / scale, bitwise the host's.
TEST_F(CudaOps, KvWrite) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3})
    for (int64_t bs : {1, 4, 16})
      for (int64_t kv : {1, 2})
        for (int64_t hd : {8, 16, 32, 80, 128})
          for (int64_t n : {1, 13, 40}) {
            const int64_t num_blocks = (n + bs - 1) / bs + 3;
            HostTensor hs = host_i32({n}, shuffled_slots(num_blocks * bs, n, 0, 5));
            HostTensor kc = random_tensor(rng_, t, {num_blocks, bs, kv, hd}), vc = random_tensor(rng_, t, {num_blocks, bs, kv, hd});
            HostTensor k = random_tensor(rng_, DType::kF32, {n, kv, hd}), v = random_tensor(rng_, DType::kF32, {n, kv, hd});
            // Past e4m3's range after the scales (saturation), and its subnormals.
            float* kf = reinterpret_cast<float*>(k.bytes.data());
            kf[0] = 500.f;
            kf[k.numel() - 1] = -1e-3f;
            const KvLayer scales{Tensor(), Tensor(), 0.7f, 1.3f};
            DeviceTensor gkc = upload(gpu_.get(), kc), gvc = upload(gpu_.get(), vc), gk = upload(gpu_.get(), k);
            DeviceTensor gv = upload(gpu_.get(), v), gs = upload(gpu_.get(), hs);
            // rope_kv_write at position 0 (cos 1, sin 0: k unrotated): the write alone.
            HostTensor q = random_tensor(rng_, DType::kF32, {n, kv, hd});
            std::vector<float> identity(static_cast<size_t>(hd), 0.f);
            std::fill(identity.begin(), identity.begin() + hd / 2, 1.f);
            DeviceTensor gq = upload(gpu_.get(), q), gtable = upload(gpu_.get(), host_f32({1, hd}, identity));
            DeviceTensor gp = upload(gpu_.get(), host_i32({n}, std::vector<int32_t>(static_cast<size_t>(n), 0)));
            ref_.kv_write(KvLayer{kc.view(), vc.view(), scales.k_scale, scales.v_scale}, k.view(), v.view(), hs.view());
            gpu_->rope_kv_write(gq.t, gk.t, gv.t, gp.t, gtable.t, KvLayer{gkc.t, gvc.t, scales.k_scale, scales.v_scale},
                                gs.t, GroupPlan(), GroupLora());
            const std::string tag = std::string(name_of(t)) + " bs=" + std::to_string(bs) + " kv=" +
                                    std::to_string(kv) + " hd=" + std::to_string(hd) + " n=" + std::to_string(n);
            expect_close("kv_write k " + tag, download(gpu_.get(), gkc.t), kc.as_f32(), 0);
            expect_close("kv_write v " + tag, download(gpu_.get(), gvc.t), vc.as_f32(), 0);
          }
}

// rope_kv_write (one kernel) against the reference's rope then kv_write: q and k rotated in
// place, the rotated k and v in the cache, padding slots untouched; GQA and MHA shapes.
TEST_F(CudaOps, RopeKvWrite) {
  const int64_t max_pos = 512, bs = 16;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3})
    for (int64_t hd : {8, 64, 128})
      for (auto [h, kv] : {std::pair<int64_t, int64_t>{4, 4}, {8, 2}, {6, 1}})
        for (int64_t n : {1, 3, 13, 33}) {
          std::vector<float> cs(static_cast<size_t>(max_pos * hd));
          for (auto& c : cs) c = static_cast<float>(rng_() % 2001) / 1000.f - 1.f;
          HostTensor table = host_f32({max_pos, hd}, cs);
          std::vector<int32_t> pos(static_cast<size_t>(n));
          for (auto& p : pos) p = static_cast<int32_t>(rng_() % max_pos);
          const int64_t num_blocks = (n + bs - 1) / bs + 2;
          HostTensor hp = host_i32({n}, pos), hs = host_i32({n}, shuffled_slots(num_blocks * bs, n, 1, 4));
          HostTensor q = random_tensor(rng_, DType::kF32, {n, h, hd}, 2.f), k = random_tensor(rng_, DType::kF32, {n, kv, hd});
          HostTensor v = random_tensor(rng_, DType::kF32, {n, kv, hd});
          HostTensor kc = random_tensor(rng_, t, {num_blocks, bs, kv, hd}), vc = random_tensor(rng_, t, {num_blocks, bs, kv, hd});
          Backend* gpu = gpu_.get();
          DeviceTensor gq = upload(gpu, q), gk = upload(gpu, k), gv = upload(gpu, v), gp = upload(gpu, hp);
          DeviceTensor gs = upload(gpu, hs), gkc = upload(gpu, kc), gvc = upload(gpu, vc), gtable = upload(gpu, table);
          ref_.rope(q.view(), k.view(), hp.view(), table.view());
          ref_.kv_write(KvLayer{kc.view(), vc.view(), 0.5f, 2.f}, k.view(), v.view(), hs.view());
          gpu->rope_kv_write(gq.t, gk.t, gv.t, gp.t, gtable.t, KvLayer{gkc.t, gvc.t, 0.5f, 2.f}, gs.t, GroupPlan(),
                             GroupLora());
          const std::string tag = std::string(name_of(t)) + " hd=" + std::to_string(hd) + " heads=" +
                                  std::to_string(h) + "/" + std::to_string(kv) + " n=" + std::to_string(n);
          // A k value one f32 ulp away from the reference's may round to the other 16-bit (or
          // 8-bit: 2^-3 relative) neighbour.
          const double cache_tol = t == DType::kF32 ? 1e-5 : t == DType::kF8E4M3 ? 0.13 : 1e-2;
          expect_close("rope_kv_write q " + tag, download(gpu, gq.t), q.as_f32(), 1e-5);
          expect_close("rope_kv_write k " + tag, download(gpu, gk.t), k.as_f32(), 1e-5);
          expect_close("rope_kv_write k cache " + tag, download(gpu, gkc.t), kc.as_f32(), cache_tol);
          expect_close("rope_kv_write v cache " + tag, download(gpu, gvc.t), vc.as_f32(), 0);
        }
}

TEST_F(CudaOps, ElementWise) {
  for (int64_t n : {1, 3, 97})
    for (int64_t d : {1, 17, 130, 4096}) {
      const std::string tag = "n=" + std::to_string(n) + " d=" + std::to_string(d);
      HostTensor g = random_tensor(rng_, DType::kF32, {n, d}, 6.f), u = random_tensor(rng_, DType::kF32, {n, d}, 2.f);
      HostTensor out = random_tensor(rng_, DType::kF32, {n, d});
      DeviceTensor gg = upload(gpu_.get(), g), gu = upload(gpu_.get(), u), go = upload(gpu_.get(), out);
      ref_.silu_mul_f32(out.view(), g.view(), u.view());
      poison(gpu_.get(), go.t);
      gpu_->silu_mul(go.t, Tensor(), gg.t, gu.t, GroupPlan(), GroupLora());
      expect_close("silu_mul " + tag, download(gpu_.get(), go.t), out.as_f32(), 1e-6);

      for (int64_t m : {1, 5, 40}) {
        std::vector<int32_t> rows(static_cast<size_t>(m));
        for (auto& r : rows) r = static_cast<int32_t>(rng_() % n);
        HostTensor hr = host_i32({m}, rows), hout = random_tensor(rng_, DType::kF32, {m, d});
        DeviceTensor gr = upload(gpu_.get(), hr), ghout = upload(gpu_.get(), hout);
        ref_.gather_rows(hout.view(), g.view(), hr.view());
        poison(gpu_.get(), ghout.t);
        gpu_->gather_rows(ghout.t, gg.t, gr.t);
        expect_close("gather_rows m=" + std::to_string(m) + " " + tag, download(gpu_.get(), ghout.t), hout.as_f32(), 0);
      }
    }
}

// The rounded value a 16-bit copy must hold (round to nearest even, as the matmul's own
// conversion before cuBLAS).
std::vector<float> rounded(const std::vector<float>& v, DType t) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    r[i] = t == DType::kBF16 ? bf16_to_f32(f32_to_bf16(v[i])) : f16_to_f32(f32_to_f16(v[i]));
  return r;
}

// A group plan's x_type for a step of n tokens of weights w (its first group's).
DType x_type(Backend* b, int64_t n, DType w) {
  StepShape s;
  s.tokens = n;
  s.weights = w;
  s.group[0] = {1, 512, {512}};
  return b->plan(s).group[0].x_type;
}

// The norms and silu_mul with an out16 write the same f32 output as without and, beside
// it, that output rounded to 16 bits; a matmul handed that copy (MatmulGroup::x16) gives
// bitwise the result of converting x itself. The plan's x_type says when the copy is wanted.
TEST_F(CudaOps, X16CopiesAreTheMatmulsOwnConversion) {
  const int gemv_max_n = DispatchTable{}.gemv_max_n;
  EXPECT_EQ(x_type(gpu_.get(), gemv_max_n, DType::kBF16), DType::kF32);
  EXPECT_EQ(x_type(gpu_.get(), gemv_max_n + 1, DType::kBF16), DType::kBF16);
  EXPECT_EQ(x_type(gpu_.get(), gemv_max_n + 1, DType::kF16), DType::kF16);
  EXPECT_EQ(x_type(gpu_.get(), 1000, DType::kF32), DType::kF32);
  CudaBackendOptions o;
  o.gemm_split_activations = true;
  auto split = variant_backend(o);
  ASSERT_NE(split, nullptr);
  EXPECT_EQ(x_type(split.get(), 1000, DType::kBF16), DType::kF32);  // it multiplies hi + lo, not one copy
  for (DType t : {DType::kBF16, DType::kF16})
    for (int64_t d : {17, 130, 4096})
      for (int64_t n : {3, 33}) {
        const std::string tag = std::string(name_of(t)) + " n=" + std::to_string(n) + " d=" + std::to_string(d);
        HostTensor x = random_tensor(rng_, DType::kF32, {n, d}, 3.f), w = random_tensor(rng_, t, {d});
        HostTensor res = random_tensor(rng_, DType::kF32, {n, d}, 2.f), out = random_tensor(rng_, DType::kF32, {n, d});
        HostTensor out16 = random_tensor(rng_, t, {n, d});
        DeviceTensor gx = upload(gpu_.get(), x), gw = upload(gpu_.get(), w), go = upload(gpu_.get(), out);
        DeviceTensor gplain = upload(gpu_.get(), out), g16 = upload(gpu_.get(), out16);
        DeviceTensor gr1 = upload(gpu_.get(), res), gr2 = upload(gpu_.get(), res);

        gpu_->rms_norm(gplain.t, Tensor(), gx.t, gw.t, 1e-5f);
        gpu_->rms_norm(go.t, g16.t, gx.t, gw.t, 1e-5f);
        std::vector<float> want = download(gpu_.get(), gplain.t);
        expect_close("rms_norm out16: out " + tag, download(gpu_.get(), go.t), want, 0);
        expect_close("rms_norm out16: out16 " + tag, download(gpu_.get(), g16.t), rounded(want, t), 0);

        gpu_->add_rms_norm(gplain.t, Tensor(), gr1.t, gx.t, gw.t, 1e-6f, GroupPlan(), GroupLora());
        gpu_->add_rms_norm(go.t, g16.t, gr2.t, gx.t, gw.t, 1e-6f, GroupPlan(), GroupLora());
        want = download(gpu_.get(), gplain.t);
        expect_close("add_rms_norm with out16: out " + tag, download(gpu_.get(), go.t), want, 0);
        expect_close("add_rms_norm with out16: residual " + tag, download(gpu_.get(), gr2.t), download(gpu_.get(), gr1.t), 0);
        expect_close("add_rms_norm with out16: out16 " + tag, download(gpu_.get(), g16.t), rounded(want, t), 0);

        // silu_mul in place on its gate, as the model calls it.
        DeviceTensor gate1 = upload(gpu_.get(), x), gate2 = upload(gpu_.get(), x), gu = upload(gpu_.get(), res);
        gpu_->silu_mul(gate1.t, Tensor(), gate1.t, gu.t, GroupPlan(), GroupLora());
        gpu_->silu_mul(gate2.t, g16.t, gate2.t, gu.t, GroupPlan(), GroupLora());
        want = download(gpu_.get(), gate1.t);
        expect_close("silu_mul with out16: out " + tag, download(gpu_.get(), gate2.t), want, 0);
        expect_close("silu_mul with out16: out16 " + tag, download(gpu_.get(), g16.t), rounded(want, t), 0);

        // Two members, each with its own output; the copy is the silu_mul output's.
        HostTensor w1 = random_tensor(rng_, t, {40, d}, 0.5f), w2 = random_tensor(rng_, t, {24, d}, 0.5f);
        HostTensor y1 = random_tensor(rng_, DType::kF32, {n, 40}), y2 = random_tensor(rng_, DType::kF32, {n, 24});
        DeviceTensor gw1 = upload(gpu_.get(), w1), gw2 = upload(gpu_.get(), w2);
        DeviceTensor a1 = upload(gpu_.get(), y1), a2 = upload(gpu_.get(), y2), b1 = upload(gpu_.get(), y1),
                     b2 = upload(gpu_.get(), y2);
        MatmulGroup g;
        g.count = 2;
        g.w[0] = gw1.t;
        g.w[1] = gw2.t;
        g.y[0] = a1.t;
        g.y[1] = a2.t;
        std::vector<MatmulKernel> kernels{MatmulKernel::kCublasSmall};
        if (n <= 16 && d % 8 == 0) kernels.push_back(MatmulKernel::kSkinny);
        for (MatmulKernel k : kernels) {
          const GroupPlan plan{k, ShrinkKernel::kNone, ExpandKernel::kNone, t};
          g.y[0] = a1.t;
          g.y[1] = a2.t;
          g.x16 = Tensor();
          gpu_->project(plan, g, GroupLora(), gate2.t);
          g.y[0] = b1.t;
          g.y[1] = b2.t;
          g.x16 = g16.t;
          gpu_->project(plan, g, GroupLora(), gate2.t);
          const std::string what = "project " + to_string(k) + " with x16, member ";
          expect_close(what + "0 " + tag, download(gpu_.get(), b1.t), download(gpu_.get(), a1.t), 0);
          expect_close(what + "1 " + tag, download(gpu_.get(), b2.t), download(gpu_.get(), a2.t), 0);
        }
      }
}

// One matmul case on `gpu` vs the reference. misalign: the weight starts one element past
// a 16-byte boundary (forces the element-wise GEMV path at any `in`).
void check_matmul(Backend* gpu, RefBackend& ref, std::mt19937& rng, const std::string& path, int64_t n, int64_t in,
                  int64_t out, DType wt, bool with_bias, bool misalign, double tol) {
  HostTensor x = random_tensor(rng, DType::kF32, {n, in}, 1.f), w = random_tensor(rng, wt, {out, in}, 0.5f);
  HostTensor bias = random_tensor(rng, wt, {out}), y = random_tensor(rng, DType::kF32, {n, out});
  ref.matmul(y.view(), x.view(), w.view(), with_bias ? bias.view() : Tensor());
  HostTensor w_shifted = w;
  if (misalign) {  // one leading element, then the weight
    w_shifted.shape = {out * in + 1};
    w_shifted.bytes.insert(w_shifted.bytes.begin(), dtype_size(wt), 0);
  }
  DeviceTensor gx = upload(gpu, x), gw = upload(gpu, w_shifted), gb = upload(gpu, bias), gy = upload(gpu, y);
  Tensor wt_view = make_view(static_cast<char*>(gw.t.data) + (misalign ? dtype_size(wt) : 0), wt, {out, in},
                             Device::kCuda);
  poison(gpu, gy.t);
  gpu->matmul(gy.t, gx.t, wt_view, with_bias ? gb.t : Tensor());
  char tag[160];
  std::snprintf(tag, sizeof tag, "matmul[%s] %s n=%lld in=%lld out=%lld%s%s", path.c_str(), name_of(wt),
                static_cast<long long>(n), static_cast<long long>(in), static_cast<long long>(out),
                with_bias ? " bias" : "", misalign ? " misaligned" : "");
  expect_close(tag, download(gpu, gy.t), y.as_f32(), tol);
}

const std::pair<int64_t, int64_t> kMatmulShapes[] = {{1, 1}, {17, 97}, {97, 17}, {130, 33}, {256, 384}, {1024, 256}};

// Default thresholds: n <= gemv_max_n on the GEMV (f32 activations: 1e-4 for every weight
// type), up to skinny_max_n the tensor-core kernel for 16-bit weights and `in` % 8 == 0,
// otherwise cuBLAS (f32 weights: pedantic f32, 1e-4; 16-bit weights: x rounded to 16 bits,
// bound 1e-2, expected ~2e-3).
std::string default_path(int64_t n, int64_t in, DType wt) {
  return to_string(plan_device_matmul(DispatchTable{}, n, in, wt, false).matmul);
}

TEST_F(CudaOps, MatmulDefaultPaths) {
  for (DType wt : kFloatTypes)
    for (auto [in, out] : kMatmulShapes)
      for (int64_t n : {1, 3, 13, 17, 33, 97})
        for (bool bias : {false, true}) {
          const bool gemv = n <= DispatchTable{}.gemv_max_n;
          const double tol = (gemv || wt == DType::kF32) ? 1e-4 : 1e-2;
          check_matmul(gpu_.get(), ref_, rng_, default_path(n, in, wt), n, in, out, wt, bias, false, tol);
        }
  // Long reductions (decode shapes scaled down), both paths.
  for (DType wt : kFloatTypes)
    for (auto [in, out] : {std::pair<int64_t, int64_t>{4096, 1000}, {11008, 64}})
      for (int64_t n : {1, 5, 8, 40}) {
        const bool gemv = n <= DispatchTable{}.gemv_max_n;
        check_matmul(gpu_.get(), ref_, rng_, default_path(n, in, wt), n, in, out, wt, true, false,
                     (gemv || wt == DType::kF32) ? 1e-4 : 1e-2);
      }
}

// Every token bucket of the GEMV kernel (1, 2, 4, 8, 16), vector and element-wise paths.
TEST_F(CudaOps, MatmulGemvAllTokenCounts) {
  CudaBackendOptions o;
  o.dispatch.gemv_max_n = 16;
  auto gemv = variant_backend(o);
  ASSERT_NE(gemv, nullptr);
  for (DType wt : kFloatTypes)
    for (auto [in, out] : {std::pair<int64_t, int64_t>{17, 97}, {256, 130}, {1024, 33}, {2056, 40}})
      for (int64_t n : {1, 2, 3, 4, 5, 8, 9, 12, 16})
        for (bool misalign : {false, true})
          check_matmul(gemv.get(), ref_, rng_, "gemv16", n, in, out, wt, n % 2 == 1, misalign, 1e-4);
}

// cuBLAS at every n (also tiny ones), plain and with split activations (~f32 accuracy).
TEST_F(CudaOps, MatmulCublasPaths) {
  CudaBackendOptions o;
  o.dispatch.gemv_max_n = 0;
  o.dispatch.skinny_max_n = 0;
  auto cublas = variant_backend(o);
  o.gemm_split_activations = true;
  auto split = variant_backend(o);
  ASSERT_NE(cublas, nullptr);
  ASSERT_NE(split, nullptr);
  for (DType wt : kFloatTypes)
    for (auto [in, out] : kMatmulShapes)
      for (int64_t n : {1, 3, 17, 97}) {
        check_matmul(cublas.get(), ref_, rng_, "cublas", n, in, out, wt, n == 3, false, wt == DType::kF32 ? 1e-4 : 1e-2);
        check_matmul(split.get(), ref_, rng_, "cublas-split", n, in, out, wt, n == 3, false, 1e-4);
      }
}

}  // namespace
}  // namespace quiver::test
