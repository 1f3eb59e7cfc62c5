// Request parsing for the OpenAI API. A key neither endpoint knows, or one quiver does not
// implement, is a 400 naming it (request_fields.h); known fields of the wrong type or out
// of range are a 400 naming the field. Ranges follow vLLM's checks so clients see the same
// limits.
#include "server/openai_protocol.h"

#include <cmath>
#include <limits>

#include "core/json_nesting.h"
#include "io/json_util.h"
#include "server/request_fields.h"
#include "tokenizer/chat_content.h"
#include "structured/request_fields.h"

namespace quiver {

using nlohmann::json;

std::string api_error_type(int status) {
  switch (status) {
    case 400: return "BadRequestError";
    case 401: return "AuthenticationError";
    case 404: return "NotFoundError";
    case 413: return "RequestTooLargeError";
    case 503: return "ServiceUnavailableError";
    default: return status >= 500 ? "InternalServerError" : "BadRequestError";
  }
}

json api_error_json(const ApiError& e) {
  json err = {{"message", e.message}, {"type", api_error_type(e.status)}, {"code", e.status}};
  err["param"] = e.param.empty() ? json(nullptr) : json(e.param);
  return json{{"error", std::move(err)}};
}

namespace {

// Reads optional fields of one object; the first error sticks and later reads are no-ops,
// so a parser reads every field it knows and checks `error` once at the end.
class FieldReader {
 public:
  explicit FieldReader(const json& obj) : obj_(obj) {}

  std::optional<ApiError> error;

  // The field, or null when absent or JSON null (both mean "use the default").
  const json* get(const char* name) const {
    auto it = obj_.find(name);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }
  void fail(const std::string& message, const char* name) {
    if (!error) error = ApiError::bad_request(message, name);
  }

  void boolean(const char* name, bool* out) {
    const json* v = get(name);
    if (error || !v) return;
    if (!v->is_boolean()) return fail(std::string(name) + " must be a boolean", name);
    *out = v->get<bool>();
  }
  void string(const char* name, std::string* out) {
    const json* v = get(name);
    if (error || !v) return;
    if (!v->is_string()) return fail(std::string(name) + " must be a string", name);
    *out = v->get<std::string>();
  }
  // Integers in [lo, hi]; floats with an integral value are accepted as vLLM's pydantic does.
  bool integer(const char* name, int64_t lo, int64_t hi, int64_t* out) {
    const json* v = get(name);
    if (error || !v) return false;
    int64_t x = 0;
    if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      x = u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max()
                                                                           : static_cast<int64_t>(u);
    } else if (v->is_number_integer()) {
      x = v->get<int64_t>();
    } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
               std::fabs(v->get<double>()) < 9.0e18) {
      x = static_cast<int64_t>(v->get<double>());
    } else {
      fail(std::string(name) + " must be an integer", name);
      return false;
    }
    if (x < lo || x > hi) {
      fail(std::string(name) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
               std::to_string(x),
           name);
      return false;
    }
    *out = x;
    return true;
  }
  template <typename Int>
  bool integer(const char* name, int64_t lo, int64_t hi, Int* out) {
    int64_t x = 0;
    if (!integer(name, lo, hi, &x)) return false;
    *out = static_cast<Int>(x);
    return true;
  }
  // Numbers in [lo, hi] (open ends when the flags say so).
  void number(const char* name, double lo, double hi, float* out, bool lo_open = false) {
    const json* v = get(name);
    if (error || !v) return;
    if (!v->is_number()) return fail(std::string(name) + " must be a number", name);
    const double x = v->get<double>();
    const bool ok = std::isfinite(x) && (lo_open ? x > lo : x >= lo) && x <= hi;
    if (!ok) {
      return fail(std::string(name) + " must be in " + (lo_open ? "(" : "[") + json(lo).dump() + ", " + json(hi).dump() +
                      "], got " + v->dump(),
                  name);
    }
    *out = static_cast<float>(x);
  }

 private:
  const json& obj_;
};

