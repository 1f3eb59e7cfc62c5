// The tokenizer a LoRA adapter's requests use, picked from the files in its folder:
//  1. DIR/tokenizer.json: that tokenizer, with DIR's tokenizer_config.json and chat template.
//  2. No tokenizer.json, but files Hugging Face reads in its place (tokenizer_config.json,
//     added_tokens.json, special_tokens_map.json, tokenizer.model): the base tokenizer plus the
//     tokens the adapter adds, with DIR's bos/eos/add_*_token/chat template where it sets them
//     and the base's otherwise. tokenizer.model (SentencePiece) is not read: such folders
//     (vLLM's sql-lora adapter for Llama-2) carry the base model's.
//  3. None of these: the base tokenizer.
// Loaded once when the adapter is registered (lora/adapter_registry.h) and kept with it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace quiver {

struct AdapterTokenizerSource {
  std::string dir;
  std::vector<std::string> allowlist;         // the files read must lie inside (empty: anywhere)
  std::shared_ptr<const Tokenizer> base;      // the base model's; null when it has none
  int64_t base_vocab_size = 0;                // config.json's vocab_size
  int64_t vocab_size = 0;                     // the adapter's: the base's plus the ids it adds
  std::vector<std::string> new_token_names;   // by id from base_vocab_size, where the folder names them
};

// The adapter's tokenizer; `source.base` itself in case 3, and also in case 2 when the base
// has no tokenizer (requests then send token ids, as for the base model). Errors name the
// file: a tokenizer that does not parse, added tokens whose ids do not continue the base
// tokenizer's vocabulary or disagree with it, a tokenizer with ids at or past `vocab_size`
// (rows the model does not have), or new_token_names it does not give those ids. A tokenizer
// smaller than the vocabulary is fine (padding rows).
Result<std::shared_ptr<const Tokenizer>> load_adapter_tokenizer(const AdapterTokenizerSource& source);

}  // namespace quiver
