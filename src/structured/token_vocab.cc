#include "structured/token_vocab.h"

#include <algorithm>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace quiver::structured {

namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// GPT-2 style vocabularies spell each byte as one printable code point; SentencePiece
// ones spell a space as U+2581 and raw bytes as <0xHH>.
std::string byte_level_bytes(const std::string& piece) {
  const utf8::ByteLevelTable& table = utf8::byte_level_table();
  std::string out;
  for (size_t pos = 0; pos < piece.size();) {
    const int b = table.decode(utf8::decode(piece, pos));
    if (b < 0) return piece;  // not byte-level after all: take it as text
    out.push_back(static_cast<char>(b));
  }
  return out;
}

std::string sentencepiece_bytes(const std::string& piece) {
  if (piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 && piece[5] == '>') {
    const int hi = hex_digit(piece[3]), lo = hex_digit(piece[4]);
    if (hi >= 0 && lo >= 0) return std::string(1, static_cast<char>(hi * 16 + lo));
  }
  std::string out;
  static const std::string kSpace = "\xE2\x96\x81";
  for (size_t i = 0; i < piece.size();) {
    if (piece.compare(i, kSpace.size(), kSpace) == 0) {
      out.push_back(' ');
      i += kSpace.size();
    } else {
      out.push_back(piece[i++]);
    }
  }
  return out;
}

}  // namespace

TokenVocab TokenVocab::from_tokenizer(const Tokenizer& tok, int64_t vocab_size, std::vector<int64_t> eos_ids) {
  // "Ġ" (byte 0x20's code point) is in every byte-level vocabulary.
  const bool byte_level = tok.token_to_id("\xC4\xA0").has_value();
  std::vector<std::string> bytes(static_cast<size_t>(vocab_size));
  for (int64_t id = 0; id < vocab_size && id < tok.vocab_size(); ++id) {
    const int32_t i = static_cast<int32_t>(id);
    if (tok.is_special(i)) continue;
    auto piece = tok.id_to_token(i);
    if (!piece.has_value()) continue;
    bytes[static_cast<size_t>(id)] = byte_level ? byte_level_bytes(*piece) : sentencepiece_bytes(*piece);
  }
  return from_bytes(std::move(bytes), std::move(eos_ids));
}

TokenVocab TokenVocab::from_bytes(std::vector<std::string> bytes, std::vector<int64_t> eos_ids) {
  TokenVocab v;
  v.bytes_ = std::move(bytes);
  v.eos_ = std::move(eos_ids);
  for (int64_t e : v.eos_)
    if (e >= 0 && e < v.size()) v.bytes_[static_cast<size_t>(e)].clear();
  v.index();
  return v;
}

bool TokenVocab::is_eos(int32_t id) const { return std::find(eos_.begin(), eos_.end(), id) != eos_.end(); }

void TokenVocab::index() {
  sorted_.clear();
  for (size_t i = 0; i < bytes_.size(); ++i)
    if (!bytes_[i].empty()) sorted_.push_back(static_cast<int32_t>(i));
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) { return bytes(a) < bytes(b); });
  lcp_.assign(sorted_.size(), 0);
  max_bytes_ = 0;
  for (size_t i = 0; i < sorted_.size(); ++i) {
    const std::string& cur = bytes(sorted_[i]);
    max_bytes_ = std::max(max_bytes_, cur.size());
    if (i == 0) continue;
    const std::string& prev = bytes(sorted_[i - 1]);
    size_t k = 0;
    while (k < cur.size() && k < prev.size() && cur[k] == prev[k]) ++k;
    lcp_[i] = static_cast<uint32_t>(k);
  }
}

}  // namespace quiver::structured
