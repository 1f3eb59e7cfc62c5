// Recursive-descent parser for the Jinja subset, following jinja2.parser.Parser's
// grammar and operator precedence (lowest first):
//   conditional (a if b else c) < or < and < not < comparisons/in < + - < ~
//   < * / // % < ** < unary - + < postfix (.attr [item] (call)) and | filter / is test
// Tags outside the subset (include, extends, import, block, ...) are errors naming them.
#include <set>

#include "tokenizer/jinja_ast.h"

namespace quiver::jinja {
namespace {

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

  // ---- statements ------------------------------------------------------------------

  // Parses until one of `ends` opens a block; its name goes to *end_tag (the tag's
  // remaining tokens are left for the caller).
  Body parse_body(const std::set<std::string>& ends, std::string* end_tag) {
    Body body;
    while (true) {
      const Token& tok = cur();
      if (tok.type == TokenType::kEnd) {
        if (!ends.empty()) {
          std::string wanted;
          for (const auto& e : ends) wanted += (wanted.empty() ? "'" : " or '") + e + "'";
          const auto& [tag, line] = open_blocks_.back();
          fail("unexpected end of template, looking for " + wanted + " to close '" + tag + "' from line " +
               std::to_string(line));
        }
        *end_tag = "";
        return body;
      }
      if (tok.type == TokenType::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kText;
        s->line = tok.line;
        s->text = tok.text;
        body.push_back(std::move(s));
        next();
        continue;
      }
      if (tok.type == TokenType::kVariableBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->line = tok.line;
        s->expr = parse_tuple(true);
        if (cur().type != TokenType::kVariableEnd) fail("expected end of print statement, got " + describe(cur()));
        next();
        body.push_back(std::move(s));
        continue;
      }
      // block
      next();
      if (cur().type != TokenType::kName) fail("expected a tag name, got " + describe(cur()));
      std::string tag = cur().text;
      if (ends.count(tag)) {
        *end_tag = tag;
        next();
        return body;
      }
      body.push_back(parse_statement(tag));
    }
  }

  StmtPtr parse_statement(const std::string& tag) {
    int line = cur().line;
    next();
    open_blocks_.emplace_back(tag, line);
    StmtPtr s = parse_tag(tag, line);
    open_blocks_.pop_back();
    return s;
  }