// Sampling and streaming fields common to both endpoints.
void read_common(FieldReader& r, CommonRequest* out) {
  SamplingParams& p = out->params;
  r.string("model", &out->model);
  r.integer("n", 1, kMaxChoices, &p.n);
  r.number("temperature", 0.0, 1.0e6, &p.temperature);
  r.number("top_p", 0.0, 1.0, &p.top_p, /*lo_open=*/true);
  r.integer("top_k", -1, std::numeric_limits<int32_t>::max(), &p.top_k);
  r.number("min_p", 0.0, 1.0, &p.min_p);
  r.number("presence_penalty", -2.0, 2.0, &p.presence_penalty);
  r.number("frequency_penalty", -2.0, 2.0, &p.frequency_penalty);
  r.number("repetition_penalty", 0.0, 1.0e6, &p.repetition_penalty, /*lo_open=*/true);
  int64_t seed = 0;
  if (r.integer("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), &seed))
    p.seed = static_cast<uint64_t>(seed);
  r.integer("min_tokens", 0, std::numeric_limits<int32_t>::max(), &p.min_tokens);
  r.boolean("ignore_eos", &p.ignore_eos);
  r.boolean("skip_special_tokens", &p.skip_special_tokens);
  r.boolean("spaces_between_special_tokens", &p.spaces_between_special_tokens);
  r.boolean("include_stop_str_in_output", &p.include_stop_str_in_output);
  r.boolean("return_token_ids", &out->return_token_ids);
  r.integer("prompt_logprobs", 0, kMaxLogprobs, &p.prompt_logprobs);
  if (const json* v = r.get("add_special_tokens"); v && !r.error) {
    bool add = false;
    r.boolean("add_special_tokens", &add);
    out->add_special_tokens = add;
  }
  r.string("request_id", &out->request_id);
  r.boolean("return_tokens_as_token_ids", &out->return_tokens_as_token_ids);

  if (const json* stop = r.get("stop"); stop && !r.error) {
    if (stop->is_string()) {
      p.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const auto& s : *stop) {
        if (!s.is_string()) return r.fail("stop must be a string or a list of strings", "stop");
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      return r.fail("stop must be a string or a list of strings", "stop");
    }
    for (const auto& s : p.stop)
      if (s.empty()) return r.fail("stop strings must not be empty", "stop");
  }
  for (auto [name, ids] : {std::pair<const char*, std::vector<int32_t>*>{"stop_token_ids", &p.stop_token_ids},
                           {"allowed_token_ids", &p.allowed_token_ids}}) {
    const json* v = r.get(name);
    if (!v || r.error) continue;
    const std::string list_error = std::string(name) + " must be a list of non-negative integers";
    if (!v->is_array()) return r.fail(list_error, name);
    for (const auto& t : *v) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > std::numeric_limits<int32_t>::max())
        return r.fail(list_error, name);
      ids->push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
  }
  if (const json* v = r.get("allowed_token_ids"); v && !r.error && p.allowed_token_ids.empty())
    return r.fail("allowed_token_ids must not be empty", "allowed_token_ids");
  if (const json* words = r.get("bad_words"); words && !r.error) {
    if (!words->is_array()) return r.fail("bad_words must be a list of strings", "bad_words");
    for (const auto& w : *words) {
      if (!w.is_string()) return r.fail("bad_words must be a list of strings", "bad_words");
      p.bad_words.push_back(w.get<std::string>());
      if (p.bad_words.back().find_first_not_of(" \t\n\r\f\v") == std::string::npos)
        return r.fail("bad_words entries must contain a character other than whitespace", "bad_words");
    }
  }
  int truncate = 0;
  if (r.integer("truncate_prompt_tokens", -1, std::numeric_limits<int32_t>::max(), &truncate)) {
    if (truncate == 0)
      return r.fail("truncate_prompt_tokens must be an integer >= 1 or -1, got 0", "truncate_prompt_tokens");
    p.truncate_prompt_tokens = truncate;
  }
  r.integer("priority", std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(), &out->priority);
  r.boolean("use_beam_search", &out->use_beam_search);
  r.number("length_penalty", -1.0e6, 1.0e6, &out->length_penalty);
  if (const json* salt = r.get("cache_salt"); salt && !r.error) {
    if (!salt->is_string() || salt->get<std::string>().empty())
      return r.fail("cache_salt must be a non-empty string", "cache_salt");
    out->cache_salt = salt->get<std::string>();
  }

  r.boolean("stream", &out->stream);
  if (out->stream && p.prompt_logprobs > 0 && !r.error)
    return r.fail("prompt_logprobs are not available when stream is true", "prompt_logprobs");
  if (const json* so = r.get("stream_options"); so && !r.error) {
    if (!so->is_object()) return r.fail("stream_options must be an object", "stream_options");
    if (!out->stream) return r.fail("stream_options can only be set when stream is true", "stream_options");
    if (auto bad = check_stream_options_fields(*so)) return r.fail(bad->message, "stream_options");
    // vLLM's default: stream_options without include_usage still asks for usage.
    out->include_usage = true;
    FieldReader sr(*so);
    sr.boolean("include_usage", &out->include_usage);
    sr.boolean("continuous_usage_stats", &out->continuous_usage);
    if (sr.error) return r.fail(sr.error->message, "stream_options");
  }

  if (const json* b = r.get("best_of"); b && !r.error && !(b->is_number_integer() && b->get<int64_t>() == p.n))
    return r.fail("best_of is not supported (leave it unset or equal to n)", "best_of");
  if (const json* lb = r.get("logit_bias"); lb && !r.error) {
    auto bias = json_logit_bias(*lb);
    if (!bias.is_ok()) return r.fail(bias.status().message(), "logit_bias");
    for (const auto& [id, b] : *bias)
      if (!(b >= -100.0f && b <= 100.0f)) return r.fail("logit_bias values must be in [-100, 100]", "logit_bias");
    p.logit_bias = std::move(bias).value();
  }
}

void read_max_tokens(FieldReader& r, const char* name, CommonRequest* out) {
  int max_tokens = 0;
  if (r.integer(name, 1, std::numeric_limits<int32_t>::max(), &max_tokens)) out->max_tokens = max_tokens;
}

bool is_token_list(const json& v) {
  for (const auto& t : v)
    if (!t.is_number_integer()) return false;
  return true;
}

// A prompt: "text", ["text", ...], [ids...] or [[ids...], ...].
void read_prompts(FieldReader& r, std::vector<PromptSpec>* out) {
  const json* p = r.get("prompt");
  if (r.error) return;
  if (!p) return r.fail("prompt is required", "prompt");
  const char* shape = "prompt must be a string, a list of strings, a list of token ids or a list of lists of token ids";
  auto to_ids = [&](const json& list, PromptSpec* spec) {
    for (const auto& t : list) {
      const int64_t id = t.get<int64_t>();
      if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
        r.fail("prompt token ids must be non-negative 32-bit integers", "prompt");
        return;
      }
      spec->token_ids.push_back(static_cast<int32_t>(id));
    }
    if (spec->token_ids.empty()) r.fail("prompt token id lists must not be empty", "prompt");
  };
  if (p->is_string()) {
    out->push_back(PromptSpec{p->get<std::string>(), {}});
  } else if (!p->is_array() || p->empty()) {
    return r.fail(p->is_array() ? "prompt must not be an empty list" : shape, "prompt");
  } else if ((*p)[0].is_string()) {
    for (const auto& s : *p) {
      if (!s.is_string()) return r.fail(shape, "prompt");
      out->push_back(PromptSpec{s.get<std::string>(), {}});
    }
  } else if ((*p)[0].is_number_integer()) {
    if (!is_token_list(*p)) return r.fail(shape, "prompt");
    out->emplace_back();
    to_ids(*p, &out->back());
  } else if ((*p)[0].is_array()) {
    for (const auto& list : *p) {
      if (!list.is_array() || !is_token_list(list)) return r.fail(shape, "prompt");
      out->emplace_back();
      to_ids(list, &out->back());
      if (r.error) return;
    }
  } else {
    return r.fail(shape, "prompt");
  }
  for (const auto& s : *out)
    if (s.text.has_value() && s.text->empty()) return r.fail("prompt must not be empty", "prompt");
}

