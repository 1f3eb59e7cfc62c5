#include "cli/generate_io.h"

#include <limits>

#include "io/json_fields.h"
#include "io/json_util.h"
#include "structured/request_fields.h"

namespace quiver {

namespace {

using nlohmann::json;

constexpr FieldUse kNo = FieldUse::kUnsupported;

// DESIGN.md's line fields and vLLM's SamplingParams names; structured-output keys are left
// to the code that implements them.
constexpr FieldRule kLineFields[] = {
    {"id"}, {"prompt"}, {"prompt_token_ids"}, {"lora"}, {"max_tokens"}, {"min_tokens"}, {"n"}, {"temperature"},
    {"top_p"}, {"top_k"}, {"min_p"}, {"presence_penalty"}, {"frequency_penalty"}, {"repetition_penalty"},
    {"logprobs"}, {"prompt_logprobs"}, {"ignore_eos"}, {"skip_special_tokens"}, {"include_stop_str_in_output"},
    {"seed"}, {"stop"}, {"logit_bias"}, {"stop_token_ids"}, {"allowed_token_ids"}, {"bad_words"},
    {"truncate_prompt_tokens"}, {"priority"}, {"cache_salt"}, {"use_beam_search"}, {"length_penalty"},
    {"response_format"}, {"guided_json"}, {"guided_regex"}, {"guided_choice"}, {"guided_grammar"},
    {"structured_outputs"},
    {"best_of", kNo}, {"detokenize", kNo, "true"},
    {"spaces_between_special_tokens"}, {"logits_processors", kNo}, {"output_kind", kNo},
    {"extra_args", kNo}, {"lora_request", kNo},
};

template <typename T>
Status read_number(const json& j, const char* key, T* out) {
  if (!j.contains(key) || j[key].is_null()) return Status::ok();
  const json& v = j[key];
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) return Status::error(std::string("field '") + key + "' must be true or false");
    *out = v.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    // Range-checked in 64 bits first: get<int>() would turn 4294967297 into 1.
    Result<int64_t> x = json_as_int(v, key);
    if (!x) return x.status();
    if (*x < std::numeric_limits<T>::min() || *x > std::numeric_limits<T>::max())
      return Status::error(std::string("field '") + key + "' is out of range: " + v.dump());
    *out = static_cast<T>(*x);
  } else {
    if (!v.is_number()) return Status::error(std::string("field '") + key + "' must be a number");
    *out = v.get<T>();
  }
  return Status::ok();
}

}  // namespace

