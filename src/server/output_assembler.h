// OutputAssembler: turns the engine's cumulative RequestOutputs of one HTTP request into
// API choices — deltas for streaming, whole choices at the end — and counts usage.
// Choice index = job * n + the completion's index (a list of prompts, n choices each).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/request_output.h"
#include "server/openai_response.h"

namespace quiver {

struct AssemblerOptions {
  int num_jobs = 1;
  int n = 1;
  bool echo = false;              // completions: prepend the prompt (text, tokens, logprobs)
  bool return_token_ids = false;  // put prompt_token_ids on each choice's first piece
  bool prompt_logprobs = false;   // completions: put the prompt's logprobs on each whole choice
  std::vector<std::string> prompt_texts;  // per job, for echo
  std::vector<std::string> stop;          // the request's stop strings
};

class OutputAssembler {
 public:
  explicit OutputAssembler(AssemblerOptions options);

  // Streaming: what each touched choice gained with this output (pieces that carry
  // nothing are left out; a finish is reported once).
  std::vector<ChoicePiece> add(int job, const RequestOutput& output);
  // Whole choices, in index order, from the latest output of each job.
  std::vector<ChoicePiece> final_choices() const;
  Usage usage() const;
  // The first engine-side error (RequestOutput::error), if any.
  const std::optional<std::string>& error() const { return error_; }

 private:
  ChoicePiece prompt_part(int job, const RequestOutput& output) const;
  void set_finish(const CompletionOutput& c, ChoicePiece* piece) const;

  AssemblerOptions options_;
  std::vector<std::optional<RequestOutput>> latest_;  // per job
  std::vector<bool> started_;                         // per choice: first piece sent
  std::vector<bool> finish_sent_;                     // per choice
  std::optional<std::string> error_;
};

}  // namespace quiver
