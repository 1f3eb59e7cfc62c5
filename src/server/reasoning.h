// Reasoning outputs as vLLM serves them (--reasoning-parser NAME): a chat choice's text
// split into the model's reasoning and its answer, returned as the message's `reasoning`
// (and `reasoning_content`, its earlier name, which clients still read) and `content`.
//   deepseek_r1: an optional leading <think>, the reasoning up to </think>, the answer after
//                it; without </think> the whole text is reasoning (the DeepSeek-R1 distills,
//                Llama and Qwen2 ones, and QwQ, whose templates open the <think> in the prompt)
// Pure functions and a per-choice streaming state; no allocation beyond the texts.
#pragma once

#include <string>
#include <string_view>

#include "server/openai_protocol.h"

namespace quiver {

enum class ReasoningParser { kNone, kDeepSeekR1 };

// "deepseek_r1"; an error lists the supported names.
ApiResult<ReasoningParser> parse_reasoning_parser(const std::string& name);

struct ReasoningSplit {
  std::string reasoning;
  std::string content;
};

// A whole choice's text.
ReasoningSplit split_reasoning(std::string_view text, ReasoningParser parser);

// The same split over a stream of pieces: each feed returns what can be sent now, holding
// back the tail that could still become a <think> or </think> tag until the next piece
// (or the last, which releases everything). The concatenated results equal
// split_reasoning of the whole text.
class ReasoningStream {
 public:
  explicit ReasoningStream(ReasoningParser parser) : parser_(parser) {}
  ReasoningSplit feed(std::string_view piece, bool last);

 private:
  ReasoningParser parser_;
  bool at_start_ = true;      // the leading <think> not yet ruled in or out
  bool in_reasoning_ = true;  // </think> not yet seen
  std::string held_;
};

}  // namespace quiver
