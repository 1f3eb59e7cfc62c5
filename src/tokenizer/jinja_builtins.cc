// Builtin tests (`x is name`), methods of str/dict/list (`x.strip()`, `d.items()`),
// template globals (range, dict, namespace, raise_exception, strftime_now) and Python
// slicing. Methods that would mutate a list or dict are refused, as transformers'
// ImmutableSandboxedEnvironment refuses them.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>
#include <set>

#include "tokenizer/jinja_eval.h"
#include "tokenizer/jinja_text.h"

namespace quiver::jinja {
namespace {

using TestFn = bool (*)(Interpreter&, const Value&, const CallArgs&);

const Value& need_arg(const CallArgs& a, size_t i, const char* what) {
  if (i >= a.positional.size()) throw JinjaError(std::string(what) + " requires an argument");
  return a.positional[i];
}

bool t_defined(Interpreter&, const Value& v, const CallArgs&) { return !v.is_undefined(); }
bool t_undefined(Interpreter&, const Value& v, const CallArgs&) { return v.is_undefined(); }
bool t_none(Interpreter&, const Value& v, const CallArgs&) { return v.is_none(); }
bool t_boolean(Interpreter&, const Value& v, const CallArgs&) { return v.is_bool(); }
bool t_true(Interpreter&, const Value& v, const CallArgs&) { return v.is_bool() && v.as_bool(); }
bool t_false(Interpreter&, const Value& v, const CallArgs&) { return v.is_bool() && !v.as_bool(); }
bool t_integer(Interpreter&, const Value& v, const CallArgs&) { return v.is_int(); }
bool t_float(Interpreter&, const Value& v, const CallArgs&) { return v.is_float(); }
bool t_number(Interpreter&, const Value& v, const CallArgs&) { return v.is_number(); }
bool t_string(Interpreter&, const Value& v, const CallArgs&) { return v.is_string(); }
bool t_mapping(Interpreter&, const Value& v, const CallArgs&) { return v.is_dict(); }
bool t_callable(Interpreter&, const Value& v, const CallArgs&) { return v.is_callable(); }
// Undefined counts as iterable and as a sequence: jinja2's Undefined defines
// __iter__, __len__ and __getitem__.
bool t_iterable(Interpreter&, const Value& v, const CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
}
bool t_sequence(Interpreter&, const Value& v, const CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
}
bool t_lower(Interpreter&, const Value& v, const CallArgs&) {
  std::string s = v.str();
  return py_lower(s) == s && py_upper(s) != s;
}
bool t_upper(Interpreter&, const Value& v, const CallArgs&) {
  std::string s = v.str();
  return py_upper(s) == s && py_lower(s) != s;
}

int64_t int_mod(const Value& v, const Value& d) {
  if (v.is_undefined()) throw JinjaError(v.undefined_hint());
  if (!v.is_number() || !d.is_number()) throw JinjaError("unsupported operand type(s) for %: '" + v.type_name() + "'");
  if (v.is_float() || d.is_float()) return std::fmod(v.as_double(), d.as_double()) == 0.0 ? 0 : 1;
  if (d.as_int() == 0) throw JinjaError("integer division or modulo by zero");
  return v.as_int() % d.as_int();
}
bool t_even(Interpreter&, const Value& v, const CallArgs&) { return int_mod(v, Value::integer(2)) == 0; }
bool t_odd(Interpreter&, const Value& v, const CallArgs&) { return int_mod(v, Value::integer(2)) != 0; }
bool t_divisibleby(Interpreter&, const Value& v, const CallArgs& a) { return int_mod(v, need_arg(a, 0, "divisibleby")) == 0; }

bool t_eq(Interpreter&, const Value& v, const CallArgs& a) { return values_equal(v, need_arg(a, 0, "eq")); }
bool t_ne(Interpreter&, const Value& v, const CallArgs& a) { return !values_equal(v, need_arg(a, 0, "ne")); }
bool t_lt(Interpreter&, const Value& v, const CallArgs& a) { return compare_values(v, need_arg(a, 0, "lt")) < 0; }
bool t_le(Interpreter&, const Value& v, const CallArgs& a) { return compare_values(v, need_arg(a, 0, "le")) <= 0; }
bool t_gt(Interpreter&, const Value& v, const CallArgs& a) { return compare_values(v, need_arg(a, 0, "gt")) > 0; }
bool t_ge(Interpreter&, const Value& v, const CallArgs& a) { return compare_values(v, need_arg(a, 0, "ge")) >= 0; }

bool t_sameas(Interpreter&, const Value& v, const CallArgs& a) {
  const Value& o = need_arg(a, 0, "sameas");
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kBool: return v.as_bool() == o.as_bool();
    case Value::Kind::kInt: return v.as_int() == o.as_int();  // CPython caches small ints
    case Value::Kind::kString: return v.as_string() == o.as_string();  // and interns literals
    case Value::Kind::kFloat: return false;
    default: return v.identity() == o.identity();
  }
}

bool t_in(Interpreter&, const Value& v, const CallArgs& a) {
  const Value& seq = need_arg(a, 0, "in");
  if (seq.is_string()) return v.is_string() && seq.as_string().find(v.as_string()) != std::string::npos;
  if (seq.is_list()) return std::any_of(seq.as_list().begin(), seq.as_list().end(), [&](const Value& x) { return values_equal(x, v); });
  if (seq.is_dict()) return v.is_string() && seq.as_dict().find(v.as_string()) != nullptr;
  throw JinjaError("argument of type '" + seq.type_name() + "' is not iterable");
}

bool t_filter(Interpreter&, const Value& v, const CallArgs&) { return v.is_string() && is_known_filter(v.as_string()); }
bool t_test(Interpreter&, const Value& v, const CallArgs&) { return v.is_string() && is_known_test(v.as_string()); }
bool t_escaped(Interpreter&, const Value&, const CallArgs&) { return false; }

const std::unordered_map<std::string, TestFn>& tests() {
  static const std::unordered_map<std::string, TestFn> kTests = {
      {"defined", t_defined},   {"undefined", t_undefined}, {"none", t_none},       {"boolean", t_boolean},
      {"true", t_true},         {"false", t_false},         {"integer", t_integer}, {"float", t_float},
      {"number", t_number},     {"string", t_string},       {"mapping", t_mapping}, {"callable", t_callable},
      {"iterable", t_iterable}, {"sequence", t_sequence},   {"lower", t_lower},     {"upper", t_upper},
      {"even", t_even},         {"odd", t_odd},             {"divisibleby", t_divisibleby},
      {"eq", t_eq},             {"equalto", t_eq},          {"==", t_eq},           {"ne", t_ne},
      {"!=", t_ne},             {"lt", t_lt},               {"lessthan", t_lt},     {"<", t_lt},
      {"le", t_le},             {"<=", t_le},               {"gt", t_gt},           {"greaterthan", t_gt},
      {">", t_gt},              {"ge", t_ge},               {">=", t_ge},           {"sameas", t_sameas},
      {"in", t_in},             {"filter", t_filter},       {"test", t_test},       {"escaped", t_escaped},
  };
  return kTests;
}

// ---- methods -------------------------------------------------------------------------

std::optional<std::string> opt_str(const CallArgs& a, size_t i) {
  if (i >= a.positional.size() || a.positional[i].is_none()) return std::nullopt;
  return a.positional[i].str();
}

Value str_method(const std::string& self, const std::string& name, const CallArgs& a) {
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return Value::string(py_strip(self, opt_str(a, 0), name != "rstrip", name != "lstrip"));
  if (name == "split" || name == "rsplit") {
    auto sep = a.get("sep", 0);
    auto maxsplit = a.get("maxsplit", 1);
    std::optional<std::string> s = sep && !sep->is_none() ? std::optional<std::string>(sep->str()) : std::nullopt;
    if (s && s->empty()) throw JinjaError("empty separator");
    long m = maxsplit ? static_cast<long>(maxsplit->as_int()) : -1;
    std::vector<std::string> parts;
    if (name == "rsplit" && m >= 0 && s) {  // split from the right: reverse, split, reverse
      std::string rs(self.rbegin(), self.rend()), rsep(s->rbegin(), s->rend());
      parts = py_split(rs, rsep, m);
      for (auto& p : parts) std::reverse(p.begin(), p.end());
      std::reverse(parts.begin(), parts.end());
    } else {
      parts = py_split(self, s, m);
    }
    List out;
    for (auto& p : parts) out.push_back(Value::string(p));
    return Value::list(std::move(out));
  }
  if (name == "startswith" || name == "endswith") {
    const Value& prefix = need_arg(a, 0, name.c_str());
    List options = prefix.is_list() ? prefix.as_list() : List{prefix};
    for (const Value& p : options) {
      const std::string& ps = p.as_string();
      bool hit = name == "startswith" ? self.compare(0, ps.size(), ps) == 0 && self.size() >= ps.size()
                                      : self.size() >= ps.size() && self.compare(self.size() - ps.size(), ps.size(), ps) == 0;
      if (hit) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  if (name == "upper") return Value::string(py_upper(self));
  if (name == "lower") return Value::string(py_lower(self));
  if (name == "title") return Value::string(py_title(self));
  if (name == "capitalize") return Value::string(py_capitalize(self));
  if (name == "replace") {
    long count = a.positional.size() > 2 ? static_cast<long>(a.positional[2].as_int()) : -1;
    return Value::string(py_replace(self, need_arg(a, 0, "replace").str(), need_arg(a, 1, "replace").str(), count));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "count") {
    std::string needle = need_arg(a, 0, name.c_str()).str();
    if (name == "count") {
      if (needle.empty()) return Value::integer(static_cast<int64_t>(utf8_length(self)) + 1);
      int64_t n = 0;
      for (size_t p = self.find(needle); p != std::string::npos; p = self.find(needle, p + needle.size())) ++n;
      return Value::integer(n);
    }
    size_t p = name == "rfind" ? self.rfind(needle) : self.find(needle);
    if (p == std::string::npos) {
      if (name == "index") throw JinjaError("substring not found");
      return Value::integer(-1);
    }
    return Value::integer(static_cast<int64_t>(utf8_length(self.substr(0, p))));
  }
  if (name == "join") {
    std::string out;
    const Value& items = need_arg(a, 0, "join");
    if (!items.is_list()) throw JinjaError("join expects a list");
    for (size_t i = 0; i < items.as_list().size(); ++i) out += (i ? self : "") + items.as_list()[i].str();
    return Value::string(out);
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace") {
    if (self.empty()) return Value::boolean(false);
    for (char32_t c : utf8_decode(self)) {
      bool ok = name == "isdigit" ? (c >= '0' && c <= '9')
              : name == "isalpha" ? ((c | 32) >= 'a' && (c | 32) <= 'z') || c >= 0xC0
              : name == "isalnum" ? ((c | 32) >= 'a' && (c | 32) <= 'z') || (c >= '0' && c <= '9') || c >= 0xC0
                                  : py_isspace(c);
      if (!ok) return Value::boolean(false);
    }
    return Value::boolean(true);
  }
  if (name == "format") {
    std::string out;
    size_t auto_index = 0;
    for (size_t i = 0; i < self.size(); ++i) {
      char c = self[i];
      if ((c == '{' || c == '}') && i + 1 < self.size() && self[i + 1] == c) {
        out.push_back(c);
        ++i;
        continue;
      }
      if (c != '{') {
        out.push_back(c);
        continue;
      }
      size_t close = self.find('}', i);
      if (close == std::string::npos) throw JinjaError("Single '{' encountered in format string");
      std::string field = self.substr(i + 1, close - i - 1);
      if (field.find(':') != std::string::npos || field.find('!') != std::string::npos)
        throw JinjaError("unsupported format spec in '" + field + "'");
      const Value* v = nullptr;
      if (field.empty()) v = a.positional.size() > auto_index ? &a.positional[auto_index++] : nullptr;
      else if (std::all_of(field.begin(), field.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        size_t index = 0;
        if (std::from_chars(field.data(), field.data() + field.size(), index).ec != std::errc())
          throw JinjaError("format field index '" + field + "' is out of range");
        v = a.get("", index);
      }
      else v = a.get(field);
      if (!v) throw JinjaError("missing argument for format field '" + field + "'");
      out += v->str();
      i = close;
    }
    return Value::string(out);
  }
  throw JinjaError("'str' object has no attribute '" + name + "'");
}

bool is_str_method(const std::string& n) {
  static const std::set<std::string> k = {"strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith",
                                          "upper", "lower", "title", "capitalize", "replace", "find", "rfind", "index",
                                          "count", "join", "isdigit", "isalpha", "isalnum", "isspace", "format"};
  return k.count(n) != 0;
}

Value dict_method(const Value& self, const std::string& name, const CallArgs& a) {
  const Dict& d = self.as_dict();
  if (name == "get") {
    const Value* v = d.find(need_arg(a, 0, "get").str());
    if (v) return *v;
    return a.positional.size() > 1 ? a.positional[1] : Value::none();
  }
  List out;
  for (const auto& [k, v] : d.items()) {
    if (name == "items") out.push_back(Value::list({Value::string(k), v}, true));
    else if (name == "keys") out.push_back(Value::string(k));
    else out.push_back(v);
  }
  return Value::list(std::move(out));
}

Value list_method(const Value& self, const std::string& name, const CallArgs& a) {
  const List& l = self.as_list();
  const Value& x = need_arg(a, 0, name.c_str());
  int64_t n = 0;
  for (size_t i = 0; i < l.size(); ++i) {
    if (!values_equal(l[i], x)) continue;
    if (name == "index") return Value::integer(static_cast<int64_t>(i));
    ++n;
  }
  if (name == "index") throw JinjaError(x.repr() + " is not in list");
  return Value::integer(n);
}

Value make_method(const Value& self, const std::string& name, Value (*impl)(const Value&, const std::string&, const CallArgs&)) {
  auto fn = std::make_shared<Callable>();
  fn->name = name;
  fn->fn = [self, name, impl](Interpreter&, const CallArgs& a) { return impl(self, name, a); };
  return Value::callable(fn);
}

Value unsafe_method(const Value& self, const std::string& name) {
  auto fn = std::make_shared<Callable>();
  fn->name = name;
  std::string type = self.type_name();
  fn->fn = [type, name](Interpreter&, const CallArgs&) -> Value {
    throw JinjaError("access to attribute '" + name + "' of '" + type + "' object is unsafe.");
  };
  return Value::callable(fn);
}

}  // namespace

bool is_known_test(const std::string& name) { return tests().count(name) != 0; }

bool call_test(Interpreter& interp, const std::string& name, const Value& operand, const CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) throw JinjaError("no test named '" + name + "'");
  return it->second(interp, operand, args);
}

std::optional<Value> bound_method(const Value& obj, const std::string& name) {
  if (obj.is_string() && is_str_method(name))
    return make_method(obj, name, [](const Value& s, const std::string& n, const CallArgs& a) { return str_method(s.as_string(), n, a); });
  if (obj.is_dict()) {
    if (name == "items" || name == "keys" || name == "values" || name == "get") return make_method(obj, name, dict_method);
    if (name == "update" || name == "pop" || name == "popitem" || name == "setdefault" || name == "clear")
      return unsafe_method(obj, name);
  }
  if (obj.is_list()) {
    if (name == "index" || name == "count") return make_method(obj, name, list_method);
    if (name == "append" || name == "extend" || name == "insert" || name == "pop" || name == "remove" ||
        name == "reverse" || name == "sort" || name == "clear")
      return unsafe_method(obj, name);
  }
  return std::nullopt;
}

Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) throw JinjaError(obj.undefined_hint());
  if (!obj.is_list() && !obj.is_string()) throw JinjaError("'" + obj.type_name() + "' object is not subscriptable");
  std::u32string chars;
  int64_t n;
  if (obj.is_string()) {
    chars = utf8_decode(obj.as_string());
    n = static_cast<int64_t>(chars.size());
  } else {
    n = static_cast<int64_t>(obj.as_list().size());
  }
  auto as_index = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_none()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) throw JinjaError("slice indices must be integers or None");
    return v.as_int();
  };
  int64_t st = as_index(step).value_or(1);
  if (st == 0) throw JinjaError("slice step cannot be zero");
  // CPython's PySlice_AdjustIndices.
  auto adjust = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t i = *v;
    if (i < 0) {
      i += n;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= n) {
      i = st < 0 ? n - 1 : n;
    }
    return i;
  };
  int64_t b = adjust(as_index(start), st < 0 ? n - 1 : 0);
  int64_t e = adjust(as_index(stop), st < 0 ? -1 : n);
  List items;
  std::u32string out_chars;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) {
    if (obj.is_string()) out_chars.push_back(chars[static_cast<size_t>(i)]);
    else items.push_back(obj.as_list()[static_cast<size_t>(i)]);
  }
  if (obj.is_string()) return Value::string(utf8_encode(out_chars));
  return Value::list(std::move(items), obj.is_tuple());
}

