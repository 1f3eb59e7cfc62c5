// Unicode normalization forms (NFC, NFD, NFKC, NFKD) and per-character lowercasing, as HF
// tokenizers' normalizers apply them. Inputs must be valid UTF-8.
#pragma once

#include <string>
#include <string_view>

namespace quiver::unicode {

enum class NormForm { kNfc, kNfd, kNfkc, kNfkd };

std::string normalize(std::string_view text, NormForm form);
// Each character replaced by its full lowercase mapping, without context (no final-sigma
// rule), like Rust's char::to_lowercase.
std::string lowercase(std::string_view text);

bool is_whitespace(char32_t cp);  // the White_Space property (Rust's char::is_whitespace)

}  // namespace quiver::unicode
