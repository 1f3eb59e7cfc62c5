// Tree-walking interpreter for parsed Jinja templates (see jinja_eval.h).
//
// Undefined values follow jinja2's default `Undefined`: they render as "", are falsy,
// iterate as empty and compare equal only to other undefined values, but using one in
// arithmetic, as a callee, or as the object of `.attr`/`[item]` is an error carrying
// the message jinja2 would raise (e.g. "'dict object' has no attribute 'x'").
#include "tokenizer/jinja_eval.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tokenizer/jinja_text.h"

namespace quiver::jinja {
namespace {

constexpr int kMaxCallDepth = 200;

[[noreturn]] void fail_undefined(const Value& v) {
  throw JinjaError(v.undefined_hint().empty() ? "undefined value used" : v.undefined_hint());
}

std::string attr_hint(const Value& obj, const std::string& name) {
  if (obj.is_none()) return "'None' has no attribute '" + name + "'";
  return "'" + obj.type_name() + " object' has no attribute '" + name + "'";
}

}  // namespace

const Value* Frame::find(const std::string& name) const {
  for (const Frame* f = this; f; f = f->parent.get()) {
    auto it = f->vars.find(name);
    if (it != f->vars.end()) return &it->second;
  }
  return nullptr;
}

void Interpreter::enter() {
  ++eval_depth_;
  if (++steps_ > kMaxSteps)
    throw JinjaError("the template takes over " + std::to_string(kMaxSteps) + " steps to render");
  if (eval_depth_ > kMaxEvalDepth) throw JinjaError("expressions nested over " + std::to_string(kMaxEvalDepth) + " deep");
}

// out += piece, within the output bound.
static void append_output(std::string& out, const std::string& piece) {
  check_size(uint64_t{out.size()} + piece.size(), "the rendered text");
  out += piece;
}

std::string Interpreter::render(const Body& body) {
  std::string out;
  auto frame = std::make_shared<Frame>();
  frame->parent = root_;
  exec_body(body, frame, out);
  return out;
}

Interpreter::Flow Interpreter::exec_body(const Body& body, std::shared_ptr<Frame>& frame, std::string& out) {
  for (const auto& s : body) {
    Flow flow = exec(*s, frame, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

void Interpreter::assign(Frame& frame, const std::vector<std::string>& targets, const Value& v, int line) {
  if (targets.size() == 1) {
    frame.vars[targets[0]] = v;
    return;
  }
  List items = iterate(v);
  if (items.size() != targets.size())
    throw JinjaError("line " + std::to_string(line) + ": cannot unpack " + std::to_string(items.size()) +
                     " values into " + std::to_string(targets.size()) + " names");
  for (size_t i = 0; i < targets.size(); ++i) frame.vars[targets[i]] = items[i];
}

Interpreter::Flow Interpreter::exec(const Stmt& s, std::shared_ptr<Frame>& frame, std::string& out) {
  Scope scope(*this);
  switch (s.kind) {
    case StmtKind::kText: append_output(out, s.text); return Flow::kNormal;
    case StmtKind::kOutput: append_output(out, eval(*s.expr, frame).str()); return Flow::kNormal;
    case StmtKind::kIf:
      for (const auto& [cond, body] : s.branches) {
        if (!cond || eval(*cond, frame).truthy()) return exec_body(body, frame, out);
      }
      return Flow::kNormal;
    case StmtKind::kFor: exec_for(s, frame, out); return Flow::kNormal;
    case StmtKind::kSet: {
      Value v = eval(*s.expr, frame);
      if (s.name.empty()) {
        assign(*frame, s.targets, v, s.line);
        return Flow::kNormal;
      }
      const Value* target = frame->find(s.targets[0]);
      if (!target || !target->is_namespace())
        throw JinjaError("line " + std::to_string(s.line) + ": cannot assign attribute on non-namespace object");
      target->namespace_dict().set(s.name, v);
      return Flow::kNormal;
    }
    case StmtKind::kSetBlock: {
      std::string captured;
      auto child = std::make_shared<Frame>();
      child->parent = frame;
      exec_body(s.body, child, captured);
      Value v = Value::string(captured);
      if (s.expr) {
        // The filter chain was parsed with a null innermost operand: bind it to the text.
        std::vector<const Expr*> chain;
        for (const Expr* e = s.expr.get(); e; e = e->children[0].get()) chain.push_back(e);
        for (auto it = chain.rbegin(); it != chain.rend(); ++it) v = apply_filter((*it)->name, v, eval_args(**it, frame, 1));
      }
      frame->vars[s.targets[0]] = v;
      return Flow::kNormal;
    }
    case StmtKind::kMacro: frame->vars[s.name] = make_macro(s, frame, nullptr); return Flow::kNormal;
    case StmtKind::kCallBlock: {
      const Expr& call = *s.expr;
      Value callee = eval(*call.children[0], frame);
      CallArgs args = eval_args(call, frame, 1);
      args.keyword.emplace_back("caller", make_macro(s, frame, &s.body));
      append_output(out, this->call(callee, args).str());
      return Flow::kNormal;
    }
    case StmtKind::kFilterBlock: {
      std::string captured;
      auto child = std::make_shared<Frame>();
      child->parent = frame;
      exec_body(s.body, child, captured);
      std::vector<const Expr*> chain;
      for (const Expr* e = s.expr.get(); e; e = e->children[0].get()) chain.push_back(e);
      Value v = Value::string(captured);
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) v = apply_filter((*it)->name, v, eval_args(**it, frame, 1));
      append_output(out, v.str());
      return Flow::kNormal;
    }
    case StmtKind::kWith: {
      auto child = std::make_shared<Frame>();
      child->parent = frame;
      for (const auto& [name, expr] : s.params) child->vars[name] = eval(*expr, frame);
      return exec_body(s.body, child, out);
    }
    case StmtKind::kBreak: return Flow::kBreak;
    case StmtKind::kContinue: return Flow::kContinue;
    case StmtKind::kTransparent: return exec_body(s.body, frame, out);
  }
  return Flow::kNormal;
}

void Interpreter::exec_for(const Stmt& s, std::shared_ptr<Frame>& frame, std::string& out) {
  List items = iterate(eval(*s.expr, frame));
  if (s.condition) {
    List kept;
    for (const Value& item : items) {
      auto probe = std::make_shared<Frame>();
      probe->parent = frame;
      assign(*probe, s.targets, item, s.line);
      if (eval(*s.condition, probe).truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    auto child = std::make_shared<Frame>();
    child->parent = frame;
    exec_body(s.else_body, child, out);
    return;
  }
  const int64_t n = static_cast<int64_t>(items.size());
  auto cycle = std::make_shared<int64_t>(0);  // index0 of the current iteration, for loop.cycle
  auto cycle_fn = std::make_shared<Callable>();
  cycle_fn->name = "cycle";
  cycle_fn->fn = [cycle](Interpreter&, const CallArgs& args) -> Value {
    if (args.positional.empty()) throw JinjaError("no items for cycling given");
    return args.positional[static_cast<size_t>(*cycle) % args.positional.size()];
  };
  Value cycle_value = Value::callable(cycle_fn);
  // loop.changed(*values): true on the first call and whenever the values differ from
  // the previous call's.
  auto last_changed = std::make_shared<std::optional<Value>>();
  auto changed_fn = std::make_shared<Callable>();
  changed_fn->name = "changed";
  changed_fn->fn = [last_changed](Interpreter&, const CallArgs& args) -> Value {
    Value now = Value::list(args.positional, true);
    bool changed = !*last_changed || !values_equal(**last_changed, now);
    *last_changed = now;
    return Value::boolean(changed);
  };
  Value changed_value = Value::callable(changed_fn);
  for (int64_t i = 0; i < n; ++i) {
    Scope step(*this);  // an iteration is a step even when its body is empty
    *cycle = i;
    Dict loop;
    loop.set("index0", Value::integer(i));
    loop.set("index", Value::integer(i + 1));
    loop.set("revindex0", Value::integer(n - i - 1));
    loop.set("revindex", Value::integer(n - i));
    loop.set("first", Value::boolean(i == 0));
    loop.set("last", Value::boolean(i == n - 1));
    loop.set("length", Value::integer(n));
    loop.set("depth", Value::integer(1));
    loop.set("depth0", Value::integer(0));
    if (i > 0) loop.set("previtem", items[static_cast<size_t>(i - 1)]);
    if (i + 1 < n) loop.set("nextitem", items[static_cast<size_t>(i + 1)]);
    loop.set("cycle", cycle_value);
    loop.set("changed", changed_value);
    auto child = std::make_shared<Frame>();
    child->parent = frame;
    child->vars["loop"] = Value::dict(std::move(loop));
    assign(*child, s.targets, items[static_cast<size_t>(i)], s.line);
    Flow flow = exec_body(s.body, child, out);
    if (flow == Flow::kBreak) break;
  }
}

Value Interpreter::make_macro(const Stmt& s, std::shared_ptr<Frame> frame, const Body* caller_body) {
  auto fn = std::make_shared<Callable>();
  fn->name = caller_body ? "caller" : s.name;
  const Stmt* stmt = &s;
  fn->fn = [stmt, frame, caller_body](Interpreter& interp, const CallArgs& args) -> Value {
    if (++interp.depth_ > kMaxCallDepth) {
      interp.depth_ = 0;
      throw JinjaError("maximum macro recursion depth exceeded");
    }
    auto local = std::make_shared<Frame>();
    local->parent = frame;
    const auto& params = stmt->params;
    List varargs;
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < params.size()) local->vars[params[i].first] = args.positional[i];
      else varargs.push_back(args.positional[i]);
    }
    Dict kwargs;
    for (const auto& [k, v] : args.keyword) {
      bool is_param = k == "caller";
      for (const auto& p : params) is_param |= p.first == k;
      if (is_param) local->vars[k] = v;
      else kwargs.set(k, v);
    }
    for (const auto& [name, def] : params) {
      if (local->vars.count(name)) continue;
      local->vars[name] = def ? interp.eval(*def, local)
                              : Value::undefined("parameter '" + name + "' was not provided");
    }
    local->vars["varargs"] = Value::list(std::move(varargs), /*is_tuple=*/true);
    local->vars["kwargs"] = Value::dict(std::move(kwargs));
    std::string out;
    interp.exec_body(caller_body ? *caller_body : stmt->body, local, out);
    --interp.depth_;
    return Value::string(out);
  };
  return Value::callable(fn);
}

CallArgs Interpreter::eval_args(const Expr& e, const std::shared_ptr<Frame>& frame, size_t first_arg) {
  CallArgs args;
  for (size_t i = first_arg; i < e.children.size(); ++i) args.positional.push_back(eval(*e.children[i], frame));
  for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, eval(*v, frame));
  return args;
}

Value Interpreter::call(const Value& callee, const CallArgs& args) {
  if (callee.is_callable()) return callee.as_callable().fn(*this, args);
  if (callee.is_undefined()) fail_undefined(callee);
  throw JinjaError("'" + callee.type_name() + "' object is not callable");
}

Value Interpreter::getattr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_namespace()) {
    const Value* v = obj.as_dict().find(name);
    return v ? *v : Value::undefined("'Namespace' object has no attribute '" + name + "'");
  }
  if (auto method = bound_method(obj, name)) return *method;
  if (obj.is_dict()) {
    const Value* v = obj.as_dict().find(name);
    if (v) return *v;
  }
  return Value::undefined(attr_hint(obj, name));
}