// Messages: a non-empty list of {"role": str, "content": str | null | [parts]}. Text parts
// are joined with newlines (vLLM's "string" content format); other keys pass through to
// the template (tool_calls, their arguments as objects; name, ...).
void read_messages(FieldReader& r, const nlohmann::ordered_json& body, nlohmann::ordered_json* out) {
  if (r.error) return;
  auto m = body.find("messages");
  if (m == body.end() || !m->is_array() || m->empty()) return r.fail("messages must be a non-empty list", "messages");
  *out = nlohmann::ordered_json::array();
  for (const auto& msg : *m) {
    if (!msg.is_object()) return r.fail("each message must be an object", "messages");
    auto role = msg.find("role");
    if (role == msg.end() || !role->is_string()) return r.fail("each message needs a string role", "messages");
    nlohmann::ordered_json norm = msg;
    auto content = msg.find("content");
    if (content != msg.end() && content->is_array()) {
      auto text = join_text_parts(json(*content));
      if (!text.is_ok()) return r.fail(text.message(), "messages");
      norm["content"] = std::move(text).value();
    } else if (content != msg.end() && !content->is_string() && !content->is_null()) {
      return r.fail("message content must be a string, null or a list of text parts", "messages");
    }
    out->push_back(std::move(norm));
  }
  if (Status s = tool_call_arguments_as_objects(out); !s.is_ok()) return r.fail(s.message(), "messages");
}