void install_globals(Frame& frame) {
  auto add = [&](const std::string& name, std::function<Value(Interpreter&, const CallArgs&)> fn) {
    auto c = std::make_shared<Callable>();
    c->name = name;
    c->fn = std::move(fn);
    frame.vars[name] = Value::callable(c);
  };
  add("range", [](Interpreter&, const CallArgs& a) {
    for (const Value& v : a.positional)
      if (!v.is_int() && !v.is_bool()) throw JinjaError("range() integer arguments expected, got " + v.type_name());
    int64_t start = 0, stop = 0, step = 1;
    if (a.positional.size() == 1) stop = a.positional[0].as_int();
    else if (a.positional.size() >= 2) {
      start = a.positional[0].as_int();
      stop = a.positional[1].as_int();
      if (a.positional.size() > 2) step = a.positional[2].as_int();
    } else {
      throw JinjaError("range expected at least 1 argument");
    }
    if (step == 0) throw JinjaError("range() arg 3 must not be zero");
    List out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (out.size() >= 100000) throw JinjaError("range too big, maximum size for range is 100000");  // sandbox MAX_RANGE
      out.push_back(Value::integer(i));
    }
    return Value::list(std::move(out));
  });
  add("dict", [](Interpreter&, const CallArgs& a) {
    Dict d;
    if (!a.positional.empty()) {
      const Value& src = a.positional[0];
      if (src.is_dict()) {
        for (const auto& [k, v] : src.as_dict().items()) d.set(k, v);
      } else if (src.is_list()) {
        for (const Value& pair : src.as_list()) {
          if (!pair.is_list() || pair.as_list().size() != 2) throw JinjaError("dict() sequence elements must be pairs");
          d.set(pair.as_list()[0].str(), pair.as_list()[1]);
        }
      } else {
        throw JinjaError("'" + src.type_name() + "' object is not iterable");
      }
    }
    for (const auto& [k, v] : a.keyword) d.set(k, v);
    return Value::dict(std::move(d));
  });
  add("namespace", [](Interpreter&, const CallArgs& a) {
    Dict d;
    if (!a.positional.empty() && a.positional[0].is_mapping())
      for (const auto& [k, v] : a.positional[0].as_dict().items()) d.set(k, v);
    for (const auto& [k, v] : a.keyword) d.set(k, v);
    return Value::make_namespace(std::move(d));
  });
  add("raise_exception", [](Interpreter&, const CallArgs& a) -> Value {
    throw JinjaError(a.positional.empty() ? "" : a.positional[0].str(), /*raised_by_template=*/true);
  });
  add("strftime_now", [](Interpreter&, const CallArgs& a) {
    std::string format = a.positional.empty() ? "" : a.positional[0].str();
    std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[512];
    size_t n = format.empty() ? 0 : std::strftime(buf, sizeof(buf), format.c_str(), &local);
    return Value::string(std::string(buf, n));
  });
}

}  // namespace quiver::jinja
