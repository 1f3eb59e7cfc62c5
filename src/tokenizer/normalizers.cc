// Normalizer implementations. Semantics follow HF tokenizers: Prepend leaves an empty string
// empty; Strip removes White_Space characters; Replace replaces every non-overlapping match.
#include "tokenizer/normalizers.h"

#include <vector>

#include "tokenizer/json_path.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode_norm.h"
#include "tokenizer/utf8.h"

namespace quiver {
namespace {

using nlohmann::json;
namespace jp = json_path;

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(unicode::NormForm form) : form_(form) {}
  void normalize(std::string& text) const override { text = unicode::normalize(text, form_); }

 private:
  unicode::NormForm form_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  void normalize(std::string& text) const override { text = unicode::lowercase(text); }
};

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        size_t pos = begin;
        if (!unicode::is_whitespace(utf8::decode(text, pos))) break;
        begin = pos;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        size_t pos = start;
        if (!unicode::is_whitespace(utf8::decode(text, pos))) break;
        end = start;
      }
    }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& text) const override { text = pattern_.replace_all(text, content_); }

 private:
  Regex pattern_;
  std::string content_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(std::string& text) const override {
    for (const auto& p : parts_) p->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

Result<std::unique_ptr<Normalizer>> parse_normalizer(const json& j, const std::string& path) {
  QV_ASSIGN_OR_RETURN(std::string type, jp::type_of(j, path));
  if (type == "NFC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(unicode::NormForm::kNfc));
  if (type == "NFD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(unicode::NormForm::kNfd));
  if (type == "NFKC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(unicode::NormForm::kNfkc));
  if (type == "NFKD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(unicode::NormForm::kNfkd));
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new LowercaseNormalizer());
  if (type == "Strip") {
    QV_ASSIGN_OR_RETURN(bool left, jp::get_bool(j, "strip_left", path, true));
    QV_ASSIGN_OR_RETURN(bool right, jp::get_bool(j, "strip_right", path, true));
    return std::unique_ptr<Normalizer>(new StripNormalizer(left, right));
  }
  if (type == "Prepend") {
    QV_ASSIGN_OR_RETURN(std::string prefix, jp::require_string(j, "prepend", path));
    return std::unique_ptr<Normalizer>(new PrependNormalizer(std::move(prefix)));
  }
  if (type == "Replace") {
    QV_ASSIGN_OR_RETURN(const json* pattern_json, jp::require(j, "pattern", path));
    QV_ASSIGN_OR_RETURN(Regex pattern, parse_pattern(*pattern_json, jp::child(path, "pattern")));
    QV_ASSIGN_OR_RETURN(std::string content, jp::require_string(j, "content", path));
    return std::unique_ptr<Normalizer>(new ReplaceNormalizer(std::move(pattern), std::move(content)));
  }
  if (type == "Sequence") {
    auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array()) return jp::error(jp::child(path, "normalizers"), "expected an array");
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (size_t i = 0; i < it->size(); ++i) {
      QV_ASSIGN_OR_RETURN(auto part, parse_normalizer((*it)[i], jp::index(jp::child(path, "normalizers"), i)));
      parts.push_back(std::move(part));
    }
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(parts)));
  }
  return jp::error(jp::child(path, "type"), "unsupported normalizer type '" + type +
                   "' (supported: NFC, NFD, NFKC, NFKD, Lowercase, Strip, Prepend, Replace, Sequence)");
}

}  // namespace quiver
