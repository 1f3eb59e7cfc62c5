// The Jinja parser's class, shared by its two halves: jinja_parser.cc (statements:
// tags and their bodies) and jinja_parse_expr.cc (expressions). Internal to the
// tokenizer folder; everything else calls parse() from jinja_ast.h.
#pragma once

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_ast.h"

namespace quiver::jinja {

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Body parse_template() {
    std::string end;
    Body body = parse_body({}, &end);
    return body;
  }

 private:
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  void next() {
    if (i_ + 1 < t_.size()) ++i_;
  }

  [[noreturn]] void fail(const std::string& what, int line = -1) const {
    throw JinjaError("line " + std::to_string(line < 0 ? cur().line : line) + ": " + what);
  }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case TokenType::kEnd: return "end of template";
      case TokenType::kBlockEnd: return "end of statement block";
      case TokenType::kVariableEnd: return "end of print statement";
      case TokenType::kString: return "string";
      default: return "'" + t.text + "'";
    }
  }

  bool is_op(const char* op) const { return cur().type == TokenType::kOperator && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == TokenType::kName && cur().text == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != TokenType::kName) fail("expected a name, got " + describe(cur()));
    std::string n = cur().text;
    next();
    return n;
  }
  void expect_block_end() {
    if (cur().type != TokenType::kBlockEnd) fail("expected end of statement block, got " + describe(cur()));
    next();
  }

  // ---- statements (jinja_parser.cc) ----
  Body parse_body(const std::set<std::string>& ends, std::string* end_tag);
  StmtPtr parse_statement(const std::string& tag);
  StmtPtr parse_tag(const std::string& tag, int line);
  void parse_targets(std::vector<std::string>& targets, const char* stop);
  void parse_signature(std::vector<std::pair<std::string, ExprPtr>>& params);

  // ---- expressions (jinja_parse_expr.cc) ----
  ExprPtr make(ExprKind kind, int line);
  ExprPtr parse_tuple(bool with_condition);
  ExprPtr parse_expression(bool with_condition);
  ExprPtr binary(ExprKind kind, ExprPtr a, ExprPtr b, int line, std::string name = "");
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr target, int line);
  void parse_call_args(Expr& e);
  ExprPtr parse_call(ExprPtr callee);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_filter_chain(ExprPtr node, bool first_bar_optional = false);
  ExprPtr parse_test(ExprPtr node);

  // Statements and expressions nested deeper than this are an error, so that neither the
  // parser's recursion nor the interpreter's overflows the stack (real templates nest < 10).
  static constexpr int kMaxNesting = 100;
  struct Nest {
    explicit Nest(Parser& p) : parser(p) {
      if (++parser.nesting_ > kMaxNesting) parser.fail("nested over " + std::to_string(kMaxNesting) + " deep");
    }
    ~Nest() { --parser.nesting_; }
    Parser& parser;
  };

  const std::vector<Token>& t_;
  size_t i_ = 0;
  int nesting_ = 0;
  std::vector<std::pair<std::string, int>> open_blocks_;  // for "unexpected end of template"
};

}  // namespace quiver::jinja
