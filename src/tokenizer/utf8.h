// UTF-8 helpers for the tokenizer: strict decoding and validation, Rust-compatible lossy
// decoding (what HF's decoders do with invalid bytes), and GPT-2's byte<->unicode table.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace quiver::utf8 {

inline constexpr char32_t kReplacement = 0xFFFD;
inline constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

// Length in bytes of the valid UTF-8 sequence starting at s[pos], or 0 if none starts there
// (invalid lead byte, bad continuation, overlong form, surrogate, > U+10FFFF, truncated).
size_t valid_sequence_length(std::string_view s, size_t pos);

// Decodes the code point at s[pos] and advances pos. Precondition: s is valid UTF-8.
char32_t decode(std::string_view s, size_t& pos);

void append(std::string& out, char32_t cp);

// Byte offset of the first invalid sequence, or npos if `s` is valid UTF-8.
size_t find_invalid(std::string_view s);
inline bool is_valid(std::string_view s) { return find_invalid(s) == std::string_view::npos; }

// Like Rust's String::from_utf8_lossy: each maximal invalid subpart becomes one U+FFFD.
std::string lossy(std::string_view bytes);

// Number of bytes at the end of `s` that form an incomplete (but so far valid) sequence.
size_t incomplete_tail(std::string_view s);

inline size_t char_length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

// GPT-2's reversible map from bytes to printable code points (ByteLevel pre-tokenizer and
// decoder): printable Latin-1 bytes map to themselves, the rest to U+0100 and up.
class ByteLevelTable {
 public:
  ByteLevelTable();
  // The UTF-8 encoding of the code point byte `b` maps to.
  const std::string& encode(uint8_t b) const { return byte_to_utf8_[b]; }
  // The byte a code point stands for, or -1 if it is not in the table.
  int decode(char32_t cp) const { return cp < unicode_to_byte_.size() ? unicode_to_byte_[cp] : -1; }

 private:
  std::array<std::string, 256> byte_to_utf8_;
  std::array<int16_t, 512> unicode_to_byte_;
};

const ByteLevelTable& byte_level_table();

}  // namespace quiver::utf8
