// Builtin filters (`value | name(args)`), following jinja2.filters, with `tojson` as
// transformers overrides it: json.dumps(x, ensure_ascii=False, indent=None,
// separators=None, sort_keys=False) instead of jinja2's HTML-safe version.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>
#include <utility>

#include "tokenizer/jinja_eval.h"
#include "tokenizer/jinja_text.h"

namespace quiver::jinja {
namespace {

using FilterFn = Value (*)(Interpreter&, const Value&, const CallArgs&);

const Value* arg(const CallArgs& a, const char* name, std::optional<size_t> pos) { return a.get(name, pos); }

// n spaces (none for n < 0), within the size bound.
std::string spaces(int64_t n, const char* what) {
  if (n <= 0) return "";
  check_size(static_cast<uint64_t>(n), what);
  return std::string(static_cast<size_t>(n), ' ');
}

bool arg_bool(const CallArgs& a, const char* name, size_t pos, bool def) {
  const Value* v = arg(a, name, pos);
  return v ? v->truthy() : def;
}

std::optional<std::string> arg_str(const CallArgs& a, const char* name, std::optional<size_t> pos) {
  const Value* v = arg(a, name, pos);
  if (!v || v->is_none() || v->is_undefined()) return std::nullopt;
  return v->str();
}

// jinja2's make_attrgetter: "a.b.0" walks item lookups.
Value get_attribute_path(Interpreter& in, Value v, const std::string& path) {
  size_t start = 0;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    int64_t index = 0;
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
                        std::from_chars(part.data(), part.data() + part.size(), index).ec == std::errc();
    v = in.getitem(v, digits ? Value::integer(index) : Value::string(part));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return v;
}

// The sort/unique/min/max key: the attribute (if given), lower-cased unless case_sensitive.
Value sort_key(Interpreter& in, const Value& item, const std::optional<std::string>& attribute, bool case_sensitive) {
  Value v = attribute ? get_attribute_path(in, item, *attribute) : item;
  if (!case_sensitive && v.is_string()) return Value::string(py_lower(v.as_string()));
  return v;
}

Value f_abs(Interpreter&, const Value& v, const CallArgs&) {
  if (v.is_float()) return Value::number(std::fabs(v.as_double()));
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == std::numeric_limits<int64_t>::min()) throw JinjaError("integer overflow in abs");
    return Value::integer(std::llabs(v.as_int()));
  }
  throw JinjaError("bad operand type for abs(): '" + v.type_name() + "'");
}

Value f_attr(Interpreter& in, const Value& v, const CallArgs& a) {
  const Value* name = arg(a, "name", 0);
  return in.getattr(v, name ? name->str() : "");
}

Value f_capitalize(Interpreter&, const Value& v, const CallArgs&) { return Value::string(py_capitalize(v.str())); }

Value f_length(Interpreter&, const Value& v, const CallArgs&) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return Value::integer(0);
    case Value::Kind::kString: return Value::integer(static_cast<int64_t>(utf8_length(v.as_string())));
    case Value::Kind::kList: return Value::integer(static_cast<int64_t>(v.as_list().size()));
    case Value::Kind::kDict: return Value::integer(static_cast<int64_t>(v.as_dict().size()));
    default: throw JinjaError("object of type '" + v.type_name() + "' has no len()");
  }
}

Value f_default(Interpreter&, const Value& v, const CallArgs& a) {
  const Value* def = arg(a, "default_value", 0);
  bool boolean = arg_bool(a, "boolean", 1, false);
  if (v.is_undefined() || (boolean && !v.truthy())) return def ? *def : Value::string("");
  return v;
}

Value f_escape(Interpreter&, const Value& v, const CallArgs&) {
  std::string out;
  for (char c : v.str()) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return Value::string(out);
}

Value f_first(Interpreter& in, const Value& v, const CallArgs&) {
  List items = in.iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(Interpreter& in, const Value& v, const CallArgs&) {
  List items = in.iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

std::optional<double> parse_float(const std::string& s) {
  std::string t = py_strip(s, std::nullopt, true, true);
  std::string clean;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '_' && i > 0 && i + 1 < t.size() && std::isdigit(static_cast<unsigned char>(t[i - 1])) &&
        std::isdigit(static_cast<unsigned char>(t[i + 1])))
      continue;
    clean.push_back(t[i]);
  }
  if (clean.empty() || clean.find('x') != std::string::npos || clean.find('X') != std::string::npos) return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return d;
}

