#include "structured/regex_parser.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace quiver::structured {

namespace {

constexpr char32_t kMaxCode = 0x10FFFF;

using NodePtr = std::unique_ptr<RegexNode>;

NodePtr make(RegexNode::Kind k) {
  auto n = std::make_unique<RegexNode>();
  n->kind = k;
  return n;
}

NodePtr make_class(CodeRanges r) {
  auto n = make(RegexNode::Kind::kClass);
  n->ranges = normalize_ranges(std::move(r));
  return n;
}

CodeRanges digit() { return {{'0', '9'}}; }
CodeRanges word() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
CodeRanges space() { return {{'\t', '\r'}, {' ', ' '}}; }

// Recursive descent over the pattern; `pos_` is a byte offset, reported in errors.
class Parser {
 public:
  explicit Parser(std::string_view p) : p_(p) {}

  Result<NodePtr> parse() {
    if (!utf8::is_valid(p_)) return Status::error("the regex is not valid UTF-8");
    if (!p_.empty() && p_[0] == '^') ++pos_;
    auto n = alternation(0);
    if (!n.is_ok()) return n;
    if (pos_ < p_.size()) return fail(p_[pos_] == ')' ? "unbalanced ')'" : "unexpected character");
    return n;
  }

 private:
  Status fail(const std::string& why) const {
    return Status::error("regex error at offset " + std::to_string(pos_) + ": " + why);
  }
  bool at_end() const { return pos_ >= p_.size(); }
  // A trailing `$` ends the pattern: full match is implicit.
  bool at_anchor_end() const { return pos_ + 1 == p_.size() && p_[pos_] == '$'; }

  Result<NodePtr> alternation(int depth) {
    if (depth > 100) return fail("groups nested too deeply");
    auto alt = make(RegexNode::Kind::kAlt);
    while (true) {
      auto c = concat(depth);
      if (!c.is_ok()) return c;
      alt->kids.push_back(std::move(c.value()));
      if (at_end() || p_[pos_] != '|') break;
      ++pos_;
    }
    if (alt->kids.size() == 1) return std::move(alt->kids[0]);
    return alt;
  }

  Result<NodePtr> concat(int depth) {
    auto cat = make(RegexNode::Kind::kConcat);
    while (!at_end() && p_[pos_] != '|' && p_[pos_] != ')') {
      if (at_anchor_end()) {
        ++pos_;
        break;
      }
      auto a = atom(depth);
      if (!a.is_ok()) return a;
      auto r = quantified(std::move(a.value()));
      if (!r.is_ok()) return r;
      cat->kids.push_back(std::move(r.value()));
    }
    if (cat->kids.empty()) return make(RegexNode::Kind::kEmpty);
    if (cat->kids.size() == 1) return std::move(cat->kids[0]);
    return cat;
  }

  Result<int> number() {
    size_t start = pos_;
    int64_t v = 0;
    while (!at_end() && p_[pos_] >= '0' && p_[pos_] <= '9') {
      v = v * 10 + (p_[pos_++] - '0');
      if (v > kMaxRepeat) return fail("repetition count above " + std::to_string(kMaxRepeat));
    }
    if (pos_ == start) return fail("expected a number in {m,n}");
    return static_cast<int>(v);
  }

  Result<NodePtr> quantified(NodePtr a) {
    while (!at_end()) {
      const char c = p_[pos_];
      int lo, hi;
      if (c == '*' || c == '+' || c == '?') {
        ++pos_;
        lo = c == '+' ? 1 : 0;
        hi = c == '?' ? 1 : -1;
      } else if (c == '{') {
        ++pos_;
        auto m = number();
        if (!m.is_ok()) return m.status();
        lo = hi = m.value();
        if (!at_end() && p_[pos_] == ',') {
          ++pos_;
          hi = -1;
          if (!at_end() && p_[pos_] != '}') {
            auto n = number();
            if (!n.is_ok()) return n.status();
            hi = n.value();
            if (hi < lo) return fail("{m,n} with n < m");
          }
        }
        if (at_end() || p_[pos_] != '}') return fail("expected '}'");
        ++pos_;
      } else {
        break;
      }
      if (!at_end() && (p_[pos_] == '?' || p_[pos_] == '+'))
        return fail("lazy and possessive quantifiers are not supported");
      auto r = make(RegexNode::Kind::kRepeat);
      r->min = lo;
      r->max = hi;
      r->kids.push_back(std::move(a));
      a = std::move(r);
    }
    return a;
  }

  Result<NodePtr> atom(int depth) {
    const char c = p_[pos_];
    if (c == '(') {
      ++pos_;
      if (!at_end() && p_[pos_] == '?') {
        if (pos_ + 1 < p_.size() && p_[pos_ + 1] == ':') {
          pos_ += 2;
        } else {
          return fail("only (?:...) groups are supported (no lookaround, named groups or flags)");
        }
      }
      auto inner = alternation(depth + 1);
      if (!inner.is_ok()) return inner;
      if (at_end() || p_[pos_] != ')') return fail("missing ')'");
      ++pos_;
      return inner;
    }
    if (c == '[') return char_class();
    if (c == '.') {
      ++pos_;
      return make_class(complement_ranges({{'\n', '\n'}}));
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') return fail("quantifier with nothing to repeat");
    if (c == '^' || c == '$') return fail("anchors are only allowed at the very start and end");
    if (c == '\\') {
      auto r = escape(false);
      if (!r.is_ok()) return r.status();
      return make_class(std::move(r.value()));
    }
    const char32_t cp = utf8::decode(p_, pos_);
    return make_class({{cp, cp}});
  }

  Result<char32_t> hex(int digits) {
    if (pos_ + static_cast<size_t>(digits) > p_.size()) return fail("truncated hex escape");
    char32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char h = p_[pos_++];
      int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (d < 0) return fail("bad hex digit in escape");
      v = v * 16 + static_cast<char32_t>(d);
    }
    return v;
  }

