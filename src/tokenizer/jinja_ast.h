// Tokens and syntax tree of the Jinja subset ChatTemplate supports, plus the lexer
// and parser entry points (jinja_lexer.cc, jinja_parser.cc).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace quiver::jinja {

enum class TokenType { kText, kVariableBegin, kVariableEnd, kBlockBegin, kBlockEnd, kName, kString, kInteger, kFloat, kOperator, kEnd };

struct Token {
  TokenType type;
  std::string text;  // text data, name, operator, or the decoded string literal
  int line;
  int64_t int_value = 0;
  double float_value = 0.0;
};

// Splits a template into tokens, applying jinja2's whitespace control exactly as
// transformers configures it: trim_blocks, lstrip_blocks, `-`/`+` markers, newline
// normalisation and removal of one trailing newline. Throws JinjaError.
std::vector<Token> lex(const std::string& source);

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kConst,      // value
  kName,       // name
  kList,       // children
  kTuple,      // children
  kDict,       // children: key0, value0, key1, value1, ...
  kGetAttr,    // children[0].name
  kGetItem,    // children[0][children[1]]
  kSlice,      // children[0][children[1]:children[2]:children[3]] (null = omitted)
  kCall,       // children[0](children[1..], kwargs)
  kFilter,     // children[0] | name(children[1..], kwargs); children[0] null in filter blocks
  kTest,       // children[0] is [not] name(children[1..], kwargs)
  kNeg,        // -children[0]
  kPos,        // +children[0]
  kNot,        // not children[0]
  kAnd,        // children[0] and children[1]
  kOr,         // children[0] or children[1]
  kBinary,     // children[0] name children[1], name in + - * / // % **
  kConcat,     // children joined with ~
  kCompare,    // children[0] ops[0] children[1] ops[1] children[2] ...
  kCondition,  // children[0] if children[1] else children[2] (null: undefined)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;
  std::string name;
  bool negated = false;  // kTest: `is not`
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare: == != < <= > >= in notin
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // branches (cond null for else)
  kFor,          // for targets in expr [if cond] body [else else_body]
  kSet,          // set targets = expr, or set targets[0].attr = expr
  kSetBlock,     // set targets[0] [| filter] body endset
  kMacro,        // macro name(params) body
  kCallBlock,    // call[(params)] expr body endcall
  kFilterBlock,  // filter expr body endfilter (expr is a kFilter chain on null)
  kWith,         // with params body endwith
  kBreak,
  kContinue,
  kTransparent,  // {% generation %}: transformers' assistant-mask marker, renders its body
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;   // kText
  std::string name;   // macro name / namespace attribute for kSet
  ExprPtr expr;       // output, set value, for iterable, call expression, filter chain
  ExprPtr condition;  // for-loop filter
  std::vector<std::string> targets;
  std::vector<std::pair<ExprPtr, Body>> branches;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro/call parameters, with assignments
  Body body;
  Body else_body;
};

// Parses tokens into statements; unsupported constructs are errors naming the
// construct and its line. Throws JinjaError.
Body parse(const std::vector<Token>& tokens);

// Names of the builtins the parser checks filters and tests against (jinja2 rejects
// unknown ones when compiling, so we do too).
bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);

}  // namespace quiver::jinja
