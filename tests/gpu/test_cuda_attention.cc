// link: qv_backend
// CUDA paged attention vs the reference: decode steps (split-K over 256-key partitions,
// 1..5 partitions, loose max_seq_len bounds) and mixed prefill/decode steps (variable
// q_len, chunked prefill with cached context), for every kv dtype, block sizes 1/4/16,
// GQA groups 1..16 and head_dim 8..256 (8 and 16 are the HF fixture models' heads: one to
// four 16-byte vectors per K/V row). Tolerance 1e-4 of max |ref| (f32 math against a
// double reference; both read the same cache values), except where the prefill runs on
// tensor cores (16-bit and fp8 caches, head_dim 16..128): q and P rounded to bf16 (bf16 and
// fp8 caches, <= 2^-8 relative) or f16 (2^-11) hold it to 1e-2 or 2e-3, and the same case
// reruns on a backend with --matmul-precision highest, which keeps the f32 kernel, at 1e-4.
// Skips without a GPU.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "gpu/cuda_test_util.h"

namespace quiver::test {
namespace {

struct SeqSpec {
  int q_len;
  int seq_len;
};

struct AttnCase {
  DType kv_type;
  int64_t block_size, num_heads, num_kv, head_dim;
  std::vector<SeqSpec> seqs;
  int query_bound_extra = 0;  // meta.max_query_len = max q_len + this
  int seq_bound_extra = 0;    // meta.max_seq_len = max seq_len + this
  float k_scale = 1.f, v_scale = 1.f;  // fp8 caches
};

class CudaAttention : public CudaTest {
 protected:
  void run(const AttnCase& c, const std::string& label) {
    std::vector<int32_t> query_start{0}, seq_lens;
    int max_q = 0, max_len = 0, max_blocks = 1;
    int64_t total_blocks = 0;
    for (const SeqSpec& s : c.seqs) {
      query_start.push_back(query_start.back() + s.q_len);
      seq_lens.push_back(s.seq_len);
      max_q = std::max(max_q, s.q_len);
      max_len = std::max(max_len, s.seq_len);
      const int blocks = static_cast<int>((s.seq_len + c.block_size - 1) / c.block_size);
      max_blocks = std::max(max_blocks, blocks);
      total_blocks += blocks;
    }
    const int64_t n = query_start.back(), num_seqs = static_cast<int64_t>(c.seqs.size());
    const int64_t num_blocks = total_blocks + 3;  // spare blocks nobody reads
    // Block tables: a random permutation of the physical blocks, padded with 0.
    std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng_);
    std::vector<int32_t> tables(static_cast<size_t>(num_seqs * max_blocks), 0);
    size_t next = 0;
    for (int64_t s = 0; s < num_seqs; ++s) {
      const int64_t blocks = (seq_lens[static_cast<size_t>(s)] + c.block_size - 1) / c.block_size;
      for (int64_t b = 0; b < blocks; ++b) tables[static_cast<size_t>(s * max_blocks + b)] = perm[next++];
    }
    const std::vector<int64_t> cache_shape{num_blocks, c.block_size, c.num_kv, c.head_dim};
    HostTensor kc = random_tensor(rng_, c.kv_type, cache_shape), vc = random_tensor(rng_, c.kv_type, cache_shape);
    HostTensor q = random_tensor(rng_, DType::kF32, {n, c.num_heads, c.head_dim}, 2.f);
    HostTensor out = random_tensor(rng_, DType::kF32, {n, c.num_heads, c.head_dim});
    HostTensor hqs = host_i32({num_seqs + 1}, query_start), hlens = host_i32({num_seqs}, seq_lens);
    HostTensor htables = host_i32({num_seqs, max_blocks}, tables);
    const float scale = 1.f / std::sqrt(static_cast<float>(c.head_dim));

    AttentionMeta hmeta{hqs.view(), hlens.view(), htables.view(), static_cast<int>(num_seqs),
                        max_q + c.query_bound_extra, max_len + c.seq_bound_extra};
    ref_.attention(out.view(), q.view(), KvLayer{kc.view(), vc.view(), c.k_scale, c.v_scale}, hmeta, scale);

