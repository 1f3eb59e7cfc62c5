// LLMEngine's structured outputs: compiling a request's constraint against the model's
// vocabulary (once per distinct constraint, cached) and host sampling under the grammar's
// token mask. Rows with a grammar never go to the device sampler (device_can_sample), so
// the decode graphs stay as captured; their logits come to the host like those of rows
// with penalties.
#include <limits>

#include "engine/llm_engine.h"
#include "engine/request_state.h"
#include "structured/grammar_cache.h"
#include "tokenizer/tokenizer.h"

namespace quiver {

Result<std::shared_ptr<structured::Grammar>> LLMEngine::grammar_for(const StructuredOutputSpec& spec) {
  if (!tokenizer_) return Status::error("structured_outputs need the model's tokenizer (the model folder has no tokenizer.json)");
  if (!grammars_) {
    auto vocab = std::make_shared<structured::TokenVocab>(
        structured::TokenVocab::from_tokenizer(*tokenizer_, config_.vocab_size, config_.eos_token_ids));
    grammars_ = std::make_unique<structured::GrammarCache>(std::move(vocab));
  }
  auto g = grammars_->get(spec);
  if (!g.is_ok()) return g.status().with_context("structured_outputs");
  return g;
}

std::optional<int32_t> LLMEngine::sample_host(Request& req, int i, std::span<const float> logits) {
  SeqState& st = *req.seqs[static_cast<size_t>(i)];
  const Sequence& seq = st.seq;
  const SamplingParams& p = req.params;
  const bool block_eos = seq.num_generated() < p.min_tokens;
  std::span<const uint64_t> allowed;
  if (req.grammar) {
    const structured::TokenMask& m = req.grammar->mask(st.grammar_state);
    if (m.num_allowed == 0) {
      req.error = "structured_outputs: no token of the vocabulary continues the output '" + st.out.text +
                  "' within the constraint";
      pending_finish_.push_back({&req, i, "abort", std::nullopt, false});
      return std::nullopt;
    }
    // The output is complete and only EOS may follow, but EOS is held back (min_tokens,
    // ignore_eos): the constraint, not the length, ends it.
    if (m.eos_only && (block_eos || p.ignore_eos)) {
      pending_finish_.push_back({&req, i, "stop", std::nullopt, false});
      return std::nullopt;
    }
    allowed = m.bits;
  }
  return sample_token(logits, p, std::span<const int32_t>(seq.tokens.data(), seq.num_prompt_tokens),
                      std::span<const int32_t>(seq.tokens.data() + seq.num_prompt_tokens, seq.num_generated()),
                      block_eos, config_.eos_token_ids, st.rng, allowed);
}

}  // namespace quiver
