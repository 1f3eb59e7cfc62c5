// LLMEngine's token masks: compiling a request's structured-output constraint against the
// vocabulary of the tokenizer its text goes through (once per distinct constraint and
// tokenizer, cached), and each row's mask, the grammar's combined with allowed_token_ids and
// bad_words: written for the device sampler while the step's forward pass runs
// (write_device_mask, called by the ModelRunner), or applied by the host sampler to host
// logits.
#include <algorithm>
#include <cstring>

#include "engine/llm_engine.h"
#include "engine/model_runner.h"
#include "engine/request_state.h"
#include "structured/grammar_cache.h"
#include "tokenizer/tokenizer.h"

namespace quiver {

Result<std::shared_ptr<structured::Grammar>> LLMEngine::grammar_for(const StructuredOutputSpec& spec,
                                                                     const std::shared_ptr<const Tokenizer>& tokenizer) {
  if (!tokenizer) return Status::error("structured_outputs need the model's tokenizer (the model folder has no tokenizer.json)");
  TokenizerGrammars& entry = grammars_[tokenizer.get()];
  if (!entry.cache || entry.tokenizer.lock() != tokenizer) {
    // Entries of tokenizers that are gone (adapters removed or re-registered) go too.
    std::erase_if(grammars_, [&](const auto& e) { return e.first != tokenizer.get() && e.second.tokenizer.expired(); });
    auto vocab = std::make_shared<structured::TokenVocab>(
        structured::TokenVocab::from_tokenizer(*tokenizer, runner_->logits_width(), config_.eos_token_ids));
    entry.tokenizer = tokenizer;
    entry.cache = std::make_unique<structured::GrammarCache>(std::move(vocab));
  }
  auto g = entry.cache->get(spec);
  if (!g.is_ok()) return g.status().with_context("structured_outputs");
  return g;
}

const structured::TokenMask* LLMEngine::grammar_mask(Request& req, int i, bool block_eos) {
  SeqState& st = *req.seqs[static_cast<size_t>(i)];
  const structured::TokenMask* m = st.grammar_state == structured::kDead ? nullptr : &req.grammar->mask(st.grammar_state);
  if (m == nullptr || m->num_allowed == 0) {
    req.error = "structured_outputs: no token of the vocabulary continues the output '" + st.out.text +
                "' within the constraint";
    pending_finish_.push_back({&req, i, "abort", std::nullopt, false});
    return nullptr;
  }
  // The output is complete and only EOS may follow, but EOS is held back (min_tokens,
  // ignore_eos): the constraint, not the length, ends it.
  if (m->eos_only && (block_eos || req.params.ignore_eos)) {
    pending_finish_.push_back({&req, i, "stop", std::nullopt, false});
    return nullptr;
  }
  return m;
}

std::optional<std::span<const uint64_t>> LLMEngine::token_mask(Request& req, int i, bool block_eos) {
  std::span<const uint64_t> grammar;
  if (req.grammar) {
    const structured::TokenMask* m = grammar_mask(req, i, block_eos);
    if (m == nullptr) return std::nullopt;
    grammar = m->bits;
  }
  if (!req.constraints.active()) return grammar;
  const size_t words = static_cast<size_t>((runner_->logits_width() + 63) / 64);
  mask_words_.assign(words, ~uint64_t{0});
  if (!grammar.empty()) std::copy_n(grammar.begin(), std::min(words, grammar.size()), mask_words_.begin());
  const std::vector<uint64_t>& allowed = req.constraints.allowed;
  for (size_t w = 0; w < allowed.size() && w < words; ++w) mask_words_[w] &= allowed[w];
  const SeqState& st = *req.seqs[static_cast<size_t>(i)];
  req.constraints.ban_bad_words(
      std::span<const int32_t>(st.seq.tokens.data() + st.seq.num_prompt_tokens, st.seq.num_generated()), mask_words_);
  // Is a token left? Ids past the request's vocabulary have -inf logits and a held-back EOS
  // is banned by the host sampler after the mask: neither counts as a way on.
  const auto vocab = static_cast<size_t>(req.vocab_size);
  bool left = false;
  for (size_t w = 0; w < words && w * 64 < vocab && !left; ++w) {
    uint64_t bits = mask_words_[w];
    if ((w + 1) * 64 > vocab) bits &= (uint64_t{1} << (vocab % 64)) - 1;
    if (block_eos)
      for (int64_t e : config_.eos_token_ids)
        if (e >= 0 && static_cast<size_t>(e) / 64 == w) bits &= ~(uint64_t{1} << (e % 64));
    left = bits != 0;
  }
  if (!left) {
    req.error = "no token may follow the output '" + st.out.text +
                "' within the request's constraints (structured_outputs, allowed_token_ids, bad_words)";
    pending_finish_.push_back({&req, i, "abort", std::nullopt, false});
    return std::nullopt;
  }
  return std::span<const uint64_t>(mask_words_);
}

bool LLMEngine::write_device_mask(int row, uint32_t* words) {
  const auto [req, i] = masked_rows_.at(static_cast<size_t>(row));
  const auto m = token_mask(*req, i, false);
  if (!m.has_value()) return false;
  const size_t n = static_cast<size_t>((runner_->logits_width() + 31) / 32);
  if (m->empty())
    std::fill_n(words, n, ~uint32_t{0});
  else
    std::memcpy(words, m->data(), sizeof(uint32_t) * n);
  return true;
}

std::optional<int32_t> LLMEngine::sample_host(Request& req, int i, std::span<const float> logits) {
  SeqState& st = *req.seqs[static_cast<size_t>(i)];
  const Sequence& seq = st.seq;
  const SamplingParams& p = req.params;
  const bool block_eos = seq.num_generated() < p.min_tokens;
  const auto allowed = token_mask(req, i, block_eos);
  if (!allowed.has_value()) return std::nullopt;
  return sample_token(logits, p, std::span<const int32_t>(seq.tokens.data(), seq.num_prompt_tokens),
                      std::span<const int32_t>(seq.tokens.data() + seq.num_prompt_tokens, seq.num_generated()),
                      block_eos, config_.eos_token_ids, st.rng, *allowed);
}

}  // namespace quiver
