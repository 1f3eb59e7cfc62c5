// The tree-walking interpreter for parsed Jinja templates, and the builtin filters,
// tests, methods and globals it dispatches to (jinja_builtins.cc).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_value.h"

namespace quiver::jinja {

// A variable scope. jinja2 gives every for-loop iteration, macro call and with-block
// its own scope, while if-blocks share their parent's; `set` writes the innermost one.
struct Frame {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Frame> parent;
  const Value* find(const std::string& name) const;
};

class Interpreter {
 public:
  // `globals` holds the render context (messages, bos_token, ...) and builtin
  // functions; it becomes the template's outermost scope.
  explicit Interpreter(std::shared_ptr<Frame> globals) : root_(std::move(globals)) {}

  std::string render(const Body& body);

  // Used by builtins that call back into the interpreter.
  Value call(const Value& callee, const CallArgs& args);
  Value getattr(const Value& obj, const std::string& name);  // obj.name
  Value getitem(const Value& obj, const Value& key);          // obj[key]
  Value apply_filter(const std::string& name, const Value& operand, const CallArgs& args);
  bool apply_test(const std::string& name, const Value& operand, const CallArgs& args);
  // Iterates like Python's iter(): list items, dict keys, string code points;
  // undefined iterates as empty. Other values are an error.
  List iterate(const Value& v);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  Flow exec_body(const Body& body, std::shared_ptr<Frame>& frame, std::string& out);
  Flow exec(const Stmt& s, std::shared_ptr<Frame>& frame, std::string& out);
  void exec_for(const Stmt& s, std::shared_ptr<Frame>& frame, std::string& out);
  Value make_macro(const Stmt& s, std::shared_ptr<Frame> frame, const Body* caller_body);
  void assign(Frame& frame, const std::vector<std::string>& targets, const Value& v, int line);

  Value eval(const Expr& e, const std::shared_ptr<Frame>& frame);
  CallArgs eval_args(const Expr& e, const std::shared_ptr<Frame>& frame, size_t first_arg);
  Value eval_binary(const std::string& op, const Value& a, const Value& b);
  bool eval_compare(const std::string& op, const Value& a, const Value& b);

  // One more statement, expression or loop iteration (enter(); leave() on the way out):
  // past kMaxSteps steps or kMaxEvalDepth open ones, a JinjaError. Llama 3.1's template
  // renders 2,000 messages and 20 tools within it, in 8 ms (test_jinja_bounds); an empty
  // loop reaches the bound in about 0.8 s.
  static constexpr int64_t kMaxSteps = 500'000;
  static constexpr int kMaxEvalDepth = 400;
  void enter();
  void leave() { --eval_depth_; }
  struct Scope {
    explicit Scope(Interpreter& i) : interp(i) { interp.enter(); }
    ~Scope() { interp.leave(); }
    Interpreter& interp;
  };

  std::shared_ptr<Frame> root_;
  int depth_ = 0;  // macro recursion guard
  int eval_depth_ = 0;
  int64_t steps_ = 0;
};

// Builtins (jinja_builtins.cc).
Value call_filter(Interpreter& interp, const std::string& name, const Value& operand, const CallArgs& args);
bool call_test(Interpreter& interp, const std::string& name, const Value& operand, const CallArgs& args);
// Methods of str, dict and list reachable as obj.name(...); nullopt when obj has none.
std::optional<Value> bound_method(const Value& obj, const std::string& name);
// range, dict, namespace, raise_exception, strftime_now, cycler/joiner helpers.
void install_globals(Frame& frame);
// Python's printf-style `fmt % args` (%s, %r, %d, %i, %%), for `%` on strings and the
// `format` filter.
std::string percent_format(const std::string& fmt, const List& args);
// Python slicing obj[start:stop:step] of a list or string.
Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step);

}  // namespace quiver::jinja