  // After a backslash: the set it stands for. In a class, \b is a backspace.
  Result<CodeRanges> escape(bool in_class) {
    ++pos_;
    if (at_end()) return fail("trailing backslash");
    const char c = p_[pos_];
    auto one = [](char32_t cp) { return CodeRanges{{cp, cp}}; };
    switch (c) {
      case 'd': ++pos_; return digit();
      case 'w': ++pos_; return word();
      case 's': ++pos_; return space();
      case 'D': ++pos_; return complement_ranges(normalize_ranges(digit()));
      case 'W': ++pos_; return complement_ranges(normalize_ranges(word()));
      case 'S': ++pos_; return complement_ranges(normalize_ranges(space()));
      case 'n': ++pos_; return one('\n');
      case 't': ++pos_; return one('\t');
      case 'r': ++pos_; return one('\r');
      case 'f': ++pos_; return one('\f');
      case 'v': ++pos_; return one('\v');
      case 'x': {
        ++pos_;
        auto v = hex(2);
        if (!v.is_ok()) return v.status();
        return one(v.value());
      }
      case 'u': {
        ++pos_;
        auto v = hex(4);
        if (!v.is_ok()) return v.status();
        if (v.value() >= 0xD800 && v.value() <= 0xDFFF) return fail("surrogate code point in \\u escape");
        return one(v.value());
      }
      default: break;
    }
    if (c == 'b' && in_class) {
      ++pos_;
      return one('\b');
    }
    if ((c >= '0' && c <= '9') || c == 'b' || c == 'B' || c == 'A' || c == 'Z' || c == 'z' || c == 'k' || c == 'p' ||
        c == 'P')
      return fail(std::string("escape \\") + c + " (backreferences, word boundaries, Unicode properties) is not supported");
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return fail(std::string("unknown escape \\") + c);
    const char32_t cp = utf8::decode(p_, pos_);
    return one(cp);
  }

  Result<NodePtr> char_class() {
    ++pos_;
    bool negate = false;
    if (!at_end() && p_[pos_] == '^') {
      negate = true;
      ++pos_;
    }
    CodeRanges r;
    bool first = true;
    while (true) {
      if (at_end()) return fail("missing ']'");
      if (p_[pos_] == ']' && !first) break;
      first = false;
      // One item: a code point (possibly starting a range) or an escaped set.
      char32_t lo;
      if (p_[pos_] == '\\') {
        auto e = escape(true);
        if (!e.is_ok()) return e.status();
        if (e.value().size() != 1 || e.value()[0].first != e.value()[0].second) {
          r.insert(r.end(), e.value().begin(), e.value().end());
          continue;
        }
        lo = e.value()[0].first;
      } else {
        lo = utf8::decode(p_, pos_);
      }
      char32_t hi = lo;
      if (pos_ + 1 < p_.size() && p_[pos_] == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        if (p_[pos_] == '\\') {
          auto e = escape(true);
          if (!e.is_ok()) return e.status();
          if (e.value().size() != 1 || e.value()[0].first != e.value()[0].second) return fail("bad range in class");
          hi = e.value()[0].first;
        } else {
          hi = utf8::decode(p_, pos_);
        }
        if (hi < lo) return fail("range out of order in class");
      }
      r.emplace_back(lo, hi);
    }
    ++pos_;
    r = normalize_ranges(std::move(r));
    return make_class(negate ? complement_ranges(r) : r);
  }

  std::string_view p_;
  size_t pos_ = 0;
};

}  // namespace

CodeRanges normalize_ranges(CodeRanges r) {
  std::sort(r.begin(), r.end());
  CodeRanges out;
  for (auto [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

CodeRanges complement_ranges(const CodeRanges& r) {
  CodeRanges out;
  char32_t next = 0;
  for (auto [lo, hi] : r) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCode) out.emplace_back(next, kMaxCode);
  // Surrogates are not scalar values, so no UTF-8 text holds them.
  CodeRanges cut;
  for (auto [lo, hi] : out) {
    if (hi < 0xD800 || lo > 0xDFFF) {
      cut.emplace_back(lo, hi);
      continue;
    }
    if (lo < 0xD800) cut.emplace_back(lo, 0xD7FF);
    if (hi > 0xDFFF) cut.emplace_back(0xE000, hi);
  }
  return cut;
}

Result<std::unique_ptr<RegexNode>> parse_regex(std::string_view pattern) { return Parser(pattern).parse(); }

std::string regex_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (std::string_view("\\.^$|?*+()[]{}").find(c) != std::string_view::npos) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

}  // namespace quiver::structured