Value Interpreter::getitem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_mapping() && key.is_string()) {
    const Value* v = obj.as_dict().find(key.as_string());
    if (v) return *v;
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t n = obj.is_list() ? static_cast<int64_t>(obj.as_list().size()) : 0;
    std::u32string chars;
    if (obj.is_string()) {
      chars = utf8_decode(obj.as_string());
      n = static_cast<int64_t>(chars.size());
    }
    int64_t i = key.as_int();
    if (i < 0) i += n;
    if (i >= 0 && i < n) {
      if (obj.is_list()) return obj.as_list()[static_cast<size_t>(i)];
      return Value::string(utf8_encode(std::u32string(1, chars[static_cast<size_t>(i)])));
    }
    return Value::undefined(obj.type_name() + " object has no element " + std::to_string(key.as_int()));
  }
  if (key.is_string() && !obj.is_mapping()) return getattr(obj, key.as_string());
  if (key.is_string() && obj.is_dict()) {
    if (auto method = bound_method(obj, key.as_string())) return *method;
  }
  return Value::undefined(attr_hint(obj, key.str()));
}

List Interpreter::iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return v.as_list();
    case Value::Kind::kDict: {
      List keys;
      for (const auto& kv : v.as_dict().items()) keys.push_back(Value::string(kv.first));
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      for (char32_t c : utf8_decode(v.as_string())) chars.push_back(Value::string(utf8_encode(std::u32string(1, c))));
      return chars;
    }
    default: throw JinjaError("'" + v.type_name() + "' object is not iterable");
  }
}