Value f_float(Interpreter&, const Value& v, const CallArgs& a) {
  const Value* def = arg(a, "default", 0);
  Value fallback = def ? *def : Value::number(0.0);
  if (v.is_number()) return Value::number(v.as_double());
  if (v.is_string()) {
    if (auto d = parse_float(v.as_string())) return Value::number(*d);
  }
  return fallback;
}

Value f_int(Interpreter&, const Value& v, const CallArgs& a) {
  const Value* def = arg(a, "default", 0);
  Value fallback = def ? *def : Value::integer(0);
  int base = 10;
  if (const Value* b = arg(a, "base", 1); b && b->is_int()) base = static_cast<int>(b->as_int());
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  if (v.is_float()) {
    if (!std::isfinite(v.as_double())) return fallback;
    return Value::integer(static_cast<int64_t>(std::trunc(v.as_double())));
  }
  if (!v.is_string()) return fallback;
  std::string t = py_strip(v.as_string(), std::nullopt, true, true);
  std::string clean;
  for (char c : t)
    if (c != '_') clean.push_back(c);
  if (!clean.empty()) {
    char* end = nullptr;
    long long i = std::strtoll(clean.c_str(), &end, base);
    if (end == clean.c_str() + clean.size() && clean.find_first_of(" \t") == std::string::npos) return Value::integer(i);
  }
  if (auto d = parse_float(v.as_string()); d && std::isfinite(*d)) return Value::integer(static_cast<int64_t>(std::trunc(*d)));
  return fallback;
}

Value f_format(Interpreter&, const Value& v, const CallArgs& a) {
  return Value::string(percent_format(v.str(), a.positional));
}

std::vector<std::string> splitlines(const std::string& s) {
  std::vector<std::string> lines;
  std::u32string u = utf8_decode(s), line;
  for (size_t i = 0; i < u.size(); ++i) {
    char32_t c = u[i];
    bool brk = c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
               c == 0x2028 || c == 0x2029;
    if (!brk) {
      line.push_back(c);
      continue;
    }
    if (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ++i;
    lines.push_back(utf8_encode(line));
    line.clear();
  }
  if (!line.empty()) lines.push_back(utf8_encode(line));
  return lines;
}

Value f_indent(Interpreter&, const Value& v, const CallArgs& a) {
  const Value* width = arg(a, "width", 0);
  std::string pad = !width ? "    " : width->is_string() ? width->as_string() : spaces(width->as_int(), "indent's width");
  bool first = arg_bool(a, "first", 1, false);
  bool blank = arg_bool(a, "blank", 2, false);
  std::vector<std::string> lines = splitlines(v.str() + "\n");
  std::string rv;
  auto add = [&](const std::string& piece) {
    check_size(uint64_t{rv.size()} + piece.size(), "indent's result");
    rv += piece;
  };
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) add((i ? "\n" + pad : "") + lines[i]);
  } else if (!lines.empty()) {
    rv = lines[0];
    for (size_t i = 1; i < lines.size(); ++i) add("\n" + (lines[i].empty() ? "" : pad) + lines[i]);
  }
  return Value::string(first ? pad + rv : rv);
}

Value f_items(Interpreter&, const Value& v, const CallArgs&) {
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) throw JinjaError("Can only get item pairs from a mapping.");
  List items;
  for (const auto& [k, x] : v.as_dict().items()) items.push_back(Value::list({Value::string(k), x}, true));
  return Value::list(std::move(items));
}

Value f_join(Interpreter& in, const Value& v, const CallArgs& a) {
  std::string sep = arg_str(a, "d", 0).value_or("");
  auto attribute = arg_str(a, "attribute", 1);
  std::string out;
  bool first = true;
  for (const Value& item : in.iterate(v)) {
    const std::string piece = (attribute ? get_attribute_path(in, item, *attribute) : item).str();
    check_size(uint64_t{out.size()} + sep.size() + piece.size(), "join's result");
    if (!first) out += sep;
    first = false;
    out += piece;
  }
  return Value::string(out);
}

Value f_list(Interpreter& in, const Value& v, const CallArgs&) { return Value::list(in.iterate(v)); }
Value f_lower(Interpreter&, const Value& v, const CallArgs&) { return Value::string(py_lower(v.str())); }
Value f_upper(Interpreter&, const Value& v, const CallArgs&) { return Value::string(py_upper(v.str())); }
Value f_title(Interpreter&, const Value& v, const CallArgs&) { return Value::string(jinja_title(v.str())); }
Value f_safe(Interpreter&, const Value& v, const CallArgs&) { return v.is_string() ? v : Value::string(v.str()); }
Value f_string(Interpreter&, const Value& v, const CallArgs&) { return Value::string(v.str()); }

