// Recursive-descent parser for the Jinja subset, after jinja2.parser.Parser: this file
// parses tags and their bodies, jinja_parse_expr.cc the expressions inside them.
// Tags outside the subset (include, extends, import, block, ...) are errors naming them.
#include "tokenizer/jinja_parser.h"

namespace quiver::jinja {

// ---- statements ------------------------------------------------------------------

// Parses until one of `ends` opens a block; its name goes to *end_tag (the tag's
// remaining tokens are left for the caller).
Body Parser::parse_body(const std::set<std::string>& ends, std::string* end_tag) {
  Nest nest(*this);
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

StmtPtr Parser::parse_statement(const std::string& tag) {
  int line = cur().line;
  next();
  open_blocks_.emplace_back(tag, line);
  StmtPtr s = parse_tag(tag, line);
  open_blocks_.pop_back();
  return s;
}

StmtPtr Parser::parse_tag(const std::string& tag, int line) {
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

void Parser::parse_targets(std::vector<std::string>& targets, const char* stop) {
  bool paren = skip_op("(");
  targets.push_back(expect_name());
  while (skip_op(",")) {
    if (is_name(stop) || is_op(")")) break;
    targets.push_back(expect_name());
  }
  if (paren) expect_op(")");
}

void Parser::parse_signature(std::vector<std::pair<std::string, ExprPtr>>& params) {
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

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_template(); }

}  // namespace quiver::jinja
