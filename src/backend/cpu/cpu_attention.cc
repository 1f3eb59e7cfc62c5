// CpuBackend paged attention: cuts the batch into work items and schedules them over
// threads; the per-item kernel (online softmax over KV chunks) is attention_kernels.h.
//
// A work item is (sequence, up to 16 query rows, kv head, the query heads sharing it),
// so each K/V row is converted once per item and reused by the whole GQA group. When
// there are too few items to keep every thread busy (decode of a few sequences over
// long contexts), items are also split along the KV axis (flash-decoding): each part
// writes an unnormalised partial output with its running max and sum, and a merge pass
// combines them.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"

namespace quiver {

namespace {

struct AttnItem {
  int seq;
  int64_t row0;  // first query row (index into q/out)
  int rows;
  int kv_head;
  int head0;     // first query head within the group
  int heads;
  int64_t first_pos;
  int64_t kv_begin, kv_end;
  int64_t partial = -1;  // float offset of this part's partial output in scratch, or -1
  int64_t cost = 0;
};

struct AttnMerge {
  size_t first_item;  // parts are items [first_item, first_item + parts)
  int parts;
};

// KV positions below which a split is not worth its merge.
constexpr int64_t kMinSplitKv = 256;

}  // namespace

void CpuBackend::attention(Tensor out, Tensor q, const KvLayer& cache, const AttentionMeta& meta, float scale) {
  const Tensor k_cache = cache.k, v_cache = cache.v;
  const bool fp8 = k_cache.dtype == DType::kF8E4M3;
  const int64_t n = q.dim(0), num_heads = q.dim(1), hd = q.dim(2);
  const int64_t block_size = k_cache.dim(1), num_kv = k_cache.dim(2);
  check(q.dtype == DType::kF32 && out.dtype == DType::kF32 && q.ndim == 3 && out.numel() == q.numel(),
        "attention: q and out must be [n, heads, head_dim] f32");
  check(k_cache.ndim == 4 && k_cache.dtype == v_cache.dtype && k_cache.numel() == v_cache.numel() &&
            k_cache.dim(3) == hd && num_heads % num_kv == 0,
        "attention: cache shape mismatch");
  check(hd <= cpu::kAttnMaxHeadDim, "attention: head_dim above the cpu backend's limit");
  const int64_t group = num_heads / num_kv;
  const int64_t hdp = (hd + 15) / 16 * 16;
  const int heads_per_item = static_cast<int>(std::min<int64_t>(group, std::max<int64_t>(1, cpu::kAttnMaxQueryFloats / hdp)));
  const int max_rows = static_cast<int>(std::clamp<int64_t>(cpu::kAttnMaxQueryFloats / (heads_per_item * hdp), 1, 16));
  const int64_t max_blocks = meta.block_tables.ndim == 2 ? meta.block_tables.dim(1) : 0;
  const int32_t* qs = meta.query_start.ptr<int32_t>();
  const int32_t* lens = meta.seq_lens.ptr<int32_t>();
  const int32_t* tables = meta.block_tables.ptr<int32_t>();
  check(meta.num_seqs == 0 || qs[meta.num_seqs] <= n, "attention: query_start beyond q");

  std::vector<AttnItem> base;
  for (int s = 0; s < meta.num_seqs; ++s) {
    const int64_t q_len = qs[s + 1] - qs[s], len = lens[s];
    check(q_len >= 0 && len >= q_len, "attention: seq_len shorter than its query chunk");
    check((len + block_size - 1) / block_size <= max_blocks, "attention: sequence longer than its block table");
    for (int64_t j0 = 0; j0 < q_len; j0 += max_rows) {
      const int rows = static_cast<int>(std::min<int64_t>(max_rows, q_len - j0));
      const int64_t first_pos = len - q_len + j0;
      for (int kvh = 0; kvh < num_kv; ++kvh) {
        for (int h0 = 0; h0 < group; h0 += heads_per_item) {
          const int hh = static_cast<int>(std::min<int64_t>(heads_per_item, group - h0));
          base.push_back({s, qs[s] + j0, rows, kvh, h0, hh, first_pos, 0, first_pos + rows});
        }
      }
    }
  }
  if (base.empty()) return;

  // Split along KV when the items alone cannot keep the threads busy.
  const int threads = pool_->num_threads();
  const int64_t want_parts =
      threads > 1 && base.size() < static_cast<size_t>(4 * threads) ? (4 * threads + base.size() - 1) / base.size() : 1;
  std::vector<AttnItem> items;
  std::vector<AttnMerge> merges;
  int64_t scratch_floats = 0;
  for (const AttnItem& b : base) {
    const int64_t kv_len = b.kv_end;
    const int64_t parts = std::min(want_parts, kv_len / kMinSplitKv);
    if (parts <= 1) {
      items.push_back(b);
      continue;
    }
    const int64_t step = ((kv_len + parts - 1) / parts + 15) / 16 * 16;
    merges.push_back({items.size(), 0});
    for (int64_t kb = 0; kb < kv_len; kb += step) {
      AttnItem p = b;
      p.kv_begin = kb;
      p.kv_end = std::min(kv_len, kb + step);
      p.partial = scratch_floats;
      scratch_floats += static_cast<int64_t>(p.rows) * p.heads * (hd + 2);
      items.push_back(p);
      ++merges.back().parts;
    }
  }
  if (attn_scratch_.size() < static_cast<size_t>(scratch_floats)) attn_scratch_.resize(static_cast<size_t>(scratch_floats));

  int64_t total_cost = 0;
  std::vector<int> order(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    AttnItem& it = items[i];
    it.cost = static_cast<int64_t>(it.rows) * it.heads * (it.kv_end - it.kv_begin) * hd;
    total_cost += it.cost;
    order[i] = static_cast<int>(i);
  }
  // Longest first, handed out dynamically: causal prefill items differ a lot in size.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return items[a].cost > items[b].cost; });

  const auto kernel = fp8 ? k_->attention_f8 : k_->attention[cpu_elem_type(k_cache.dtype)];
  const int64_t q_row_stride = num_heads * hd;
  auto run_item = [&](const AttnItem& it) {
    const int64_t head_offset = (it.row0 * num_heads + it.kv_head * group + it.head0) * hd;
    cpu::AttentionWork w{};
    w.q = q.ptr<float>() + head_offset;
    w.q_row_stride = q_row_stride;
    if (it.partial < 0) {
      w.out = out.ptr<float>() + head_offset;
      w.out_row_stride = q_row_stride;
    } else {
      w.out = attn_scratch_.data() + it.partial;
      w.out_row_stride = it.heads * hd;
      w.m = w.out + static_cast<int64_t>(it.rows) * it.heads * hd;
      w.l = w.m + static_cast<int64_t>(it.rows) * it.heads;
    }
    w.num_rows = it.rows;
    w.group = it.heads;
    w.head_dim = static_cast<int>(hd);
    w.first_pos = it.first_pos;
    w.kv_begin = it.kv_begin;
    w.kv_end = it.kv_end;
    w.k_cache = k_cache.data;
    w.v_cache = v_cache.data;
    w.block_table = tables + it.seq * max_blocks;
    w.block_size = static_cast<int>(block_size);
    w.kv_token_stride = num_kv * hd;
    w.kv_head_offset = it.kv_head * hd;
    w.scale = fp8 ? scale * cache.k_scale : scale;
    w.v_scale = fp8 ? cache.v_scale : 1.f;
    kernel(w);
  };
  if (threads == 1 || total_cost < 32 * 1024) {
    for (int i : order) run_item(items[i]);
  } else {
    run_units(static_cast<int64_t>(order.size()), [&](int64_t i) { run_item(items[order[i]]); });
  }

  // Merge split parts: o = sum_p e^(m_p - M) o_p / sum_p e^(m_p - M) l_p.
  parallel(static_cast<int64_t>(merges.size()), 4096, 1, [&](int64_t b, int64_t e, int) {
    std::vector<float> acc(static_cast<size_t>(hd));
    for (int64_t mi = b; mi < e; ++mi) {
      const AttnMerge& mg = merges[static_cast<size_t>(mi)];
      const AttnItem& it0 = items[mg.first_item];
      const int nq = it0.rows * it0.heads;
      for (int qi = 0; qi < nq; ++qi) {
        float mx = -INFINITY;
        for (int p = 0; p < mg.parts; ++p) {
          const float* base_p = attn_scratch_.data() + items[mg.first_item + p].partial;
          mx = std::max(mx, base_p[static_cast<int64_t>(nq) * hd + qi]);
        }
        std::fill(acc.begin(), acc.end(), 0.f);
        float sum = 0;
        for (int p = 0; p < mg.parts; ++p) {
          const float* base_p = attn_scratch_.data() + items[mg.first_item + p].partial;
          const float mp = base_p[static_cast<int64_t>(nq) * hd + qi];
          if (mp == -INFINITY) continue;  // this part saw no position of this row
          const float f = std::exp(mp - mx);
          sum += f * base_p[static_cast<int64_t>(nq) * (hd + 1) + qi];
          for (int64_t e2 = 0; e2 < hd; ++e2) acc[e2] += f * base_p[qi * hd + e2];
        }
        const int r = qi / it0.heads, g = qi % it0.heads;
        float* o = out.ptr<float>() + ((it0.row0 + r) * num_heads + it0.kv_head * group + it0.head0 + g) * hd;
        const float inv = sum > 0 ? 1.0f / sum : 0.f;
        for (int64_t e2 = 0; e2 < hd; ++e2) o[e2] = acc[e2] * inv;
      }
    }
  });
}

}  // namespace quiver