Value Interpreter::apply_filter(const std::string& name, const Value& operand, const CallArgs& args) {
  return call_filter(*this, name, operand, args);
}

bool Interpreter::apply_test(const std::string& name, const Value& operand, const CallArgs& args) {
  return call_test(*this, name, operand, args);
}

Value Interpreter::eval(const Expr& e, const std::shared_ptr<Frame>& frame) {
  Scope scope(*this);
  try {
    switch (e.kind) {
      case ExprKind::kConst: return e.value;
      case ExprKind::kName: {
        const Value* v = frame->find(e.name);
        return v ? *v : Value::undefined("'" + e.name + "' is undefined");
      }
      case ExprKind::kList:
      case ExprKind::kTuple: {
        List items;
        for (const auto& c : e.children) items.push_back(eval(*c, frame));
        return Value::list(std::move(items), e.kind == ExprKind::kTuple);
      }
      case ExprKind::kDict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
          Value k = eval(*e.children[i], frame);
          if (!k.is_string()) throw JinjaError("unsupported dict key of type " + k.type_name());
          d.set(k.as_string(), eval(*e.children[i + 1], frame));
        }
        return Value::dict(std::move(d));
      }
      case ExprKind::kGetAttr: return getattr(eval(*e.children[0], frame), e.name);
      case ExprKind::kGetItem: return getitem(eval(*e.children[0], frame), eval(*e.children[1], frame));
      case ExprKind::kSlice: {
        Value obj = eval(*e.children[0], frame);
        auto part = [&](size_t i) { return e.children[i] ? eval(*e.children[i], frame) : Value::none(); };
        return slice_value(obj, part(1), part(2), part(3));
      }
      case ExprKind::kCall: {
        Value callee = eval(*e.children[0], frame);
        return call(callee, eval_args(e, frame, 1));
      }
      case ExprKind::kFilter:
        return apply_filter(e.name, eval(*e.children[0], frame), eval_args(e, frame, 1));
      case ExprKind::kTest:
        return Value::boolean(apply_test(e.name, eval(*e.children[0], frame), eval_args(e, frame, 1)) != e.negated);
      case ExprKind::kNeg:
      case ExprKind::kPos: {
        Value v = eval(*e.children[0], frame);
        if (v.is_undefined()) fail_undefined(v);
        if (!v.is_number()) throw JinjaError("bad operand type for unary " + std::string(e.kind == ExprKind::kNeg ? "-" : "+") + ": '" + v.type_name() + "'");
        if (e.kind == ExprKind::kPos) return v.is_bool() ? Value::integer(v.as_int()) : v;
        if (v.is_float()) return Value::number(-v.as_double());
        if (v.as_int() == std::numeric_limits<int64_t>::min()) throw JinjaError("integer overflow in unary -");
        return Value::integer(-v.as_int());
      }
      case ExprKind::kNot: return Value::boolean(!eval(*e.children[0], frame).truthy());
      case ExprKind::kAnd: {
        Value a = eval(*e.children[0], frame);
        return a.truthy() ? eval(*e.children[1], frame) : a;
      }
      case ExprKind::kOr: {
        Value a = eval(*e.children[0], frame);
        return a.truthy() ? a : eval(*e.children[1], frame);
      }
      case ExprKind::kBinary: return eval_binary(e.name, eval(*e.children[0], frame), eval(*e.children[1], frame));
      case ExprKind::kConcat: {
        std::string s;
        for (const auto& c : e.children) {
          const std::string piece = eval(*c, frame).str();
          check_size(uint64_t{s.size()} + piece.size(), "a ~ concatenation");
          s += piece;
        }
        return Value::string(s);
      }
      case ExprKind::kCompare: {
        Value left = eval(*e.children[0], frame);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.children[i + 1], frame);
          if (!eval_compare(e.ops[i], left, right)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case ExprKind::kCondition:
        if (eval(*e.children[1], frame).truthy()) return eval(*e.children[0], frame);
        return e.children[2] ? eval(*e.children[2], frame) : Value::undefined("conditional expression has no else branch");
    }
  } catch (const JinjaError& err) {
    // Prefix the innermost line once; raise_exception messages stay untouched.
    std::string what = err.what();
    if (err.from_raise_exception || what.rfind("line ", 0) == 0) throw;
    throw JinjaError("line " + std::to_string(e.line) + ": " + what);
  }
  return Value();
}

