// LLMEngine: vLLM's engine API in C++. add_request() queues a request with its own
// sampling params and (optional) LoRA adapter; each step() schedules one batch — chunked
// prefills and decodes of many adapters together — runs it, samples, and returns the
// RequestOutputs that progressed.
#pragma once

#include <chrono>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "engine/beam_search.h"
#include "engine/engine_args.h"
#include "engine/engine_rank.h"
#include "engine/graph_runner.h"
#include "engine/memory_plan.h"
#include "engine/request_output.h"
#include "engine/sampling_params.h"
#include "engine/step_stats.h"
#include "io/model_config.h"
#include "lora/adapter_registry.h"
#include "parallel/rank_threads.h"

namespace quiver {

class Tokenizer;
class BlockPool;
class Scheduler;
class EngineLoraSlots;
struct Request;
struct BeamRequest;
struct AdapterBinding;
struct SeqState;
struct DeviceSampling;
struct ScheduledBatch;
struct ScheduledSeq;
namespace structured {
class Grammar;
struct TokenMask;
class GrammarCache;
}
struct Sequence;

// A prompt is text (needs the model's tokenizer) or token ids.
struct PromptInput {
  std::optional<std::string> text;
  std::vector<int32_t> token_ids;
  // vLLM's cache_salt: the prompt shares prefix-cache blocks only with prompts of the same
  // salt (one tenant's cache cannot reveal another's prompts by timing).
  std::optional<std::string> cache_salt;
};

// vLLM's LoRARequest: an adapter by name; `path` registers it on first use.
struct LoRARequest {
  std::string name;
  int64_t id = 0;
  std::string path;
};

// The host level of the adapter cache, for callers that check adapters load once.
struct AdapterCacheStats {
  int num_cached = 0;  // adapters held in host memory by the LRU (<= max_cpu_loras)
  int64_t loads = 0;   // adapters read from disk so far (first uses and reloads after eviction)
};

class LLMEngine {
 public:
  static Result<std::unique_ptr<LLMEngine>> create(const EngineArgs& args);
  ~LLMEngine();

  // Validates and queues. Errors (bad params, unknown adapter, prompt too long, token id
  // out of range, text without a tokenizer) concern this request only. `priority` orders
  // the queue under --scheduling-policy priority (lower first) and must be 0 otherwise.
  Status add_request(const std::string& request_id, const PromptInput& prompt, const SamplingParams& params,
                     const std::optional<LoRARequest>& lora = std::nullopt, int priority = 0);
  // vLLM's beam search as one request (llm_engine_beams.cc): its steps run as one-token
  // requests of every live beam, batched with everything else, and its one RequestOutput,
  // when the search ends, has the beam_width best beams as outputs, best first (text and
  // token_ids of the generated tokens, a final EOS's text left out; finish_reason "stop" at
  // EOS, else "length"; with params.logprobs, each token's and its step's best candidates).
  Status add_beam_search(const std::string& request_id, const PromptInput& prompt, const BeamSearchParams& params,
                         const std::optional<LoRARequest>& lora = std::nullopt, int priority = 0);
  std::vector<RequestOutput> step();
  // Finishes the request with reason "abort" (reported by the next step). False if unknown.
  bool abort_request(const std::string& request_id);
  bool has_unfinished_requests() const;
  // vLLM's reset_prefix_cache (after changing weights, or between benchmark runs): the
  // prefix cache forgets every block; false, with nothing changed, while requests run.
  bool reset_prefix_cache();
  int num_unfinished_requests() const;

  Result<AdapterInfo> add_lora(const std::string& name, const std::string& path,
                               const std::vector<std::string>& allowlist = {});
  Status remove_lora(const std::string& name);
  std::vector<AdapterInfo> list_loras() const;
  AdapterCacheStats lora_cache_stats() const;  // zeros when LoRA is not enabled

