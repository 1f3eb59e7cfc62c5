// The keys /v1/completions and /v1/chat/completions accept: OpenAI's and vLLM's parameter
// names, each either implemented or refused as unsupported, and nothing else (a 400 that
// names the key, as OpenAI answers).
#pragma once

#include <optional>

#include <nlohmann/json.hpp>

#include "server/openai_protocol.h"

namespace quiver {

std::optional<ApiError> check_completion_fields(const nlohmann::json& body);
std::optional<ApiError> check_chat_fields(const nlohmann::json& body);
// The keys of a stream_options object (both endpoints).
std::optional<ApiError> check_stream_options_fields(const nlohmann::json& stream_options);

}  // namespace quiver
