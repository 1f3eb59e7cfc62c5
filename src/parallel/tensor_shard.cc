#include "parallel/tensor_shard.h"

#include <algorithm>
#include <string>

namespace quiver {

namespace {

bool row_parallel(LoraTarget t) { return t == LoraTarget::kO || t == LoraTarget::kDown; }

// The rows of `t`'s output (column-parallel) or columns of its input (row-parallel) that
// the rank holds.
Span target_span(const ModelShard& s, LoraTarget t) {
  switch (t) {
    case LoraTarget::kQ:
    case LoraTarget::kO: return s.q;
    case LoraTarget::kK:
    case LoraTarget::kV: return s.kv;
    case LoraTarget::kGate:
    case LoraTarget::kUp:
    case LoraTarget::kDown: return s.inter;
  }
  return {};
}

}  // namespace

Status check_tensor_parallel(const ModelConfig& c, int world) {
  if (world < 1) return Status::error("--tensor-parallel-size must be at least 1, got " + std::to_string(world));
  if (world == 1) return Status::ok();
  const std::string tp = "--tensor-parallel-size " + std::to_string(world);
  if (c.num_heads % world != 0)
    return Status::error(tp + " does not divide the model's " + std::to_string(c.num_heads) + " attention heads");
  if (c.intermediate_size % world != 0)
    return Status::error(tp + " does not divide the model's intermediate_size " + std::to_string(c.intermediate_size));
  if (c.num_kv_heads % world != 0 && world % c.num_kv_heads != 0)
    return Status::error(tp + " and the model's " + std::to_string(c.num_kv_heads) +
                         " KV heads: one must divide the other (KV heads are split, or each replicated on world / "
                         "num_kv_heads ranks)");
  return Status::ok();
}

ModelShard model_shard(const ModelConfig& c, ShardSpec shard) {
  const int64_t r = shard.rank, w = shard.world;
  ModelShard s;
  s.spec = shard;
  const int64_t heads = c.num_heads / w;
  s.q = {r * heads * c.head_dim, heads * c.head_dim};
  if (c.num_kv_heads >= w) {
    const int64_t kv = c.num_kv_heads / w;
    s.kv = {r * kv * c.head_dim, kv * c.head_dim};
  } else {
    // Query head j reads KV head j / (num_heads / num_kv_heads): the rank's first query
    // head r * heads reads KV head r * num_kv_heads / world, and so do the others.
    s.kv = {r * c.num_kv_heads / w * c.head_dim, c.head_dim};
  }
  const int64_t f = c.intermediate_size / w;
  s.inter = {r * f, f};
  s.vocab_rows = (c.vocab_size + w - 1) / w;
  const int64_t begin = std::min(c.vocab_size, r * s.vocab_rows);
  s.vocab = {begin, std::min(s.vocab_rows, c.vocab_size - begin)};
  return s;
}

ModelConfig shard_model_config(const ModelConfig& full, ShardSpec shard) {
  ModelConfig c = full;
  const ModelShard s = model_shard(full, shard);
  c.num_heads = s.q.count / full.head_dim;
  c.num_kv_heads = s.kv.count / full.head_dim;
  c.intermediate_size = s.inter.count;
  return c;
}

LoraAdapter shard_lora_adapter(const LoraAdapter& adapter, const ModelConfig& full, ShardSpec shard) {
  if (!shard.sharded()) return adapter;
  const ModelShard s = model_shard(full, shard);
  LoraAdapter out;
  out.name = adapter.name;
  out.path = adapter.path;
  out.max_rank = adapter.max_rank;
  out.vocab = adapter.vocab;
  out.embed_lora = adapter.embed_lora;
  out.lm_head_lora = adapter.lm_head_lora;
  out.layers.resize(adapter.layers.size());
  for (size_t l = 0; l < adapter.layers.size(); ++l) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      const auto& m = adapter.layers[l][static_cast<size_t>(t)];
      if (!m) continue;
      const LoraTarget target = static_cast<LoraTarget>(t);
      const Span span = target_span(s, target);
      const size_t rank = static_cast<size_t>(m->rank);
      LoraModule part;
      part.rank = m->rank;
      if (row_parallel(target)) {
        // A [rank, in]: columns [span.begin, span.begin + span.count) of every row.
        const size_t in = static_cast<size_t>(lora_target_in(full, target));
        part.a.reserve(rank * static_cast<size_t>(span.count));
        for (size_t i = 0; i < rank; ++i) {
          const auto row = m->a.begin() + static_cast<ptrdiff_t>(i * in + static_cast<size_t>(span.begin));
          part.a.insert(part.a.end(), row, row + span.count);
        }
        part.b = m->b;
      } else {
        // B [out, rank]: rows [span.begin, span.begin + span.count).
        part.a = m->a;
        const auto first = m->b.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(span.begin) * rank);
        part.b.assign(first, first + static_cast<ptrdiff_t>(static_cast<size_t>(span.count) * rank));
      }
      out.layers[l][static_cast<size_t>(t)] = std::move(part);
    }
  }
  return out;
}

}  // namespace quiver