Value f_trim(Interpreter&, const Value& v, const CallArgs& a) {
  return Value::string(py_strip(v.str(), arg_str(a, "chars", 0), true, true));
}

Value f_map(Interpreter& in, const Value& v, const CallArgs& a) {
  List out;
  if (auto attribute = arg_str(a, "attribute", std::nullopt)) {
    const Value* def = arg(a, "default", std::nullopt);
    for (const Value& item : in.iterate(v)) {
      Value x = get_attribute_path(in, item, *attribute);
      out.push_back(x.is_undefined() && def ? *def : x);
    }
    return Value::list(std::move(out));
  }
  if (a.positional.empty()) throw JinjaError("map requires a filter argument");
  std::string filter = a.positional[0].str();
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  for (const Value& item : in.iterate(v)) out.push_back(in.apply_filter(filter, item, rest));
  return Value::list(std::move(out));
}

// select / reject / selectattr / rejectattr.
Value select_impl(Interpreter& in, const Value& v, const CallArgs& a, bool by_attribute, bool keep_when) {
  size_t next = 0;
  std::optional<std::string> attribute;
  if (by_attribute) {
    if (a.positional.empty()) throw JinjaError("missing attribute for selectattr/rejectattr");
    attribute = a.positional[next++].str();
  }
  std::optional<std::string> test;
  if (next < a.positional.size()) test = a.positional[next++].str();
  CallArgs test_args;
  test_args.positional.assign(a.positional.begin() + static_cast<long>(next), a.positional.end());
  test_args.keyword = a.keyword;
  List out;
  for (const Value& item : in.iterate(v)) {
    Value x = attribute ? get_attribute_path(in, item, *attribute) : item;
    bool passed = test ? in.apply_test(*test, x, test_args) : x.truthy();
    if (passed == keep_when) out.push_back(item);
  }
  return Value::list(std::move(out));
}
Value f_select(Interpreter& in, const Value& v, const CallArgs& a) { return select_impl(in, v, a, false, true); }
Value f_reject(Interpreter& in, const Value& v, const CallArgs& a) { return select_impl(in, v, a, false, false); }
Value f_selectattr(Interpreter& in, const Value& v, const CallArgs& a) { return select_impl(in, v, a, true, true); }
Value f_rejectattr(Interpreter& in, const Value& v, const CallArgs& a) { return select_impl(in, v, a, true, false); }

Value f_replace(Interpreter&, const Value& v, const CallArgs& a) {
  const Value* old = arg(a, "old", 0);
  const Value* repl = arg(a, "new", 1);
  const Value* count = arg(a, "count", 2);
  if (!old || !repl) throw JinjaError("replace requires old and new arguments");
  long n = count && !count->is_none() ? static_cast<long>(count->as_int()) : -1;
  return Value::string(py_replace(v.str(), old->str(), repl->str(), n));
}

Value f_reverse(Interpreter& in, const Value& v, const CallArgs&) {
  if (v.is_string()) {
    std::u32string u = utf8_decode(v.as_string());
    std::reverse(u.begin(), u.end());
    return Value::string(utf8_encode(u));
  }
  List items = in.iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_round(Interpreter&, const Value& v, const CallArgs& a) {
  const Value* p = arg(a, "precision", 0);
  int64_t precision = p ? p->as_int() : 0;
  std::string method = arg_str(a, "method", 1).value_or("common");
  if (!v.is_number()) throw JinjaError("round requires a number, got " + v.type_name());
  if (method == "common" && (v.is_int() || v.is_bool())) return Value::integer(v.as_int());
  double x = v.as_double();
  if (method == "common") {
    // Python's round(): correctly rounded, ties to even on the exact binary value,
    // which is what printf's %.*f does too.
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::clamp<int64_t>(precision, 0, 300)), x);
    return Value::number(std::strtod(buf, nullptr));
  }
  double scale = std::pow(10.0, static_cast<double>(precision));
  if (method == "ceil") return Value::number(std::ceil(x * scale) / scale);
  if (method == "floor") return Value::number(std::floor(x * scale) / scale);
  throw JinjaError("method must be common, ceil or floor");
}

Value f_sort(Interpreter& in, const Value& v, const CallArgs& a) {
  bool reverse = arg_bool(a, "reverse", 0, false);
  bool case_sensitive = arg_bool(a, "case_sensitive", 1, false);
  auto attribute = arg_str(a, "attribute", 2);
  List items = in.iterate(v);
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : items) keyed.emplace_back(sort_key(in, item, attribute, case_sensitive), item);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? compare_values(y.first, x.first) < 0 : compare_values(x.first, y.first) < 0;
  });
  List out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::list(std::move(out));
}

