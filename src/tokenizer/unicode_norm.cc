// Normalization per UAX #15: full decomposition, canonical ordering of combining marks,
// then (for the composed forms) canonical composition. Hangul syllables are algorithmic.
#include "tokenizer/unicode_norm.h"

#include <algorithm>
#include <vector>

#include "tokenizer/unicode_tables.h"
#include "tokenizer/utf8.h"

namespace quiver::unicode {
namespace {

using namespace unicode_data;

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr char32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  auto it = std::upper_bound(kCccRanges, kCccRanges + kCccRanges_size, cp,
                             [](char32_t c, const CccRange& r) { return c < r.lo; });
  if (it == kCccRanges) return 0;
  --it;
  return cp <= it->hi ? it->ccc : 0;
}

const Decomposition* find(const Decomposition* table, size_t size, char32_t cp) {
  auto it = std::lower_bound(table, table + size, cp,
                             [](const Decomposition& d, char32_t c) { return d.cp < c; });
  return (it != table + size && it->cp == cp) ? it : nullptr;
}

void decompose(char32_t cp, bool compat, std::vector<char32_t>& out) {
  if (cp < 0xA0) {  // nothing below U+00A0 decomposes
    out.push_back(cp);
    return;
  }
  if (cp >= kSBase && cp < kSBase + kSCount) {
    char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* d = compat ? find(kCompat, kCompat_size, cp) : nullptr;
  if (d == nullptr) d = find(kCanonical, kCanonical_size, cp);
  if (d == nullptr) {
    out.push_back(cp);
    return;
  }
  out.insert(out.end(), kDecompData + d->offset, kDecompData + d->offset + d->len);
}

// Stable sort of each run of non-starters by combining class.
void canonical_order(std::vector<char32_t>& cps) {
  size_t i = 0;
  while (i < cps.size()) {
    if (combining_class(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && combining_class(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + i, cps.begin() + j,
                     [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
}

bool compose_pair(char32_t a, char32_t b, char32_t* out) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    *out = kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
    return true;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    *out = a + (b - kTBase);
    return true;
  }
  auto it = std::lower_bound(kCompositions, kCompositions + kCompositions_size, std::pair(a, b),
                             [](const Composition& c, const std::pair<char32_t, char32_t>& k) {
                               return c.first != k.first ? c.first < k.first : c.second < k.second;
                             });
  if (it == kCompositions + kCompositions_size || it->first != a || it->second != b) return false;
  *out = it->composite;
  return true;
}

void compose(std::vector<char32_t>& cps) {
  if (cps.empty()) return;
  size_t starter = 0;  // index of the last starter in the output
  bool have_starter = combining_class(cps[0]) == 0;
  size_t out = 1;
  int last_ccc = have_starter ? 0 : 256;
  for (size_t i = 1; i < cps.size(); ++i) {
    char32_t c = cps[i];
    int ccc = combining_class(c);
    char32_t composite;
    // Blocked unless the previous kept char is the starter itself or has a lower class.
    bool blocked = out - 1 != starter && (last_ccc == 0 || last_ccc >= ccc);
    if (have_starter && !blocked && compose_pair(cps[starter], c, &composite)) {
      cps[starter] = composite;
      continue;
    }
    if (ccc == 0) {
      starter = out;
      have_starter = true;
    }
    last_ccc = ccc;
    cps[out++] = c;
  }
  cps.resize(out);
}

bool all_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

}  // namespace

std::string normalize(std::string_view text, NormForm form) {
  if (all_ascii(text)) return std::string(text);
  bool compat = form == NormForm::kNfkc || form == NormForm::kNfkd;
  std::vector<char32_t> cps;
  cps.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) decompose(utf8::decode(text, pos), compat, cps);
  canonical_order(cps);
  if (form == NormForm::kNfc || form == NormForm::kNfkc) compose(cps);
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : cps) utf8::append(out, cp);
  return out;
}

std::string lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    char32_t cp = utf8::decode(text, pos);
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp));
      continue;
    }
    const Decomposition* d = find(kLower, kLower_size, cp);
    if (d == nullptr) {
      utf8::append(out, cp);
      continue;
    }
    for (uint32_t i = 0; i < d->len; ++i) utf8::append(out, kLowerData[d->offset + i]);
  }
  return out;
}

bool is_whitespace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

}  // namespace quiver::unicode
