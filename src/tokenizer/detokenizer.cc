// IncrementalDetokenizer: decodes a sliding window [prefix_offset_, end) of ids and returns
// the part of its text beyond what the window [prefix_offset_, read_offset_) already showed.
// Decoding with some context on the left keeps decoder effects that depend on position
// (SentencePiece's leading-space strip, Metaspace's first-token rule) identical in both
// decodes, so their difference is exactly the new text. Text ending in U+FFFD may be an
// incomplete UTF-8 sequence (byte-fallback or byte-level pieces) and is held back.
#include "tokenizer/tokenizer.h"

#include "core/check.h"
#include "tokenizer/utf8.h"

namespace quiver {
namespace {

// Prompt tokens kept as left context for the first generated token.
constexpr size_t kInitialContext = 5;
// How much further back the context may reach to start on a character boundary.
constexpr size_t kMaxContextBacktrack = 16;

bool ends_with_replacement(const std::string& s) {
  return s.size() >= utf8::kReplacementUtf8.size() &&
         s.compare(s.size() - utf8::kReplacementUtf8.size(), std::string::npos, utf8::kReplacementUtf8) == 0;
}

// The part of `new_text` after `prefix_text`, starting on a character boundary.
std::string suffix_after(const std::string& new_text, const std::string& prefix_text) {
  size_t start = prefix_text.size();
  while (start < new_text.size() && (static_cast<unsigned char>(new_text[start]) & 0xC0) == 0x80) ++start;
  return start < new_text.size() ? new_text.substr(start) : std::string();
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer* tokenizer, std::vector<int32_t> prompt_ids,
                                               bool skip_special_tokens, bool spaces_between_special_tokens)
    : tokenizer_(tokenizer),
      ids_(std::move(prompt_ids)),
      skip_special_(skip_special_tokens),
      joined_added_(!skip_special_tokens && !spaces_between_special_tokens) {
  check(tokenizer_ != nullptr, "IncrementalDetokenizer needs a tokenizer");
  read_offset_ = ids_.size();
  prefix_offset_ = ids_.size() > kInitialContext ? ids_.size() - kInitialContext : 0;
  // The context must not start inside a multi-token character: ByteFallback turns a whole
  // byte run into U+FFFDs when any of it is invalid, so orphan bytes at the window's start
  // would spoil the new text too. Move back until the context decodes cleanly.
  for (size_t steps = 0; prefix_offset_ > 0 && steps < kMaxContextBacktrack; ++steps) {
    std::span<const int32_t> window(ids_.data() + prefix_offset_, read_offset_ - prefix_offset_);
    auto text = tokenizer_->decode(window, skip_special_);
    if (!text.is_ok() || text.value().compare(0, utf8::kReplacementUtf8.size(), utf8::kReplacementUtf8) != 0) break;
    --prefix_offset_;
  }
}

Result<std::string> IncrementalDetokenizer::push(int32_t id) {
  ids_.push_back(id);
  if (joined_added_) {
    const bool added = tokenizer_->is_added(id);
    const bool follows_added = added && last_added_;
    last_added_ = added;
    if (follows_added) {  // the previous added token ended a complete piece: nothing is pending
      prefix_offset_ = read_offset_;
      read_offset_ = ids_.size();
      return tokenizer_->id_to_token(id).value_or("");
    }
  }
  std::span<const int32_t> all(ids_);
  QV_ASSIGN_OR_RETURN(std::string prefix_text,
                      tokenizer_->decode(all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_));
  QV_ASSIGN_OR_RETURN(std::string new_text, tokenizer_->decode(all.subspan(prefix_offset_), skip_special_));
  if (new_text.size() <= prefix_text.size() || ends_with_replacement(new_text)) return std::string();
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  return suffix_after(new_text, prefix_text);
}

Result<std::string> IncrementalDetokenizer::flush() {
  std::span<const int32_t> all(ids_);
  QV_ASSIGN_OR_RETURN(std::string prefix_text,
                      tokenizer_->decode(all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_));
  QV_ASSIGN_OR_RETURN(std::string new_text, tokenizer_->decode(all.subspan(prefix_offset_), skip_special_));
  read_offset_ = ids_.size();
  return suffix_after(new_text, prefix_text);
}

}  // namespace quiver
