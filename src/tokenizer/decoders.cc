// Decoder implementations with HF tokenizers' exact quirks: ByteFallback turns an invalid
// byte run into one U+FFFD per byte; ByteLevel decodes all bytes at once, lossily; Metaspace
// drops every replacement character of the first token when it prepends; Strip works per
// token and counts characters.
#include "tokenizer/decoders.h"

#include "tokenizer/json_path.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace quiver {
namespace {

using nlohmann::json;
namespace jp = json_path;
using DecoderPtr = std::unique_ptr<Decoder>;

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string bytes;
    auto flush = [&] {
      if (bytes.empty()) return;
      if (utf8::is_valid(bytes)) {
        out.push_back(bytes);
      } else {
        for (size_t i = 0; i < bytes.size(); ++i) out.emplace_back(utf8::kReplacementUtf8);
      }
      bytes.clear();
    };
    for (std::string& t : tokens) {
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && hex_value(t[3]) >= 0 &&
          hex_value(t[4]) >= 0) {
        bytes.push_back(static_cast<char>(hex_value(t[3]) * 16 + hex_value(t[4])));
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    tokens = std::move(out);
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string joined;
    for (const std::string& t : tokens) joined += t;
    tokens.assign(1, std::move(joined));
  }
};

class StripDecoder final : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop) : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::vector<size_t> offsets;  // byte offset of each character, plus the end
      for (size_t pos = 0; pos < t.size();) {
        offsets.push_back(pos);
        pos += utf8::char_length(static_cast<unsigned char>(t[pos]));
      }
      size_t n = offsets.size();
      offsets.push_back(t.size());
      auto char_at = [&](size_t i) {
        size_t p = offsets[i];
        return utf8::decode(t, p);
      };
      size_t begin = 0;
      while (begin < start_ && begin < n && char_at(begin) == content_) ++begin;
      size_t end = n;
      for (size_t i = 0; i < stop_ && end > begin && char_at(end - 1) == content_; ++i) --end;
      t = t.substr(offsets[begin], offsets[end] - offsets[begin]);
    }
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(Regex pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) t = pattern_.replace_all(t, content_);
  }

 private:
  Regex pattern_;
  std::string content_;
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool prepends) : replacement_(std::move(replacement)), prepends_(prepends) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      std::string out;
      out.reserve(t.size());
      for (size_t pos = 0; pos < t.size();) {
        if (t.compare(pos, replacement_.size(), replacement_) == 0) {
          if (!(i == 0 && prepends_)) out.push_back(' ');
          pos += replacement_.size();
        } else {
          out.push_back(t[pos++]);
        }
      }
      t = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool prepends_;  // prepend_scheme is not "never"
};

class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    const utf8::ByteLevelTable& table = utf8::byte_level_table();
    std::string bytes;
    for (const std::string& t : tokens) {
      // A token with any character outside the table is taken as raw bytes, whole.
      size_t mark = bytes.size();
      bool ok = true;
      for (size_t pos = 0; pos < t.size();) {
        int b = table.decode(utf8::decode(t, pos));
        if (b < 0) {
          ok = false;
          break;
        }
        bytes.push_back(static_cast<char>(b));
      }
      if (!ok) {
        bytes.resize(mark);
        bytes += t;
      }
    }
    tokens.assign(1, utf8::lossy(bytes));
  }
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<DecoderPtr> parts) : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->decode_chain(tokens);
  }

 private:
  std::vector<DecoderPtr> parts_;
};

Result<char32_t> single_char(const std::string& s, const std::string& path) {
  size_t pos = 0;
  if (s.empty() || !utf8::is_valid(s)) return jp::error(path, "expected one character");
  char32_t cp = utf8::decode(s, pos);
  if (pos != s.size()) return jp::error(path, "expected one character");
  return cp;
}

}  // namespace

Result<DecoderPtr> parse_decoder(const json& j, const std::string& path) {
  QV_ASSIGN_OR_RETURN(std::string type, jp::type_of(j, path));
  if (type == "ByteFallback") return DecoderPtr(new ByteFallbackDecoder());
  if (type == "Fuse") return DecoderPtr(new FuseDecoder());
  if (type == "ByteLevel") return DecoderPtr(new ByteLevelDecoder());
  if (type == "Strip") {
    QV_ASSIGN_OR_RETURN(std::string content, jp::require_string(j, "content", path));
    QV_ASSIGN_OR_RETURN(char32_t c, single_char(content, jp::child(path, "content")));
    QV_ASSIGN_OR_RETURN(int64_t start, jp::get_int(j, "start", path, 0));
    QV_ASSIGN_OR_RETURN(int64_t stop, jp::get_int(j, "stop", path, 0));
    if (start < 0 || stop < 0) return jp::error(path, "start and stop must be >= 0");
    return DecoderPtr(new StripDecoder(c, static_cast<size_t>(start), static_cast<size_t>(stop)));
  }
  if (type == "Replace") {
    QV_ASSIGN_OR_RETURN(const json* pattern_json, jp::require(j, "pattern", path));
    QV_ASSIGN_OR_RETURN(Regex pattern, parse_pattern(*pattern_json, jp::child(path, "pattern")));
    QV_ASSIGN_OR_RETURN(std::string content, jp::require_string(j, "content", path));
    return DecoderPtr(new ReplaceDecoder(std::move(pattern), std::move(content)));
  }
  if (type == "Metaspace") {
    QV_ASSIGN_OR_RETURN(std::string replacement, jp::get_string(j, "replacement", path, "\xE2\x96\x81"));
    QV_RETURN_IF_ERROR(single_char(replacement, jp::child(path, "replacement")).status());
    QV_ASSIGN_OR_RETURN(bool add_prefix_space, jp::get_bool(j, "add_prefix_space", path, true));
    QV_ASSIGN_OR_RETURN(std::string scheme,
                        jp::get_string(j, "prepend_scheme", path, add_prefix_space ? "always" : "never"));
    if (scheme != "always" && scheme != "first" && scheme != "never") {
      return jp::error(jp::child(path, "prepend_scheme"), "unknown prepend_scheme '" + scheme + "'");
    }
    return DecoderPtr(new MetaspaceDecoder(std::move(replacement), scheme != "never"));
  }
  if (type == "Sequence") {
    auto it = j.find("decoders");
    std::string list_path = jp::child(path, "decoders");
    if (it == j.end() || !it->is_array()) return jp::error(list_path, "expected an array");
    std::vector<DecoderPtr> parts;
    for (size_t i = 0; i < it->size(); ++i) {
      QV_ASSIGN_OR_RETURN(auto part, parse_decoder((*it)[i], jp::index(list_path, i)));
      parts.push_back(std::move(part));
    }
    return DecoderPtr(new SequenceDecoder(std::move(parts)));
  }
  return jp::error(jp::child(path, "type"), "unsupported decoder type '" + type +
                   "' (supported: ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace, Sequence)");
}

}  // namespace quiver
