// link: qv_backend
// Paged attention vs contiguous attention: K/V written through shuffled block tables with
// block sizes 1, 4 and 16, read back by the ref and cpu backends' paged attention, must
// equal plain causal attention over contiguous per-sequence arrays (computed here).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "backend/ref/ref_backend.h"

namespace quiver {
namespace {

struct Case {
  int block_size;
  std::vector<int> seq_lens;  // context length after this step
  std::vector<int> q_lens;    // tokens computed this step (the last q_len positions)
  int heads, kv_heads, head_dim;
};

void run_case(const Case& c, HostBackend& be, uint64_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int num_seqs = static_cast<int>(c.seq_lens.size()), hd = c.head_dim;
  int max_blocks = 0, total_blocks = 0;
  for (int len : c.seq_lens) {
    max_blocks = std::max(max_blocks, (len + c.block_size - 1) / c.block_size);
    total_blocks += (len + c.block_size - 1) / c.block_size;
  }
  // Physical blocks handed out in a shuffled order.
  std::vector<int> phys(total_blocks + 3);
  std::iota(phys.begin(), phys.end(), 0);
  std::shuffle(phys.begin(), phys.end(), rng);
  std::vector<int32_t> tables(num_seqs * max_blocks, 0);
  size_t next = 0;
  for (int s = 0; s < num_seqs; ++s)
    for (int b = 0; b < (c.seq_lens[s] + c.block_size - 1) / c.block_size; ++b) tables[s * max_blocks + b] = phys[next++];

  // Contiguous K/V per sequence, written into the paged cache position by position.
  const int num_blocks = total_blocks + 3;
  std::vector<float> kc(static_cast<size_t>(num_blocks) * c.block_size * c.kv_heads * hd, 0.f), vc(kc.size(), 0.f);
  std::vector<std::vector<float>> K(num_seqs), V(num_seqs);
  for (int s = 0; s < num_seqs; ++s) {
    const int len = c.seq_lens[s];
    K[s].resize(static_cast<size_t>(len) * c.kv_heads * hd);
    V[s].resize(K[s].size());
    for (auto& x : K[s]) x = nd(rng);
    for (auto& x : V[s]) x = nd(rng);
    std::vector<int32_t> slots(len);
    for (int p = 0; p < len; ++p) slots[p] = tables[s * max_blocks + p / c.block_size] * c.block_size + p % c.block_size;
    Tensor kct(kc.data(), DType::kF32, {num_blocks, c.block_size, c.kv_heads, hd});
    Tensor vct(vc.data(), DType::kF32, {num_blocks, c.block_size, c.kv_heads, hd});
    be.kv_write(KvLayer{kct, vct}, Tensor(K[s].data(), DType::kF32, {len, c.kv_heads, hd}),
                Tensor(V[s].data(), DType::kF32, {len, c.kv_heads, hd}), Tensor(slots.data(), DType::kI32, {len}));
  }
  std::vector<int32_t> qs{0};
  for (int ql : c.q_lens) qs.push_back(qs.back() + ql);
  const int n = qs.back();
  std::vector<float> q(static_cast<size_t>(n) * c.heads * hd), out(q.size(), NAN);
  for (auto& x : q) x = nd(rng);
  std::vector<int32_t> lens(c.seq_lens.begin(), c.seq_lens.end());
  AttentionMeta meta;
  meta.query_start = Tensor(qs.data(), DType::kI32, {num_seqs + 1});
  meta.seq_lens = Tensor(lens.data(), DType::kI32, {num_seqs});
  meta.block_tables = Tensor(tables.data(), DType::kI32, {num_seqs, max_blocks});
  meta.num_seqs = num_seqs;
  meta.max_query_len = *std::max_element(c.q_lens.begin(), c.q_lens.end());
  meta.max_seq_len = *std::max_element(c.seq_lens.begin(), c.seq_lens.end());
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  be.attention(Tensor(out.data(), DType::kF32, {n, c.heads, hd}), Tensor(q.data(), DType::kF32, {n, c.heads, hd}),
               KvLayer{Tensor(kc.data(), DType::kF32, {num_blocks, c.block_size, c.kv_heads, hd}),
                       Tensor(vc.data(), DType::kF32, {num_blocks, c.block_size, c.kv_heads, hd})},
               meta, scale);

  // Contiguous causal attention.
  const int group = c.heads / c.kv_heads;
  for (int s = 0; s < num_seqs; ++s) {
    for (int j = 0; j < c.q_lens[s]; ++j) {
      const int row = qs[s] + j, pos = c.seq_lens[s] - c.q_lens[s] + j;
      for (int h = 0; h < c.heads; ++h) {
        const int kvh = h / group;
        std::vector<double> w(pos + 1);
        double mx = -1e300, sum = 0;
        for (int t = 0; t <= pos; ++t) {
          double d = 0;
          for (int e = 0; e < hd; ++e) d += q[(row * c.heads + h) * hd + e] * K[s][(t * c.kv_heads + kvh) * hd + e];
          w[t] = d * scale;
          mx = std::max(mx, w[t]);
        }
        for (auto& x : w) sum += (x = std::exp(x - mx));
        for (int e = 0; e < hd; ++e) {
          double acc = 0;
          for (int t = 0; t <= pos; ++t) acc += w[t] * V[s][(t * c.kv_heads + kvh) * hd + e];
          const float got = out[(row * c.heads + h) * hd + e];
          ASSERT_NEAR(got, acc / sum, 2e-5) << be.name() << " block " << c.block_size << " seq " << s << " row " << j;
        }
      }
    }
  }
}

TEST(PagedAttention, EqualsContiguousAttention) {
  RefBackend ref;
  CpuBackend cpu(2);
  for (int bs : {1, 4, 16}) {
    // Decodes, a whole prompt, and a prefill chunk that starts mid-sequence, mixed.
    Case c{bs, {1, 37, 17, 50, 5}, {1, 1, 17, 13, 5}, 8, 2, 32};
    run_case(c, ref, 100 + bs);
    run_case(c, cpu, 100 + bs);
    Case mha{bs, {64, 3}, {1, 3}, 4, 4, 64};
    run_case(mha, ref, 200 + bs);
    run_case(mha, cpu, 200 + bs);
  }
}

}  // namespace
}  // namespace quiver
