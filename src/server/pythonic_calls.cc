#include "server/pythonic_calls.h"

#include <cerrno>
#include <cstdlib>
#include <string>

#include "tokenizer/utf8.h"

namespace quiver {

namespace {

using ojson = nlohmann::ordered_json;

// Recursive descent over the literal subset; every method returns false on anything else.
class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}

  bool calls(ojson* out) {
    *out = ojson::array();
    blanks();
    if (!eat('[')) return false;
    const bool listed = items(']', /*trailing_comma=*/false, [&] {
      ojson call;
      if (!one_call(&call)) return false;
      out->push_back(std::move(call));
      return true;
    });
    blanks();
    return listed && !out->empty() && pos_ == s_.size();  // no call: not a tool call list
  }

 private:
  static constexpr int kMaxDepth = 64;  // nesting of lists and dicts

  // The comma-separated items up to `close` (the opening bracket already read), each read
  // by item(), blanks around them; a comma before `close` only where `trailing_comma`
  // (Python's literals take one; vLLM's pattern for the list of calls does not).
  template <class Item>
  bool items(char close, bool trailing_comma, const Item& item) {
    blanks();
    if (eat(close)) return true;
    for (;;) {
      if (!item()) return false;
      blanks();
      if (eat(close)) return true;
      if (!eat(',')) return false;
      blanks();
      if (trailing_comma && eat(close)) return true;
    }
  }

  bool one_call(ojson* call) {
    std::string name;
    if (!identifier(&name)) return false;
    blanks();
    if (!eat('(')) return false;
    ojson args = ojson::object();
    const bool listed = items(')', /*trailing_comma=*/true, [&] {
      std::string key;
      if (!identifier(&key)) return false;  // keywords only
      blanks();
      if (!eat('=')) return false;
      blanks();
      return value(&args[key], 0);
    });
    if (!listed) return false;
    *call = ojson{{"name", name}, {"arguments", std::move(args)}};
    return true;
  }

  bool value(ojson* v, int depth) {
    if (depth > kMaxDepth || pos_ >= s_.size()) return false;
    const char c = s_[pos_];
    if (c == '\'' || c == '"') {
      std::string text;
      if (!string(&text)) return false;
      *v = std::move(text);
      return true;
    }
    if (c == '[') return list(v, depth);
    if (c == '{') return dict(v, depth);
    if (c == '-' || c == '+' || c == '.' || (c >= '0' && c <= '9')) return number(v);
    std::string word;
    if (!identifier(&word)) return false;
    if (word == "True") *v = true;
    else if (word == "False") *v = false;
    else if (word == "None") *v = nullptr;
    else return false;
    return true;
  }

  bool list(ojson* v, int depth) {
    ++pos_;  // [
    *v = ojson::array();
    return items(']', /*trailing_comma=*/true, [&] {
      ojson e;
      if (!value(&e, depth + 1)) return false;
      v->push_back(std::move(e));
      return true;
    });
  }

  // Keys are strings, or numbers, booleans and None written as JSON text (json.dumps' rule).
  bool dict(ojson* v, int depth) {
    ++pos_;  // {
    *v = ojson::object();
    return items('}', /*trailing_comma=*/true, [&] {
      ojson key;
      if (!value(&key, depth + 1) || key.is_array() || key.is_object()) return false;
      blanks();
      if (!eat(':')) return false;
      blanks();
      return value(&(*v)[key.is_string() ? key.get<std::string>() : key.dump()], depth + 1);
    });
  }

  bool number(ojson* v) {
    const size_t start = pos_;
    if (s_[pos_] == '-' || s_[pos_] == '+') ++pos_;
    bool real = false, digits = false;
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c >= '0' && c <= '9') {
        digits = true;
      } else if (c == '.' || c == 'e' || c == 'E') {
        real = true;
        if (c != '.' && pos_ + 1 < s_.size() && (s_[pos_ + 1] == '-' || s_[pos_ + 1] == '+')) ++pos_;
      } else {
        break;
      }
      ++pos_;
    }
    if (!digits) return false;
    const std::string text(s_.substr(start, pos_ - start));
    char* end = nullptr;
    errno = 0;
    if (real) {
      const double d = std::strtod(text.c_str(), &end);
      if (end != text.c_str() + text.size() || errno != 0) return false;
      *v = d;
    } else {
      const long long i = std::strtoll(text.c_str(), &end, 10);
      if (end != text.c_str() + text.size() || errno != 0) return false;
      *v = static_cast<int64_t>(i);
    }
    return true;
  }

  // A quoted string with Python's escapes (\n, \t, \r, \0, \\, \', \", \xHH, \uHHHH,
  // \UHHHHHHHH); an unknown escape keeps its backslash, as Python does.
  bool string(std::string* out) {
    const char quote = s_[pos_++];
    while (pos_ < s_.size() && s_[pos_] != quote) {
      const char c = s_[pos_++];
      if (c == '\n') return false;  // not inside a one-line string
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) return false;
      const char e = s_[pos_++];
      switch (e) {
        case 'n': out->push_back('\n'); break;
        case 't': out->push_back('\t'); break;
        case 'r': out->push_back('\r'); break;
        case '0': out->push_back('\0'); break;
        case '\\': case '\'': case '"': out->push_back(e); break;
        case 'x': case 'u': case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (pos_ + n > s_.size()) return false;
          const std::string hex(s_.substr(pos_, n));
          char* end = nullptr;
          const unsigned long cp = std::strtoul(hex.c_str(), &end, 16);
          if (end != hex.c_str() + n || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
          pos_ += n;
          utf8::append(*out, static_cast<char32_t>(cp));
          break;
        }
        default: out->push_back('\\'); out->push_back(e); break;
      }
    }
    return eat(quote);
  }

  // A name starting with a letter or _, then letters, digits and _.
  bool identifier(std::string* out) {
    const size_t start = pos_;
    auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
    if (pos_ >= s_.size() || !alpha(s_[pos_])) return false;
    while (pos_ < s_.size() && (alpha(s_[pos_]) || (s_[pos_] >= '0' && s_[pos_] <= '9'))) ++pos_;
    *out = std::string(s_.substr(start, pos_ - start));
    return true;
  }

  void blanks() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool eat(char c) {
    if (pos_ >= s_.size() || s_[pos_] != c) return false;
    ++pos_;
    return true;
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

std::optional<nlohmann::ordered_json> parse_pythonic_calls(std::string_view text) {
  ojson calls;
  Reader r(text);
  if (!r.calls(&calls)) return std::nullopt;
  return calls;
}

}  // namespace quiver