Value Interpreter::eval_binary(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  auto type_error = [&]() -> JinjaError {
    return JinjaError("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
  };
  bool numeric = a.is_number() && b.is_number();
  bool use_float = numeric && (a.is_float() || b.is_float());
  // int64 arithmetic that would wrap is an error (Python's ints would grow instead).
  auto checked = [&](bool overflow, const int64_t& r) {  // r by reference: read after the builtin wrote it
    if (overflow) throw JinjaError("integer overflow in " + op);
    return Value::integer(r);
  };
  int64_t r = 0;
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      check_size(uint64_t{a.as_string().size()} + b.as_string().size(), "a + of strings");
      return Value::string(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      check_size(uint64_t{a.as_list().size()} + b.as_list().size(), "a + of lists");
      List items = a.as_list();
      items.insert(items.end(), b.as_list().begin(), b.as_list().end());
      return Value::list(std::move(items), a.is_tuple());
    }
    if (!numeric) {
      if (a.is_string() || b.is_string())
        throw JinjaError("can only concatenate str (not \"" + (a.is_string() ? b : a).type_name() + "\") to str");
      throw type_error();
    }
    if (use_float) return Value::number(a.as_double() + b.as_double());
    return checked(__builtin_add_overflow(a.as_int(), b.as_int(), &r), r);
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) {
      const int64_t times = std::max<int64_t>(0, b.as_int());
      const uint64_t unit = a.is_string() ? a.as_string().size() : a.as_list().size();
      uint64_t total = 0;
      if (__builtin_mul_overflow(unit, static_cast<uint64_t>(times), &total)) total = std::numeric_limits<uint64_t>::max();
      check_size(total, "a * repetition");
      if (a.is_string()) {
        std::string s;
        for (int64_t i = 0; i < times; ++i) s += a.as_string();
        return Value::string(s);
      }
      List items;
      for (int64_t i = 0; i < times; ++i) items.insert(items.end(), a.as_list().begin(), a.as_list().end());
      return Value::list(std::move(items), a.is_tuple());
    }
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return eval_binary(op, b, a);
    if (!numeric) throw type_error();
    if (use_float) return Value::number(a.as_double() * b.as_double());
    return checked(__builtin_mul_overflow(a.as_int(), b.as_int(), &r), r);
  }
  if (op == "%" && a.is_string()) return Value::string(percent_format(a.as_string(), b.is_tuple() ? b.as_list() : List{b}));
  if (!numeric) throw type_error();
  if (op == "-") {
    if (use_float) return Value::number(a.as_double() - b.as_double());
    return checked(__builtin_sub_overflow(a.as_int(), b.as_int(), &r), r);
  }
  if (op == "/") {
    if (b.as_double() == 0.0) throw JinjaError("division by zero");
    return Value::number(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (b.as_double() == 0.0) throw JinjaError(op == "//" ? "integer division or modulo by zero" : "modulo by zero");
    if (use_float) {
      double x = a.as_double(), y = b.as_double();
      // CPython's float_divmod.
      double m = std::fmod(x, y);
      double div = (x - m) / y;
      if (m != 0.0 && ((y < 0) != (m < 0))) {
        m += y;
        div -= 1.0;
      }
      if (op == "%") return Value::number(m != 0.0 ? m : std::copysign(0.0, y));
      double floor_div = std::floor(div);
      if (div - floor_div > 0.5) floor_div += 1.0;
      return Value::number(div != 0.0 ? floor_div : std::copysign(0.0, x / y));
    }
    int64_t x = a.as_int(), y = b.as_int();
    if (x == std::numeric_limits<int64_t>::min() && y == -1) {
      if (op == "%") return Value::integer(0);
      throw JinjaError("integer overflow in //");
    }
    int64_t q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) {
      --q;
      m += y;
    }
    return op == "//" ? Value::integer(q) : Value::integer(m);
  }
  if (op == "**") {
    if (!use_float && b.as_int() >= 0) {  // by squaring: 64 rounds at most
      int64_t result = 1, base = a.as_int();
      bool overflow = false;
      for (int64_t e = b.as_int(); e > 0 && !overflow; e >>= 1) {
        if (e & 1) overflow = __builtin_mul_overflow(result, base, &result);
        if (e > 1 && !overflow) overflow = __builtin_mul_overflow(base, base, &base);
      }
      return checked(overflow, result);
    }
    return Value::number(std::pow(a.as_double(), b.as_double()));
  }
  throw JinjaError("unknown operator " + op);
}

bool Interpreter::eval_compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return values_equal(a, b);
  if (op == "!=") return !values_equal(a, b);
  if (op == "in" || op == "notin") {
    bool found = false;
    if (b.is_string()) {
      if (!a.is_string()) throw JinjaError("'in <string>' requires string as left operand, not " + a.type_name());
      found = b.as_string().find(a.as_string()) != std::string::npos;
    } else if (b.is_list()) {
      for (const Value& item : b.as_list()) found = found || values_equal(item, a);
    } else if (b.is_dict()) {
      found = a.is_string() && b.as_dict().find(a.as_string()) != nullptr;
    } else if (!b.is_undefined()) {
      throw JinjaError("argument of type '" + b.type_name() + "' is not iterable");
    }
    return op == "in" ? found : !found;
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  int c = compare_values(a, b);
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  if (op == ">=") return c >= 0;
  throw JinjaError("unknown comparison " + op);
}

}  // namespace quiver::jinja
