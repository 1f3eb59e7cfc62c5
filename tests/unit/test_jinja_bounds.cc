// link: qv_tokenizer
// A chat template comes with the model folder, so a hostile or broken one must end in an
// error Status, never in a crash, a hang or an allocation that takes the process down:
// integer literals and arithmetic past int64, repetition and concatenation past the size
// bound, loops past the step bound, nesting past the depth bound. Each case here crashed,
// hung or wrapped before (tests/fuzz/fuzz_tokenizer.cc found the first).
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"

namespace quiver {
namespace {

Result<std::string> render(const std::string& source) {
  auto tmpl = ChatTemplate::parse(source);
  if (!tmpl.is_ok()) return tmpl.status();
  return tmpl->render(nlohmann::json::array(), false, nlohmann::json::object());
}

void expect_error(const std::string& source, const std::string& words) {
  auto r = render(source);
  ASSERT_FALSE(r.is_ok()) << source.substr(0, 80) << " rendered " << r.value().size() << " bytes";
  EXPECT_NE(r.message().find(words), std::string::npos) << source.substr(0, 80) << ": " << r.message();
}

TEST(JinjaBounds, IntegersPastInt64AreErrorsNotWraps) {
  expect_error("{{ 99999999999999999999 }}", "integer literal 99999999999999999999 is out of range");
  expect_error("{{ 9223372036854775807 + 1 }}", "integer overflow in +");
  expect_error("{{ -9223372036854775807 - 2 }}", "integer overflow in -");
  expect_error("{{ 4294967296 * 4294967296 }}", "integer overflow in *");
  expect_error("{{ 2 ** 64 }}", "integer overflow in **");
  expect_error("{{ -(-9223372036854775807 - 1) }}", "integer overflow in unary -");
  expect_error("{{ (-9223372036854775807 - 1) // -1 }}", "integer overflow in //");
  expect_error("{{ (-9223372036854775807 - 1) | abs }}", "integer overflow in abs");
  expect_error("{{ [9223372036854775807, 1] | sum }}", "integer overflow in sum");
  // In range, the same operators still give Python's values; ** by squaring is exact.
  EXPECT_EQ(render("{{ 2 ** 62 }} {{ 3 ** 39 }} {{ (-9223372036854775807 - 1) % -1 }} {{ 1e999 }}").value(),
            "4611686018427387904 4052555153018976267 0 inf");
}

TEST(JinjaBounds, BuiltValuesStayUnderTheSizeBound) {
  expect_error("{{ 'a' * 100000000000 }}", "a * repetition would take");
  expect_error("{{ [1, 2] * 100000000000 }}", "a * repetition would take");
  expect_error("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
               "a ~ concatenation would take");
  expect_error("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
               "a + of strings would take");
  expect_error("{{ 'x' | indent(100000000000, true) }}", "indent's width would take");
  expect_error("{{ 'x' | center(100000000000) }}", "center's width would take");
  expect_error("{{ {'a': 1} | tojson(indent=100000000000) }}", "tojson's indent would take");
  expect_error("{{ 'abc' | replace('', 'x' * 8000000) }}", "replace()'s result would take");
  expect_error("{{ range(99999) | join('x' * 1000) }}", "join's result would take");
  expect_error("{% for i in range(99999) %}{{ 'x' * 1000 }}{% endfor %}", "the rendered text would take");
}

TEST(JinjaBounds, LoopsAndNestingEndInErrors) {
  expect_error("{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}",
               "takes over 500000 steps");
  std::string parens = "{{ ";  // appended, not a + chain: GCC 12 misreads one (-Wrestrict)
  parens.append(5000, '(').append("1").append(5000, ')').append(" }}");
  expect_error(parens, "nested over 100 deep");
  std::string minus = "{{ ";
  minus.append(5000, '-').append("1 }}");
  expect_error(minus, "nested over 100 deep");
  std::string ifs;
  for (int i = 0; i < 500; ++i) ifs += "{% if true %}";
  expect_error(ifs, "nested over 100 deep");
  expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "deep");
}

// The bounds leave real work alone: Llama 3.1's template (tools, a system prompt, the
// date) over a 2,000-message conversation.
TEST(JinjaBounds, ALongConversationRendersWithRoomToSpare) {
  std::ifstream f(std::string(QUIVER_SOURCE_DIR) + "/tests/fixtures/chat_templates/llama3_1.jinja");
  const std::string source((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(source.empty());
  auto tmpl = ChatTemplate::parse(source);
  ASSERT_TRUE(tmpl.is_ok()) << tmpl.message();
  nlohmann::json messages = nlohmann::json::array();
  messages.push_back({{"role", "system"}, {"content", "Be brief."}});
  for (int i = 0; i < 2000; ++i)
    messages.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", std::string("message ").append(std::to_string(i))}});
  nlohmann::json tools = nlohmann::json::array();
  for (int i = 0; i < 20; ++i)
    tools.push_back({{"type", "function"}, {"function", {{"name", std::string("f").append(std::to_string(i))}, {"parameters", {{"type", "object"}}}}}});
  auto r = tmpl->render(messages, true, {{"bos_token", "<s>"}, {"tools", tools}});
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_NE(r.value().find("message 1999"), std::string::npos);
}

}  // namespace
}  // namespace quiver
