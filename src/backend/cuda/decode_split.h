// How decode attention splits each sequence's keys into partitions (attention.cu), in
// plain C++ so that the CPU tests check the bounds the kernel's grid and scratch rely on.
//
// A partition is a power of two from kDecodePartMin to kDecodePartMax keys, about
// len / target, where target (1..kDecodeMaxTarget partitions per sequence) is what the
// batch needs for kDecodeBlocksPerSm blocks per SM. target depends on the batch's sequences
// and head groups only, never on the host's max_seq_len bound, so a graph captured for the
// longest context and the same padded batch run eagerly split every sequence alike.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/host_device.h"

namespace quiver::cuda {

inline constexpr int kDecodePartMax = 256;   // most keys per partition (the scores' shared memory)
inline constexpr int kDecodePartMin = 32;    // fewest keys per partition
inline constexpr int kDecodeMaxTarget = 8;   // most partitions per sequence below 8 x 256 keys
inline constexpr int kDecodeBlocksPerSm = 8;  // decode blocks per SM the target aims at
inline constexpr int kDecodeGridPerTarget = 2;  // grid blocks per sequence: this x the target

// Partitions per sequence the batch wants: enough blocks for kDecodeBlocksPerSm per SM.
inline int decode_target(int64_t num_seqs, int64_t head_groups, int num_sms) {
  const int64_t blocks = std::max<int64_t>(num_seqs * head_groups, 1);
  const int64_t want = (int64_t{kDecodeBlocksPerSm} * std::max(num_sms, 1) + blocks - 1) / blocks;
  return static_cast<int>(std::clamp<int64_t>(want, 1, kDecodeMaxTarget));
}

// Keys per partition for a sequence of len keys: len / target rounded up to a power of
// two, within [kDecodePartMin, kDecodePartMax]. A function of (len, target) alone.
QV_HOST_DEVICE int decode_part_len(int len, int target) {
  int part = kDecodePartMin;
  while (part < kDecodePartMax && part * target < len) part *= 2;
  return part;
}

// Partitions of a sequence of len keys.
QV_HOST_DEVICE int decode_splits(int len, int target) {
  const int part = decode_part_len(len, target);
  return (len + part - 1) / part;
}

// The most partitions of any sequence of at most max_len keys: the grid's x size.
inline int decode_max_splits(int64_t max_len, int target) {
  const int64_t m = std::max<int64_t>(max_len, 1);
  const int64_t small = std::min<int64_t>(target, (m + kDecodePartMin - 1) / kDecodePartMin);
  return static_cast<int>(std::max<int64_t>(small, (m + kDecodePartMax - 1) / kDecodePartMax));
}

// Blocks per (sequence, head group) in the grid: max_splits, but at most
// kDecodeGridPerTarget x target. Block x takes partitions x, x + grid, ...; the target
// already gives the batch enough blocks, and a loose bound (a graph's: the model's whole
// context) would otherwise launch a block for every partition no sequence has yet.
inline int decode_grid_splits(int max_splits, int target) {
  return std::max(1, std::min(max_splits, kDecodeGridPerTarget * std::max(target, 1)));
}

}  // namespace quiver::cuda
