// Tool calling's pure parts: which tool_choice values are allowed (400s naming the field),
// the constraint that enforces "required" and a named function (checked by compiling it
// and matching real call text), the llama3_json, hermes, mistral and pythonic parsers, and the structured
// output fields of request bodies.
#include <gtest/gtest.h>

#include "server/openai_protocol.h"
#include "server/tool_calls.h"
#include "structured/dfa.h"
#include "structured/grammar_cache.h"
#include "structured/regex_parser.h"

namespace quiver {
namespace {

using nlohmann::json;

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "ping"}}])");

ToolOptions enabled(ToolCallParser p = ToolCallParser::kHermes) { return ToolOptions{true, p}; }

std::function<std::string()> ids() {
  auto n = std::make_shared<int>(0);
  return [n] { return "call-" + std::to_string((*n)++); };
}

bool constraint_matches(const ToolPlan& plan, const std::string& text) {
  auto regex = structured::spec_to_regex(plan.constraint);
  EXPECT_TRUE(regex.is_ok()) << regex.status().message();
  auto tree = structured::parse_regex(regex.value());
  EXPECT_TRUE(tree.is_ok());
  auto dfa = structured::Dfa::compile(*tree.value(), structured::kMaxDfaStates);
  EXPECT_TRUE(dfa.is_ok()) << dfa.status().message();
  return dfa.value().matches(text);
}

TEST(ToolCalls, ChoiceDefaultsAndErrors) {
  auto plan = plan_tools(kTools, json(), enabled());
  ASSERT_TRUE(plan.is_ok());
  EXPECT_EQ(plan.value().mode, ToolPlan::Mode::kAuto);
  plan = plan_tools(kTools, json(), ToolOptions{});
  ASSERT_TRUE(plan.is_ok());
  EXPECT_EQ(plan.value().mode, ToolPlan::Mode::kNone);  // tools only reach the template
  plan = plan_tools(kTools, "auto", ToolOptions{});
  ASSERT_FALSE(plan.is_ok());
  EXPECT_EQ(plan.error().param, "tool_choice");
  EXPECT_NE(plan.error().message.find("--enable-auto-tool-choice"), std::string::npos);
  plan = plan_tools(json(), "required", enabled());
  ASSERT_FALSE(plan.is_ok());
  EXPECT_NE(plan.error().message.find("non-empty tools"), std::string::npos);
  plan = plan_tools(kTools, json::parse(R"({"type": "function", "function": {"name": "nope"}})"), enabled());
  ASSERT_FALSE(plan.is_ok());
  EXPECT_NE(plan.error().message.find("'nope'"), std::string::npos);
  plan = plan_tools(kTools, "sometimes", enabled());
  ASSERT_FALSE(plan.is_ok());
  plan = plan_tools(json::parse(R"([{"type": "function"}])"), "required", enabled());
  ASSERT_FALSE(plan.is_ok());
  EXPECT_EQ(plan.error().param, "tools");
  EXPECT_EQ(parse_tool_call_parser("mistral").value(), ToolCallParser::kMistral);
  EXPECT_EQ(parse_tool_call_parser("pythonic").value(), ToolCallParser::kPythonic);
  auto unknown = parse_tool_call_parser("granite");
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_NE(unknown.error().message.find("llama3_json, hermes, mistral, pythonic"), std::string::npos);
}