// structured_outputs / guided_* / response_format, read from the body in its key order (a
// schema's properties are generated in the order it lists them).
std::optional<ApiError> read_structured(const nlohmann::ordered_json& ordered, SamplingParams* p) {
  std::string field;
  auto spec = structured::read_structured_fields(ordered, &field);
  if (!spec.is_ok()) return ApiError::bad_request(spec.status().message(), field);
  p->structured_outputs = std::move(spec).value();
  return std::nullopt;
}

}  // namespace

ApiResult<json> parse_json_object(std::string_view body) {
  if (!json_nesting_within(body, kMaxRequestJsonDepth))
    return ApiError::bad_request("JSON nested deeper than " + std::to_string(kMaxRequestJsonDepth) + " levels");
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return ApiError::bad_request("the request body is not valid JSON");
  if (!j.is_object()) return ApiError::bad_request("the request body must be a JSON object");
  return j;
}

ApiResult<CompletionRequest> parse_completion_request(std::string_view body, const SamplingParams& defaults) {
  auto parsed = parse_json_object(body);
  if (!parsed.is_ok()) return parsed.error();
  const json& j = parsed.value();
  if (auto bad = check_completion_fields(j)) return *bad;
  CompletionRequest req;
  req.params = defaults;  // fields the body gives overwrite these
  FieldReader r(j);
  read_prompts(r, &req.prompts);
  read_common(r, &req);
  read_max_tokens(r, "max_tokens", &req);
  r.integer("logprobs", 0, kMaxLogprobs, &req.params.logprobs);
  r.boolean("echo", &req.echo);
  if (r.error) return *r.error;
  if (req.params.min_tokens > req.max_tokens.value_or(16))
    return ApiError::bad_request("min_tokens must not exceed max_tokens", "min_tokens");
  if (structured::has_structured_fields(j)) {
    if (auto e = read_structured(nlohmann::ordered_json::parse(body.begin(), body.end(), nullptr, false), &req.params))
      return *e;
  }
  return req;
}

ApiResult<ChatRequest> parse_chat_request(std::string_view body, const SamplingParams& defaults) {
  auto parsed = parse_json_object(body);
  if (!parsed.is_ok()) return parsed.error();
  if (auto bad = check_chat_fields(parsed.value())) return *bad;
  // Valid JSON (parse_json_object said so), read again keeping its key order.
  const auto ordered = nlohmann::ordered_json::parse(body.begin(), body.end(), nullptr, false);
  auto req = chat_request_from_json(parsed.value(), ordered, defaults);
  if (!req.is_ok()) return req;
  if (structured::has_structured_fields(parsed.value())) {
    if (auto e = read_structured(ordered, &req.value().params)) return *e;
  }
  return req;
}

