#include "kv/kv_cache.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

namespace quiver {

KvCache::KvCache(Backend* backend, const KvCacheShape& shape, int num_blocks) : shape_(shape), num_blocks_(num_blocks) {
  for (int64_t l = 0; l < shape.num_layers; ++l) {
    KvLayer& layer = layers_.emplace_back();
    for (int which = 0; which < 2; ++which) {
      Buffer b = Buffer::zeroed(backend, static_cast<size_t>(shape.bytes_per_block() / (2 * shape.num_layers)) * num_blocks);
      Tensor t = b.tensor(shape.dtype, {num_blocks, shape.block_size, shape.num_kv_heads, shape.head_dim});
      (which == 0 ? layer.k : layer.v) = t;
      buffers_.push_back(std::move(b));
    }
  }
}

void KvCache::set_scales(int l, float k_scale, float v_scale) {
  check(l >= 0 && l < static_cast<int>(layers_.size()), "KvCache::set_scales: no such layer");
  check(std::isfinite(k_scale) && std::isfinite(v_scale) && k_scale > 0 && v_scale > 0,
        "KvCache::set_scales: scales must be positive and finite");
  layers_[static_cast<size_t>(l)].k_scale = k_scale;
  layers_[static_cast<size_t>(l)].v_scale = v_scale;
}

Result<int64_t> parse_byte_size(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) return Status::error("invalid byte size '" + text + "' (examples: 4GiB, 512MiB, 2GB, 1000000)");
  double value = std::strtod(text.substr(0, i).c_str(), nullptr);
  std::string unit = text.substr(i);
  for (auto& ch : unit) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  double mult;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "k" || unit == "kb") mult = 1e3;
  else if (unit == "kib") mult = 1024.0;
  else if (unit == "m" || unit == "mb") mult = 1e6;
  else if (unit == "mib") mult = 1024.0 * 1024;
  else if (unit == "g" || unit == "gb") mult = 1e9;
  else if (unit == "gib") mult = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tb") mult = 1e12;
  else if (unit == "tib") mult = 1024.0 * 1024 * 1024 * 1024;
  else return Status::error("invalid byte size unit in '" + text + "' (use B, KB, KiB, MB, MiB, GB, GiB, TB, TiB)");
  double bytes = value * mult;
  if (!(bytes > 0) || bytes > 9e18) return Status::error("byte size out of range: '" + text + "'");
  return static_cast<int64_t>(std::llround(bytes));
}

}  // namespace quiver
