// UTF-8 decoding rules follow the Unicode standard's table 3-7 (well-formed byte sequences),
// which is also what Rust's str validation and from_utf8_lossy use.
#include "tokenizer/utf8.h"

namespace quiver::utf8 {
namespace {

// Valid range of the second byte for each lead byte (table 3-7); others are 80..BF.
bool second_byte_ok(unsigned char lead, unsigned char b) {
  if (lead == 0xE0) return b >= 0xA0 && b <= 0xBF;
  if (lead == 0xED) return b >= 0x80 && b <= 0x9F;
  if (lead == 0xF0) return b >= 0x90 && b <= 0xBF;
  if (lead == 0xF4) return b >= 0x80 && b <= 0x8F;
  return b >= 0x80 && b <= 0xBF;
}

size_t expected_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// Length of the maximal prefix of a valid sequence starting at pos (>= 1 byte consumed
// for an invalid lead), and whether it is complete.
size_t maximal_subpart(std::string_view s, size_t pos, bool* complete) {
  unsigned char lead = s[pos];
  size_t need = expected_length(lead);
  if (need == 0) {
    *complete = false;
    return 1;
  }
  if (need == 1) {
    *complete = true;
    return 1;
  }
  size_t i = 1;
  while (i < need && pos + i < s.size()) {
    unsigned char b = s[pos + i];
    bool ok = i == 1 ? second_byte_ok(lead, b) : (b >= 0x80 && b <= 0xBF);
    if (!ok) break;
    ++i;
  }
  *complete = i == need;
  return i;
}

}  // namespace

size_t valid_sequence_length(std::string_view s, size_t pos) {
  bool complete = false;
  size_t n = maximal_subpart(s, pos, &complete);
  return complete ? n : 0;
}

char32_t decode(std::string_view s, size_t& pos) {
  unsigned char lead = s[pos];
  if (lead < 0x80) {
    ++pos;
    return lead;
  }
  size_t n = char_length(lead);
  char32_t cp = n == 2 ? (lead & 0x1F) : n == 3 ? (lead & 0x0F) : (lead & 0x07);
  for (size_t i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<unsigned char>(s[pos + i]) & 0x3F);
  pos += n;
  return cp;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t find_invalid(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    if (static_cast<unsigned char>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    size_t n = valid_sequence_length(s, pos);
    if (n == 0) return pos;
    pos += n;
  }
  return std::string_view::npos;
}

std::string lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    bool complete = false;
    size_t n = maximal_subpart(bytes, pos, &complete);
    if (complete) {
      out.append(bytes.substr(pos, n));
    } else {
      out.append(kReplacementUtf8);
    }
    pos += n;
  }
  return out;
}

size_t incomplete_tail(std::string_view s) {
  // A truncated sequence is at most 3 bytes long: look back for its lead byte.
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    size_t pos = s.size() - back;
    unsigned char b = s[pos];
    if (b >= 0x80 && b <= 0xBF) continue;  // continuation byte: keep looking
    bool complete = false;
    size_t n = maximal_subpart(s, pos, &complete);
    return (!complete && n == back && expected_length(b) > back) ? back : 0;
  }
  return 0;
}

ByteLevelTable::ByteLevelTable() {
  unicode_to_byte_.fill(-1);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(next++);
    append(byte_to_utf8_[b], cp);
    unicode_to_byte_[cp] = static_cast<int16_t>(b);
  }
}

const ByteLevelTable& byte_level_table() {
  // Immutable after construction (thread-safe static init); not mutable global state.
  static const ByteLevelTable table;
  return table;
}

}  // namespace quiver::utf8
