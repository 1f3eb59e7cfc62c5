// Pre-tokenizer implementations, following HF tokenizers: ByteLevel optionally adds a
// leading space, splits with GPT-2's pattern and maps every byte to its printable stand-in;
// Metaspace turns spaces into the replacement character (U+2581) and optionally prepends one.
#include "tokenizer/pre_tokenizers.h"

#include "tokenizer/json_path.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace quiver {
namespace {

using nlohmann::json;
namespace jp = json_path;

// GPT-2's word pattern, used by ByteLevel when use_regex is true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Splits every piece by a regex with the given behavior.
void split_pieces(const Regex& re, SplitBehavior behavior, bool invert, std::vector<PreToken>& pieces) {
  std::vector<PreToken> out;
  out.reserve(pieces.size() * 2);
  std::vector<Regex::Match> found;
  std::vector<Span> matches;
  for (PreToken& piece : pieces) {
    re.find_all(piece.text, found);
    matches.clear();
    for (const auto& m : found) matches.push_back({m.start, m.end});
    for (const Span& s : split_spans(piece.text.size(), matches, behavior, invert)) {
      if (s.end == s.start) continue;
      out.push_back({piece.text.substr(s.start, s.end - s.start), piece.at_start && s.start == 0});
    }
  }
  pieces = std::move(out);
}

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Regex> re)
      : add_prefix_space_(add_prefix_space), re_(std::move(re)) {}

  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    if (add_prefix_space_) {
      for (PreToken& p : pieces)
        if (p.text.empty() || p.text[0] != ' ') p.text = ' ' + p.text;
    }
    if (re_) split_pieces(*re_, SplitBehavior::kIsolated, false, pieces);
    const utf8::ByteLevelTable& table = utf8::byte_level_table();
    for (PreToken& p : pieces) {
      std::string mapped;
      mapped.reserve(p.text.size() * 2);
      for (unsigned char b : p.text) mapped += table.encode(b);
      p.text = std::move(mapped);
    }
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> re_;  // null when use_regex is false
};

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Regex re, SplitBehavior behavior, bool invert)
      : re_(std::move(re)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    split_pieces(re_, behavior_, invert_, pieces);
  }

 private:
  Regex re_;
  SplitBehavior behavior_;
  bool invert_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split),
        splitter_(Regex::literal(replacement_)) {}

  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    for (PreToken& p : pieces) {
      std::string replaced;
      replaced.reserve(p.text.size() + replacement_.size());
      for (char c : p.text) {
        if (c == ' ') {
          replaced += replacement_;
        } else {
          replaced.push_back(c);
        }
      }
      bool starts = replaced.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts && (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && p.at_start))) {
        replaced = replacement_ + replaced;
      }
      p.text = std::move(replaced);
    }
    if (split_) split_pieces(splitter_, SplitBehavior::kMergedWithNext, false, pieces);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
  Regex splitter_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    for (const auto& p : parts_) p->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

Result<SplitBehavior> parse_behavior(const json& j, const std::string& path) {
  QV_ASSIGN_OR_RETURN(std::string name, jp::require_string(j, "behavior", path));
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return jp::error(jp::child(path, "behavior"), "unknown split behavior '" + name + "'");
}

Result<PrependScheme> parse_prepend_scheme(const json& j, const std::string& path) {
  // Older files have add_prefix_space instead of prepend_scheme.
  QV_ASSIGN_OR_RETURN(bool add_prefix_space, jp::get_bool(j, "add_prefix_space", path, true));
  QV_ASSIGN_OR_RETURN(std::string name,
                      jp::get_string(j, "prepend_scheme", path, add_prefix_space ? "always" : "never"));
  if (name == "always") return PrependScheme::kAlways;
  if (name == "first") return PrependScheme::kFirst;
  if (name == "never") return PrependScheme::kNever;
  return jp::error(jp::child(path, "prepend_scheme"), "unknown prepend_scheme '" + name + "'");
}

using PreTokenizerPtr = std::unique_ptr<PreTokenizer>;

}  // namespace

Result<PreTokenizerPtr> parse_pre_tokenizer(const json& j, const std::string& path) {
  QV_ASSIGN_OR_RETURN(std::string type, jp::type_of(j, path));
  if (type == "ByteLevel") {
    QV_ASSIGN_OR_RETURN(bool add_prefix_space, jp::get_bool(j, "add_prefix_space", path, true));
    QV_ASSIGN_OR_RETURN(bool use_regex, jp::get_bool(j, "use_regex", path, true));
    std::unique_ptr<Regex> re;
    if (use_regex) {
      auto compiled = Regex::compile(kGpt2Pattern);
      if (!compiled) return compiled.status().with_context(path);
      re = std::make_unique<Regex>(std::move(compiled.value()));
    }
    return PreTokenizerPtr(new ByteLevelPreTokenizer(add_prefix_space, std::move(re)));
  }
  if (type == "Split") {
    QV_ASSIGN_OR_RETURN(const json* pattern_json, jp::require(j, "pattern", path));
    QV_ASSIGN_OR_RETURN(Regex re, parse_pattern(*pattern_json, jp::child(path, "pattern")));
    QV_ASSIGN_OR_RETURN(SplitBehavior behavior, parse_behavior(j, path));
    QV_ASSIGN_OR_RETURN(bool invert, jp::get_bool(j, "invert", path, false));
    return PreTokenizerPtr(new SplitPreTokenizer(std::move(re), behavior, invert));
  }
  if (type == "Metaspace") {
    QV_ASSIGN_OR_RETURN(std::string replacement, jp::get_string(j, "replacement", path, "\xE2\x96\x81"));
    QV_ASSIGN_OR_RETURN(PrependScheme scheme, parse_prepend_scheme(j, path));
    QV_ASSIGN_OR_RETURN(bool split, jp::get_bool(j, "split", path, true));
    if (replacement.empty() || !utf8::is_valid(replacement)) {
      return jp::error(jp::child(path, "replacement"), "must be one character");
    }
    return PreTokenizerPtr(new MetaspacePreTokenizer(std::move(replacement), scheme, split));
  }
  if (type == "Digits") {
    QV_ASSIGN_OR_RETURN(bool individual, jp::get_bool(j, "individual_digits", path, false));
    auto re = Regex::compile(R"(\p{N})");
    if (!re) return re.status();
    return PreTokenizerPtr(new SplitPreTokenizer(
        std::move(re.value()), individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, false));
  }
  if (type == "Sequence") {
    auto it = j.find("pretokenizers");
    std::string list_path = jp::child(path, "pretokenizers");
    if (it == j.end() || !it->is_array()) return jp::error(list_path, "expected an array");
    std::vector<PreTokenizerPtr> parts;
    for (size_t i = 0; i < it->size(); ++i) {
      QV_ASSIGN_OR_RETURN(auto part, parse_pre_tokenizer((*it)[i], jp::index(list_path, i)));
      parts.push_back(std::move(part));
    }
    return PreTokenizerPtr(new SequencePreTokenizer(std::move(parts)));
  }
  return jp::error(jp::child(path, "type"), "unsupported pre_tokenizer type '" + type +
                   "' (supported: ByteLevel, Split, Metaspace, Digits, Sequence)");
}

}  // namespace quiver
