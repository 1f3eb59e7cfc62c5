#include "engine/graph_runner.h"

#include <algorithm>

#include "core/check.h"

namespace quiver {

std::vector<int> decode_buckets(int max_bucket) {
  std::vector<int> out;
  for (int b : {1, 2, 4, 8})
    if (b < max_bucket) out.push_back(b);
  for (int b = 16; b <= 64 && b < max_bucket; b += 8) out.push_back(b);
  for (int b = 80; b < max_bucket; b += 16) out.push_back(b);
  if (max_bucket >= 1) out.push_back(max_bucket);
  return out;
}

int pick_bucket(const std::vector<int>& buckets, int num_seqs) {
  auto it = std::lower_bound(buckets.begin(), buckets.end(), num_seqs);
  return it == buckets.end() ? -1 : *it;
}

bool is_paddable_decode(const ForwardBatch& b) {
  const int n = b.num_seqs();
  if (!b.decode_only || n == 0 || b.num_tokens() != n || static_cast<int>(b.logit_rows.size()) != n) return false;
  for (int i = 0; i < n; ++i)
    if (b.logit_rows[i] != i || b.query_start[i] != i) return false;
  return b.query_start[n] == n;
}

ForwardBatch pad_decode_batch(const ForwardBatch& b, int bucket, int max_blocks_per_seq) {
  const int n = b.num_seqs();
  check(n == 0 || is_paddable_decode(b), "pad_decode_batch: not a decode-only batch");
  check(n <= bucket, "pad_decode_batch: more sequences than the bucket");
  check(b.max_blocks_per_seq <= max_blocks_per_seq, "pad_decode_batch: block table wider than the fixed stride");
  ForwardBatch p;
  p.token_ids = b.token_ids;
  p.positions = b.positions;
  p.slot_mapping = b.slot_mapping;
  p.token_lora_slot = b.token_lora_slot;
  p.seq_lens = b.seq_lens;
  p.token_ids.resize(bucket, 0);
  p.positions.resize(bucket, 0);
  p.slot_mapping.resize(bucket, -1);
  p.token_lora_slot.resize(bucket, -1);
  p.seq_lens.resize(bucket, 1);
  p.query_start.resize(bucket + 1);
  p.logit_rows.resize(bucket);
  for (int i = 0; i <= bucket; ++i) p.query_start[i] = i;
  for (int i = 0; i < bucket; ++i) p.logit_rows[i] = i;
  p.max_blocks_per_seq = max_blocks_per_seq;
  p.block_tables.assign(static_cast<size_t>(bucket) * max_blocks_per_seq, 0);
  for (int s = 0; s < n; ++s)
    std::copy_n(b.block_tables.begin() + static_cast<ptrdiff_t>(s) * b.max_blocks_per_seq, b.max_blocks_per_seq,
                p.block_tables.begin() + static_cast<ptrdiff_t>(s) * max_blocks_per_seq);
  p.decode_only = true;
  return p;
}

int GraphRunner::find(int bucket, const StepPlan& plan) const {
  for (size_t i = 0; i < graphs_.size(); ++i)
    if (graphs_[i].bucket == bucket && graphs_[i].plan == plan) return static_cast<int>(i);
  return -1;
}

void GraphRunner::capture(int bucket, const StepPlan& plan, const std::function<void()>& record) {
  check(!has(bucket, plan), "GraphRunner::capture: graph captured twice");
  backend_->begin_capture();
  record();
  graphs_.push_back({bucket, plan, backend_->end_capture()});
}

void GraphRunner::replay(int bucket, const StepPlan& plan) {
  const int i = find(bucket, plan);
  check(i >= 0, "GraphRunner::replay: no graph for this bucket and plan");
  backend_->replay(graphs_[static_cast<size_t>(i)].id);
}

}  // namespace quiver
