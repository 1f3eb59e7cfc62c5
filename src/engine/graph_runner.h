// GraphRunner: replays decode steps from graphs recorded through the Backend graph API
// (CUDA graphs on the cuda backend); no CUDA headers, so CPU-only builds compile it too.
//
// Decode-only batches are padded to a bucket size (1, 2, 4, 8, then every 8 up to 64,
// then every 16) in graph and eager mode alike, so both run the same kernels on the same
// shapes and give bitwise-identical results (`quiver verify` checks it). A graph is keyed
// by (bucket, plan): the LoRA kernels' presence is decided at capture and frozen
// (DESIGN.md §2 rule 3), so a batch that carries any adapter replays the lora=true graph,
// whose kernels exit early on rows with slot -1, and a batch without adapters the lora=false
// one. Everything else a kernel reads at replay lives in persistent buffers (rule 1, 2)
// and every grid-sizing host integer is a fixed upper bound (rule 4); see pad_decode_batch.
#pragma once

#include <functional>
#include <vector>

#include "backend/backend.h"
#include "sched/forward_batch.h"

namespace quiver {

// Bucket sizes for decode graphs: 1, 2, 4, 8, then every 8 up to 64, then every 16 up to
// max_bucket, which is always the last bucket (even off that grid). Empty if max_bucket < 1.
std::vector<int> decode_buckets(int max_bucket);

// Smallest bucket >= num_seqs; -1 when num_seqs is above the largest bucket.
int pick_bucket(const std::vector<int>& buckets, int num_seqs);

// Whether `batch` can be padded: decode-only, one token and one logit row per sequence,
// logit row i = token row i.
bool is_paddable_decode(const ForwardBatch& batch);

// The decode batch padded to `bucket` sequences, its block table restrided to
// max_blocks_per_seq columns (a fixed stride, identical in every step). Padding rows:
// token 0, position 0, KV slot -1 (kv_write skips it), LoRA slot -1, one query, seq_len 1,
// block table row all block 0 (attention reads one position of block 0, never writes it),
// and a logit row of their own. Real rows keep their order and come first.
ForwardBatch pad_decode_batch(const ForwardBatch& batch, int bucket, int max_blocks_per_seq);

// What ModelRunner::capture_graphs() did (logged at engine start).
struct GraphCaptureInfo {
  int num_graphs = 0;
  int num_buckets = 0;
  int max_bucket = 0;
  double seconds = 0;
};

// The recorded graphs by (bucket, plan): the plan names every kernel the graph recorded,
// so a step replays a graph only when it would run those very kernels eagerly.
class GraphRunner {
 public:
  explicit GraphRunner(Backend* backend) : backend_(backend) {}

  // Records what `record` enqueues on the backend as the graph of (bucket, plan).
  // `record` must not allocate, copy to or from the host, or synchronize.
  void capture(int bucket, const StepPlan& plan, const std::function<void()>& record);
  bool has(int bucket, const StepPlan& plan) const { return find(bucket, plan) >= 0; }
  void replay(int bucket, const StepPlan& plan);
  int num_graphs() const { return static_cast<int>(graphs_.size()); }

 private:
  struct Entry {
    int bucket;
    StepPlan plan;
    int id;  // the backend's graph id
  };
  int find(int bucket, const StepPlan& plan) const;  // index into graphs_, -1 if none

  Backend* backend_;
  std::vector<Entry> graphs_;  // a few dozen: a scan costs less than a step's launch
};

}  // namespace quiver