    char tag[200];
    std::snprintf(tag, sizeof tag, "attention[%s] %s bs=%lld heads=%lld/%lld hd=%lld n=%lld seqs=%lld", label.c_str(),
                  name_of(c.kv_type), static_cast<long long>(c.block_size), static_cast<long long>(c.num_heads),
                  static_cast<long long>(c.num_kv), static_cast<long long>(c.head_dim), static_cast<long long>(n),
                  static_cast<long long>(num_seqs));
    const auto on = [&](Backend* gpu, const std::string& what, double tol) {
      DeviceTensor gkc = upload(gpu, kc), gvc = upload(gpu, vc), gq = upload(gpu, q);
      DeviceTensor go = upload(gpu, out), gqs = upload(gpu, hqs), glens = upload(gpu, hlens);
      DeviceTensor gtables = upload(gpu, htables);
      AttentionMeta gmeta{gqs.t, glens.t, gtables.t, hmeta.num_seqs, hmeta.max_query_len, hmeta.max_seq_len};
      poison(gpu, go.t);
      gpu->attention(go.t, gq.t, KvLayer{gkc.t, gvc.t, c.k_scale, c.v_scale}, gmeta, scale);
      expect_close(what, download(gpu, go.t), out.as_f32(), tol);
    };
    const bool tensor_cores = max_q > 1 && c.kv_type != DType::kF32 && c.head_dim % 16 == 0 && c.head_dim <= 128;
    if (!tensor_cores) {
      on(gpu_.get(), tag, 1e-4);
      return;
    }
    on(gpu_.get(), tag, c.kv_type == DType::kF16 ? 2e-3 : 1e-2);
    on(precise(), std::string(tag) + " highest", 1e-4);
  }

  // --matmul-precision highest: f32 prefill throughout.
  Backend* precise() {
    if (!precise_) {
      CudaBackendOptions o;
      o.gemm_split_activations = true;
      precise_ = variant_backend(o);
    }
    return precise_.get();
  }
  std::unique_ptr<Backend> precise_;
};

// q_len 1 everywhere: the split-K decode kernel. 256 and 257 straddle a partition edge.
const std::vector<SeqSpec> kDecodeSeqs = {{1, 1}, {1, 17}, {1, 256}, {1, 257}, {1, 600}, {1, 1100}};
// Mixed step: decode sequences, whole prompts and chunks with cached context.
const std::vector<SeqSpec> kMixedSeqs = {{1, 1}, {1, 17}, {13, 13}, {5, 40}, {33, 97}, {64, 300}, {2, 2}};

// Mixed step whose prompts and decode sequences run past one 256-key partition.
const std::vector<SeqSpec> kMixedLongSeqs = {{1, 257}, {100, 520}, {1, 600}, {37, 256}, {3, 3}};

const std::pair<int64_t, int64_t> kGqa[] = {{4, 4}, {4, 2}, {8, 2}, {12, 4}, {7, 1}, {16, 2}, {32, 2}};
// GQA groups 1, 2, 4, 8 at the fixtures' head counts (llama_gqa 8/2, qwen2 4/2, mistral 4/1).
const std::pair<int64_t, int64_t> kSmallGqa[] = {{2, 2}, {4, 2}, {8, 2}, {8, 1}};

TEST_F(CudaAttention, DecodeDtypesAndBlockSizes) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16})
    for (int64_t bs : {1, 4, 16}) run({t, bs, 8, 2, 64, kDecodeSeqs}, "decode");
}

// fp8 e4m3 caches with per-layer scales, decode and mixed steps, every head size it takes.
TEST_F(CudaAttention, Fp8CacheDecodeAndMixed) {
  for (int64_t hd : {16, 32, 64, 80, 128, 256}) {
    run({DType::kF8E4M3, 16, 8, 2, hd, kDecodeSeqs, 0, 0, 0.5f, 2.f}, "decode fp8");
    run({DType::kF8E4M3, 4, 4, 2, hd, kMixedSeqs, 0, 0, 1.5f, 0.25f}, "mixed fp8");
  }
  run({DType::kF8E4M3, 16, 32, 32, 128, {{1, 3001}}, 0, 4096, 1.f, 1.f}, "decode fp8 long");
  for (auto [h, kv] : kGqa) run({DType::kF8E4M3, 16, h, kv, 128, kMixedLongSeqs, 0, 0, 0.3f, 0.7f}, "mixed fp8 gqa");
}