TEST(ToolCalls, RequiredIsEnforcedAndParsed) {
  auto plan = plan_tools(kTools, "required", enabled());
  ASSERT_TRUE(plan.is_ok());
  ASSERT_EQ(plan.value().mode, ToolPlan::Mode::kRequired);
  const std::string text = R"([{"name": "get_weather", "parameters": {"city": "Oslo", "unit": "c"}}, {"name": "ping", "parameters": {}}])";
  EXPECT_TRUE(constraint_matches(plan.value(), text));
  EXPECT_FALSE(constraint_matches(plan.value(), "[]"));
  EXPECT_FALSE(constraint_matches(plan.value(), R"([{"name": "other", "parameters": {}}])"));
  EXPECT_FALSE(constraint_matches(plan.value(), R"([{"name": "get_weather", "parameters": {"unit": "c"}}])"));
  ParsedTools p = parse_tool_output(text, plan.value(), ids());
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[0]["id"], "call-0");
  EXPECT_EQ(p.tool_calls[0]["type"], "function");
  EXPECT_EQ(p.tool_calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(p.tool_calls[0]["function"]["arguments"].get<std::string>()), json::parse(R"({"city": "Oslo", "unit": "c"})"));
  EXPECT_EQ(p.content, "");
}

// The constraint generates a function's parameters in the order its schema lists them, as
// the request wrote it (a sorted copy would write "city" before "unit" here).
TEST(ToolCalls, ConstraintKeepsTheSchemasOrder) {
  const auto tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "f",
      "parameters": {"type": "object", "properties": {"unit": {"type": "string"}, "city": {"type": "string"}}}}}])");
  auto named = plan_tools(tools, json::parse(R"({"type": "function", "function": {"name": "f"}})"), ToolOptions{});
  ASSERT_TRUE(named.is_ok());
  EXPECT_NE(named.value().constraint.json_schema.find(R"("properties":{"unit":{"type":"string"},"city")"),
            std::string::npos)
      << named.value().constraint.json_schema;
  auto required = plan_tools(tools, "required", ToolOptions{});
  ASSERT_TRUE(required.is_ok());
  EXPECT_NE(required.value().constraint.json_schema.find(R"("properties":{"unit":{"type":"string"},"city")"),
            std::string::npos);
}

TEST(ToolCalls, NamedIsEnforcedAndParsed) {
  auto plan = plan_tools(kTools, json::parse(R"({"type": "function", "function": {"name": "get_weather"}})"), ToolOptions{});
  ASSERT_TRUE(plan.is_ok());
  ASSERT_EQ(plan.value().mode, ToolPlan::Mode::kNamed);
  EXPECT_TRUE(constraint_matches(plan.value(), R"({"city": "Paris"})"));
  EXPECT_FALSE(constraint_matches(plan.value(), R"({"unit": "c"})"));
  ParsedTools p = parse_tool_output(" {\"city\": \"Paris\"}\n", plan.value(), ids());
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(p.tool_calls[0]["function"]["arguments"], "{\"city\": \"Paris\"}");
}