  StmtPtr parse_tag(const std::string& tag, int line) {
    auto s = std::make_unique<Stmt>();
    s->line = line;
    std::string end;
    if (tag == "if") {
      s->kind = StmtKind::kIf;
      ExprPtr cond = parse_tuple(true);
      expect_block_end();
      while (true) {
        Body b = parse_body({"elif", "else", "endif"}, &end);
        s->branches.emplace_back(std::move(cond), std::move(b));
        if (end == "elif") {
          cond = parse_tuple(true);
          expect_block_end();
          continue;
        }
        if (end == "else") {
          expect_block_end();
          Body e = parse_body({"endif"}, &end);
          s->branches.emplace_back(nullptr, std::move(e));
        }
        expect_block_end();
        return s;
      }
    }
    if (tag == "for") {
      s->kind = StmtKind::kFor;
      parse_targets(s->targets, "in");
      if (!skip_name("in")) fail("expected 'in' in for loop, got " + describe(cur()));
      s->expr = parse_tuple(false);
      if (skip_name("if")) s->condition = parse_tuple(true);
      if (is_name("recursive")) fail("unsupported construct 'recursive' loop");
      expect_block_end();
      s->body = parse_body({"endfor", "else"}, &end);
      if (end == "else") {
        expect_block_end();
        s->else_body = parse_body({"endfor"}, &end);
      }
      expect_block_end();
      return s;
    }
    if (tag == "set") {
      std::string first = expect_name();
      if (skip_op(".")) {
        s->kind = StmtKind::kSet;
        s->targets.push_back(first);
        s->name = expect_name();
        expect_op("=");
        s->expr = parse_tuple(true);
        expect_block_end();
        return s;
      }
      s->targets.push_back(first);
      while (skip_op(",")) {
        if (is_op("=")) break;
        s->targets.push_back(expect_name());
      }
      if (skip_op("=")) {
        s->kind = StmtKind::kSet;
        s->expr = parse_tuple(true);
        expect_block_end();
        return s;
      }
      if (s->targets.size() != 1) fail("expected '=' after set targets");
      s->kind = StmtKind::kSetBlock;
      if (is_op("|")) s->expr = parse_filter_chain(nullptr);
      expect_block_end();
      s->body = parse_body({"endset"}, &end);
      expect_block_end();
      return s;
    }
    if (tag == "macro") {
      s->kind = StmtKind::kMacro;
      s->name = expect_name();
      parse_signature(s->params);
      expect_block_end();
      s->body = parse_body({"endmacro"}, &end);
      if (cur().type == TokenType::kName) next();  // {% endmacro name %}
      expect_block_end();
      return s;
    }
    if (tag == "call") {
      s->kind = StmtKind::kCallBlock;
      if (is_op("(")) parse_signature(s->params);
      s->expr = parse_expression(true);
      if (s->expr->kind != ExprKind::kCall) fail("expected a call in call block", line);
      expect_block_end();
      s->body = parse_body({"endcall"}, &end);
      expect_block_end();
      return s;
    }
    if (tag == "filter") {
      s->kind = StmtKind::kFilterBlock;
      s->expr = parse_filter_chain(nullptr, /*first_bar_optional=*/true);
      expect_block_end();
      s->body = parse_body({"endfilter"}, &end);
      expect_block_end();
      return s;
    }
    if (tag == "with") {
      s->kind = StmtKind::kWith;
      while (cur().type != TokenType::kBlockEnd) {
        if (!s->params.empty()) expect_op(",");
        std::string n = expect_name();
        expect_op("=");
        s->params.emplace_back(n, parse_expression(true));
      }
      expect_block_end();
      s->body = parse_body({"endwith"}, &end);
      expect_block_end();
      return s;
    }
    if (tag == "generation") {
      s->kind = StmtKind::kTransparent;
      expect_block_end();
      s->body = parse_body({"endgeneration"}, &end);
      expect_block_end();
      return s;
    }
    if (tag == "break" || tag == "continue") {
      s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      expect_block_end();
      return s;
    }
    static const std::set<std::string> kEndTags = {"endif", "endfor", "elif", "else", "endset", "endmacro",
                                                   "endcall", "endfilter", "endwith", "endgeneration", "endraw"};
    if (kEndTags.count(tag)) fail("unexpected '" + tag + "'", line);
    fail("unsupported construct '" + tag + "'", line);
  }

  void parse_targets(std::vector<std::string>& targets, const char* stop) {
    bool paren = skip_op("(");
    targets.push_back(expect_name());
    while (skip_op(",")) {
      if (is_name(stop) || is_op(")")) break;
      targets.push_back(expect_name());
    }
    if (paren) expect_op(")");
  }

  void parse_signature(std::vector<std::pair<std::string, ExprPtr>>& params) {
    expect_op("(");
    while (!skip_op(")")) {
      if (!params.empty()) expect_op(",");
      if (skip_op(")")) break;
      std::string n = expect_name();
      ExprPtr def;
      if (skip_op("=")) def = parse_expression(true);
      params.emplace_back(n, std::move(def));
    }
  }

  // ---- expressions -----------------------------------------------------------------

  ExprPtr make(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // A comma-separated tuple without parentheses (as in `{{ a, b }}` or `set x = 1, 2`).
  ExprPtr parse_tuple(bool with_condition) {
    int line = cur().line;
    ExprPtr first = parse_expression(with_condition);
    if (!is_op(",")) return first;
    auto tuple = make(ExprKind::kTuple, line);
    tuple->children.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().type == TokenType::kBlockEnd || cur().type == TokenType::kVariableEnd || is_name("if")) break;
      tuple->children.push_back(parse_expression(with_condition));
    }
    return tuple;
  }

  ExprPtr parse_expression(bool with_condition) {
    int line = cur().line;
    ExprPtr expr = parse_or();
    if (!with_condition) return expr;
    while (skip_name("if")) {
      auto cond = make(ExprKind::kCondition, line);
      cond->children.push_back(std::move(expr));
      cond->children.push_back(parse_or());
      cond->children.push_back(skip_name("else") ? parse_expression(true) : nullptr);
      expr = std::move(cond);
    }
    return expr;
  }

