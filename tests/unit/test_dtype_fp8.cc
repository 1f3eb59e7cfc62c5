// link: qv_core
// The fp8 e4m3 conversions every backend shares (core/dtype.h): all 256 codes round-trip,
// rounding is to nearest even at every spacing (subnormal and normal), and magnitudes past
// 448 saturate; NaN stays NaN.
#include <gtest/gtest.h>

#include <cmath>

#include "core/dtype.h"

namespace quiver {
namespace {

TEST(DtypeFp8, EveryCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    const float f = e4m3_to_f32(static_cast<uint8_t>(c));
    if ((c & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(f)) << c;
      EXPECT_EQ(f32_to_e4m3(f) & 0x7f, 0x7f) << c;
      continue;
    }
    EXPECT_EQ(f32_to_e4m3(f), c) << c << " = " << f;
  }
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.f);
  EXPECT_EQ(e4m3_to_f32(0x08), 1.f / 64);   // smallest normal
  EXPECT_EQ(e4m3_to_f32(0x01), 1.f / 512);  // smallest subnormal
  EXPECT_EQ(e4m3_to_f32(0x38), 1.f);
}

TEST(DtypeFp8, RoundsToNearestEvenBetweenEveryPairOfNeighbours) {
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = e4m3_to_f32(static_cast<uint8_t>(c)), hi = e4m3_to_f32(static_cast<uint8_t>(c + 1));
    const float mid = (lo + hi) / 2;  // exact in f32
    const int even = (c & 1) == 0 ? c : c + 1;
    EXPECT_EQ(f32_to_e4m3(mid), even) << "tie between " << lo << " and " << hi;
    EXPECT_EQ(f32_to_e4m3(std::nextafter(mid, 0.f)), c) << "below the tie of " << lo << ", " << hi;
    EXPECT_EQ(f32_to_e4m3(std::nextafter(mid, 1000.f)), c + 1) << "above the tie of " << lo << ", " << hi;
    EXPECT_EQ(f32_to_e4m3(-mid), 0x80 | even);
  }
}

TEST(DtypeFp8, SaturatesPast448) {
  for (float v : {448.f, 449.f, 464.f, 480.f, 1e6f, INFINITY}) {
    EXPECT_EQ(f32_to_e4m3(v), 0x7e) << v;
    EXPECT_EQ(f32_to_e4m3(-v), 0xfe) << v;
  }
  EXPECT_EQ(f32_to_e4m3(1e-4f), 0x00);  // below half the smallest subnormal
  EXPECT_EQ(f32_to_e4m3(-0.f), 0x80);
  EXPECT_EQ(dtype_size(DType::kF8E4M3), 1u);
  EXPECT_EQ(load_as_f32("\x38", DType::kF8E4M3, 0), 1.f);
}

}  // namespace
}  // namespace quiver
