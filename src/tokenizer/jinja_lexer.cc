// Jinja lexer with jinja2's whitespace rules as transformers configures them
// (trim_blocks=True, lstrip_blocks=True). The rules mirror jinja2.lexer.Lexer:
//  - newlines are normalised to \n and one trailing newline is dropped;
//  - `{%-`/`{{-`/`{#-` rstrip all whitespace before the tag, `-%}`/`-}}`/`-#}` lstrip
//    all whitespace after it;
//  - trim_blocks: `%}` and `#}` eat one directly following \n (`+%}` keeps it);
//  - lstrip_blocks: spaces/tabs between the start of a line and `{%`/`{#` are removed
//    (`{%+` keeps them), where "start of a line" also holds right after a tag whose
//    closing match ended in \n.
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <cstring>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_text.h"

namespace quiver::jinja {
namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string rstrip_ws(const std::string& s) {
  size_t e = s.size();
  while (e > 0 && is_ws(s[e - 1])) --e;
  return s.substr(0, e);
}

std::string normalize_newlines(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      size_t tag = find_tag(pos_);
      std::string text = src_.substr(pos_, tag == std::string::npos ? std::string::npos : tag - pos_);
      if (tag == std::string::npos) {
        emit_text(text);
        advance_to(src_.size());
        break;
      }
      char kind = src_[tag + 1];  // '{', '%' or '#'
      char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign == '-') {
        text = rstrip_ws(text);
      } else if (sign != '+' && kind != '{') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if (l_pos > 0 || line_starting) {
          bool all_ws = l_pos < text.size();
          for (size_t i = l_pos; i < text.size() && all_ws; ++i) all_ws = is_ws(text[i]);
          if (all_ws) text.resize(l_pos);
        }
      }
      emit_text(text);
      advance_to(tag + 2 + (sign == '-' || sign == '+' ? 1 : 0));
      if (kind == '#') {
        line_starting = lex_comment();
      } else if (kind == '%' && try_raw()) {
        line_starting = last_end_newline_;
      } else {
        line_starting = lex_tag(kind == '{');
      }
    }
    tokens_.push_back({TokenType::kEnd, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  void advance_to(size_t p) {
    for (size_t i = pos_; i < p && i < src_.size(); ++i) line_ += src_[i] == '\n';
    pos_ = p;
  }

  void emit_text(const std::string& text) {
    if (!text.empty()) tokens_.push_back({TokenType::kText, text, line_});
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw JinjaError("line " + std::to_string(line_) + ": " + what);
  }

  // Consumes the end of a block or comment tag at pos_ ('-' or '+' already checked by
  // the caller's position); returns whether the consumed text ended in a newline.
  bool consume_tag_end(size_t end_pos, size_t marker_len, bool strip, bool keep) {
    size_t p = end_pos + marker_len;
    if (strip) {
      while (p < src_.size() && is_ws(src_[p])) ++p;
    } else if (!keep && p < src_.size() && src_[p] == '\n') {
      ++p;  // trim_blocks
    }
    advance_to(p);
    return p > 0 && src_[p - 1] == '\n';
  }

  bool lex_comment() {
    size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) fail("unclosed comment");
    bool strip = end > pos_ && src_[end - 1] == '-';
    bool keep = end > pos_ && src_[end - 1] == '+';
    return consume_tag_end(end, 2, strip, keep);
  }

  // {% raw %}...{% endraw %}: the body is emitted verbatim.
  bool try_raw() {
    size_t p = pos_;
    while (p < src_.size() && is_ws(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[p + 3])) || src_[p + 3] == '_')))
      return false;
    p += 3;
    while (p < src_.size() && is_ws(src_[p])) ++p;
    bool strip = false, keep = false;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) {
      strip = src_[p] == '-';
      keep = src_[p] == '+';
      ++p;
    }
    if (src_.compare(p, 2, "%}") != 0) fail("expected '%}' after raw");
    last_end_newline_ = consume_tag_end(p, 2, strip, keep);
    size_t search = pos_;
    while (true) {
      size_t open = src_.find("{%", search);
      if (open == std::string::npos) fail("missing endraw");
      size_t q = open + 2;
      char sign = q < src_.size() ? src_[q] : '\0';
      if (sign == '-' || sign == '+') ++q;
      while (q < src_.size() && is_ws(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") != 0) {
        search = open + 2;
        continue;
      }
      std::string body = src_.substr(pos_, open - pos_);
      if (sign == '-') body = rstrip_ws(body);
      emit_text(body);
      q += 6;
      while (q < src_.size() && is_ws(src_[q])) ++q;
      bool end_strip = false, end_keep = false;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) {
        end_strip = src_[q] == '-';
        end_keep = src_[q] == '+';
        ++q;
      }
      if (src_.compare(q, 2, "%}") != 0) fail("expected '%}' after endraw");
      advance_to(q);
      last_end_newline_ = consume_tag_end(q, 2, end_strip, end_keep);
      return true;
    }
  }

  // Tokens inside {{ }} or {% %} up to the closing delimiter.
  bool lex_tag(bool variable) {
    tokens_.push_back({variable ? TokenType::kVariableBegin : TokenType::kBlockBegin, "", line_});
    const char* close = variable ? "}}" : "%}";
    int depth = 0;  // inside brackets a closing delimiter is just two operators (jinja2 does the same)
    while (true) {
      if (pos_ >= src_.size()) fail(variable ? "unclosed '{{'" : "unclosed '{%'");
      char c = src_[pos_];
      if (depth == 0) {
        if ((c == '-' || c == '+') && src_.compare(pos_ + 1, 2, close) == 0) {
          if (variable && c == '+') {
            // jinja2 has no `+}}`; '+' is then an operator followed by the end.
          } else {
            tokens_.push_back({variable ? TokenType::kVariableEnd : TokenType::kBlockEnd, "", line_});
            bool strip = c == '-';
            return consume_tag_end(pos_, 3, strip, !strip || variable);
          }
        }
        if (src_.compare(pos_, 2, close) == 0) {
          tokens_.push_back({variable ? TokenType::kVariableEnd : TokenType::kBlockEnd, "", line_});
          return consume_tag_end(pos_, 2, false, variable);
        }
      }
      if (is_ws(c)) {
        advance_to(pos_ + 1);
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number();
        continue;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos_;
        while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        tokens_.push_back({TokenType::kName, src_.substr(pos_, e - pos_), line_});
        advance_to(e);
        continue;
      }
      if (c == '\'' || c == '"') {
        lex_string(c);
        continue;
      }
      static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "/", "*", "%", "~", "[", "]",
                                   "(", ")", "{", "}", "<", ">", "=", ".", ":", "|", ",", ";"};
      bool matched = false;
      for (const char* op : kOps) {
        size_t n = std::strlen(op);
        if (src_.compare(pos_, n, op) == 0) {
          if (op[0] == '(' || op[0] == '[' || op[0] == '{') ++depth;
          if ((op[0] == ')' || op[0] == ']' || op[0] == '}') && depth > 0) --depth;
          tokens_.push_back({TokenType::kOperator, op, line_});
          advance_to(pos_ + n);
          matched = true;
          break;
        }
      }
      if (!matched) fail(std::string("unexpected character '") + c + "'");
    }
  }

  void lex_number() {
    size_t e = pos_;
    auto digits = [&] {
      while (e < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
    };
    digits();
    bool is_float = false;
    if (e + 1 < src_.size() && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      is_float = true;
      ++e;
      digits();
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t f = e + 1;
      if (f < src_.size() && (src_[f] == '+' || src_[f] == '-')) ++f;
      if (f < src_.size() && std::isdigit(static_cast<unsigned char>(src_[f]))) {
        is_float = true;
        e = f;
        digits();
      }
    }
    std::string text;
    for (size_t i = pos_; i < e; ++i)
      if (src_[i] != '_') text.push_back(src_[i]);
    Token t{is_float ? TokenType::kFloat : TokenType::kInteger, text, line_};
    if (is_float) {
      t.float_value = std::strtod(text.c_str(), nullptr);  // past the range: inf, as Python's float
    } else {
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), t.int_value);
      if (ec != std::errc() || end != text.data() + text.size()) fail("integer literal " + text + " is out of range");
    }
    tokens_.push_back(t);
    advance_to(e);
  }

  // Decodes like Python's "unicode-escape" codec, which jinja2 applies to literals.
  void lex_string(char quote) {
    std::string out;
    size_t p = pos_ + 1;
    auto hex_value = [&](size_t start, int count) -> char32_t {
      if (start + count > src_.size()) fail("truncated escape in string literal");
      char32_t v = 0;
      for (int i = 0; i < count; ++i) {
        char h = src_[start + i];
        if (!std::isxdigit(static_cast<unsigned char>(h))) fail("truncated escape in string literal");
        v = v * 16 + static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
      }
      return v;
    };
    while (true) {
      if (p >= src_.size()) fail("unterminated string literal");
      char c = src_[p];
      if (c == quote) break;
      if (c != '\\') {
        out.push_back(c);
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) fail("unterminated string literal");
      char e = src_[p + 1];
      p += 2;
      switch (e) {
        case '\n': break;  // line continuation
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'v': out.push_back('\v'); break;
        case 'x': utf8_append(out, hex_value(p, 2)); p += 2; break;
        case 'u': utf8_append(out, hex_value(p, 4)); p += 4; break;
        case 'U': utf8_append(out, hex_value(p, 8)); p += 8; break;
        default:
          if (e >= '0' && e <= '7') {
            char32_t v = static_cast<char32_t>(e - '0');
            for (int i = 0; i < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++i, ++p)
              v = v * 8 + static_cast<char32_t>(src_[p] - '0');
            utf8_append(out, v);
          } else {
            out.push_back('\\');  // unknown escapes stay as written
            out.push_back(e);
          }
      }
    }
    tokens_.push_back({TokenType::kString, out, line_});
    advance_to(p + 1);
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool last_end_newline_ = false;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex(const std::string& source) { return Lexer(normalize_newlines(source)).run(); }

}  // namespace quiver::jinja
