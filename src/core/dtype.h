// Element types and the scalar conversions every backend agrees on.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace quiver {

// kF8E4M3: OCP FP8 E4M3 (1 sign, 4 exponent bits of bias 7, 3 mantissa bits; no infinity,
// largest finite 448), the KV cache's 8-bit type (--kv-cache-dtype fp8). kI8: a weight
// quantized to signed 8-bit integers with a float scale per row (Tensor::row_scale).
enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kF8E4M3, kI8 };

// How a model's projection weights (q/k/v/o, gate/up/down) are stored once loaded.
// kInt8: symmetric int8 per output channel (--quantization int8, model/int8_weights.h);
// kFp8: e4m3 with one scale per output channel (--quantization fp8, model/fp8_weights.h).
enum class WeightQuantization : uint8_t { kNone, kInt8, kFp8 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
    case DType::kF8E4M3: return 1;
    case DType::kI8: return 1;
  }
  return 0;
}

constexpr bool is_16bit_float(DType t) { return t == DType::kF16 || t == DType::kBF16; }

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kI32: return "I32";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kI8: return "I8";
  }
  return "?";
}

// A float type by the names flags and config files use (PyTorch's and the short ones):
// float32/f32, float16/f16/half, bfloat16/bf16; nothing for any other name.
constexpr std::optional<DType> float_dtype_named(std::string_view s) {
  if (s == "float32" || s == "f32") return DType::kF32;
  if (s == "float16" || s == "f16" || s == "half") return DType::kF16;
  if (s == "bfloat16" || s == "bf16") return DType::kBF16;
  return std::nullopt;
}

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, as torch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even.
inline uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to inf
  if (abs < 0x38800000u) {                                               // subnormal or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    uint32_t e = abs >> 23;
    uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;  // value = m * 2^(e - 150) = half * 2^-24
    uint32_t half = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t h = ((abs >> 13) - ((127 - 15) << 10));
  uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

inline float e4m3_to_f32(uint8_t b) {
  const uint32_t exp = (b >> 3) & 0xfu, mant = b & 7u;
  float mag;
  if (exp == 15 && mant == 7) {
    mag = __builtin_nanf("");
  } else if (exp == 0) {
    mag = static_cast<float>(mant) * (1.0f / 512);  // subnormal: mant x 2^-9
  } else {
    const uint32_t bits = ((exp + 127 - 7) << 23) | (mant << 20);
    std::memcpy(&mag, &bits, 4);
  }
  return (b & 0x80u) ? -mag : mag;
}

// Round to nearest even, saturating: magnitudes past 448 (infinity too) become 448, as
// CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3); NaN stays NaN.
inline uint8_t f32_to_e4m3(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7f);
  if (abs >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7e);  // >= 448
  if (abs < 0x3c800000u) {  // below 2^-6: subnormal steps of 2^-9, nearest even
    float a;
    std::memcpy(&a, &abs, 4);
    const float scaled = a * 512.0f;  // exact: a power of two
    auto m = static_cast<uint32_t>(scaled);
    const float rem = scaled - static_cast<float>(m);
    if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
    return static_cast<uint8_t>(sign | m);  // m == 8 is 2^-6, the smallest normal's code
  }
  uint32_t e = (abs >> 23) - 127 + 7;  // 1..15
  uint32_t q = (abs >> 20) & 7u;
  const uint32_t rem = abs & 0xfffffu;
  if (rem > 0x80000u || (rem == 0x80000u && (q & 1u))) ++q;
  if (q == 8) {
    q = 0;
    ++e;
  }
  if (e > 15 || (e == 15 && q == 7)) return static_cast<uint8_t>(sign | 0x7e);
  return static_cast<uint8_t>(sign | (e << 3) | q);
}

// Reads element i of a buffer of the given floating dtype as float. The buffer may be
// unaligned (a safetensors header of odd length shifts the data), so elements are copied
// out byte-wise; compilers turn each memcpy into one plain load.
inline float load_as_f32(const void* data, DType t, size_t i) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  switch (t) {
    case DType::kF32: {
      float v;
      std::memcpy(&v, bytes + i * 4, 4);
      return v;
    }
    case DType::kF16:
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, bytes + i * 2, 2);
      return t == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
    case DType::kI32: {
      int32_t v;
      std::memcpy(&v, bytes + i * 4, 4);
      return static_cast<float>(v);
    }
    case DType::kF8E4M3: return e4m3_to_f32(bytes[i]);
    case DType::kI8: return static_cast<float>(static_cast<int8_t>(bytes[i]));  // without its row's scale
  }
  return 0.f;
}

}  // namespace quiver