  ExprPtr binary(ExprKind kind, ExprPtr a, ExprPtr b, int line, std::string name = "") {
    auto e = make(kind, line);
    e->name = std::move(name);
    e->children.push_back(std::move(a));
    e->children.push_back(std::move(b));
    return e;
  }

  ExprPtr parse_or() {
    int line = cur().line;
    ExprPtr left = parse_and();
    while (skip_name("or")) left = binary(ExprKind::kOr, std::move(left), parse_and(), line);
    return left;
  }

  ExprPtr parse_and() {
    int line = cur().line;
    ExprPtr left = parse_not();
    while (skip_name("and")) left = binary(ExprKind::kAnd, std::move(left), parse_not(), line);
    return left;
  }

  ExprPtr parse_not() {
    int line = cur().line;
    if (skip_name("not")) {
      auto e = make(ExprKind::kNot, line);
      e->children.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == TokenType::kOperator &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" || cur().text == ">" ||
           cur().text == ">=")) {
        op = cur().text;
        next();
      } else if (skip_name("in")) {
        op = "in";
      } else if (is_name("not") && peek().type == TokenType::kName && peek().text == "in") {
        next();
        next();
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(ExprKind::kCompare, line);
        cmp->children.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->children.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr parse_math1() {
    int line = cur().line;
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      next();
      left = binary(ExprKind::kBinary, std::move(left), parse_concat(), line, op);
    }
    return left;
  }

  ExprPtr parse_concat() {
    int line = cur().line;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = make(ExprKind::kConcat, line);
    e->children.push_back(std::move(first));
    while (skip_op("~")) e->children.push_back(parse_math2());
    return e;
  }

