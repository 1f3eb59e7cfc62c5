// Expression half of the Jinja parser (see jinja_parser.h), with jinja2's grammar and
// operator precedence (lowest first):
//   conditional (a if b else c) < or < and < not < comparisons/in < + - < ~
//   < * / // % < ** < unary - + < postfix (.attr [item] (call)) and | filter / is test
#include "tokenizer/jinja_parser.h"

namespace quiver::jinja {

// ---- expressions -----------------------------------------------------------------

ExprPtr Parser::make(ExprKind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

// A comma-separated tuple without parentheses (as in `{{ a, b }}` or `set x = 1, 2`).
ExprPtr Parser::parse_tuple(bool with_condition) {
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

ExprPtr Parser::parse_expression(bool with_condition) {
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

ExprPtr Parser::binary(ExprKind kind, ExprPtr a, ExprPtr b, int line, std::string name) {
  auto e = make(kind, line);
  e->name = std::move(name);
  e->children.push_back(std::move(a));
  e->children.push_back(std::move(b));
  return e;
}

ExprPtr Parser::parse_or() {
  int line = cur().line;
  ExprPtr left = parse_and();
  while (skip_name("or")) left = binary(ExprKind::kOr, std::move(left), parse_and(), line);
  return left;
}

ExprPtr Parser::parse_and() {
  int line = cur().line;
  ExprPtr left = parse_not();
  while (skip_name("and")) left = binary(ExprKind::kAnd, std::move(left), parse_not(), line);
  return left;
}

ExprPtr Parser::parse_not() {
  int line = cur().line;
  if (skip_name("not")) {
    auto e = make(ExprKind::kNot, line);
    e->children.push_back(parse_not());
    return e;
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
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

ExprPtr Parser::parse_math1() {
  int line = cur().line;
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    std::string op = cur().text;
    next();
    left = binary(ExprKind::kBinary, std::move(left), parse_concat(), line, op);
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  int line = cur().line;
  ExprPtr first = parse_math2();
  if (!is_op("~")) return first;
  auto e = make(ExprKind::kConcat, line);
  e->children.push_back(std::move(first));
  while (skip_op("~")) e->children.push_back(parse_math2());
  return e;
}

ExprPtr Parser::parse_math2() {
  int line = cur().line;
  ExprPtr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    std::string op = cur().text;
    next();
    left = binary(ExprKind::kBinary, std::move(left), parse_pow(), line, op);
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  int line = cur().line;
  ExprPtr left = parse_unary(true);
  while (skip_op("**")) left = binary(ExprKind::kBinary, std::move(left), parse_unary(true), line, "**");
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  Nest nest(*this);
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

ExprPtr Parser::parse_primary() {
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

ExprPtr Parser::parse_postfix(ExprPtr node) {
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

ExprPtr Parser::parse_subscript(ExprPtr target, int line) {
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

void Parser::parse_call_args(Expr& e) {
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

ExprPtr Parser::parse_call(ExprPtr callee) {
  auto e = make(ExprKind::kCall, cur().line);
  e->children.push_back(std::move(callee));
  parse_call_args(*e);
  return e;
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
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
ExprPtr Parser::parse_filter_chain(ExprPtr node, bool first_bar_optional) {
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

ExprPtr Parser::parse_test(ExprPtr node) {
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

}  // namespace quiver::jinja