Value f_unique(Interpreter& in, const Value& v, const CallArgs& a) {
  bool case_sensitive = arg_bool(a, "case_sensitive", 0, false);
  auto attribute = arg_str(a, "attribute", 1);
  List out, seen;
  for (const Value& item : in.iterate(v)) {
    Value key = sort_key(in, item, attribute, case_sensitive);
    bool dup = std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return values_equal(s, key); });
    if (dup) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value min_max(Interpreter& in, const Value& v, const CallArgs& a, bool want_max) {
  bool case_sensitive = arg_bool(a, "case_sensitive", 0, false);
  auto attribute = arg_str(a, "attribute", 1);
  List items = in.iterate(v);
  if (items.empty()) return Value::undefined(std::string("No aggregated item, sequence was empty."));
  size_t best = 0;
  Value best_key = sort_key(in, items[0], attribute, case_sensitive);
  for (size_t i = 1; i < items.size(); ++i) {
    Value key = sort_key(in, items[i], attribute, case_sensitive);
    int c = compare_values(key, best_key);
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = key;
    }
  }
  return items[best];
}
Value f_max(Interpreter& in, const Value& v, const CallArgs& a) { return min_max(in, v, a, true); }
Value f_min(Interpreter& in, const Value& v, const CallArgs& a) { return min_max(in, v, a, false); }

Value f_sum(Interpreter& in, const Value& v, const CallArgs& a) {
  auto attribute = arg_str(a, "attribute", 0);
  const Value* start = arg(a, "start", 1);
  Value total = start ? *start : Value::integer(0);
  for (const Value& item : in.iterate(v)) {
    Value x = attribute ? get_attribute_path(in, item, *attribute) : item;
    if (!x.is_number() || !total.is_number()) throw JinjaError("unsupported operand type(s) for +: '" + total.type_name() + "' and '" + x.type_name() + "'");
    int64_t r = 0;
    if (total.is_float() || x.is_float()) total = Value::number(total.as_double() + x.as_double());
    else if (__builtin_add_overflow(total.as_int(), x.as_int(), &r)) throw JinjaError("integer overflow in sum");
    else total = Value::integer(r);
  }
  return total;
}

Value f_tojson(Interpreter&, const Value& v, const CallArgs& a) {
  JsonOptions o;
  o.ensure_ascii = arg_bool(a, "ensure_ascii", 0, false);
  if (const Value* indent = arg(a, "indent", 1); indent && !indent->is_none()) {
    o.indent = indent->is_string() ? indent->as_string() : spaces(indent->as_int(), "tojson's indent");
    o.item_separator = ",";
  }
  if (const Value* sep = arg(a, "separators", 2); sep && sep->is_list()) {
    if (sep->as_list().size() != 2) throw JinjaError("separators must be a pair of strings");
    o.item_separator = sep->as_list()[0].str();
    o.key_separator = sep->as_list()[1].str();
  }
  o.sort_keys = arg_bool(a, "sort_keys", 3, false);
  return Value::string(to_json(v, o));
}

Value f_dictsort(Interpreter&, const Value& v, const CallArgs& a) {
  if (!v.is_dict()) throw JinjaError("dictsort requires a mapping");
  bool case_sensitive = arg_bool(a, "case_sensitive", 0, false);
  std::string by = arg_str(a, "by", 1).value_or("key");
  bool reverse = arg_bool(a, "reverse", 2, false);
  List items;
  for (const auto& [k, x] : v.as_dict().items()) items.push_back(Value::list({Value::string(k), x}, true));
  size_t pos = by == "value" ? 1 : 0;
  auto key = [&](const Value& item) {
    const Value& x = item.as_list()[pos];
    return !case_sensitive && x.is_string() ? Value::string(py_lower(x.as_string())) : x;
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? compare_values(key(y), key(x)) < 0 : compare_values(key(x), key(y)) < 0;
  });
  return Value::list(std::move(items));
}

Value f_batch(Interpreter& in, const Value& v, const CallArgs& a) {
  const Value* count = arg(a, "linecount", 0);
  if (!count || count->as_int() <= 0) throw JinjaError("batch requires a positive line count");
  check_size(static_cast<uint64_t>(count->as_int()), "batch's line count");
  const Value* fill = arg(a, "fill_with", 1);
  List out, current;
  for (const Value& item : in.iterate(v)) {
    current.push_back(item);
    if (static_cast<int64_t>(current.size()) == count->as_int()) out.push_back(Value::list(std::exchange(current, {})));
  }
  if (!current.empty()) {
    if (fill && !fill->is_none())
      while (static_cast<int64_t>(current.size()) < count->as_int()) current.push_back(*fill);
    out.push_back(Value::list(std::move(current)));
  }
  return Value::list(std::move(out));
}

