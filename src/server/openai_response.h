// The OpenAI API's response side: completion and chat objects, their streaming chunks,
// logprob blocks in both formats, usage, and Server-Sent Events framing. Pure functions of
// their inputs, like the parsers.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/sampler.h"

namespace quiver {

// A token's text as logprob blocks show it ("token_id:N" when the model has no tokenizer).
using TokenText = std::function<std::string(int32_t)>;

// What one choice gained since its previous chunk (streaming) or in total.
struct ChoicePiece {
  int index = 0;
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<TokenLogprobs> logprobs;  // one per token in token_ids, when requested
  std::string finish_reason;            // empty while running
  std::optional<std::string> stop_reason;
  bool stop_reason_is_token = false;  // a stop token id: reported as a number, as vLLM does
  // Completions only: the echoed prompt's tokens and their logprobs (the first is null),
  // prepended to the text / logprob block; and prompt ids for return_token_ids.
  std::vector<int32_t> echo_token_ids;
  std::vector<std::optional<TokenLogprobs>> echo_logprobs;
  std::optional<std::vector<int32_t>> prompt_token_ids;
  // vLLM's prompt_logprobs on a whole completion choice: null for the first position.
  std::optional<std::vector<std::optional<TokenLogprobs>>> prompt_logprobs;
  // Chat: OpenAI tool_calls parsed from the text (tool_calls.h); empty when none.
  nlohmann::json tool_calls = nlohmann::json::array();
  // Chat under --reasoning-parser: the reasoning part of the text (reasoning.h), which
  // `text` then no longer holds.
  bool reasoning_parsed = false;
  std::string reasoning;
};

struct ResponseMeta {
  std::string id;
  std::string model;
  int64_t created = 0;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;         // prompt tokens the prefix cache held
  bool prompt_tokens_details = false;  // report them (--enable-prompt-tokens-details)
};

nlohmann::json usage_json(const Usage& usage);

// Completions: `logprobs` says whether the choice carries a logprob block; `text_offset`
// is where this piece's text starts in the choice's whole text (streaming).
nlohmann::json completion_choice_json(const ChoicePiece& piece, bool logprobs, const TokenText& token_text,
                                      size_t text_offset, bool return_token_ids);
nlohmann::json completion_response_json(const ResponseMeta& meta, nlohmann::json choices, const Usage& usage);
nlohmann::json completion_chunk_json(const ResponseMeta& meta, nlohmann::json choices);

// Chat: a whole message from `role`, or a streaming delta (`role` on a choice's first
// chunk, else empty).
nlohmann::json chat_choice_json(const ChoicePiece& piece, const std::string& role, bool logprobs,
                                const TokenText& token_text, bool return_token_ids);
nlohmann::json chat_delta_choice_json(const ChoicePiece& piece, const std::string& role, bool logprobs,
                                      const TokenText& token_text, bool return_token_ids);
nlohmann::json chat_response_json(const ResponseMeta& meta, nlohmann::json choices, const Usage& usage);
nlohmann::json chat_chunk_json(const ResponseMeta& meta, nlohmann::json choices);

// The final usage-only chunk of a stream (stream_options.include_usage).
nlohmann::json usage_chunk_json(const ResponseMeta& meta, const char* object, const Usage& usage);

// JSON text that never throws on invalid UTF-8 (bytes are replaced by U+FFFD): token
// pieces of byte-level vocabularies are not always valid UTF-8 on their own.
std::string safe_dump(const nlohmann::json& j);
// One SSE event: "data: <json>\n\n".
std::string sse_event(const nlohmann::json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

}  // namespace quiver