  const ModelConfig& model_config() const { return config_; }
  // The base model's tokenizer; null when its folder has none.
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  const std::shared_ptr<const Tokenizer>& shared_tokenizer() const { return tokenizer_; }
  // The tokenizer requests with `lora` use: the adapter's own or the base model's (null:
  // none). A LoRARequest with a path registers its adapter first, as add_request does.
  // Error: LoRA not enabled, unknown adapter, an adapter that does not load.
  Result<std::shared_ptr<const Tokenizer>> tokenizer_for(const std::optional<LoRARequest>& lora);
  const EngineArgs& args() const { return args_; }
  int max_model_len() const { return max_model_len_; }
  const StepStats& last_step() const { return last_step_; }
  const EngineCounters& counters() const { return counters_; }
  // Rank 0's backend (the only one without tensor parallelism).
  Backend* backend() const { return backend_; }
  // Bandwidth accounting for `quiver bench`: bytes of all model weights
  // (LlamaWeights::weight_bytes), of the input embedding table alone (a decode step
  // gathers only its rows), both summed over the tensor-parallel ranks (replicated
  // tensors once per rank, as each rank reads its own), and the element type the KV cache
  // is stored in.
  size_t weight_bytes() const;
  size_t embedding_bytes() const;
  DType kv_cache_dtype() const;
  // Decode graphs captured at start (num_graphs 0: none, e.g. enforce_eager or no GPU).
  const GraphCaptureInfo& graph_info() const { return graph_info_; }
  // What start-up allocated, and the KV cache's size and how it was chosen (memory_plan.h).
  const MemoryReport& memory_report() const { return memory_; }

 private:
  LLMEngine() = default;
  Status init(const EngineArgs& args);
  // Builds every rank's model, LoRA slot stacks and runner (rank_threads_ runs each on its
  // own thread).
  Status init_ranks(const EngineArgs& args, const ParsedEngineArgs& parsed, const std::shared_ptr<Checkpoint>& checkpoint,
                    DType weight_dtype, DType lora_dtype, const RunnerLimits& limits);
  // fn(r) on every rank at once; the first error, by rank.
  Status on_ranks(const std::function<Status(int)>& fn);
  // logprobs: the row's TokenLogprobs when the request asked for them.
  void process_sample(Request& req, int seq_index, int32_t token, std::optional<TokenLogprobs> logprobs);
  // Ends every sequence of `req` after this step's commit, reporting `error`.
  void fail_request(Request& req, const std::string& error);
  static std::string non_finite_logits_error(const Request& req, const std::string& seen);
  // Logs a newly registered adapter's load line (lora/slot_vocab.h: describe_adapter).
  void report_adapter(const LoraAdapter& a) const;
  // Marks the rows of this step that the device samples (device_sampling.h).
  void plan_device_sampling(const ScheduledBatch& sb, DeviceSampling* ds);
  // step(), in order: the model on the batch; each scheduled sequence's logits (prompt
  // logprobs, its sample); the outputs of requests that progressed (finished ones leave);
  // the step's stats.
  void execute_batch(const ScheduledBatch& sb, StepStats* stats);
  void process_scheduled(const ScheduledSeq& ss, StepStats* stats);
  std::vector<RequestOutput> collect_outputs();
  // Beam searches' part of step(): their one-token requests' outputs are taken out of
  // `outputs`, each search whose step is complete advances (its next requests added) or
  // ends (its RequestOutput added to `outputs`).
  void route_beam_outputs(std::vector<RequestOutput>* outputs);
  // add_request; with `bound`, on that adapter registration without looking its name up
  // (a beam search's later steps, which keep the adapter its first step found even once
  // the name is removed, as a running request keeps its own).
  Status add_request_bound(const std::string& request_id, const PromptInput& prompt, const SamplingParams& params,
                           const std::optional<LoRARequest>& lora, int priority, const AdapterBinding* bound);
  // Adds the one-token requests of a search's live beams.
  Status add_beam_step(BeamRequest& beam);
  RequestOutput beam_output(BeamRequest& beam);
  void record_step(const ScheduledBatch& sb, StepStats stats, std::chrono::steady_clock::time_point t0);
  // The token mask of sequence i's grammar state, or null when the sequence is finished
  // instead (nothing the grammar allows, or only an EOS that is held back).
  const structured::TokenMask* grammar_mask(Request& req, int i, bool block_eos);
  // The tokens sequence i may sample next: its grammar's, within allowed_token_ids, less
  // what bad_words ban after its output; empty: any token. nullopt: the sequence is
  // finished instead (grammar_mask's cases, or nothing left). The span lives until the
  // next call.
  std::optional<std::span<const uint64_t>> token_mask(Request& req, int i, bool block_eos);
  // DeviceSampling::write_mask for this step's rows (masked_rows_).
  bool write_device_mask(int row, uint32_t* words);
  // by_stop_string: the stop checker already emitted the final text (held-back text is dropped).
  void finish_seq(Request& req, int seq_index, const std::string& reason, std::optional<std::string> stop_reason,
                  bool by_stop_string = false);
  RequestOutput make_output(Request& req);
  // The registered adapter `lora` names (weights null), or, when it is not registered and
  // has a path, the adapter read from there and not registered yet.
  Result<AdapterRegistry::Loaded> find_adapter(const LoRARequest& lora) const;
  // The grammar a structured-output request is held to (compiled or cached), over the
  // vocabulary of the tokenizer its text goes through.
  Result<std::shared_ptr<structured::Grammar>> grammar_for(const StructuredOutputSpec& spec,
                                                           const std::shared_ptr<const Tokenizer>& tokenizer);
  // Host-samples row `logits` of sequence i, under its token mask if it has one.
  // nullopt: the sequence was finished instead (nothing left the mask allows).
  std::optional<int32_t> sample_host(Request& req, int i, std::span<const float> logits);

