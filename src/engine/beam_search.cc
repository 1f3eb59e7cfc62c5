#include "engine/beam_search.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace quiver {

Status BeamSearchParams::validate(int max_logprobs) const {
  if (beam_width < 1) return Status::error("beam_width (n) must be at least 1, got " + std::to_string(beam_width));
  if (2 * static_cast<int64_t>(beam_width) > max_logprobs)
    return Status::error("beam search with beam_width (n) " + std::to_string(beam_width) + " asks each step for " +
                         std::to_string(2 * static_cast<int64_t>(beam_width)) + " logprobs, over the engine's " +
                         "max_logprobs (" + std::to_string(max_logprobs) + ")");
  if (max_tokens < 1) return Status::error("max_tokens must be at least 1, got " + std::to_string(max_tokens));
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) return Status::error("temperature must be >= 0");
  if (!std::isfinite(length_penalty)) return Status::error("length_penalty must be a finite number");
  if (logprobs > max_logprobs)
    return Status::error("logprobs " + std::to_string(logprobs) + " exceeds the engine's max_logprobs (" +
                         std::to_string(max_logprobs) + ")");
  return Status::ok();
}

BeamSearchParams beam_search_params(const SamplingParams& p, float length_penalty) {
  BeamSearchParams b;
  b.beam_width = p.n;
  b.max_tokens = p.max_tokens;
  b.ignore_eos = p.ignore_eos;
  b.temperature = p.temperature;
  b.length_penalty = length_penalty;
  b.logprobs = p.logprobs;
  return b;
}

const char* beam_search_conflict(const SamplingParams& p) {
  return !p.stop.empty()                    ? "stop"
         : !p.stop_token_ids.empty()        ? "stop_token_ids"
         : p.structured_outputs.active()    ? "structured_outputs"
         : p.prompt_logprobs >= 0           ? "prompt_logprobs"
         : !p.allowed_token_ids.empty()     ? "allowed_token_ids"
         : !p.bad_words.empty()             ? "bad_words"
                                            : nullptr;
}

double beam_score(const Beam& beam, std::span<const int64_t> eos_ids, float length_penalty) {
  size_t length = beam.tokens.size();
  if (length > 0 && std::find(eos_ids.begin(), eos_ids.end(), beam.tokens.back()) != eos_ids.end()) --length;
  return beam.cum_logprob / std::pow(static_cast<double>(length), static_cast<double>(length_penalty));
}

BeamSearch::BeamSearch(std::vector<int32_t> prompt, const BeamSearchParams& params, std::vector<int64_t> eos_ids)
    : params_(params), eos_ids_(std::move(eos_ids)), prompt_len_(prompt.size()) {
  live_.push_back(Beam{std::move(prompt), {}, 0.0, false});
}

std::vector<Beam> BeamSearch::keep_best(std::vector<Beam> beams) const {
  std::vector<double> score(beams.size());
  std::vector<size_t> order(beams.size());
  for (size_t i = 0; i < beams.size(); ++i) {
    score[i] = beam_score(beams[i], eos_ids_, params_.length_penalty);
    order[i] = i;
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return score[a] > score[b]; });
  std::vector<Beam> out;
  for (size_t k = 0; k < order.size() && static_cast<int>(out.size()) < params_.beam_width; ++k)
    out.push_back(std::move(beams[order[k]]));
  return out;
}

void BeamSearch::advance(const std::vector<TokenLogprobs>& candidates) {
  std::vector<Beam> grown;
  for (size_t i = 0; i < live_.size() && i < candidates.size(); ++i) {
    const TokenLogprobs& c = candidates[i];
    // The top tokens, then the sampled one when it is not among them (vLLM's dict of both).
    std::vector<std::pair<int32_t, float>> options = c.top;
    if (std::none_of(options.begin(), options.end(), [&](const auto& o) { return o.first == c.token; }))
      options.emplace_back(c.token, c.logprob);
    for (size_t k = 0; k < options.size(); ++k) {
      const auto [token, logprob] = options[k];
      Beam b = live_[i];
      b.tokens.push_back(token);
      b.logprobs.push_back(TokenLogprobs{token, logprob, k < c.top.size() ? static_cast<int>(k) + 1 : c.rank, c.top});
      b.cum_logprob += logprob;
      const bool eos = std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end();
      if (eos && !params_.ignore_eos) {
        b.at_eos = true;
        ended_.push_back(std::move(b));
      } else {
        grown.push_back(std::move(b));
      }
    }
  }
  live_ = keep_best(std::move(grown));
  ++steps_;
}

std::vector<Beam> BeamSearch::best() const {
  std::vector<Beam> all = ended_;
  all.insert(all.end(), live_.begin(), live_.end());
  return keep_best(std::move(all));
}

}  // namespace quiver
