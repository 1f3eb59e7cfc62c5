// Request: the engine's bookkeeping for one request and its n sequences.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/beam_search.h"
#include "engine/llm_engine.h"
#include "engine/request_output.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"
#include "engine/token_constraints.h"
#include "io/peft_adapter.h"
#include "sched/sequence.h"
#include "structured/grammar.h"
#include "tokenizer/stop_checker.h"
#include "tokenizer/tokenizer.h"

namespace quiver {

// Seconds from `t` (a request's arrival, a step's start) to now.
inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

struct Request;

struct SeqState {
  Sequence seq;
  Request* req = nullptr;  // the request it belongs to, as its seqs[index]
  int index = 0;
  SeqRng rng;            // the host sampler's generator
  uint64_t seed = 0;     // the device sampler's Philox key (the same seed rng started from)
  CompletionOutput out;
  std::unique_ptr<IncrementalDetokenizer> detok;
  std::unique_ptr<StopChecker> stops;
  size_t reported_tokens = 0;   // tokens included in the previous RequestOutput
  size_t reported_text = 0;     // bytes of text included in the previous RequestOutput
  int32_t grammar_state = 0;    // where the output stands in the request's grammar
};

struct Request {
  std::string id;
  std::string prompt_text;
  SamplingParams params;
  std::string lora_name;
  uint64_t lora_uid = 0;
  std::shared_ptr<const LoraAdapter> adapter;  // keeps host weights while running
  // What its text goes through (its adapter's or the base model's; null: none). Declared
  // before seqs, whose detokenizers point to it.
  std::shared_ptr<const Tokenizer> tokenizer;
  // Token ids this request may see: the base vocabulary plus its adapter's new tokens
  // (its logits rows are wider; the columns past this are -inf).
  int64_t vocab_size = 0;
  std::shared_ptr<structured::Grammar> grammar;  // set when params.structured_outputs is
  TokenConstraints constraints;  // allowed_token_ids and bad_words
  std::string error;  // why the engine ended the request, reported as RequestOutput::error
  std::vector<std::unique_ptr<SeqState>> seqs;
  std::vector<std::optional<TokenLogprobs>> prompt_logprobs;
  std::chrono::steady_clock::time_point arrival;
  double first_token_s = -1;
  bool touched = false;  // progressed this step

  // Its rows are sampled under a token mask (llm_engine_masks.cc).
  bool masked() const { return grammar != nullptr || constraints.active(); }
};

// An adapter registration and its weights, held by a beam search from its first step on.
struct AdapterBinding {
  AdapterInfo info;
  std::shared_ptr<const LoraAdapter> weights;
};

// A beam search (LLMEngine::add_beam_search): the search and its current step's requests.
struct BeamRequest {
  std::string id;
  std::string prompt_text;
  BeamSearch search;
  std::optional<LoRARequest> lora;
  std::optional<AdapterBinding> adapter;  // what its first step's request found for `lora`
  int priority = 0;
  std::optional<std::string> cache_salt;
  std::shared_ptr<const Tokenizer> tokenizer;  // decodes the beams' text (null: none)
  std::vector<std::optional<TokenLogprobs>> results;  // this step's, per live beam
  size_t pending = 0;                                 // this step's requests not finished yet
  std::string error;
  bool aborted = false;
  std::chrono::steady_clock::time_point arrival;
};

}  // namespace quiver
