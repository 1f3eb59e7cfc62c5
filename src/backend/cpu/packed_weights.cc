#include "backend/cpu/packed_weights.h"

#include "core/check.h"

namespace quiver::cpu {
namespace {

// Offset of element e (0..31) of group p within its block: bf16 groups in order; int8
// groups two by two, group p's elements 8L..8L+7 at bytes 16L..16L+7 of the pair's 64
// bytes and group p + 1's at 16L+8..16L+15 (L = 0..3), a last odd group in order.
int64_t group_offset(const uint16_t*, int64_t p, int64_t, int e) { return p * 2 * kPackRows + e; }
int64_t group_offset(const int8_t*, int64_t p, int64_t pairs, int e) {
  if ((p | 1) >= pairs) return p * 2 * kPackRows + e;  // the last, odd group
  return (p & ~int64_t{1}) * 2 * kPackRows + 16 * (e / 8) + 8 * (p & 1) + e % 8;
}

uint16_t stored(uint16_t v) { return v; }
// Sign and magnitude: |q| <= 127 (int8_weights.h) indexes the kernel's tables.
int8_t stored(int8_t q) {
  check(q != -128, "pack_block16: an int8 weight of -128 (the symmetric scheme stores -127..127)");
  const int m = q < 0 ? -q : q;
  return static_cast<int8_t>(static_cast<uint8_t>((q < 0 ? 0x80 : 0) | m));
}

template <class E>
void pack(E* dst, const E* src, int64_t k, int64_t block_begin, int64_t block_end) {
  const int64_t pairs = k / 2;
  for (int64_t b = block_begin; b < block_end; ++b) {
    E* out = dst + b * kPackRows * k;
    for (int64_t r = 0; r < kPackRows; ++r) {
      const E* row = src + (b * kPackRows + r) * k;
      for (int64_t p = 0; p < pairs; ++p)
        for (int j = 0; j < 2; ++j)
          out[group_offset(out, p, pairs, static_cast<int>(2 * r + j))] = stored(row[2 * p + j]);
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
