// Added tokens (tokenizer.json "added_tokens"): strings such as "<|im_start|>" or "</s>"
// that are cut out of the input before normalization and pre-tokenization, honoring each
// token's lstrip / rstrip / single_word / normalized flags like HF's AddedVocabulary.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizer/regex.h"

namespace quiver {

class Normalizer;

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
};

Result<AddedToken> parse_added_token(const nlohmann::json& j, const std::string& path);

// A piece of input: either plain text (id < 0) or one added token.
struct TextPiece {
  std::string text;
  int32_t id = -1;
  bool at_start = false;  // begins at offset 0 of the input
};

class AddedVocabulary {
 public:
  // `normalizer` (may be null) is applied to the content of normalized tokens, and to
  // the text between non-normalized ones, as HF does.
  AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer);

  // Splits `text` (valid UTF-8) into pieces; plain pieces come out normalized.
  std::vector<TextPiece> split(std::string_view text) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // Leftmost-longest exact matching over a small set of strings.
  class Matcher {
   public:
    void add(std::string content, size_t token_index);
    void finish();
    // The match starting at the smallest position >= from (longest there), or false.
    bool find(std::string_view text, size_t from, size_t* start, size_t* end, size_t* token_index) const;
    bool empty() const { return entries_.empty(); }

   private:
    struct Entry {
      std::string content;
      size_t token_index;
    };
    std::vector<Entry> entries_;
    std::vector<std::vector<size_t>> by_first_byte_ = std::vector<std::vector<size_t>>(256);
  };

  void split_with(const Matcher& matcher, const TextPiece& piece, std::vector<TextPiece>& out) const;
  bool is_word_char_at(std::string_view text, size_t pos, bool before) const;

  std::vector<AddedToken> tokens_;
  const Normalizer* normalizer_;
  Matcher raw_;         // tokens with normalized == false
  Matcher normalized_;  // tokens with normalized == true, content normalized
  Regex word_char_;
};

}  // namespace quiver
