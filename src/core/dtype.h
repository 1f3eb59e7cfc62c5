// Element types and the scalar conversions every backend agrees on.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace quiver {

enum class DType : uint8_t { kF32, kF16, kBF16, kI32 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
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
  }
  return 0.f;
}

}  // namespace quiver
