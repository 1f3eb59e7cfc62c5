// Field tables of both generation endpoints. The names are vLLM's CompletionRequest and
// ChatCompletionRequest plus OpenAI's own; quiver's extension return_token_ids is vLLM's
// too. Structured-output and tool keys are accepted here and left to their own parsing.
#include "server/request_fields.h"

#include "io/json_fields.h"

namespace quiver {

namespace {

constexpr FieldUse kNo = FieldUse::kUnsupported;

// Keys both endpoints share, with the same meaning.
constexpr FieldRule kShared[] = {
    {"model"},
    {"frequency_penalty"},
    {"logit_bias"},
    {"max_tokens"},
    {"n"},
    {"presence_penalty"},
    {"seed"},
    {"stop"},
    {"stream"},
    {"stream_options"},
    {"temperature"},
    {"top_p"},
    {"user"},  // an end-user id for abuse tracking; nothing to do with generation
    {"best_of"},
    {"top_k"},
    {"min_p"},
    {"repetition_penalty"},
    {"stop_token_ids"},
    {"include_stop_str_in_output"},
    {"ignore_eos"},
    {"min_tokens"},
    {"skip_special_tokens"},
    {"spaces_between_special_tokens"},
    {"prompt_logprobs"},
    {"add_special_tokens"},
    {"request_id"},
    {"return_tokens_as_token_ids"},
    {"return_token_ids"},
    {"allowed_token_ids"},
    {"bad_words"},
    {"truncate_prompt_tokens"},
    {"priority"},
    {"cache_salt"},
    {"use_beam_search"},
    {"length_penalty"},
    // structured outputs: parsed where they are implemented
    {"response_format"},
    {"guided_json"},
    {"guided_regex"},
    {"guided_choice"},
    {"guided_grammar"},
    {"structured_outputs"},
    // vLLM parameters quiver does not implement
    {"guided_decoding_backend", kNo},
    {"guided_whitespace_pattern", kNo},
    {"logits_processors", kNo},
    {"kv_transfer_params", kNo},
    {"vllm_xargs", kNo},
};

constexpr FieldRule kCompletionOnly[] = {
    {"prompt"},
    {"echo"},
    {"logprobs"},
    {"suffix", kNo},
    {"prompt_embeds", kNo},
};

constexpr FieldRule kChatOnly[] = {
    {"messages"},
    {"logprobs"},
    {"top_logprobs"},
    {"max_completion_tokens"},
    {"add_generation_prompt"},
    {"chat_template_kwargs"},
    {"documents"},
    // false: --reasoning-parser's reasoning is left out of the response
    {"include_reasoning"},
    // tool calling: parsed where it is implemented
    {"tools"},
    {"tool_choice"},
    {"parallel_tool_calls"},
    {"continue_final_message"},
    {"echo"},
    {"chat_template"},  // under --trust-request-chat-template
    {"mm_processor_kwargs", kNo},
    {"structural_tag", kNo},
    {"reasoning_effort", kNo},
    // OpenAI parameters with no counterpart here
    {"audio", kNo},
    {"modalities", kNo},
    {"prediction", kNo},
    {"service_tier", kNo},
    {"store", kNo, "false"},
    {"metadata", kNo},
    {"functions", kNo},
    {"function_call", kNo},
    {"web_search_options", kNo},
};

constexpr FieldRule kStreamOptions[] = {
    {"include_usage"},
    {"continuous_usage_stats"},
};

template <size_t A, size_t B>
std::optional<ApiError> check(const nlohmann::json& body, const FieldRule (&shared)[A], const FieldRule (&own)[B],
                              const char* api) {
  std::vector<FieldRule> rules(shared, shared + A);
  rules.insert(rules.end(), own, own + B);
  auto problem = check_fields(body, rules, api);
  if (!problem) return std::nullopt;
  return ApiError::bad_request(problem->message, problem->field);
}

}  // namespace

std::optional<ApiError> check_completion_fields(const nlohmann::json& body) {
  return check(body, kShared, kCompletionOnly, "/v1/completions");
}

std::optional<ApiError> check_chat_fields(const nlohmann::json& body) {
  return check(body, kShared, kChatOnly, "/v1/chat/completions");
}

std::optional<ApiError> check_stream_options_fields(const nlohmann::json& stream_options) {
  auto problem = check_fields(stream_options, kStreamOptions, "stream_options");
  if (!problem) return std::nullopt;
  return ApiError::bad_request(problem->message, "stream_options");
}

}  // namespace quiver
