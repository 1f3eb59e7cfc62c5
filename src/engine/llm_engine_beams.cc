// LLMEngine's beam searches: a search is one request to the caller and, inside, a one-token
// request per live beam per step (2 * beam_width logprobs each, on the search's adapter),
// scheduled with every other request; the prefix cache holds each beam's earlier tokens, so
// a step recomputes about a block per beam. When a step's requests have all finished the
// search advances and adds the next ones, or ends and reports its best beams.
#include <algorithm>

#include "engine/llm_engine.h"
#include "engine/request_state.h"
#include "tokenizer/tokenizer.h"

namespace quiver {

Status LLMEngine::add_beam_search(const std::string& id, const PromptInput& prompt, const BeamSearchParams& params,
                                  const std::optional<LoRARequest>& lora, int priority) {
  if (requests_.count(id) || beams_.count(id)) return Status::error("request id '" + id + "' is already in use");
  QV_RETURN_IF_ERROR(params.validate(args_.max_logprobs));
  QV_ASSIGN_OR_RETURN(std::shared_ptr<const Tokenizer> tokenizer, tokenizer_for(lora));
  std::vector<int32_t> ids = prompt.token_ids;
  if (prompt.text.has_value()) {
    if (!tokenizer) return Status::error("text prompt, but the model has no tokenizer.json (send prompt_token_ids)");
    QV_ASSIGN_OR_RETURN(ids, tokenizer->encode(*prompt.text, true));
  }
  if (ids.empty()) return Status::error("the prompt is empty");
  if (static_cast<int64_t>(ids.size()) + params.max_tokens > max_model_len_)
    return Status::error("prompt (" + std::to_string(ids.size()) + " tokens) + max_tokens (" +
                         std::to_string(params.max_tokens) + ") exceeds the maximum context length " +
                         std::to_string(max_model_len_));
  auto beam = std::make_unique<BeamRequest>(BeamRequest{
      id, prompt.text.value_or(""), BeamSearch(std::move(ids), params, config_.eos_token_ids), lora, std::nullopt,
      priority, prompt.cache_salt, std::move(tokenizer), {}, 0, "", false, std::chrono::steady_clock::now()});
  // The first step's request carries every check add_request makes (ids, adapter, salt,
  // priority): a refusal there refuses the search, leaving nothing behind.
  QV_RETURN_IF_ERROR(add_beam_step(*beam));
  beams_[id] = std::move(beam);
  return Status::ok();
}

Status LLMEngine::add_beam_step(BeamRequest& beam) {
  const std::vector<Beam>& live = beam.search.live();
  SamplingParams p;
  p.max_tokens = 1;
  p.temperature = beam.search.params().temperature;
  p.logprobs = 2 * beam.search.params().beam_width;
  p.ignore_eos = true;  // one token either way; the search decides what EOS ends
  beam.results.assign(live.size(), std::nullopt);
  beam.pending = 0;
  for (size_t i = 0; i < live.size(); ++i) {
    std::string part;
    do {
      part = "beam-" + std::to_string(next_beam_part_++);
    } while (requests_.count(part) || beams_.count(part));
    PromptInput in;
    in.token_ids = live[i].tokens;
    in.cache_salt = beam.cache_salt;
    Status s = add_request_bound(part, in, p, beam.lora, beam.priority, beam.adapter ? &*beam.adapter : nullptr);
    if (!s.is_ok()) {
      // The step's requests added so far end as aborted; the search ends when they have.
      for (const auto& [other, owner] : beam_parts_)
        if (owner.first == &beam) abort_request(other);
      return s;
    }
    if (beam.lora.has_value() && !beam.adapter.has_value()) {  // the first request found it
      const Request& r = *requests_.at(part);
      AdapterInfo info;
      info.name = r.lora_name;
      info.uid = r.lora_uid;
      info.vocab_size = r.vocab_size;
      info.tokenizer = r.tokenizer;
      beam.adapter = AdapterBinding{std::move(info), r.adapter};
    }
    beam_parts_[part] = {&beam, i};
    ++beam.pending;
  }
  return Status::ok();
}

void LLMEngine::route_beam_outputs(std::vector<RequestOutput>* outputs) {
  if (beams_.empty()) return;
  std::vector<BeamRequest*> stepped;
  std::erase_if(*outputs, [&](RequestOutput& out) {
    auto it = beam_parts_.find(out.request_id);
    if (it == beam_parts_.end()) return false;
    if (!out.finished) return true;
    auto [beam, index] = it->second;
    beam_parts_.erase(it);
    if (!out.error.empty() && beam->error.empty()) beam->error = out.error;
    if (!out.outputs.empty() && !out.outputs[0].logprobs.empty()) beam->results[index] = out.outputs[0].logprobs[0];
    if (--beam->pending == 0) stepped.push_back(beam);
    return true;
  });
  for (BeamRequest* beam : stepped) {
    bool ended = beam->aborted || !beam->error.empty();
    if (!ended) {
      std::vector<TokenLogprobs> results;
      for (const auto& r : beam->results) {
        if (!r.has_value()) {
          beam->error = "beam search: a step's request ended without logprobs";
          break;
        }
        results.push_back(*r);
      }
      if (beam->error.empty()) beam->search.advance(results);
      ended = !beam->error.empty() || beam->search.done();
      if (!ended) {
        Status s = add_beam_step(*beam);
        if (!s.is_ok()) beam->error = "beam search: " + s.message();
        ended = beam->pending == 0;  // else when the step's requests already added have ended
      }
    }
    if (!ended) continue;
    outputs->push_back(beam_output(*beam));
    ++counters_.requests_finished;
    beams_.erase(beam->id);
  }
}

RequestOutput LLMEngine::beam_output(BeamRequest& beam) {
  RequestOutput out;
  out.request_id = beam.id;
  out.prompt = beam.prompt_text;
  out.finished = true;
  const size_t prompt_len = beam.search.prompt_len();
  const std::vector<Beam> best = beam.search.best();
  if (!best.empty()) out.prompt_token_ids.assign(best[0].tokens.begin(), best[0].tokens.begin() + prompt_len);
  if (beam.lora.has_value()) out.lora_name = beam.lora->name;
  out.finished_s = seconds_since(beam.arrival);
  out.first_token_s = out.finished_s;  // the answer comes whole, at the end
  if (!beam.error.empty()) {
    out.error = beam.error;
    return out;
  }
  for (size_t i = 0; i < best.size(); ++i) {
    const Beam& b = best[i];
    CompletionOutput c;
    c.index = static_cast<int>(i);
    c.token_ids.assign(b.tokens.begin() + static_cast<std::ptrdiff_t>(prompt_len), b.tokens.end());
    const int report = beam.search.params().logprobs;
    if (report >= 0) {
      c.logprobs = b.logprobs;
      for (TokenLogprobs& lp : c.logprobs) lp.top.resize(std::min(lp.top.size(), static_cast<size_t>(report)));
    }
    // As vLLM's server: the text of the generated tokens, a final EOS's left out, special
    // tokens kept.
    if (beam.tokenizer) {
      const size_t n = c.token_ids.size() - (b.at_eos ? 1 : 0);
      auto text = beam.tokenizer->decode(std::span<const int32_t>(c.token_ids.data(), n), false);
      if (text.is_ok()) c.text = std::move(text).value();
    }
    c.finish_reason = beam.aborted ? "abort" : b.at_eos ? "stop" : "length";
    c.num_new_tokens = c.token_ids.size();
    c.delta_text = c.text;
    out.outputs.push_back(std::move(c));
  }
  return out;
}

}  // namespace quiver
