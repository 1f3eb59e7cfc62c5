// From a parsed completion/chat request to engine jobs: resolve the model name to the base
// model or an adapter (404 otherwise), tokenize text and chat prompts, apply defaults and
// the context-length check (400), and fix how the response will be assembled.
#pragma once

#include <string>
#include <vector>

#include "server/engine_loop.h"
#include "server/openai_protocol.h"
#include "server/openai_response.h"
#include "server/output_assembler.h"
#include "server/tool_calls.h"

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
  bool return_token_ids = false;
  bool logprobs = false;  // choices carry a logprob block
  std::string request_id;  // the caller's (request_id), empty = a fresh one
  bool tokens_as_ids = false;  // logprob blocks name tokens "token_id:N"
  ToolPlan tools;         // chat: how the output becomes tool_calls
};

// What preparation needs to know about the running server.
struct ModelView {
  std::string base_name;
  int max_model_len = 0;
  const Tokenizer* tokenizer = nullptr;  // null: token-id prompts only
  const EngineLoop* loop = nullptr;      // for adapter names
  const ChatTemplate* chat_template = nullptr;  // --chat-template; null = the tokenizer's
  ToolOptions tools;
};

// The adapter a "model" field names: "" for the base model (or an empty field), 404 if unknown.
ApiResult<std::string> resolve_model(const ModelView& view, const std::string& model);

ApiResult<PreparedGeneration> prepare_completion(const ModelView& view, CompletionRequest request);
ApiResult<PreparedGeneration> prepare_chat(const ModelView& view, ChatRequest request);

// Token text for logprob blocks: the token decoded alone, or "token_id:N" without a tokenizer.
TokenText make_token_text(const Tokenizer* tokenizer);

}  // namespace quiver