Value f_center(Interpreter&, const Value& v, const CallArgs& a) {
  const Value* w = arg(a, "width", 0);
  int64_t width = w ? w->as_int() : 80;
  std::string s = v.str();
  int64_t len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return Value::string(s);
  check_size(static_cast<uint64_t>(width), "center's width");
  int64_t margin = width - len;
  int64_t left = margin / 2 + (margin & width & 1);  // CPython's str.center
  return Value::string(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(margin - left), ' '));
}

Value f_truncate(Interpreter&, const Value& v, const CallArgs& a) {
  const Value* l = arg(a, "length", 0);
  int64_t length = l ? l->as_int() : 255;
  bool killwords = arg_bool(a, "killwords", 1, false);
  std::string end = arg_str(a, "end", 2).value_or("...");
  const Value* lw = arg(a, "leeway", 3);
  int64_t leeway = lw && !lw->is_none() ? lw->as_int() : 5;
  std::u32string s = utf8_decode(v.str());
  int64_t n = static_cast<int64_t>(s.size());
  if (n <= length + leeway) return Value::string(v.str());
  int64_t keep = std::max<int64_t>(0, length - static_cast<int64_t>(utf8_length(end)));
  std::u32string head = s.substr(0, static_cast<size_t>(keep));
  if (!killwords) {
    size_t space = head.rfind(U' ');
    if (space != std::u32string::npos) head = head.substr(0, space);
  }
  return Value::string(utf8_encode(head) + end);
}

Value f_pprint(Interpreter&, const Value& v, const CallArgs&) { return Value::string(v.repr()); }

Value f_wordcount(Interpreter&, const Value& v, const CallArgs&) {
  return Value::integer(static_cast<int64_t>(py_split(v.str(), std::nullopt, -1).size()));
}

const std::unordered_map<std::string, FilterFn>& filters() {
  static const std::unordered_map<std::string, FilterFn> kFilters = {
      {"abs", f_abs},         {"attr", f_attr},         {"capitalize", f_capitalize}, {"count", f_length},
      {"d", f_default},       {"default", f_default},   {"e", f_escape},              {"escape", f_escape},
      {"first", f_first},     {"float", f_float},       {"format", f_format},         {"indent", f_indent},
      {"int", f_int},         {"items", f_items},       {"join", f_join},             {"last", f_last},
      {"length", f_length},   {"list", f_list},         {"lower", f_lower},           {"map", f_map},
      {"max", f_max},         {"min", f_min},           {"reject", f_reject},         {"rejectattr", f_rejectattr},
      {"replace", f_replace}, {"reverse", f_reverse},   {"round", f_round},           {"safe", f_safe},
      {"select", f_select},   {"selectattr", f_selectattr}, {"sort", f_sort},         {"string", f_string},
      {"sum", f_sum},         {"title", f_title},       {"tojson", f_tojson},         {"trim", f_trim},
      {"unique", f_unique},   {"upper", f_upper},       {"wordcount", f_wordcount},   {"dictsort", f_dictsort},
      {"batch", f_batch},     {"center", f_center},     {"truncate", f_truncate},     {"pprint", f_pprint},
  };
  return kFilters;
}

}  // namespace

std::string percent_format(const std::string& fmt, const List& args) {
  std::string out;
  size_t next_arg = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%' || i + 1 >= fmt.size()) {
      out.push_back(fmt[i]);
      continue;
    }
    char spec = fmt[++i];
    if (spec == '%') {
      out.push_back('%');
      continue;
    }
    if (next_arg >= args.size()) throw JinjaError("not enough arguments for format string");
    const Value& x = args[next_arg++];
    if (spec == 's') out += x.str();
    else if (spec == 'r') out += x.repr();
    else if ((spec == 'd' || spec == 'i') && x.is_number()) out += std::to_string(static_cast<int64_t>(std::trunc(x.as_double())));
    else throw JinjaError(std::string("unsupported format character '") + spec + "'");
  }
  if (next_arg < args.size()) throw JinjaError("not all arguments converted during string formatting");
  return out;
}

bool is_known_filter(const std::string& name) { return filters().count(name) != 0; }

Value call_filter(Interpreter& interp, const std::string& name, const Value& operand, const CallArgs& args) {
  auto it = filters().find(name);
  if (it == filters().end()) throw JinjaError("no filter named '" + name + "'");
  return it->second(interp, operand, args);
}

}  // namespace quiver::jinja