// Every e4m3 code, NaNs included, read exactly by each kernel that reads an fp8 cache: a
// query that sees one key puts out that key's V row times v_scale (a power of two) exactly,
// NaN where the code is NaN. Sequences 0-15 are one decode query over one key;
// 16-31 prompts of 2, whose first query sees its first key only (the prefill kernels: tensor
// cores on the default backend, f32 on the precise one). V row s % 16 holds codes 16 (s % 16)
// up to 16 (s % 16) + 15; K is zeros.
TEST_F(CudaAttention, Fp8CacheReadsEveryCodeExactly) {
  constexpr int64_t kHd = 16, kSeqs = 32;
  constexpr float kVScale = 2.f;
  std::vector<int32_t> query_start{0}, seq_lens, tables;
  for (int s = 0; s < kSeqs; ++s) {
    const int len = s < 16 ? 1 : 2;
    query_start.push_back(query_start.back() + len);
    seq_lens.push_back(len);
    tables.push_back(s);
  }
  const int64_t n = query_start.back();
  HostTensor kc = host_f32({kSeqs, 2, 1, kHd}, {}, DType::kF8E4M3), vc = kc;  // zeros
  for (int64_t s = 0; s < kSeqs; ++s)
    for (int64_t e = 0; e < kHd; ++e)
      vc.bytes[static_cast<size_t>(s * 2 * kHd + e)] = static_cast<uint8_t>((s % 16) * kHd + e);
  HostTensor q = random_tensor(rng_, DType::kF32, {n, 1, kHd});
  HostTensor hqs = host_i32({kSeqs + 1}, query_start), hlens = host_i32({kSeqs}, seq_lens);
  HostTensor htables = host_i32({kSeqs, 1}, tables);
  for (Backend* gpu : {gpu_.get(), precise()}) {
    DeviceTensor gkc = upload(gpu, kc), gvc = upload(gpu, vc), gq = upload(gpu, q);
    DeviceTensor go = upload(gpu, q), gqs = upload(gpu, hqs), glens = upload(gpu, hlens);
    DeviceTensor gtables = upload(gpu, htables);
    AttentionMeta meta{gqs.t, glens.t, gtables.t, static_cast<int>(kSeqs), 2, 2};
    gpu->attention(go.t, gq.t, KvLayer{gkc.t, gvc.t, 1.f, kVScale}, meta, 0.25f);
    const std::vector<float> got = download(gpu, go.t);
    int wrong = 0;
    for (int64_t s = 0; s < kSeqs; ++s) {
      const int64_t row = query_start[static_cast<size_t>(s)];  // the query that sees key 0 only
      for (int64_t e = 0; e < kHd; ++e) {
        const float want = vc.get(s * 2 * kHd + e) * kVScale, have = got[static_cast<size_t>(row * kHd + e)];
        const bool same = std::isnan(want) ? std::isnan(have) : have == want;  // -0 sums to +0
        if (!same && ++wrong <= 5)
          ADD_FAILURE() << "code " << (s % 16) * kHd + e << (s < 16 ? " decode" : " prefill") << ": " << have
                        << " for " << want;
      }
    }
    EXPECT_EQ(wrong, 0);
  }
}

TEST_F(CudaAttention, DecodeHeadDims) {
  for (int64_t hd : {32, 64, 80, 96, 128, 256}) run({DType::kBF16, 16, 4, 2, hd, kDecodeSeqs}, "decode");
  for (int64_t hd : {32, 80, 256}) run({DType::kF32, 4, 4, 4, hd, kDecodeSeqs}, "decode");
}

TEST_F(CudaAttention, DecodeGqaGroups) {
  for (auto [h, kv] : kGqa) run({DType::kF16, 16, h, kv, 128, kDecodeSeqs}, "decode");
}

// The large-batch decode kernels with 2-8 heads a block (no loads before the PDL wait):
// enough sequences that each (sequence, KV head) gets fewer than 8 partitions on a 132-SM
// card, at Mistral's and Llama-3's 32 / 8 heads, Qwen2-7B's 28 / 4 and a group of 2, every
// cache type; contexts up to 281 keys keep the CPU reference short.
TEST_F(CudaAttention, DecodeManyGqa) {
  std::vector<SeqSpec> many;
  for (int i = 0; i < 41; ++i) many.push_back({1, 1 + 7 * i});
  const std::pair<int64_t, int64_t> groups[] = {{32, 8}, {28, 4}, {32, 16}};
  for (auto [h, kv] : groups) {
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) run({t, 16, h, kv, 128, many}, "decode many gqa");
    run({DType::kF8E4M3, 16, h, kv, 128, many, 0, 0, 0.5f, 2.f}, "decode many gqa fp8");
  }
}

TEST_F(CudaAttention, DecodeLooseBoundsAndBatchOne) {
  // Bounds far above the actual lengths: the extra partitions must exit cleanly.
  run({DType::kBF16, 16, 8, 2, 128, kDecodeSeqs, 0, 3000}, "decode loose");
  run({DType::kBF16, 16, 32, 32, 128, {{1, 2000}}}, "decode batch1");
  run({DType::kF32, 1, 4, 1, 64, {{1, 1}}, 0, 7}, "decode single");
  // Past 8 partitions of 256 keys, and every partition length (32 .. 256) in one batch.
  run({DType::kBF16, 16, 32, 32, 128, {{1, 3001}}, 0, 4096}, "decode long");
  run({DType::kBF16, 16, 8, 8, 128, {{1, 31}, {1, 33}, {1, 300}, {1, 520}, {1, 1030}, {1, 2049}}}, "decode parts");
  // Enough sequences and heads for one partition per 256 keys (the large-batch target).
  std::vector<SeqSpec> many;
  for (int i = 0; i < 48; ++i) many.push_back({1, 1 + 61 * i});
  run({DType::kBF16, 16, 32, 32, 128, many}, "decode many");
}

