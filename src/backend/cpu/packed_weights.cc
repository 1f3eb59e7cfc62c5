#include "backend/cpu/packed_weights.h"

namespace quiver::cpu {
namespace {

template <class E>
void pack(E* dst, const E* src, int64_t k, int64_t block_begin, int64_t block_end) {
  const int64_t pairs = k / 2;
  for (int64_t b = block_begin; b < block_end; ++b) {
    E* out = dst + b * kPackRows * k;
    for (int64_t r = 0; r < kPackRows; ++r) {
      const E* row = src + (b * kPackRows + r) * k;
      for (int64_t p = 0; p < pairs; ++p) {
        out[p * 2 * kPackRows + 2 * r] = row[2 * p];
        out[p * 2 * kPackRows + 2 * r + 1] = row[2 * p + 1];
      }
    }
  }
}

}  // namespace

void pack_block16(uint16_t* dst, const uint16_t* src, int64_t k, int64_t block_begin, int64_t block_end) {
  pack(dst, src, k, block_begin, block_end);
}

void pack_block16(int8_t* dst, const int8_t* src, int64_t k, int64_t block_begin, int64_t block_end) {
  pack(dst, src, k, block_begin, block_end);
}

}  // namespace quiver::cpu
