// The OpenAI API's request side: JSON bodies -> typed requests, with 400 errors that
// name the offending parameter. Every parse function is pure (bytes in, value or error
// out, no engine, no I/O), so it can be fuzzed on its own.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/sampling_params.h"

namespace quiver {

// An error as the API reports it: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string param;  // empty = null

  static ApiError bad_request(std::string message, std::string param = "") {
    return {400, std::move(message), std::move(param)};
  }
  static ApiError not_found(std::string message, std::string param = "") {
    return {404, std::move(message), std::move(param)};
  }
};

// The error type string for a status, vLLM's names (BadRequestError, NotFoundError, ...).
std::string api_error_type(int status);
nlohmann::json api_error_json(const ApiError& error);

template <typename T>
class ApiResult {
 public:
  ApiResult(T value) : v_(std::move(value)) {}      // NOLINT: implicit by design
  ApiResult(ApiError error) : v_(std::move(error)) {}  // NOLINT
  bool is_ok() const { return v_.index() == 0; }
  T& value() { return std::get<0>(v_); }
  const T& value() const { return std::get<0>(v_); }
  const ApiError& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, ApiError> v_;
};

// One prompt: text (tokenized by the server) or token ids.
struct PromptSpec {
  std::optional<std::string> text;
  std::vector<int32_t> token_ids;
};

// Fields /v1/completions and /v1/chat/completions share.
struct CommonRequest {
  std::string model;  // empty = the base model
  SamplingParams params;
  std::optional<int> max_tokens;  // absent: 16 for completions, the rest of the context for chat
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  bool continuous_usage = false;  // stream_options.continuous_usage_stats: usage in every chunk
  bool return_token_ids = false;  // vLLM extension: "token_ids" / "prompt_token_ids" in choices
  std::optional<bool> add_special_tokens;   // absent: true for completions, false for chat (vLLM's)
  std::string request_id;                   // the caller's id: the response id becomes <prefix><request_id>
  bool return_tokens_as_token_ids = false;  // logprob blocks name tokens "token_id:N"
  int priority = 0;                         // --scheduling-policy priority: lower first
  std::optional<std::string> cache_salt;    // prefix-cache blocks shared only within the salt
  bool use_beam_search = false;             // vLLM's: n beams instead of n samples
  float length_penalty = 1.0f;              // the beams' score: logprob over length^length_penalty
};

struct CompletionRequest : CommonRequest {
  std::vector<PromptSpec> prompts;  // each becomes its own engine request with n choices
  bool echo = false;
};

struct ChatRequest : CommonRequest {
  // In the body's key order, which the template's `tojson` prints (tools, tool calls).
  nlohmann::ordered_json messages;            // content parts joined, tool call arguments objects
  nlohmann::ordered_json template_variables;  // tools + chat_template_kwargs + documents
  nlohmann::ordered_json tools;        // null when absent (tool_calls.h plans what they mean)
  nlohmann::json tool_choice;          // null when absent
  bool parallel_tool_calls = true;     // false: a choice returns its first tool call only
  std::optional<std::string> chat_template;  // the request's own (or chat_template_kwargs'), if given
  bool add_generation_prompt = true;
  bool continue_final_message = false;  // the template's output ends inside the last message
  bool echo = false;  // the answer begins with the last message's text when it has the answer's role
  bool include_reasoning = true;  // with --reasoning-parser: return the reasoning
  bool logprobs = false;
  int top_logprobs = 0;
};

struct LoadLoraRequest {
  std::string name;
  std::string path;
};

// Largest top-K of logprobs a request may ask for (vLLM's default max_logprobs).
constexpr int kMaxLogprobs = 20;
// Largest n per request; every choice holds KV blocks of its own.
constexpr int kMaxChoices = 128;

// `defaults` are what a request gets for the sampling fields it leaves out (the model's
// generation_config.json under --generation-config auto, as vLLM does).
ApiResult<CompletionRequest> parse_completion_request(std::string_view body, const SamplingParams& defaults = {});
ApiResult<ChatRequest> parse_chat_request(std::string_view body, const SamplingParams& defaults = {});
// The same from a body already parsed both ways, `j` and `body` in its key order (POST
// /tokenize's chat form); without the field check and structured outputs.
ApiResult<ChatRequest> chat_request_from_json(const nlohmann::json& j, const nlohmann::ordered_json& body,
                                              const SamplingParams& defaults = {});
ApiResult<LoadLoraRequest> parse_load_lora_request(std::string_view body);
ApiResult<std::string> parse_unload_lora_request(std::string_view body);  // the adapter name

// The body as a JSON object, or a 400 (not JSON, too deeply nested, not an object).
ApiResult<nlohmann::json> parse_json_object(std::string_view body);

}  // namespace quiver