// Small heads: NV = 1 (16-bit kv, hd 8) up to 4 (f32, hd 16) vectors per row, so the decode
// kernel keeps 32..128 keys in flight in its P V phase.
TEST_F(CudaAttention, DecodeSmallHeads) {
  for (int64_t hd : {8, 16})
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16})
      for (auto [h, kv] : kSmallGqa)
        for (int64_t bs : {1, 16}) run({t, bs, h, kv, hd, kDecodeSeqs}, "decode small");
}

TEST_F(CudaAttention, DecodeSmallHeadsOddGroupsAndLooseBounds) {
  for (int64_t hd : {8, 16}) {
    run({DType::kBF16, 16, 7, 1, hd, kDecodeSeqs}, "decode small group 7");
    run({DType::kF32, 16, 12, 4, hd, kDecodeSeqs}, "decode small group 3");
    run({DType::kF16, 16, 8, 2, hd, kDecodeSeqs, 0, 3000}, "decode small loose");
    run({DType::kBF16, 1, 4, 1, hd, {{1, 1}}, 0, 7}, "decode small single");
  }
}

TEST_F(CudaAttention, PrefillDtypesAndBlockSizes) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16})
    for (int64_t bs : {1, 4, 16}) run({t, bs, 8, 2, 64, kMixedSeqs}, "mixed");
}

TEST_F(CudaAttention, PrefillHeadDims) {
  for (int64_t hd : {32, 64, 80, 96, 128, 256}) run({DType::kBF16, 16, 4, 2, hd, kMixedSeqs}, "mixed");
  for (int64_t hd : {32, 80, 256}) run({DType::kF32, 4, 4, 4, hd, kMixedSeqs}, "mixed");
}

TEST_F(CudaAttention, PrefillGqaGroups) {
  for (auto [h, kv] : kGqa) run({DType::kF16, 16, h, kv, 128, kMixedSeqs}, "mixed");
}

TEST_F(CudaAttention, PrefillSmallHeads) {
  for (int64_t hd : {8, 16})
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16})
      for (auto [h, kv] : kSmallGqa)
        for (int64_t bs : {1, 16}) {
          run({t, bs, h, kv, hd, kMixedSeqs}, "mixed small");
          run({t, bs, h, kv, hd, kMixedLongSeqs}, "mixed small long");
        }
}

TEST_F(CudaAttention, PrefillSmallHeadsLooseBoundsAndSingles) {
  for (int64_t hd : {8, 16}) {
    run({DType::kBF16, 16, 7, 1, hd, kMixedSeqs, 70, 500}, "mixed small loose");
    run({DType::kF32, 16, 4, 2, hd, {{97, 97}}}, "prefill small one prompt");
    run({DType::kF16, 1, 8, 2, hd, {{2, 2}}}, "prefill small two tokens");
    run({DType::kBF16, 16, 4, 1, hd, {{31, 1000}, {33, 33}}}, "small chunk after long context");
  }
}

// The tensor-core prefill's edges: prompts ending on either side of its 64-key tiles and
// 64-query blocks, chunks starting mid-tile after cached context, every cache type it takes.
TEST_F(CudaAttention, PrefillTileEdges) {
  const std::vector<SeqSpec> edges = {{2, 2}, {63, 63}, {64, 64}, {65, 65}, {128, 128}, {129, 129},
                                      {200, 329}, {64, 127}, {70, 134}, {1, 90}};
  for (DType t : {DType::kBF16, DType::kF16, DType::kF8E4M3})
    for (int64_t hd : {64, 128}) run({t, 16, 8, 2, hd, edges, 0, 0, 0.5f, 2.f}, "prefill edges");
  run({DType::kBF16, 1, 4, 4, 128, edges}, "prefill edges bs1");
  run({DType::kBF16, 16, 32, 32, 128, {{700, 700}}}, "prefill long");
}

TEST_F(CudaAttention, PrefillLooseBoundsAndSingles) {
  run({DType::kBF16, 16, 8, 2, 128, kMixedSeqs, 70, 500}, "mixed loose");
  run({DType::kF32, 16, 4, 2, 64, {{97, 97}}}, "prefill one prompt");
  run({DType::kF32, 4, 4, 2, 64, {{2, 2}}}, "prefill two tokens");
  run({DType::kBF16, 16, 4, 2, 128, {{31, 1000}, {33, 33}}}, "chunk after long context");
}

}  // namespace
}  // namespace quiver::test