Result<GenerateRequest> parse_generate_request(const std::string& line, int line_no) {
  json j = json::parse(line, nullptr, false);
  if (j.is_discarded()) return Status::error("line " + std::to_string(line_no) + " is not valid JSON");
  if (!j.is_object()) return Status::error("line " + std::to_string(line_no) + " is not a JSON object");
  if (auto problem = check_fields(j, kLineFields, "a request line")) {
    if (problem->field == "lora_request") problem->message += " (name the adapter with \"lora\": NAME)";
    return Status::error(problem->message);
  }
  GenerateRequest r;
  if (j.contains("id")) {
    if (j["id"].is_string()) r.id = j["id"].get<std::string>();
    else if (j["id"].is_number_integer()) r.id = std::to_string(j["id"].get<int64_t>());
    else return Status::error("field 'id' must be a string");
  } else {
    r.id = "line-" + std::to_string(line_no);
  }
  const bool has_text = j.contains("prompt") && !j["prompt"].is_null();
  const bool has_ids = j.contains("prompt_token_ids") && !j["prompt_token_ids"].is_null();
  if (has_text == has_ids) return Status::error("give exactly one of 'prompt' (text) or 'prompt_token_ids'");
  if (has_text) {
    if (!j["prompt"].is_string()) return Status::error("field 'prompt' must be a string");
    r.prompt.text = j["prompt"].get<std::string>();
  } else {
    if (!j["prompt_token_ids"].is_array()) return Status::error("field 'prompt_token_ids' must be a list of integers");
    for (const auto& t : j["prompt_token_ids"]) {
      if (!t.is_number_integer()) return Status::error("field 'prompt_token_ids' must be a list of integers");
      int64_t v = t.get<int64_t>();
      if (v < 0 || v > INT32_MAX) return Status::error("prompt token id " + std::to_string(v) + " is out of range");
      r.prompt.token_ids.push_back(static_cast<int32_t>(v));
    }
  }
  if (j.contains("lora") && !j["lora"].is_null()) {
    if (!j["lora"].is_string()) return Status::error("field 'lora' must be an adapter name or null");
    r.lora = j["lora"].get<std::string>();
  }
  SamplingParams& p = r.params;
  QV_RETURN_IF_ERROR(read_number(j, "max_tokens", &p.max_tokens));
  QV_RETURN_IF_ERROR(read_number(j, "min_tokens", &p.min_tokens));
  QV_RETURN_IF_ERROR(read_number(j, "n", &p.n));
  QV_RETURN_IF_ERROR(read_number(j, "temperature", &p.temperature));
  QV_RETURN_IF_ERROR(read_number(j, "top_p", &p.top_p));
  QV_RETURN_IF_ERROR(read_number(j, "top_k", &p.top_k));
  QV_RETURN_IF_ERROR(read_number(j, "min_p", &p.min_p));
  QV_RETURN_IF_ERROR(read_number(j, "presence_penalty", &p.presence_penalty));
  QV_RETURN_IF_ERROR(read_number(j, "frequency_penalty", &p.frequency_penalty));
  QV_RETURN_IF_ERROR(read_number(j, "repetition_penalty", &p.repetition_penalty));
  QV_RETURN_IF_ERROR(read_number(j, "logprobs", &p.logprobs));
  QV_RETURN_IF_ERROR(read_number(j, "prompt_logprobs", &p.prompt_logprobs));
  QV_RETURN_IF_ERROR(read_number(j, "ignore_eos", &p.ignore_eos));
  QV_RETURN_IF_ERROR(read_number(j, "skip_special_tokens", &p.skip_special_tokens));
  QV_RETURN_IF_ERROR(read_number(j, "spaces_between_special_tokens", &p.spaces_between_special_tokens));
  QV_RETURN_IF_ERROR(read_number(j, "include_stop_str_in_output", &p.include_stop_str_in_output));
  if (j.contains("seed") && !j["seed"].is_null()) {
    if (!j["seed"].is_number_integer() || (!j["seed"].is_number_unsigned() && j["seed"].get<int64_t>() < 0))
      return Status::error("field 'seed' must be a non-negative integer");
    p.seed = j["seed"].get<uint64_t>();
  }
  if (j.contains("stop") && !j["stop"].is_null()) {
    const json& s = j["stop"];
    if (s.is_string()) p.stop.push_back(s.get<std::string>());
    else if (s.is_array()) {
      for (const auto& x : s) {
        if (!x.is_string()) return Status::error("field 'stop' must be a string or a list of strings");
        p.stop.push_back(x.get<std::string>());
      }
    } else {
      return Status::error("field 'stop' must be a string or a list of strings");
    }
  }
  if (j.contains("logit_bias") && !j["logit_bias"].is_null()) {
    QV_ASSIGN_OR_RETURN(p.logit_bias, json_logit_bias(j["logit_bias"]));
  }
  for (auto [key, ids] : {std::pair<const char*, std::vector<int32_t>*>{"stop_token_ids", &p.stop_token_ids},
                          {"allowed_token_ids", &p.allowed_token_ids}}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    const std::string list_error = std::string("field '") + key + "' must be a list of token ids";
    if (!j[key].is_array()) return Status::error(list_error);
    for (const auto& x : j[key]) {
      Result<int64_t> id = json_as_int(x, key);
      if (!id || *id < 0 || *id > std::numeric_limits<int32_t>::max()) return Status::error(list_error + ", got " + x.dump());
      ids->push_back(static_cast<int32_t>(*id));
    }
    if (ids->empty() && std::string(key) == "allowed_token_ids")
      return Status::error("field 'allowed_token_ids' must not be empty");
  }
  if (j.contains("bad_words") && !j["bad_words"].is_null()) {
    if (!j["bad_words"].is_array()) return Status::error("field 'bad_words' must be a list of strings");
    for (const auto& x : j["bad_words"]) {
      if (!x.is_string()) return Status::error("field 'bad_words' must be a list of strings");
      p.bad_words.push_back(x.get<std::string>());
    }
  }
  if (j.contains("truncate_prompt_tokens") && !j["truncate_prompt_tokens"].is_null()) {
    int k = 0;
    QV_RETURN_IF_ERROR(read_number(j, "truncate_prompt_tokens", &k));
    p.truncate_prompt_tokens = k;
  }
  QV_RETURN_IF_ERROR(read_number(j, "priority", &r.priority));
  if (j.contains("cache_salt") && !j["cache_salt"].is_null()) {
    if (!j["cache_salt"].is_string()) return Status::error("field 'cache_salt' must be a string");
    r.prompt.cache_salt = j["cache_salt"].get<std::string>();
  }
  if (structured::has_structured_fields(j)) {
    std::string field;
    auto spec = structured::read_structured_fields(nlohmann::ordered_json::parse(line), &field);
    if (!spec.is_ok()) return spec.status();
    p.structured_outputs = std::move(spec).value();
  }
  bool beam = false;
  float length_penalty = 1.0f;
  QV_RETURN_IF_ERROR(read_number(j, "use_beam_search", &beam));
  QV_RETURN_IF_ERROR(read_number(j, "length_penalty", &length_penalty));
  if (beam) {
    if (const char* with = beam_search_conflict(p))
      return Status::error(std::string("field '") + with + "' cannot be combined with use_beam_search");
    r.beam = beam_search_params(p, length_penalty);
  }
  return r;
}

