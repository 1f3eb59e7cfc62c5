// RequestOutput -> ChoicePiece. The engine reports cumulative token ids and logprobs plus
// num_new_tokens / delta_text per completion, so a streaming delta is the tail of the
// cumulative vectors.
#include "server/output_assembler.h"

#include <algorithm>

namespace quiver {

OutputAssembler::OutputAssembler(AssemblerOptions options)
    : options_(std::move(options)),
      latest_(options_.num_jobs),
      started_(static_cast<size_t>(options_.num_jobs * options_.n), false),
      finish_sent_(static_cast<size_t>(options_.num_jobs * options_.n), false) {}

ChoicePiece OutputAssembler::prompt_part(int job, const RequestOutput& out) const {
  ChoicePiece p;
  if (options_.echo) {
    if (job < static_cast<int>(options_.prompt_texts.size())) p.text = options_.prompt_texts[job];
    p.echo_token_ids = out.prompt_token_ids;
    p.echo_logprobs = out.prompt_logprobs;
  }
  if (options_.return_token_ids) p.prompt_token_ids = out.prompt_token_ids;
  return p;
}

// The engine reports a stop token as its decimal id in stop_reason; anything that is not
// one of the request's stop strings and names the last token is such an id.
void OutputAssembler::set_finish(const CompletionOutput& c, ChoicePiece* p) const {
  p->finish_reason = c.finish_reason;
  p->stop_reason = c.stop_reason;
  if (c.stop_reason.has_value() && !c.token_ids.empty() &&
      std::find(options_.stop.begin(), options_.stop.end(), *c.stop_reason) == options_.stop.end())
    p->stop_reason_is_token = *c.stop_reason == std::to_string(c.token_ids.back());
}

std::vector<ChoicePiece> OutputAssembler::add(int job, const RequestOutput& out) {
  if (!out.error.empty() && !error_) error_ = out.error;
  latest_[job] = out;
  std::vector<ChoicePiece> pieces;
  for (const CompletionOutput& c : out.outputs) {
    const size_t choice = static_cast<size_t>(job * options_.n + c.index);
    if (choice >= started_.size() || finish_sent_[choice]) continue;
    ChoicePiece p = started_[choice] ? ChoicePiece{} : prompt_part(job, out);
    p.index = static_cast<int>(choice);
    p.text += c.delta_text;
    const size_t fresh = std::min(c.num_new_tokens, c.token_ids.size());
    p.token_ids.assign(c.token_ids.end() - static_cast<std::ptrdiff_t>(fresh), c.token_ids.end());
    if (c.logprobs.size() >= fresh)
      p.logprobs.assign(c.logprobs.end() - static_cast<std::ptrdiff_t>(fresh), c.logprobs.end());
    if (c.finished()) {
      set_finish(c, &p);
      finish_sent_[choice] = true;
    }
    const bool first = !started_[choice];
    if (first || !p.text.empty() || !p.token_ids.empty() || !p.finish_reason.empty()) {
      started_[choice] = true;
      pieces.push_back(std::move(p));
    }
  }
  return pieces;
}

std::vector<ChoicePiece> OutputAssembler::final_choices() const {
  std::vector<ChoicePiece> choices;
  for (int job = 0; job < options_.num_jobs; ++job) {
    if (!latest_[job].has_value()) continue;
    const RequestOutput& out = *latest_[job];
    for (const CompletionOutput& c : out.outputs) {
      ChoicePiece p = prompt_part(job, out);
      p.index = job * options_.n + c.index;
      p.text += c.text;
      p.token_ids = c.token_ids;
      p.logprobs = c.logprobs;
      if (options_.prompt_logprobs) p.prompt_logprobs = out.prompt_logprobs;
      set_finish(c, &p);
      choices.push_back(std::move(p));
    }
  }
  std::sort(choices.begin(), choices.end(), [](const ChoicePiece& a, const ChoicePiece& b) { return a.index < b.index; });
  return choices;
}

Usage OutputAssembler::usage() const {
  Usage u;
  for (const auto& out : latest_) {
    if (!out.has_value()) continue;
    u.prompt_tokens += static_cast<int64_t>(out->prompt_token_ids.size());
    u.cached_tokens += out->num_cached_tokens;
    for (const auto& c : out->outputs) u.completion_tokens += static_cast<int64_t>(c.token_ids.size());
  }
  return u;
}

}  // namespace quiver
