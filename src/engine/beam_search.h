// Beam search as vLLM runs it, over an engine that gives one token's logprobs: every step
// extends each live beam by each of its candidates (the step's 2 * beam_width likeliest
// tokens, and the one sampled), beams that reach EOS end, and the beam_width best of the
// rest by score go on. The score is vLLM's: the cumulative logprob over the length (prompt
// included, a final EOS not) to the power length_penalty. LLMEngine runs the steps
// (llm_engine_beams.cc); this holds one prompt's beams.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"

namespace quiver {

// vLLM's BeamSearchParams.
struct BeamSearchParams {
  int beam_width = 1;
  int max_tokens = 16;
  bool ignore_eos = false;
  float temperature = 0.0f;  // of the step's sampled token; scores use the raw logprobs
  float length_penalty = 1.0f;
  // How many of each token's candidates its output reports (-1: no logprobs); the steps
  // ask for 2 * beam_width whatever this is.
  int logprobs = -1;

  // Each step asks for 2 * beam_width logprobs: at most `max_logprobs` (the engine's).
  Status validate(int max_logprobs) const;
};

// A request's use_beam_search as vLLM's server maps it: n beams of up to max_tokens, its
// ignore_eos, temperature and logprobs, and `length_penalty`.
BeamSearchParams beam_search_params(const SamplingParams& p, float length_penalty);
// The first field of `p` that beam search would not honour (stop strings and tokens,
// constraints, allowed_token_ids, bad_words, prompt_logprobs), to refuse rather than
// ignore; null when none.
const char* beam_search_conflict(const SamplingParams& p);

struct Beam {
  std::vector<int32_t> tokens;          // the prompt's, then the generated
  std::vector<TokenLogprobs> logprobs;  // per generated token: it and the step's candidates
  double cum_logprob = 0;               // the generated tokens' logprobs, summed
  bool at_eos = false;                  // ended at an EOS id
};

double beam_score(const Beam& beam, std::span<const int64_t> eos_ids, float length_penalty);

class BeamSearch {
 public:
  BeamSearch(std::vector<int32_t> prompt, const BeamSearchParams& params, std::vector<int64_t> eos_ids);

  // The beams to extend by one token now (none once done()).
  const std::vector<Beam>& live() const { return live_; }
  // One step: `candidates[i]` holds live()[i]'s next-token logprobs (the sampled token and
  // the top ones).
  void advance(const std::vector<TokenLogprobs>& candidates);
  bool done() const { return live_.empty() || steps_ >= params_.max_tokens; }
  // The beam_width best of the ended and the live beams, best first.
  std::vector<Beam> best() const;
  size_t prompt_len() const { return prompt_len_; }
  const BeamSearchParams& params() const { return params_; }

 private:
  // The beam_width best of `beams`, best first (stable: equal scores keep their order).
  std::vector<Beam> keep_best(std::vector<Beam> beams) const;

  BeamSearchParams params_;
  std::vector<int64_t> eos_ids_;
  size_t prompt_len_ = 0;
  int steps_ = 0;
  std::vector<Beam> live_;
  std::vector<Beam> ended_;
};

}  // namespace quiver
