// The Responses API's stream (POST /v1/responses with "stream": true): Server-Sent Events
// "event: TYPE" / "data: {...}" with a running sequence_number, from the chat choice's
// pieces as OpenAI sends them: response.created and .in_progress; a reasoning item
// (reasoning_text deltas) when there is reasoning; the message item (content part,
// output_text deltas, done events); a function_call item per tool call (arguments delta and
// done); then response.completed (or .incomplete at max_output_tokens) with the whole
// response and its usage. No "[DONE]" line follows, as in OpenAI's API.
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "server/responses_api.h"

namespace quiver {

class ResponsesStream {
 public:
  // `new_id(prefix)` names the output items.
  ResponsesStream(const ResponsesRequest* request, ResponseMeta meta, std::function<std::string(const char*)> new_id)
      : request_(request), meta_(std::move(meta)), new_id_(std::move(new_id)) {}

  std::string start();
  // A running piece's reasoning and text.
  std::string piece(const ChoicePiece& p);
  // The finishing piece: its text, then every open item closed, the tool calls, and the
  // final response event.
  std::string finish(const ChoicePiece& last, const Usage& usage);
  // An error ends the stream with an "error" event.
  std::string error(const ApiError& e);

 private:
  std::string event(const char* type, nlohmann::json fields);
  std::string open_reasoning();
  std::string close_reasoning();
  std::string open_message();
  std::string close_message(const std::string& status);
  std::string function_call(const nlohmann::json& call);

  const ResponsesRequest* request_;
  ResponseMeta meta_;
  std::function<std::string(const char*)> new_id_;
  int64_t sequence_ = 0;
  nlohmann::json done_ = nlohmann::json::array();  // finished output items, in order
  struct OpenItem {
    bool open = false;
    std::string id;
    std::string text;
  };
  OpenItem reasoning_, message_;
  bool message_sent_ = false;  // a message item went out (open or done)
};

}  // namespace quiver