// Mistral-7B-Instruct-v0.3's format: content, then [TOOL_CALLS] and a JSON list of calls.
TEST(ToolCalls, MistralParser) {
  ToolPlan plan = plan_tools(kTools, "auto", enabled(ToolCallParser::kMistral)).value();
  ParsedTools p = parse_tool_output(
      R"(Checking.[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Rome", "unit": "c"}}, )"
      R"({"name": "ping", "arguments": {}}])",
      plan, ids());
  EXPECT_EQ(p.content, "Checking.");
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(p.tool_calls[0]["function"]["arguments"].get<std::string>()),
            json::parse(R"({"city": "Rome", "unit": "c"})"));
  EXPECT_EQ(p.tool_calls[1]["function"]["arguments"], "{}");
  // A single call object, and a list followed by stray text (found from "[{" to "}]").
  p = parse_tool_output(R"([TOOL_CALLS]{"name": "ping", "arguments": {}})", plan, ids());
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.content, "");
  p = parse_tool_output(R"([TOOL_CALLS] [{"name": "ping", "arguments": {"a": [1]}}] and more)", plan, ids());
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0]["function"]["arguments"], R"({"a":[1]})");
  // Without the token, or with what is not a list of calls, the text stays content.
  for (const std::string text : {"just text [TOOL_CALL]", "[TOOL_CALLS] [{not json}]", R"([TOOL_CALLS] [{"x": 1}])"}) {
    p = parse_tool_output(text, plan, ids());
    EXPECT_TRUE(p.tool_calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
  // Mistral's templates take only 9 alphanumerics as call ids; other parsers keep OpenAI's form.
  EXPECT_EQ(tool_call_id(ToolCallParser::kMistral, "0123456789abcdef"), "012345678");
  EXPECT_EQ(tool_call_id(ToolCallParser::kHermes, "0123456789abcdef"), "chatcmpl-tool-0123456789abcdef");
}

// Llama 3.2's pythonic format: the answer is a Python list of calls with literal keyword
// arguments, which become JSON in the order written.
TEST(ToolCalls, PythonicParser) {
  ToolPlan plan = plan_tools(kTools, "auto", enabled(ToolCallParser::kPythonic)).value();
  ParsedTools p = parse_tool_output(
      "[get_weather(city='San Francisco', unit=\"c\", days=[1, 2.5, -3], opts={'deep': True, 'x': None}), "
      "ping()]\n",
      plan, ids());
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(p.tool_calls[0]["function"]["arguments"],
            R"({"city":"San Francisco","unit":"c","days":[1,2.5,-3],"opts":{"deep":true,"x":null}})");
  EXPECT_EQ(p.tool_calls[1]["function"]["name"], "ping");
  EXPECT_EQ(p.tool_calls[1]["function"]["arguments"], "{}");
  // Python's string escapes, a dict's number key as JSON text, multi-line calls.
  p = parse_tool_output("[f(s='it\\'s \\u00e9\\n\\x41 \\d', d={1: 'a'},\n  e=1e3)]", plan, ids());
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(json::parse(p.tool_calls[0]["function"]["arguments"].get<std::string>()),
            json::parse(R"({"s": "it's \u00e9\nA \\d", "d": {"1": "a"}, "e": 1000.0})"));
  // Bytes that are not UTF-8 inside a string (found by fuzzing: the dump threw) become U+FFFD.
  p = parse_tool_output("[f(s='a\xd7\"b')]", plan, ids());
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0]["function"]["arguments"], "{\"s\":\"a\xef\xbf\xbd\\\"b\"}");
  // Not a list of calls with literal keyword arguments: the text stays content.
  for (const std::string text : {"Sure, [f(a=1)]", " [f(a=1)]", "[f(1)]", "[f(a=x)]", "[]", "[f(a=1)] and more",
                                 "[f(a=1)", "[f(a='x)]", "[os.system(a=1)]", "[f(a=(1, 2))]", "no calls"}) {
    p = parse_tool_output(text, plan, ids());
    EXPECT_TRUE(p.tool_calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
}

TEST(ToolCalls, HermesParser) {
  ToolPlan plan = plan_tools(kTools, "auto", enabled(ToolCallParser::kHermes)).value();
  ParsedTools p = parse_tool_output(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>\n"
      "<tool_call>{\"name\": \"ping\", \"arguments\": {}}</tool_call>",
      plan, ids());
  EXPECT_EQ(p.content, "Let me check.\n");
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[1]["function"]["name"], "ping");
  EXPECT_EQ(p.tool_calls[0]["function"]["arguments"], "{\"city\":\"Rome\"}");
  EXPECT_NE(p.tool_calls[0]["id"], p.tool_calls[1]["id"]);
  // parallel_tool_calls false (vLLM's rule): the first call only.
  plan.parallel = false;
  p = parse_tool_output("<tool_call>{\"name\": \"ping\"}</tool_call><tool_call>{\"name\": \"get_weather\"}</tool_call>",
                        plan, ids());
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0]["function"]["name"], "ping");
  plan.parallel = true;
  EXPECT_TRUE(parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}]})").value().parallel_tool_calls);
  EXPECT_FALSE(parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "parallel_tool_calls": false})")
                   .value()
                   .parallel_tool_calls);
  p = parse_tool_output("just text", plan, ids());
  EXPECT_EQ(p.content, "just text");
  EXPECT_TRUE(p.tool_calls.empty());
  p = parse_tool_output("<tool_call>{not json</tool_call>", plan, ids());
  EXPECT_TRUE(p.tool_calls.empty());
  EXPECT_EQ(p.content, "<tool_call>{not json</tool_call>");
}