  EngineArgs args_;
  ModelConfig config_;
  int max_model_len_ = 0;
  // The tensor-parallel ranks (one without tensor parallelism), each step run on all of
  // them at once by rank_threads_; the pointers below are rank 0's, which samples.
  std::vector<EngineRank> ranks_;
  std::unique_ptr<RankThreads> rank_threads_;
  Backend* backend_ = nullptr;
  LlamaModel* model_ = nullptr;
  KvCache* kv_ = nullptr;
  LoraSlotPool* slots_ = nullptr;
  ModelRunner* runner_ = nullptr;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::unique_ptr<BlockPool> blocks_;
  std::unique_ptr<AdapterRegistry> adapters_;
  std::unique_ptr<EngineLoraSlots> slot_provider_;
  std::unique_ptr<Scheduler> scheduler_;
  // Compiled grammars per tokenizer (adapters may bring their own vocabulary), each made on
  // the first structured request through that tokenizer. The weak_ptr tells a live entry from
  // one whose tokenizer is gone (its address may then be reused).
  struct TokenizerGrammars {
    std::weak_ptr<const Tokenizer> tokenizer;
    std::unique_ptr<structured::GrammarCache> cache;
  };
  std::map<const Tokenizer*, TokenizerGrammars> grammars_;

  std::map<std::string, std::unique_ptr<Request>> requests_;
  std::map<std::string, std::unique_ptr<BeamRequest>> beams_;  // beam searches by request id
  // Their one-token requests' ids -> (search, live beam index).
  std::unordered_map<std::string, std::pair<BeamRequest*, size_t>> beam_parts_;
  int64_t next_beam_part_ = 0;
  std::unordered_map<const Sequence*, SeqState*> states_;  // every live sequence's state
  std::vector<std::string> aborted_;  // reported by the next step
  struct PendingFinish {
    Request* req;
    int seq_index;
    std::string reason;
    std::optional<std::string> stop_reason;
    bool by_stop_string;
  };
  std::vector<PendingFinish> pending_finish_;  // decided while sampling, applied after commit
  int64_t next_seq_id_ = 1;
  uint64_t rng_state_ = 0;
  std::vector<float> logits_;
  std::unique_ptr<DeviceSampling> device_sampling_;  // null: every row sampled on the host
  std::vector<std::pair<Request*, int>> masked_rows_;  // this step's logits rows -> sequence, for masks
  std::vector<uint64_t> mask_words_;  // token_mask's combined masks
  StepStats last_step_;
  GraphCaptureInfo graph_info_;
  MemoryReport memory_;
  EngineCounters counters_;
};

}  // namespace quiver
