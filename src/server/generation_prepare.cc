// Request -> engine jobs. Tokenizing and compiling constraints here, on the HTTP thread,
// keeps that work off the engine thread (the tokenizer is const and guards its cache; the
// automaton cache locks) and lets a too-long prompt or a refused constraint be answered
// with a 400 before anything is queued. Context messages follow vLLM's.
#include "server/generation_prepare.h"

#include <algorithm>

#include "tokenizer/chat_content.h"
#include "tokenizer/tokenizer.h"

namespace quiver {

namespace {

// Sets params.max_tokens; `requested` absent means `fallback` tokens, or the rest of the
// context when fallback < 0; then at most `cap` (> 0).
std::optional<ApiError> fit_context(size_t prompt_len, std::optional<int> requested, int fallback, int cap,
                                    int max_model_len, const char* prompt_param, SamplingParams* params) {
  const int64_t len = static_cast<int64_t>(prompt_len);
  if (len >= max_model_len)
    return ApiError::bad_request("This model's maximum context length is " + std::to_string(max_model_len) +
                                     " tokens. However, your request has " + std::to_string(len) +
                                     " input tokens. Please reduce the length of the input.",
                                 prompt_param);
  int64_t max_tokens = requested.has_value() ? *requested : fallback >= 0 ? fallback : max_model_len - len;
  if (len + max_tokens > max_model_len)
    return ApiError::bad_request("This model's maximum context length is " + std::to_string(max_model_len) +
                                     " tokens. However, you requested " + std::to_string(len + max_tokens) +
                                     " tokens (" + std::to_string(len) + " in the input, " +
                                     std::to_string(max_tokens) + " in the completion). Please reduce the length of "
                                     "the input or the completion.",
                                 requested.has_value() ? "max_tokens" : prompt_param);
  params->max_tokens = static_cast<int>(cap > 0 ? std::min<int64_t>(max_tokens, cap) : max_tokens);
  if (params->min_tokens > params->max_tokens)
    return ApiError::bad_request("min_tokens must not exceed max_tokens", "min_tokens");
  return std::nullopt;
}

// truncate_prompt_tokens, as vLLM's server: at most max_model_len, then the prompt's last
// tokens kept.
std::optional<ApiError> truncate_prompt(const ModelView& view, const SamplingParams& params, std::vector<int32_t>* ids) {
  if (params.truncate_prompt_tokens.value_or(0) > view.max_model_len)
    return ApiError::bad_request("truncate_prompt_tokens value (" + std::to_string(*params.truncate_prompt_tokens) +
                                     ") is greater than max_model_len (" + std::to_string(view.max_model_len) +
                                     "). Please, select a smaller truncation size.",
                                 "truncate_prompt_tokens");
  params.truncate_prompt(*ids, view.max_model_len);
  return std::nullopt;
}

// use_beam_search, as vLLM's server: n beams of up to max_tokens, the request's
// temperature, ignore_eos, length_penalty and logprobs. What sampling alone has (stop
// strings and tokens, constraints, prompt_logprobs) is refused rather than ignored.
std::optional<ApiError> plan_beam_search(const CommonRequest& r, EngineJob* job) {
  if (!r.use_beam_search) return std::nullopt;
  if (const char* with = beam_search_conflict(job->params))
    return ApiError::bad_request(std::string(with) + " cannot be combined with use_beam_search", with);
  job->beam = beam_search_params(job->params, r.length_penalty);
  return std::nullopt;
}

// Attaches the constraint's automaton to `params`; the engine's own message for a refusal.
std::optional<ApiError> compile_constraint(const ModelView& view, SamplingParams* params) {
  StructuredOutputSpec& spec = params->structured_outputs;
  if (!spec.active() || view.automata == nullptr) return std::nullopt;
  auto dfa = view.automata->get(spec);
  if (!dfa.is_ok()) return ApiError::bad_request(dfa.status().with_context("structured_outputs").message());
  spec.compiled = std::move(dfa).value();
  return std::nullopt;
}

PreparedGeneration common_part(const ModelView& view, const CommonRequest& r, const ResolvedModel& m) {
  PreparedGeneration g;
  g.meta.model = m.lora.empty() ? view.base_name : m.lora;  // the base model by its first name, as vLLM
  g.stream = r.stream;
  g.include_usage = r.stream && (r.include_usage || view.force_include_usage);
  g.continuous_usage = g.include_usage && r.continuous_usage;
  g.return_token_ids = r.return_token_ids;
  g.assembler.n = r.params.n;
  g.assembler.return_token_ids = r.return_token_ids;
  g.assembler.stop = r.params.stop;
  g.request_id = r.request_id;
  g.tokens_as_ids = r.return_tokens_as_token_ids || view.tokens_as_ids;
  return g;
}

}  // namespace

ApiResult<std::string> render_chat(const Tokenizer& tokenizer, const ChatRequest& r, const ModelView& view) {
  const ChatTemplate* chat_template = view.chat_template;
  std::optional<ChatTemplate> own;
  if (r.chat_template) {
    if (!view.trust_request_chat_template)
      return ApiError::bad_request("Chat template is passed with request, but --trust-request-chat-template is not "
                                   "set. Refused request with untrusted chat template.",
                                   "chat_template");
    auto parsed = ChatTemplate::parse(*r.chat_template);
    if (!parsed.is_ok()) return ApiError::bad_request("chat_template: " + parsed.message(), "chat_template");
    own.emplace(std::move(parsed).value());
    chat_template = &*own;
  }
  auto rendered = tokenizer.apply_chat_template(r.messages, r.add_generation_prompt, r.template_variables, chat_template);
  if (!rendered.is_ok()) return ApiError::bad_request("chat template: " + rendered.message(), "messages");
  if (!r.continue_final_message) return std::move(rendered).value();
  auto cut = cut_after_final_message(rendered.value(), r.messages);
  if (!cut.is_ok()) return ApiError::bad_request(cut.message(), "continue_final_message");
  return std::move(cut).value();
}

ApiResult<ResolvedModel> resolve_model(const ModelView& view, const std::string& model) {
  if (model.empty() || model == view.base_name ||
      std::find(view.base_aliases.begin(), view.base_aliases.end(), model) != view.base_aliases.end())
    return ResolvedModel{"", 0, view.tokenizer};
  if (view.loop != nullptr) {
    if (std::optional<AdapterInfo> a = view.loop->find_adapter(model)) return ResolvedModel{model, a->uid, a->tokenizer};
  }
  return ApiError::not_found("The model `" + model + "` does not exist.", "model");
}

ApiResult<PreparedGeneration> prepare_completion(const ModelView& view, CompletionRequest r) {
  auto resolved = resolve_model(view, r.model);
  if (!resolved.is_ok()) return resolved.error();
  const ResolvedModel& m = resolved.value();
  const Tokenizer* tokenizer = m.tokenizer.get();
  PreparedGeneration g = common_part(view, r, m);
  g.tokenizer = m.tokenizer;
  g.logprobs = r.params.logprobs >= 0;
  g.assembler.echo = r.echo;
  // Echo with logprobs shows the prompt's logprobs too (vLLM does the same).
  if (r.echo && r.params.logprobs >= 0 && r.params.prompt_logprobs < 0) r.params.prompt_logprobs = r.params.logprobs;
  g.assembler.prompt_logprobs = r.params.prompt_logprobs >= 0;
  if (auto e = compile_constraint(view, &r.params)) return *e;  // once for all the prompts
  for (const PromptSpec& p : r.prompts) {
    EngineJob job;
    job.lora = m.lora;
    job.lora_uid = m.lora_uid;
    job.params = r.params;
    job.priority = r.priority;
    job.cache_salt = r.cache_salt;
    std::string echo_text;
    if (p.text.has_value()) {
      if (tokenizer == nullptr)
        return ApiError::bad_request("this model has no tokenizer: send the prompt as token ids", "prompt");
      auto ids = tokenizer->encode(*p.text, r.add_special_tokens.value_or(true));
      if (!ids.is_ok()) return ApiError::bad_request("prompt: " + ids.message(), "prompt");
      job.prompt_token_ids = std::move(ids.value());
      echo_text = *p.text;
    } else {
      job.prompt_token_ids = p.token_ids;
      if (r.echo && tokenizer != nullptr) {
        auto text = tokenizer->decode(p.token_ids, r.params.skip_special_tokens);
        if (text.is_ok()) echo_text = text.value();
      }
    }
    if (job.prompt_token_ids.empty()) return ApiError::bad_request("the prompt is empty", "prompt");
    if (auto e = truncate_prompt(view, job.params, &job.prompt_token_ids)) return *e;
    if (auto e = fit_context(job.prompt_token_ids.size(), r.max_tokens, 16, view.max_tokens_cap, view.max_model_len,
                             "prompt", &job.params))
      return *e;
    if (auto e = plan_beam_search(r, &job)) return *e;
    g.assembler.prompt_texts.push_back(std::move(echo_text));
    g.jobs.push_back(std::move(job));
  }
  g.assembler.num_jobs = static_cast<int>(g.jobs.size());
  return g;
}

ApiResult<PreparedGeneration> prepare_chat(const ModelView& view, ChatRequest r) {
  auto resolved = resolve_model(view, r.model);
  if (!resolved.is_ok()) return resolved.error();
  const ResolvedModel& m = resolved.value();
  if (m.tokenizer == nullptr)
    return ApiError::bad_request("this model has no tokenizer, so it cannot render chat messages; "
                                 "use /v1/completions with token ids",
                                 "messages");
  PreparedGeneration g = common_part(view, r, m);
  g.chat = true;
  g.logprobs = r.logprobs;
  g.include_reasoning = r.include_reasoning;
  g.tokenizer = m.tokenizer;
  // vLLM's: the view's role after a generation prompt, else the last message's (its reply
  // goes on); echo repeats that message's text when its role is the answer's.
  const nlohmann::ordered_json& last = r.messages.back();
  g.role = r.add_generation_prompt ? view.response_role : last.value("role", std::string());
  if (r.echo && last.value("role", std::string()) == g.role && last.contains("content") && last["content"].is_string())
    g.echo = last["content"].get<std::string>();
  auto rendered = render_chat(*m.tokenizer, r, view);
  if (!rendered.is_ok()) return rendered.error();
  // The template writes the special tokens itself (bos included), so by default none are added.
  auto ids = m.tokenizer->encode(rendered.value(), r.add_special_tokens.value_or(false));
  if (!ids.is_ok()) return ApiError::bad_request("messages: " + ids.message(), "messages");
  EngineJob job;
  job.lora = m.lora;
  job.lora_uid = m.lora_uid;
  job.params = r.params;
  job.priority = r.priority;
  job.cache_salt = r.cache_salt;
  job.prompt_token_ids = std::move(ids.value());
  if (job.prompt_token_ids.empty()) return ApiError::bad_request("the rendered chat prompt is empty", "messages");
  auto plan = plan_tools(r.tools, r.tool_choice, view.tools);
  if (!plan.is_ok()) return plan.error();
  if (plan.value().constraint.active()) {
    if (job.params.structured_outputs.active())
      return ApiError::bad_request("tool_choice \"required\" or a named function constrains the output itself; "
                                   "it cannot be combined with response_format or structured_outputs",
                                   "tool_choice");
    job.params.structured_outputs = plan.value().constraint;
  }
  // vLLM's mistral parser: [TOOL_CALLS] is a special token, which the text must keep.
  if (plan.value().active() && plan.value().parser == ToolCallParser::kMistral) job.params.skip_special_tokens = false;
  g.tools = plan.value();
  g.tools.parallel = r.parallel_tool_calls;
  if (auto e = compile_constraint(view, &job.params)) return *e;
  if (auto e = truncate_prompt(view, job.params, &job.prompt_token_ids)) return *e;
  if (auto e = fit_context(job.prompt_token_ids.size(), r.max_tokens, -1, view.max_tokens_cap, view.max_model_len,
                             "messages", &job.params))
    return *e;
  if (auto e = plan_beam_search(r, &job)) return *e;
  g.jobs.push_back(std::move(job));
  g.assembler.num_jobs = 1;
  return g;
}

TokenText make_token_text(std::shared_ptr<const Tokenizer> tokenizer) {
  if (tokenizer == nullptr) return [](int32_t id) { return "token_id:" + std::to_string(id); };
  return [tokenizer = std::move(tokenizer)](int32_t id) {
    const int32_t one[1] = {id};
    auto text = tokenizer->decode(one, /*skip_special_tokens=*/false);
    return text.is_ok() ? text.value() : "token_id:" + std::to_string(id);
  };
}

}  // namespace quiver