TEST(ToolCalls, Llama3JsonParser) {
  ToolPlan plan = plan_tools(kTools, "auto", enabled(ToolCallParser::kLlama3Json)).value();
  ParsedTools p = parse_tool_output("<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"a;b\"}}", plan, ids());
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0]["function"]["arguments"], "{\"city\":\"a;b\"}");
  p = parse_tool_output("{\"name\": \"ping\", \"parameters\": {}}; {\"name\": \"get_weather\", \"parameters\": {\"city\": \"x\"}}",
                        plan, ids());
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[1]["function"]["name"], "get_weather");
  p = parse_tool_output("The answer is 4.", plan, ids());
  EXPECT_TRUE(p.tool_calls.empty());
  EXPECT_EQ(p.content, "The answer is 4.");
}

TEST(StructuredFields, RequestBodiesGiveSpecs) {
  auto chat = parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "json_schema", "json_schema": {"name": "w", "strict": true,
      "schema": {"type": "object", "properties": {"z": {"type": "integer"}, "a": {"type": "string"}}}}}})");
  ASSERT_TRUE(chat.is_ok()) << chat.error().message;
  const StructuredOutputSpec& s = chat.value().params.structured_outputs;
  ASSERT_EQ(s.kind, StructuredOutputSpec::Kind::kJson);
  EXPECT_LT(s.json_schema.find("\"z\""), s.json_schema.find("\"a\""));  // the request's order
  auto c = parse_completion_request(R"({"prompt": "x", "guided_choice": ["a", "b"]})");
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c.value().params.structured_outputs.choice, (std::vector<std::string>{"a", "b"}));
  c = parse_completion_request(R"({"prompt": "x", "structured_outputs": {"regex": "[0-9]+"}})");
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c.value().params.structured_outputs.regex, "[0-9]+");
  c = parse_completion_request(R"({"prompt": "x", "response_format": {"type": "json_object"}})");
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c.value().params.structured_outputs.kind, StructuredOutputSpec::Kind::kJsonObject);
  c = parse_completion_request(R"({"prompt": "x", "guided_json": "{\"type\": \"boolean\"}"})");
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c.value().params.structured_outputs.json_schema, "{\"type\":\"boolean\"}");
  c = parse_completion_request(R"({"prompt": "x", "response_format": {"type": "text"}})");
  ASSERT_TRUE(c.is_ok());
  EXPECT_FALSE(c.value().params.structured_outputs.active());

  auto refused = [](const std::string& body, const std::string& param, const std::string& words) {
    auto r = parse_completion_request(body);
    ASSERT_FALSE(r.is_ok()) << body;
    EXPECT_EQ(r.error().status, 400);
    EXPECT_EQ(r.error().param, param) << body;
    EXPECT_NE(r.error().message.find(words), std::string::npos) << r.error().message;
  };
  refused(R"({"prompt": "x", "guided_grammar": "root ::= x"})", "guided_grammar", "not supported");
  refused(R"({"prompt": "x", "structured_outputs": {"grammar": "root ::= x"}})", "structured_outputs", "grammar");
  refused(R"({"prompt": "x", "guided_regex": "a", "guided_choice": ["b"]})", "guided_choice", "only one");
  refused(R"({"prompt": "x", "structured_outputs": {"regex": "a", "choice": ["b"]}})", "structured_outputs", "only one");
  refused(R"({"prompt": "x", "guided_choice": []})", "guided_choice", "non-empty list");
  refused(R"({"prompt": "x", "response_format": {"type": "json_schema"}})", "response_format", "json_schema");
  refused(R"({"prompt": "x", "response_format": {"type": "yaml"}})", "response_format", "'yaml'");
  refused(R"({"prompt": "x", "guided_json": 3})", "guided_json", "JSON schema");
}

}  // namespace
}  // namespace quiver
