// AddedVocabulary: two passes as in HF. First the non-normalized tokens are cut out of the
// raw input; every remaining piece is normalized and then searched for normalized tokens.
#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "core/check.h"
#include "tokenizer/json_path.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/unicode_norm.h"
#include "tokenizer/utf8.h"

namespace quiver {

namespace jp = json_path;

Result<AddedToken> parse_added_token(const nlohmann::json& j, const std::string& path) {
  if (!j.is_object()) return jp::error(path, "expected an object");
  AddedToken t;
  QV_ASSIGN_OR_RETURN(int64_t id, jp::get_int(j, "id", path, -1));
  if (id < 0 || id > jp::kMaxTokenId)
    return jp::error(jp::child(path, "id"), "missing or outside [0, " + std::to_string(jp::kMaxTokenId) + "]");
  t.id = static_cast<int32_t>(id);
  QV_ASSIGN_OR_RETURN(t.content, jp::require_string(j, "content", path));
  if (t.content.empty()) return jp::error(jp::child(path, "content"), "is empty");
  if (!utf8::is_valid(t.content)) return jp::error(jp::child(path, "content"), "is not valid UTF-8");
  QV_ASSIGN_OR_RETURN(t.special, jp::get_bool(j, "special", path, false));
  QV_ASSIGN_OR_RETURN(t.single_word, jp::get_bool(j, "single_word", path, false));
  QV_ASSIGN_OR_RETURN(t.lstrip, jp::get_bool(j, "lstrip", path, false));
  QV_ASSIGN_OR_RETURN(t.rstrip, jp::get_bool(j, "rstrip", path, false));
  QV_ASSIGN_OR_RETURN(t.normalized, jp::get_bool(j, "normalized", path, !t.special));
  return t;
}

void AddedVocabulary::Matcher::add(std::string content, size_t token_index) {
  if (content.empty()) return;
  entries_.push_back({std::move(content), token_index});
}

void AddedVocabulary::Matcher::finish() {
  // Longest first, so the first hit at a position is the longest one there.
  std::stable_sort(entries_.begin(), entries_.end(),
                   [](const Entry& a, const Entry& b) { return a.content.size() > b.content.size(); });
  for (auto& list : by_first_byte_) list.clear();
  for (size_t i = 0; i < entries_.size(); ++i) {
    by_first_byte_[static_cast<unsigned char>(entries_[i].content[0])].push_back(i);
  }
}

bool AddedVocabulary::Matcher::find(std::string_view text, size_t from, size_t* start, size_t* end,
                                    size_t* token_index) const {
  for (size_t pos = from; pos < text.size(); ++pos) {
    const auto& candidates = by_first_byte_[static_cast<unsigned char>(text[pos])];
    for (size_t i : candidates) {
      const Entry& e = entries_[i];
      if (text.compare(pos, e.content.size(), e.content) == 0) {
        *start = pos;
        *end = pos + e.content.size();
        *token_index = e.token_index;
        return true;
      }
    }
  }
  return false;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer)
    : tokens_(std::move(tokens)), normalizer_(normalizer), word_char_(Regex::literal("")) {
  auto re = Regex::compile(R"(\A\w\z)");
  check(re.is_ok(), "word-character regex must compile");
  word_char_ = std::move(re.value());
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    if (t.normalized && normalizer_ != nullptr) {
      std::string content = t.content;
      normalizer_->normalize(content);
      normalized_.add(std::move(content), i);
    } else if (t.normalized) {
      normalized_.add(t.content, i);
    } else {
      raw_.add(t.content, i);
    }
  }
  raw_.finish();
  normalized_.finish();
}

bool AddedVocabulary::is_word_char_at(std::string_view text, size_t pos, bool before) const {
  // The character just before `pos` (before == true) or starting at `pos`.
  if (before) {
    if (pos == 0) return false;
    size_t start = pos - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    text = text.substr(start, pos - start);
  } else {
    if (pos >= text.size()) return false;
    text = text.substr(pos, utf8::char_length(static_cast<unsigned char>(text[pos])));
  }
  std::vector<Regex::Match> m;
  word_char_.find_all(text, m);
  return !m.empty();
}

namespace {

size_t skip_whitespace_back(std::string_view s, size_t pos) {
  while (pos > 0) {
    size_t start = pos - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t p = start;
    if (!unicode::is_whitespace(utf8::decode(s, p))) break;
    pos = start;
  }
  return pos;
}

size_t skip_whitespace_forward(std::string_view s, size_t pos) {
  while (pos < s.size()) {
    size_t p = pos;
    if (!unicode::is_whitespace(utf8::decode(s, p))) break;
    pos = p;
  }
  return pos;
}

}  // namespace

void AddedVocabulary::split_with(const Matcher& matcher, const TextPiece& piece, std::vector<TextPiece>& out) const {
  std::string_view text = piece.text;
  auto emit_text = [&](size_t a, size_t b) {
    if (b > a) out.push_back({std::string(text.substr(a, b - a)), -1, piece.at_start && a == 0});
  };
  size_t offset = 0;  // end of the last emitted piece
  size_t from = 0;    // where the matcher resumes
  size_t start, end, index;
  while (!matcher.empty() && matcher.find(text, from, &start, &end, &index)) {
    from = end;
    const AddedToken& t = tokens_[index];
    if (t.single_word) {
      bool start_ok = start == 0 || !is_word_char_at(text, start, true);
      bool stop_ok = end == text.size() || !is_word_char_at(text, end, false);
      if (!start_ok || !stop_ok) continue;
    }
    if (t.lstrip) start = std::max(skip_whitespace_back(text, start), offset);
    if (t.rstrip) end = skip_whitespace_forward(text, end);
    emit_text(offset, start);
    out.push_back({std::string(text.substr(start, end - start)), t.id, piece.at_start && start == 0});
    offset = end;
  }
  emit_text(offset, text.size());
}

std::vector<TextPiece> AddedVocabulary::split(std::string_view text) const {
  std::vector<TextPiece> first;
  split_with(raw_, TextPiece{std::string(text), -1, true}, first);
  std::vector<TextPiece> out;
  out.reserve(first.size());
  for (TextPiece& p : first) {
    if (p.id >= 0) {
      out.push_back(std::move(p));
      continue;
    }
    if (normalizer_ != nullptr) normalizer_->normalize(p.text);
    if (p.text.empty()) continue;
    split_with(normalized_, p, out);
  }
  return out;
}

}  // namespace quiver
