#include "server/tool_calls.h"

#include "io/json_util.h"
#include "server/pythonic_calls.h"

namespace quiver {

namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

const std::string kPythonTag = "<|python_tag|>";
const std::string kOpen = "<tool_call>", kClose = "</tool_call>";
const std::string kMistralCalls = "[TOOL_CALLS]";

// The function's parameter schema, or any object when it declares none; in the request's
// key order, which is the order the constraint generates the properties in.
ojson parameters_of(const ojson& tool) {
  const ojson& f = tool["function"];
  if (f.contains("parameters") && !f["parameters"].is_null()) return f["parameters"];
  return ojson{{"type", "object"}};
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r\n");
  return s.substr(a, b - a + 1);
}

json call_json(const std::string& id, const std::string& name, const std::string& arguments) {
  return json{{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}};
}

// One {"name", "parameters"|"arguments"} object as a call; false when it is not one.
bool add_call(const json& obj, const std::function<std::string()>& new_id, json* calls) {
  if (!obj.is_object() || !obj.contains("name") || !obj["name"].is_string()) return false;
  json args = obj.contains("arguments") ? obj["arguments"] : obj.contains("parameters") ? obj["parameters"] : json::object();
  // Some models write the arguments as a JSON string already.
  const std::string text = args.is_string() ? args.get<std::string>() : args.dump();
  calls->push_back(call_json(new_id(), obj["name"].get<std::string>(), text));
  return true;
}

ParsedTools parse_llama3(const std::string& text, const std::function<std::string()>& new_id) {
  ParsedTools out;
  std::string body = trim(text);
  if (body.rfind(kPythonTag, 0) == 0) body = trim(body.substr(kPythonTag.size()));
  if (body.empty() || body[0] != '{') {
    out.content = text;
    return out;
  }
  // Calls separated by ';' (a ';' inside a string would split wrongly, so try the whole
  // text first).
  json whole = json::parse(body, nullptr, false);
  if (!whole.is_discarded() && add_call(whole, new_id, &out.tool_calls)) return out;
  size_t start = 0;
  while (start < body.size()) {
    size_t end = body.find(';', start);
    if (end == std::string::npos) end = body.size();
    json one = json::parse(body.substr(start, end - start), nullptr, false);
    if (one.is_discarded() || !add_call(one, new_id, &out.tool_calls)) {
      out.tool_calls = json::array();
      out.content = text;
      return out;
    }
    start = end + 1;
  }
  return out;
}

ParsedTools parse_hermes(const std::string& text, const std::function<std::string()>& new_id) {
  ParsedTools out;
  const size_t first = text.find(kOpen);
  if (first == std::string::npos) {
    out.content = text;
    return out;
  }
  out.content = text.substr(0, first);  // as written, as vLLM returns it (and streams it)
  size_t pos = first;
  while ((pos = text.find(kOpen, pos)) != std::string::npos) {
    const size_t body = pos + kOpen.size();
    size_t end = text.find(kClose, body);
    if (end == std::string::npos) end = text.size();  // cut off by max_tokens: take what is there
    json one = json::parse(trim(text.substr(body, end - body)), nullptr, false);
    if (!one.is_discarded()) add_call(one, new_id, &out.tool_calls);
    pos = end;
  }
  if (out.tool_calls.empty()) out.content = text;
  return out;
}

// Mistral: content, then [TOOL_CALLS] and a JSON list of calls. Like vLLM, the markers are
// taken out of the rest and the list found whole, or else from its first "[{" to its last
// "}]"; a single call object is taken too.
ParsedTools parse_mistral(const std::string& text, const std::function<std::string()>& new_id) {
  ParsedTools out;
  const size_t first = text.find(kMistralCalls);
  if (first == std::string::npos) {
    out.content = text;
    return out;
  }
  std::string rest;
  for (size_t at = first; at != std::string::npos;) {
    const size_t body = at + kMistralCalls.size(), next = text.find(kMistralCalls, body);
    rest += text.substr(body, next == std::string::npos ? std::string::npos : next - body);
    at = next;
  }
  rest = trim(rest);
  json calls = json::parse(rest, nullptr, false);
  if (calls.is_discarded()) {
    const size_t open = rest.find("[{"), close = rest.rfind("}]");
    if (open != std::string::npos && close != std::string::npos && close > open)
      calls = json::parse(rest.substr(open, close + 2 - open), nullptr, false);
  }
  if (calls.is_object()) calls = json::array({calls});
  if (calls.is_array()) {
    for (const json& c : calls) {
      if (!add_call(c, new_id, &out.tool_calls)) {
        out.tool_calls = json::array();
        break;
      }
    }
  }
  out.content = out.tool_calls.empty() ? text : text.substr(0, first);
  return out;
}

// Pythonic: the answer, from its first character, is a list of calls (vLLM requires the
// `[` first too); anything else is content.
ParsedTools parse_pythonic(const std::string& text, const std::function<std::string()>& new_id) {
  ParsedTools out;
  std::optional<nlohmann::ordered_json> calls;
  if (!text.empty() && text[0] == '[') calls = parse_pythonic_calls(text);
  if (!calls) {
    out.content = text;
    return out;
  }
  // Bytes that are not UTF-8 in a string (the detokenizer writes none, but the parser takes
  // any text) become U+FFFD rather than an exception.
  for (const auto& c : *calls) {
    const std::string args = c["arguments"].dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    out.tool_calls.push_back(call_json(new_id(), c["name"].get<std::string>(), args));
  }
  return out;
}

}  // namespace