std::string generate_request_id(const std::string& line, int line_no) {
  const json j = json::parse(line, nullptr, false);
  if (j.is_object() && j.contains("id")) {
    if (j["id"].is_string()) return j["id"].get<std::string>();
    if (j["id"].is_number_integer()) return std::to_string(j["id"].get<int64_t>());
  }
  return "line-" + std::to_string(line_no);
}

json logprob_map_json(const TokenLogprobs& lp) {
  json m = json::object();
  for (const auto& [id, v] : lp.top) m[std::to_string(id)] = v;
  m[std::to_string(lp.token)] = lp.logprob;
  return m;
}

namespace {
json completion_json(const CompletionOutput& c, bool with_logprobs) {
  json o;
  o["token_ids"] = c.token_ids;
  o["text"] = c.text;
  o["finish_reason"] = c.finish_reason;
  if (with_logprobs) {
    json lps = json::array();
    for (const auto& lp : c.logprobs) lps.push_back(logprob_map_json(lp));
    o["logprobs"] = lps;
  }
  return o;
}
}  // namespace

json generate_output_json(const RequestOutput& out) {
  const bool with_logprobs = !out.outputs.empty() && !out.outputs[0].logprobs.empty();
  json j = {{"id", out.request_id}};
  if (!out.outputs.empty()) j.update(completion_json(out.outputs[0], with_logprobs));
  if (!out.prompt_logprobs.empty()) {
    json pl = json::array();
    for (const auto& e : out.prompt_logprobs) pl.push_back(e.has_value() ? logprob_map_json(*e) : json(nullptr));
    j["prompt_logprobs"] = pl;
  }
  if (!out.lora_name.empty()) j["lora"] = out.lora_name;
  if (out.outputs.size() > 1) {
    json all = json::array();
    for (const auto& c : out.outputs) all.push_back(completion_json(c, with_logprobs));
    j["outputs"] = all;
  }
  if (!out.error.empty()) j["error"] = {{"message", out.error}, {"type", "engine_error"}};
  return j;
}

json generate_error_json(const std::string& id, const std::string& message) {
  return {{"id", id}, {"error", {{"message", message}, {"type", "invalid_request"}}}};
}

}  // namespace quiver
