// ModelRunner: turns a ForwardBatch into device inputs, runs the model, and returns the
// logits the engine asked for. Owns the persistent step buffers (their addresses never
// change, which is what CUDA graph replay needs) and the activation workspace.
//
// Decode-only batches of up to the largest bucket are padded to a bucket (graph_runner.h)
// and then either replay the captured graph of (bucket, plan) or, with
// enforce-eager or on backends without graphs, run the very same ops eagerly.
//
// With sample_on_device, Backend::sample follows lm_head (right after a graph's replay):
// rows the engine marks in a DeviceSampling are sampled there and only their small results
// come back; the logits are copied to the host only when some row needs them
// (device_sampling.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/device_sampling.h"
#include "engine/graph_runner.h"
#include "kv/kv_cache.h"
#include "lora/slot_pool.h"
#include "model/llama.h"
#include "sched/forward_batch.h"

namespace quiver {

struct RunnerLimits {
  int max_num_batched_tokens = 2048;  // rows per step
  int max_num_seqs = 256;
  int max_blocks_per_seq = 128;       // block-table stride of padded decode steps
  int max_model_len = 2048;           // attention's sequence-length bound in padded decode steps
  int max_logit_chunk = 256;          // lm_head rows computed (and downloaded) at a time
  bool sample_on_device = false;      // run Backend::sample after lm_head (the engine: on CUDA)
};

// Which path ran, for traces and verification.
struct StepPath {
  bool lora_active = false;  // LoRA kernels ran
  bool graph = false;        // replayed from a captured graph
  int bucket = 0;            // padded decode bucket, 0 when not padded
  std::string path;          // "eager", "eager bs=8 (padded)", "graph bs=8"
  StepPlan plan;             // the kernels that ran (with the bucket, the graph key)
};

class ModelRunner {
 public:
  // The KV cache comes later (set_kv_cache): its size is planned from what the runner's
  // buffers and its largest steps leave free (engine/memory_plan.h).
  ModelRunner(const LlamaModel* model, const LoraSlotPool* lora, RunnerLimits limits);
  ~ModelRunner();

  // The cache every later step reads and writes; before execute() and capture_graphs().
  void set_kv_cache(KvCache* kv);

  // Runs the largest steps the limits allow, eagerly, so that every buffer that grows on
  // first use (the backend's scratch, library workspaces) has its final size when the KV
  // cache is planned: a prefill of max_num_batched_tokens tokens (with LoRA kernels when
  // the pool exists) and the largest padded decode bucket, LoRA on and off. Writes no KV
  // slot; needs a cache of at least one block (its attention reads block 0).
  void profile_largest_steps();

  // Bytes of the runner's own buffers (activations, step inputs, logits, sampling).
  size_t buffer_bytes() const;
  // What capture_graphs will take off the device: kGraphBytes for every graph it may
  // capture (a bucket, LoRA on and off).
  int64_t graph_memory_estimate() const;

  // Captures a graph per (bucket, plan of lora on / off) when the backend supports graphs, each after
  // one eager warm-up run of the same shape (scratch buffers grow, kernels load). A no-op
  // returning num_graphs 0 otherwise. Call once, before the first step.
  GraphCaptureInfo capture_graphs();

  // logits (host) receives [batch.logit_rows.size(), logits_width()] float32. With sample_on_device
  // and `sampling` (one entry per logits row), rows it marks are sampled on the device and
  // sampling->sampled is set; logits then stay empty unless sampling->needs_host_logits().
  // logits null (a tensor-parallel rank past the first, engine/engine_rank.h): the
  // step runs, its collectives with it, and nothing is sampled or copied to the host.
  StepPath execute(const ForwardBatch& batch, std::vector<float>* logits, DeviceSampling* sampling = nullptr);

  const RunnerLimits& limits() const { return limits_; }
  // Width of a logits row: the base vocabulary, plus the ids LoRA adapters may add
  // (VocabLimits::extra_vocab; a row's columns past its own vocabulary are -inf).
  int64_t logits_width() const { return width_; }
  const std::vector<int>& buckets() const { return buckets_; }

 private:
  // Packs the batch's integer inputs into staging_, uploads them with one copy into
  // inputs_, and returns the device views. padded: the fixed bounds of padded decode.
  // With sample_on_device the staging also carries the sampling inputs of every logits row.
  StepTensors prepare(const ForwardBatch& b, bool padded, const DeviceSampling* ds = nullptr);
  // The backend's plan for a step of `tokens` tokens (LoRA kernels on or off).
  // run_tokens: the step's one-adapter runs (StepShape::lora_run_tokens).
  StepPlan plan(int tokens, bool lora, int64_t run_tokens = 0) const;
  // A padded decode step of `bucket` padding rows (KV slot -1, LoRA slot -1: nothing
  // persistent is written) under the bucket's plan, LoRA kernels on or off: what warm-ups
  // and captures run.
  StepTensors padding_step(int bucket, bool lora);
  // forward + lm_head over all `bucket` rows into logits_ (what a graph records).
  void run_padded(const StepTensors& st, int bucket);
  // out ([rows, width_]) = the logits of the step's logits rows [first, first + rows): lm_head,
  // then, with vocabulary rows, Backend::vocab_logits over each row's adapter.
  void logits_of(Tensor out, const StepTensors& st, int first, int rows);
  // Has ds write this step's structured-output masks and uploads them into masks_.
  void upload_masks(DeviceSampling* ds);
  StepPath execute_padded(const ForwardBatch& b, int bucket, std::vector<float>* logits, DeviceSampling* ds);
  // Backend::sample over `logits`, rows [first, first + count) of this step's logits rows.
  void sample_rows(Tensor logits, int first, int count);
  // Copies the step's sample results (rows logits rows) to the host, into ds.
  void download_samples(int rows, DeviceSampling* ds);

  const LlamaModel* model_;
  KvCache* kv_;
  const LoraSlotPool* lora_;
  RunnerLimits limits_;
  Backend* backend_;
  Workspace ws_;
  KvCacheView kv_view_;
  std::vector<int> buckets_;
  std::unique_ptr<GraphRunner> graphs_;  // null until capture_graphs() captured any
  // Persistent device inputs: every per-step integer array, packed (see input_layout).
  Buffer inputs_;
  std::vector<int32_t> staging_;
  std::vector<int32_t> seg_start_, seg_slot_, sorted_tokens_;
  Buffer logits_;  // [max(max_logit_chunk, largest bucket), width_]
  // Vocabulary rows of the LoRA slots (lora/slot_pool.h): with them lm_head writes the base
  // vocabulary's logits into base_logits_ and vocab_logits widens them into logits_.
  bool vocab_ = false;
  int64_t width_ = 0;
  VocabTables vocab_tables_;
  Buffer base_logits_;
  // Device sampling: this step's packed inputs (inside inputs_) and its row count, and the
  // persistent results ([kSampleOutputWords * rows] words, see device_sampling.h).
  int32_t* sample_inputs_ = nullptr;
  int sample_rows_ = 0;
  Buffer sample_out_;
  std::vector<int32_t> sample_host_;
  // Structured-output masks: [max_num_seqs, mask_words_] bit words, this step's masked rows
  // in row order (device_sampling.cc gives each its table row).
  int64_t mask_words_ = 0;
  Buffer masks_;
  std::vector<uint32_t> mask_host_;
};

}  // namespace quiver
