// Steps built by hand for ModelRunner tests (test_graph_padding.cc, test_tensor_parallel.cc):
// sequences with their tokens and adapter, one prefill of every prompt, then one greedy
// token a sequence per decode step.
#pragma once

#include <algorithm>
#include <filesystem>
#include <functional>
#include <vector>

#include "io/peft_adapter.h"
#include "sched/forward_batch.h"

namespace quiver {

struct Seq {
  std::vector<int32_t> tokens;
  int computed = 0;
  int adapter = -1;  // index into the test's adapter list, -1 = base
};

// Three sequences (a decode bucket of 4): two on adapters 0 and 5, one on the base model,
// prompts of 4, 1 and 6 tokens.
inline const std::vector<Seq> kMixedSeqs = {{{5, 9, 100, 7}, 0, 0}, {{300}, 0, -1}, {{44, 45, 46, 47, 48, 49}, 0, 5}};

// The tokens of every sequence not computed yet, in one batch (decode: marked decode-only),
// sequence s in KV blocks [8 s, 8 s + 8) of `block_size` tokens. slot_of(adapter) is the
// LoRA slot of a sequence's adapter (called once per sequence that has one).
inline ForwardBatch next_batch(std::vector<Seq>& seqs, bool decode, int block_size,
                               const std::function<int(int)>& slot_of) {
  ForwardBatch b;
  b.query_start.push_back(0);
  b.max_blocks_per_seq = 8;
  b.decode_only = decode;
  for (size_t s = 0; s < seqs.size(); ++s) {
    Seq& q = seqs[s];
    const int slot = q.adapter >= 0 ? slot_of(q.adapter) : -1;
    for (int pos = q.computed; pos < static_cast<int>(q.tokens.size()); ++pos) {
      b.token_ids.push_back(q.tokens[static_cast<size_t>(pos)]);
      b.positions.push_back(pos);
      b.slot_mapping.push_back(static_cast<int32_t>(8 * static_cast<int>(s) * block_size + pos));
      b.token_lora_slot.push_back(slot);
    }
    b.query_start.push_back(b.num_tokens());
    b.seq_lens.push_back(static_cast<int32_t>(q.tokens.size()));
    b.logit_rows.push_back(b.num_tokens() - 1);
    for (int k = 0; k < 8; ++k) b.block_tables.push_back(static_cast<int32_t>(8 * s + k));
    q.computed = static_cast<int>(q.tokens.size());
  }
  return b;
}

// Appends to each sequence the argmax of its logits row (rows `width` apart).
inline void append_greedy(std::vector<Seq>& seqs, const std::vector<float>& logits, int64_t width) {
  for (size_t s = 0; s < seqs.size(); ++s) {
    const float* row = logits.data() + static_cast<int64_t>(s) * width;
    seqs[s].tokens.push_back(static_cast<int32_t>(std::max_element(row, row + width) - row));
  }
}

// The adapters of a fixture model's adapters/ folder, in name order.
inline std::vector<LoraAdapter> fixture_adapters(const std::filesystem::path& model, const ModelConfig& config) {
  std::vector<LoraAdapter> out;
  std::vector<std::filesystem::path> dirs;
  for (const auto& a : std::filesystem::directory_iterator(model / "adapters")) dirs.push_back(a.path());
  std::sort(dirs.begin(), dirs.end());
  for (const auto& d : dirs) out.push_back(load_peft_adapter(d.string(), d.filename().string(), config, 64).value());
  return out;
}

}  // namespace quiver