  ExprPtr parse_math2() {
    int line = cur().line;
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      next();
      left = binary(ExprKind::kBinary, std::move(left), parse_pow(), line, op);
    }
    return left;
  }

  ExprPtr parse_pow() {
    int line = cur().line;
    ExprPtr left = parse_unary(true);
    while (skip_op("**")) left = binary(ExprKind::kBinary, std::move(left), parse_unary(true), line, "**");
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    int line = cur().line;
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      auto e = make(is_op("-") ? ExprKind::kNeg : ExprKind::kPos, line);
      next();
      e->children.push_back(parse_unary(false));
      node = std::move(e);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& tok = cur();
    int line = tok.line;
    auto constant = [&](Value v) {
      auto e = make(ExprKind::kConst, line);
      e->value = std::move(v);
      return e;
    };
    switch (tok.type) {
      case TokenType::kName: {
        std::string n = tok.text;
        next();
        if (n == "true" || n == "True") return constant(Value::boolean(true));
        if (n == "false" || n == "False") return constant(Value::boolean(false));
        if (n == "none" || n == "None") return constant(Value::none());
        auto e = make(ExprKind::kName, line);
        e->name = n;
        return e;
      }
      case TokenType::kString: {
        std::string s = tok.text;
        next();
        while (cur().type == TokenType::kString) {  // adjacent literals concatenate
          s += cur().text;
          next();
        }
        return constant(Value::string(s));
      }
      case TokenType::kInteger: {
        int64_t v = tok.int_value;
        next();
        return constant(Value::integer(v));
      }
      case TokenType::kFloat: {
        double v = tok.float_value;
        next();
        return constant(Value::number(v));
      }
      default: break;
    }
    if (skip_op("(")) {
      if (skip_op(")")) return make(ExprKind::kTuple, line);
      ExprPtr first = parse_expression(true);
      if (skip_op(")")) return first;
      auto tuple = make(ExprKind::kTuple, line);
      tuple->children.push_back(std::move(first));
      while (skip_op(",")) {
        if (is_op(")")) break;
        tuple->children.push_back(parse_expression(true));
      }
      expect_op(")");
      return tuple;
    }
    if (skip_op("[")) {
      auto list = make(ExprKind::kList, line);
      while (!skip_op("]")) {
        if (!list->children.empty()) expect_op(",");
        if (skip_op("]")) break;
        list->children.push_back(parse_expression(true));
      }
      return list;
    }
    if (skip_op("{")) {
      auto dict = make(ExprKind::kDict, line);
      while (!skip_op("}")) {
        if (!dict->children.empty()) expect_op(",");
        if (skip_op("}")) break;
        dict->children.push_back(parse_expression(true));
        expect_op(":");
        dict->children.push_back(parse_expression(true));
      }
      return dict;
    }
    fail("unexpected " + describe(tok));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      int line = cur().line;
      if (skip_op(".")) {
        if (cur().type == TokenType::kInteger) {
          auto e = make(ExprKind::kGetItem, line);
          e->children.push_back(std::move(node));
          auto idx = make(ExprKind::kConst, line);
          idx->value = Value::integer(cur().int_value);
          next();
          e->children.push_back(std::move(idx));
          node = std::move(e);
          continue;
        }
        auto e = make(ExprKind::kGetAttr, line);
        e->name = expect_name();
        e->children.push_back(std::move(node));
        node = std::move(e);
      } else if (skip_op("[")) {
        node = parse_subscript(std::move(node), line);
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr target, int line) {
    ExprPtr parts[3];
    bool is_slice = false;
    int part = 0;
    while (!is_op("]")) {
      if (skip_op(":")) {
        is_slice = true;
        if (++part > 2) fail("too many ':' in subscript");
        continue;
      }
      if (parts[part]) fail("expected ']' or ':', got " + describe(cur()));
      parts[part] = parse_expression(true);
    }
    next();
    if (!is_slice) {
      if (!parts[0]) fail("empty subscript", line);
      auto e = make(ExprKind::kGetItem, line);
      e->children.push_back(std::move(target));
      e->children.push_back(std::move(parts[0]));
      return e;
    }
    auto e = make(ExprKind::kSlice, line);
    e->children.push_back(std::move(target));
    for (auto& p : parts) e->children.push_back(std::move(p));
    return e;
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!skip_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (skip_op(")")) break;
      if (is_op("*") || is_op("**")) fail("unsupported construct '*args' in call");
      if (cur().type == TokenType::kName && peek().type == TokenType::kOperator && peek().text == "=") {
        std::string n = cur().text;
        next();
        next();
        e.kwargs.emplace_back(n, parse_expression(true));
      } else {
        if (!e.kwargs.empty()) fail("positional argument after keyword argument");
        e.children.push_back(parse_expression(true));
      }
    }
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = make(ExprKind::kCall, cur().line);
    e->children.push_back(std::move(callee));
    parse_call_args(*e);
    return e;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter_chain(std::move(node));
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  // `| name(args) | name ...`; with first_bar_optional the leading '|' may be missing
  // (filter blocks: `{% filter upper %}`).
  ExprPtr parse_filter_chain(ExprPtr node, bool first_bar_optional = false) {
    bool first = true;
    while (is_op("|") || (first && first_bar_optional)) {
      if (!(first && first_bar_optional && !is_op("|"))) expect_op("|");
      first = false;
      int line = cur().line;
      std::string name = expect_name();
      while (skip_op(".")) {
        std::string part = expect_name();
        name.push_back('.');
        name.append(part);
      }
      if (!is_known_filter(name)) fail("no filter named '" + name + "'", line);
      auto e = make(ExprKind::kFilter, line);
      e->name = name;
      e->children.push_back(std::move(node));
      if (is_op("(")) parse_call_args(*e);
      node = std::move(e);
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    int line = cur().line;
    next();  // is
    bool negated = skip_name("not");
    std::string name = expect_name();
    if (!is_known_test(name)) fail("no test named '" + name + "'", line);
    auto e = make(ExprKind::kTest, line);
    e->name = name;
    e->negated = negated;
    e->children.push_back(std::move(node));
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((cur().type == TokenType::kName || cur().type == TokenType::kString || cur().type == TokenType::kInteger ||
                cur().type == TokenType::kFloat || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and") && !is_name("if")) {
      if (is_name("is")) fail("you cannot chain multiple tests with is");
      e->children.push_back(parse_postfix(parse_primary()));
    }
    return e;
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
  std::vector<std::pair<std::string, int>> open_blocks_;  // for "unexpected end of template"
};

}  // namespace

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_template(); }

}  // namespace quiver::jinja
