// The AVX512-BF16 weight layout (WeightLayout::kBlock16) and the packing into it.
//
// A bf16 or int8 weight [rows, k] (rows a multiple of 16, k even) is cut into blocks of 16
// rows. Block b is one contiguous run of k/2 groups of 32 elements (64 bytes of bf16, 32 of
// int8); group p holds elements 2p and 2p+1 of the block's 16 rows, row r's pair at
// element 2r and 2r+1 of the group. One vdpbf16ps of group p against token x's pair (x[2p],
// x[2p+1]), broadcast to all 16 lanes, adds that pair's products to the 16 rows' outputs
// at once: the outputs of a tile are whole vectors (no horizontal sums), a tile of NB
// blocks x T tokens loads NB weight vectors and T 4-byte broadcasts per NB*T instructions
// (the row-major dot-product kernel loads NB+T full vectors), and one token streams each
// thread's rows as a single sequential run.
//
// bf16 groups are stored in order. int8 groups are stored two by two in the order the
// kernel's widening reads them (cpu_packed_avx512bf16.cc): in the 64 bytes of groups p and
// p + 1 (p even), bytes 16L..16L+7 hold elements 8L..8L+7 of group p and bytes
// 16L+8..16L+15 those of group p + 1 (L = 0..3); the last group of an odd number is
// stored in order. Each int8 byte holds a sign bit and the magnitude |q| <= 127.
#pragma once

#include <cstdint>

namespace quiver::cpu {

inline constexpr int64_t kPackRows = 16;  // rows per block: one zmm of f32 outputs

// Whether a [rows, k] weight can be packed.
inline bool packable_block16(int64_t rows, int64_t k) {
  return rows > 0 && k > 0 && rows % kPackRows == 0 && k % 2 == 0;
}

// Packs blocks [block_begin, block_end) of src ([rows, k] row-major) into dst.
void pack_block16(uint16_t* dst, const uint16_t* src, int64_t k, int64_t block_begin, int64_t block_end);
void pack_block16(int8_t* dst, const int8_t* src, int64_t k, int64_t block_begin, int64_t block_end);

}  // namespace quiver::cpu
