// The table of CPU kernels one instruction set provides, and the plain argument structs
// they take. CpuBackend picks a table once (scalar, AVX2 or AVX-512) and does all the
// threading and tiling decisions itself; kernels only see raw pointers and index ranges.
//
// Why raw pointers: the *_avx2.cc / *_avx512.cc translation units are compiled with
// extra -m flags. Any inline function or template they instantiate from a shared header
// (Tensor, check(), std:: algorithms) could be emitted there with AVX-512 instructions
// and picked by the linker for baseline code too, which would SIGILL on older CPUs.
// So this header holds only PODs and function-pointer types, and the kernel files keep
// their helpers in per-ISA namespaces with internal linkage.
#pragma once

#include <cstddef>
#include <cstdint>

namespace quiver::cpu {

// Element type of weights / caches as seen by kernels (index into the per-dtype tables).
enum ElemType : int { kElemF32 = 0, kElemF16 = 1, kElemBF16 = 2, kNumElemTypes = 3 };
// The fp8 e4m3 KV cache's element, for attention only (CpuKernels::attention_f8).
inline constexpr int kElemF8 = kNumElemTypes;
// An int8 weight with a scale per row (MatmulArgs::w_scale), for matmul only (matmul_i8).
inline constexpr int kElemI8 = kNumElemTypes + 1;

// y[t, r] (+)= sum_k x[t, k] * w[r, k] (+ bias[r]) for a block of rows and tokens.
struct MatmulArgs {
  float* y;            // [tokens, ldy] f32
  int64_t ldy;
  const float* x;      // [tokens, ldx] f32
  int64_t ldx;
  const void* w;       // [rows, ldw] of the table's element type
  int64_t ldw;
  const float* bias;   // [rows] f32 or null
  int64_t k;           // reduction length
  bool accumulate;     // y += result instead of y = result
  // x rounded to bf16 ([tokens, ldx]): what the bf16 dot-product kernel reads instead of x.
  const uint16_t* x16 = nullptr;
  // A weight's per-row scales ([rows]) or null: y[t, r] = w_scale[r] * sum_k x[t, k] * w[r, k]
  // (int8 weights; FP8 values held in bf16; Tensor::row_scale).
  const float* w_scale = nullptr;
};
// Computes rows [row_begin, row_end) for tokens [tok_begin, tok_end).
using MatmulFn = void (*)(const MatmulArgs& a, int64_t row_begin, int64_t row_end, int64_t tok_begin,
                          int64_t tok_end);

// One attention work item: `num_rows` consecutive query rows of one sequence and the
// `group` query heads that share one kv head, over KV positions [kv_begin, kv_end).
// Query row r sits at position first_pos + r and sees KV positions <= its position.
struct AttentionWork {
  const float* q;             // row r, head g at q + r * q_row_stride + g * head_dim
  int64_t q_row_stride;
  float* out;                 // same layout with out_row_stride
  int64_t out_row_stride;
  float* m;                   // [num_rows * group] running max, or null (then out is normalised)
  float* l;                   // [num_rows * group] running sum, null iff m is null
  int num_rows;
  int group;
  int head_dim;
  int64_t first_pos;
  int64_t kv_begin, kv_end;
  const void* k_cache;        // [num_blocks, block_size, num_kv_heads, head_dim]
  const void* v_cache;
  const int32_t* block_table; // physical block of each logical block of this sequence
  int block_size;
  int64_t kv_token_stride;    // elements between consecutive cache slots (num_kv_heads * head_dim)
  int64_t kv_head_offset;     // kv_head * head_dim
  float scale;                // the queries' factor (the softmax scale x an fp8 cache's k_scale)
  float v_scale = 1.f;        // the outputs' factor (an fp8 cache's v_scale)
};
using AttentionFn = void (*)(const AttentionWork& w);

constexpr int kAttnMaxHeadDim = 512;
// Queries of one work item are held scaled and padded to a multiple of 16 floats:
// num_rows * group * round_up(head_dim, 16) must not exceed this.
constexpr int kAttnMaxQueryFloats = 8192;

struct CpuKernels {
  const char* name;
  MatmulFn matmul[kNumElemTypes];
  MatmulFn matmul_i8;                                                 // int8 weights, f32 x
  AttentionFn attention[kNumElemTypes];                               // by cache element type
  AttentionFn attention_f8;                                           // fp8 e4m3 caches
  void (*to_f32[kNumElemTypes])(float* dst, const void* src, int64_t n);
  void (*from_f32[kNumElemTypes])(void* dst, const float* src, int64_t n);  // round to nearest even
  double (*sum_squares)(const float* x, int64_t n);
  float (*stream_sum)(const float* x, int64_t n);  // sum of x, for the read-rate probe
  void (*scale_mul)(float* out, const float* x, float s, const float* w, int64_t n);  // out = w * (x * s)
  void (*add)(float* y, const float* x, int64_t n);                                   // y += x
  void (*silu_mul)(float* out, const float* gate, const float* up, int64_t n);
  // Rotate-half on one head: (a, b) = (v[j], v[half + j]) -> (a c - b s, b c + a s).
  void (*rope)(float* v, const float* cos, const float* sin, int64_t half);
};

const CpuKernels& scalar_kernels();
// Only call these when the CPU supports the instruction set (see CpuBackend).
const CpuKernels& avx2_kernels();
const CpuKernels& avx512_kernels();
// The bf16 dot-product matmul (bf16 weights, MatmulArgs::x16): only when the CPU has
// AVX512-BF16 (cpu_kernels_avx512bf16.cc).
MatmulFn avx512bf16_matmul_bf16_dot();
// The same on int8 weights (MatmulArgs::w_scale), widened exactly to bf16 in registers.
MatmulFn avx512bf16_matmul_i8_dot();
// The same on weights packed for it (packed_weights.h; cpu_packed_avx512bf16.cc): row
// ranges are multiples of 16.
MatmulFn avx512bf16_matmul_bf16_packed();
// The same on packed int8 weights (MatmulArgs::w_scale), widened exactly to bf16.
MatmulFn avx512bf16_matmul_i8_packed();

}  // namespace quiver::cpu