CallStart answer_start(ToolCallParser parser, std::string_view text) {
  if (parser == ToolCallParser::kPythonic) {
    if (text.empty()) return CallStart::kUndecided;
    return text[0] == '[' ? CallStart::kCall : CallStart::kContent;
  }
  if (parser != ToolCallParser::kLlama3Json) return CallStart::kContent;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return CallStart::kUndecided;  // blanks so far
  const std::string_view body = text.substr(first);
  if (body[0] == '{' || body.substr(0, kPythonTag.size()) == kPythonTag) return CallStart::kCall;
  if (std::string_view(kPythonTag).substr(0, body.size()) == body) return CallStart::kUndecided;  // the tag's start
  return CallStart::kContent;
}

std::string tool_call_marker(ToolCallParser parser) {
  switch (parser) {
    case ToolCallParser::kHermes:
      return kOpen;
    case ToolCallParser::kMistral:
      return kMistralCalls;
    default:
      return "";
  }
}

std::string tool_call_id(ToolCallParser parser, const std::string& unique) {
  return parser == ToolCallParser::kMistral ? unique.substr(0, 9) : "chatcmpl-tool-" + unique;
}

ApiResult<ToolCallParser> parse_tool_call_parser(const std::string& name) {
  if (name == "llama3_json") return ToolCallParser::kLlama3Json;
  if (name == "hermes") return ToolCallParser::kHermes;
  if (name == "mistral") return ToolCallParser::kMistral;
  if (name == "pythonic") return ToolCallParser::kPythonic;
  return ApiError::bad_request("unknown tool call parser '" + name +
                               "' (supported: llama3_json, hermes, mistral, pythonic)");
}

