// Values of the Jinja interpreter behind ChatTemplate, with Python semantics: the
// chat templates were written against jinja2, so truthiness, equality, str(), repr()
// and json.dumps must all behave as CPython does for the output to match byte for byte.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace quiver::jinja {

// Raised anywhere inside the interpreter; ChatTemplate turns it into a Status at the
// API boundary. Exceptions keep the recursive evaluator readable: threading a Result
// through every expression node would triple its size for no gain.
struct JinjaError : std::runtime_error {
  explicit JinjaError(const std::string& message, bool raised_by_template = false)
      : std::runtime_error(message), from_raise_exception(raised_by_template) {}
  bool from_raise_exception;  // raise_exception(...): the message is passed through as is
};

// Bounds on what one render may build: a template is a file that comes with the model
// folder, so `'a' * 10**12`, a doubling loop or `indent(10**12)` must end in an error, not
// in an allocation that takes the process down. A rendered prompt longer than 16 MiB is
// far past any model's context.
constexpr uint64_t kMaxValueSize = uint64_t{16} << 20;  // bytes of a string, items of a list
// A JinjaError when a string or list of n (bytes, items) would pass kMaxValueSize.
void check_size(uint64_t n, const char* what);

class Value;
class Dict;
struct Callable;
using List = std::vector<Value>;

class Value {
 public:
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };

  Value() = default;  // undefined
  static Value undefined(std::string hint = "");
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double f);
  static Value string(std::string s);
  static Value list(List items, bool is_tuple = false);
  static Value dict(std::shared_ptr<const Dict> d);
  static Value dict(Dict d);
  static Value make_namespace(Dict d);
  static Value callable(std::shared_ptr<const Callable> fn);

  static Value from_json(const nlohmann::ordered_json& j);
  static Value from_json(const nlohmann::json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_mapping() const { return kind_ == Kind::kDict || kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }  // int or bool
  double as_double() const;                                                   // any number
  const std::string& as_string() const { return s_; }
  const List& as_list() const { return *list_; }
  const Dict& as_dict() const { return *dict_; }  // dict or namespace
  Dict& namespace_dict() const { return *dict_; }  // namespaces are mutable, shared by reference
  const Callable& as_callable() const { return *fn_; }
  const std::string& undefined_hint() const { return s_; }
  const void* identity() const;  // for `is sameas`

  bool truthy() const;
  std::string str() const;   // Python str()
  std::string repr() const;  // Python repr()
  std::string type_name() const;  // as Python names it in error messages

 private:
  Kind kind_ = Kind::kUndefined;
  bool tuple_ = false;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0.0;
  std::string s_;  // string value, or the undefined value's hint
  std::shared_ptr<const List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const Callable> fn_;
};

// An insertion-ordered str -> Value map (Python dicts keep insertion order, and
// tojson must print keys in that order).
class Dict {
 public:
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value value);
  const std::vector<std::pair<std::string, Value>>& items() const { return items_; }
  size_t size() const { return items_.size(); }

 private:
  std::vector<std::pair<std::string, Value>> items_;
  std::unordered_map<std::string, size_t> index_;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // Finds a keyword argument by name, or the positional one at `pos` (if given).
  const Value* get(std::string_view name, std::optional<size_t> pos = std::nullopt) const;
};

class Interpreter;
struct Callable {
  std::string name;
  std::function<Value(Interpreter&, const CallArgs&)> fn;
};

// Python semantics shared by the evaluator and the builtins.
bool values_equal(const Value& a, const Value& b);
// -1/0/1 for <, ==, >; throws JinjaError when Python would raise TypeError.
int compare_values(const Value& a, const Value& b);
std::string py_float_repr(double f);

struct JsonOptions {
  std::optional<std::string> indent;  // json.dumps(indent=...): None, a count, or a string
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;  // transformers' tojson defaults to False
};
// json.dumps with the given options; throws JinjaError for values JSON cannot hold.
std::string to_json(const Value& v, const JsonOptions& options);

}  // namespace quiver::jinja
