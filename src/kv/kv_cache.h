// KvCache: the paged K/V tensors of every layer, allocated once on a backend and zeroed.
//   k[l], v[l]: [num_blocks, block_size, num_kv_heads, head_dim]
// An fp8 cache carries each layer's k/v scales (KvLayer); they are fixed before the first
// write, since every stored value is relative to them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"

namespace quiver {

struct KvCacheShape {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int block_size = 16;
  DType dtype = DType::kF32;

  int64_t bytes_per_block() const {
    return 2 * num_layers * block_size * num_kv_heads * head_dim * static_cast<int64_t>(dtype_size(dtype));
  }
};

class KvCache {
 public:
  KvCache(Backend* backend, const KvCacheShape& shape, int num_blocks);

  int num_blocks() const { return num_blocks_; }
  const KvCacheShape& shape() const { return shape_; }
  const KvLayer& layer(int l) const { return layers_[static_cast<size_t>(l)]; }
  const std::vector<KvLayer>& layers() const { return layers_; }
  // Layer l's fp8 scales (1 until set); positive and finite.
  void set_scales(int l, float k_scale, float v_scale);

 private:
  KvCacheShape shape_;
  int num_blocks_;
  std::vector<Buffer> buffers_;
  std::vector<KvLayer> layers_;
};

// "4GiB", "512MiB", "2GB", "1.5G", "1000000" -> bytes. Errors name the text.
Result<int64_t> parse_byte_size(const std::string& text);

}  // namespace quiver
