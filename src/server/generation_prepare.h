// From a parsed completion/chat request to engine jobs: resolve the model name to the base
// model or an adapter (404 otherwise), tokenize text and chat prompts, compile a
// structured-output constraint, apply defaults and the context-length check (400), and fix
// how the response will be assembled.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/engine_loop.h"
#include "server/openai_protocol.h"
#include "server/openai_response.h"
#include "server/output_assembler.h"
#include "server/tool_calls.h"
#include "structured/automaton_cache.h"

namespace quiver {

class Tokenizer;
class ChatTemplate;

struct PreparedGeneration {
  bool chat = false;
  std::vector<EngineJob> jobs;
  AssemblerOptions assembler;
  ResponseMeta meta;  // id filled by the caller
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage = false;  // vLLM's: every chunk carries the usage so far (with include_usage)
  bool return_token_ids = false;
  bool logprobs = false;  // choices carry a logprob block
  std::string request_id;  // the caller's (request_id), empty = a fresh one
  bool tokens_as_ids = false;  // logprob blocks name tokens "token_id:N"
  ToolPlan tools;         // chat: how the output becomes tool_calls
  bool include_reasoning = true;  // chat under --reasoning-parser: the reasoning is returned
  std::string role = "assistant";  // chat: the answer's role (--response-role, or the last message's)
  std::string echo;                // chat echo: the last message's text, before each choice's
  std::shared_ptr<const Tokenizer> tokenizer;  // the model's (adapter's or base's); null: none
};

// What preparation needs to know about the running server.
struct ModelView {
  std::string base_name;
  int max_model_len = 0;
  std::shared_ptr<const Tokenizer> tokenizer;  // the base model's; null: token-id prompts only
  const EngineLoop* loop = nullptr;            // for adapter names and their tokenizers
  const ChatTemplate* chat_template = nullptr;  // --chat-template; null = the tokenizer's
  ToolOptions tools;
  // Compiles the jobs' constraints here, off the engine thread; null: the engine compiles them.
  const structured::AutomatonCache* automata = nullptr;
  // generation_config.json's max_new_tokens (--generation-config): the most tokens any
  // request generates, its own max_tokens or the default, as in vLLM; 0 = no bound.
  int max_tokens_cap = 0;
  bool force_include_usage = false;  // --enable-force-include-usage: streams end with usage
  bool tokens_as_ids = false;        // --return-tokens-as-token-ids: every request's default
  std::string response_role = "assistant";  // --response-role: the role chat answers come from
  std::vector<std::string> base_aliases = {};  // more names of the base model (--served-model-name)
  bool trust_request_chat_template = false;    // a request's own "chat_template" is used, not refused
};

// What a "model" field names: the adapter ("" for the base model, also for an empty field)
// and the tokenizer its text goes through (an adapter's own, else the base model's).
struct ResolvedModel {
  std::string lora;
  uint64_t lora_uid = 0;
  std::shared_ptr<const Tokenizer> tokenizer;  // null: token-id prompts only
};
// 404 for a name that is neither the base model nor a listed adapter.
ApiResult<ResolvedModel> resolve_model(const ModelView& view, const std::string& model);

// A chat request's messages through the chat template (the request's own when the view
// trusts it, a 400 when not, as vLLM's; else `view.chat_template`, else the tokenizer's),
// cut after the final message under continue_final_message.
ApiResult<std::string> render_chat(const Tokenizer& tokenizer, const ChatRequest& request, const ModelView& view);

ApiResult<PreparedGeneration> prepare_completion(const ModelView& view, CompletionRequest request);
ApiResult<PreparedGeneration> prepare_chat(const ModelView& view, ChatRequest request);

// Token text for logprob blocks: the token decoded alone by the request's tokenizer (kept
// alive by the result), or "token_id:N" without one.
TokenText make_token_text(std::shared_ptr<const Tokenizer> tokenizer);

}  // namespace quiver
