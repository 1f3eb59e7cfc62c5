// Raw Unicode data tables (generated into unicode_tables.cc by tools/gen_unicode_tables.py).
// Only unicode_norm.cc reads them; everything else uses unicode_norm.h.
#pragma once

#include <cstddef>
#include <cstdint>

namespace quiver::unicode_data {

struct CccRange {
  char32_t lo, hi;  // inclusive
  uint8_t ccc;
};
struct Decomposition {
  char32_t cp;
  uint32_t offset;  // into kDecompData (or kLowerData for kLower)
  uint32_t len;
};
struct Composition {
  char32_t first, second, composite;
};

extern const char* const kUnicodeVersion;
// All tables are sorted by their first field.
extern const CccRange kCccRanges[];
extern const size_t kCccRanges_size;
extern const char32_t kDecompData[];
extern const size_t kDecompData_size;
extern const Decomposition kCanonical[];  // full canonical decomposition (excl. Hangul)
extern const size_t kCanonical_size;
extern const Decomposition kCompat[];  // full compatibility decomposition where it differs
extern const size_t kCompat_size;
extern const Composition kCompositions[];  // primary composites (excl. Hangul)
extern const size_t kCompositions_size;
extern const char32_t kLowerData[];
extern const size_t kLowerData_size;
extern const Decomposition kLower[];  // per-character full lowercase mapping
extern const size_t kLower_size;

}  // namespace quiver::unicode_data