ApiResult<ToolPlan> plan_tools(const ojson& tools, const json& tool_choice, const ToolOptions& options) {
  ToolPlan plan;
  plan.parser = options.parser;
  const bool has_tools = tools.is_array() && !tools.empty();
  if (!tools.is_null()) {
    if (!tools.is_array()) return ApiError::bad_request("tools must be a list", "tools");
    for (const ojson& t : tools) {
      if (!t.is_object() || string_field_or(t, "type", "") != "function" || !t.contains("function") ||
          !t["function"].is_object() ||
          !t["function"].contains("name") || !t["function"]["name"].is_string())
        return ApiError::bad_request("each tool must be {\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": ...}}",
                                     "tools");
    }
  }
  std::string choice;
  if (tool_choice.is_null()) {
    choice = has_tools && options.enable_auto_tool_choice ? "auto" : "none";
  } else if (tool_choice.is_string()) {
    choice = tool_choice.get<std::string>();
    if (choice != "none" && choice != "auto" && choice != "required")
      return ApiError::bad_request("tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                                   "\"function\": {\"name\": ...}}",
                                   "tool_choice");
  } else if (tool_choice.is_object() && string_field_or(tool_choice, "type", "") == "function" &&
             tool_choice.contains("function") &&
             tool_choice["function"].is_object() && tool_choice["function"].contains("name") &&
             tool_choice["function"]["name"].is_string()) {
    choice = "named";
    plan.function = tool_choice["function"]["name"].get<std::string>();
  } else {
    return ApiError::bad_request("tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                                 "\"function\": {\"name\": ...}}",
                                 "tool_choice");
  }
  if (choice == "none") return plan;
  if (!has_tools) return ApiError::bad_request("tool_choice \"" + choice + "\" needs a non-empty tools list", "tool_choice");
  if (choice == "auto") {
    if (!options.enable_auto_tool_choice || options.parser == ToolCallParser::kNone)
      return ApiError::bad_request("\"auto\" tool choice needs `quiver serve --enable-auto-tool-choice --tool-call-parser NAME`",
                                   "tool_choice");
    plan.mode = ToolPlan::Mode::kAuto;
    return plan;
  }
  plan.constraint.kind = StructuredOutputSpec::Kind::kJson;
  if (choice == "named") {
    for (const ojson& t : tools)
      if (t["function"]["name"] == plan.function) {
        plan.mode = ToolPlan::Mode::kNamed;
        plan.constraint.json_schema = parameters_of(t).dump();
        return plan;
      }
    return ApiError::bad_request("tool_choice names function '" + plan.function + "', which is not in tools", "tool_choice");
  }
  // required: a non-empty list of calls, each naming one of the tools with its parameters.
  ojson any = ojson::array();
  for (const ojson& t : tools)
    any.push_back({{"type", "object"},
                   {"properties", {{"name", {{"const", t["function"]["name"]}}}, {"parameters", parameters_of(t)}}},
                   {"required", {"name", "parameters"}}});
  plan.mode = ToolPlan::Mode::kRequired;
  plan.constraint.json_schema = ojson{{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", any}}}}.dump();
  return plan;
}

namespace {

ParsedTools parse_all(const std::string& text, const ToolPlan& plan, const std::function<std::string()>& new_id) {
  ParsedTools out;
  switch (plan.mode) {
    case ToolPlan::Mode::kNone:
      out.content = text;
      return out;
    case ToolPlan::Mode::kNamed:
      out.tool_calls.push_back(call_json(new_id(), plan.function, trim(text)));
      return out;
    case ToolPlan::Mode::kRequired: {
      json calls = json::parse(text, nullptr, false);
      if (calls.is_array())
        for (const json& c : calls) add_call(c, new_id, &out.tool_calls);
      if (out.tool_calls.empty()) out.content = text;  // cut off before a whole call
      return out;
    }
    case ToolPlan::Mode::kAuto:
      switch (plan.parser) {
        case ToolCallParser::kHermes:
          return parse_hermes(text, new_id);
        case ToolCallParser::kMistral:
          return parse_mistral(text, new_id);
        case ToolCallParser::kPythonic:
          return parse_pythonic(text, new_id);
        default:
          return parse_llama3(text, new_id);
      }
  }
  return out;
}

}  // namespace

ParsedTools parse_tool_output(const std::string& text, const ToolPlan& plan, const std::function<std::string()>& new_id) {
  ParsedTools out = parse_all(text, plan, new_id);
  // vLLM's parallel_tool_calls false: the first call only, however many the model wrote.
  if (!plan.parallel && out.tool_calls.size() > 1)
    out.tool_calls.erase(out.tool_calls.begin() + 1, out.tool_calls.end());
  return out;
}

}  // namespace quiver