ApiResult<ChatRequest> chat_request_from_json(const json& j, const nlohmann::ordered_json& body,
                                              const SamplingParams& defaults) {
  ChatRequest req;
  req.params = defaults;  // fields the body gives overwrite these
  FieldReader r(j);       // the scalar fields; what the template reads keeps the body's order
  read_messages(r, body, &req.messages);
  read_common(r, &req);
  read_max_tokens(r, "max_tokens", &req);
  read_max_tokens(r, "max_completion_tokens", &req);  // the newer name wins
  r.boolean("logprobs", &req.logprobs);
  r.integer("top_logprobs", 0, kMaxLogprobs, &req.top_logprobs);
  r.boolean("add_generation_prompt", &req.add_generation_prompt);
  r.boolean("continue_final_message", &req.continue_final_message);
  r.boolean("echo", &req.echo);
  r.boolean("include_reasoning", &req.include_reasoning);
  r.boolean("parallel_tool_calls", &req.parallel_tool_calls);
  if (r.error) return *r.error;
  if (r.get("top_logprobs") && !req.logprobs)
    return ApiError::bad_request("top_logprobs needs logprobs set to true", "top_logprobs");
  if (req.logprobs) req.params.logprobs = req.top_logprobs;
  if (req.continue_final_message && req.add_generation_prompt)
    return ApiError::bad_request("Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
                                 "continue_final_message");
  if (req.max_tokens && req.params.min_tokens > *req.max_tokens)
    return ApiError::bad_request("min_tokens must not exceed max_tokens", "min_tokens");

  req.template_variables = nlohmann::ordered_json::object();
  auto ordered = [&](const char* name) { return r.get(name) ? &body.at(name) : nullptr; };
  if (const nlohmann::ordered_json* tools = ordered("tools")) {
    if (!tools->is_array()) return ApiError::bad_request("tools must be a list", "tools");
    req.template_variables["tools"] = *tools;
    req.tools = *tools;
  }
  if (const json* tc = r.get("tool_choice")) req.tool_choice = *tc;
  if (const nlohmann::ordered_json* kw = ordered("chat_template_kwargs")) {
    if (!kw->is_object()) return ApiError::bad_request("chat_template_kwargs must be an object", "chat_template_kwargs");
    for (const auto& [k, v] : kw->items()) {
      if (k != "chat_template") {
        req.template_variables[k] = v;
      } else if (!v.is_null()) {  // vLLM takes a template here too, under the same trust rule
        if (!v.is_string())
          return ApiError::bad_request("chat_template_kwargs.chat_template must be a string", "chat_template_kwargs");
        req.chat_template = v.get<std::string>();
      }
    }
  }
  if (const json* t = r.get("chat_template")) {
    if (!t->is_string()) return ApiError::bad_request("chat_template must be a string", "chat_template");
    req.chat_template = t->get<std::string>();
  }
  // RAG documents reach the template as a variable, as in vLLM; templates without them ignore it.
  if (const nlohmann::ordered_json* docs = ordered("documents")) {
    if (!docs->is_array()) return ApiError::bad_request("documents must be a list of objects", "documents");
    req.template_variables["documents"] = *docs;
  }
  return req;
}

ApiResult<LoadLoraRequest> parse_load_lora_request(std::string_view body) {
  auto parsed = parse_json_object(body);
  if (!parsed.is_ok()) return parsed.error();
  LoadLoraRequest req;
  FieldReader r(parsed.value());
  r.string("lora_name", &req.name);
  r.string("lora_path", &req.path);
  if (r.error) return *r.error;
  if (req.name.empty()) return ApiError::bad_request("lora_name is required", "lora_name");
  if (req.path.empty()) return ApiError::bad_request("lora_path is required", "lora_path");
  return req;
}

ApiResult<std::string> parse_unload_lora_request(std::string_view body) {
  auto parsed = parse_json_object(body);
  if (!parsed.is_ok()) return parsed.error();
  std::string name;
  FieldReader r(parsed.value());
  r.string("lora_name", &name);
  if (r.error) return *r.error;
  if (name.empty()) return ApiError::bad_request("lora_name is required", "lora_name");
  return name;
}

}  // namespace quiver
