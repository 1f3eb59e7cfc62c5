// EngineLoop: owns the LLMEngine (not thread-safe) and runs it on a thread of its own.
// HTTP threads only enqueue — new requests, cancellations, adapter loads/unloads — and
// read their ResponseChannel. The engine thread loops:
//   drain queues -> add/abort/load/unload -> step() -> route outputs to channels
//   -> publish metrics -> sleep on the condition variable when nothing is left to do.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/llm_engine.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"
#include "server/response_channel.h"
#include "server/serving_log.h"

namespace quiver {

// One engine request: an already tokenized prompt, its sampling params, its adapter.
struct EngineJob {
  std::vector<int32_t> prompt_token_ids;
  SamplingParams params;
  std::string lora;  // empty = the base model
  uint64_t lora_uid = 0;  // the registration the prompt was tokenized for (0: any)
  std::string log_id;  // the response id, for the request log line
  int priority = 0;    // under --scheduling-policy priority
  std::optional<std::string> cache_salt;
  std::optional<BeamSearchParams> beam;  // use_beam_search: a beam search instead of sampling
};

class EngineLoop {
 public:
  // `log` (may be null) gets a line per finished request, naming base-model requests `model_name`.
  EngineLoop(std::unique_ptr<LLMEngine> engine, ServerMetrics* metrics, int max_pending_requests,
             ServingLog* log = nullptr, std::string model_name = "");
  ~EngineLoop();  // stop()s

  void start();
  // Aborts whatever is still running, answers queued work with 503, joins the thread.
  void stop();

  // ---- called from HTTP threads ----
  // Queues the jobs; the channel then learns admission (or a 400/404) and the outputs.
  // An immediate error (503: overloaded, shutting down, engine failed) is returned here.
  std::optional<ApiError> submit(std::vector<EngineJob> jobs, std::shared_ptr<ResponseChannel> channel);
  // Aborts the channel's unfinished jobs (client went away); their KV blocks are freed.
  void cancel(std::shared_ptr<ResponseChannel> channel);
  // Aborts every running request (shutdown grace period over).
  void abort_all();
  // New submissions get 503 from now on.
  void begin_drain();
  // Loads and fully validates an adapter before it is listed; 400 on any problem.
  // `allowlist` stays with the adapter: every later reload from disk is checked against it.
  ApiResult<AdapterInfo> load_lora(const std::string& name, const std::string& path,
                                   const std::vector<std::string>& allowlist);
  // Unlists the adapter at once; requests already using it finish first, then the engine
  // forgets it. 404 if unknown.
  std::optional<ApiError> unload_lora(const std::string& name);

  std::vector<AdapterInfo> adapters() const;  // listed adapters, in load order
  bool has_adapter(const std::string& name) const;
  std::optional<AdapterInfo> find_adapter(const std::string& name) const;  // a listed adapter
  bool failed() const { return failed_.load(); }
  int num_in_flight() const;  // engine requests queued or running

  // Fixed at construction; safe from any thread.
  const std::shared_ptr<const Tokenizer>& tokenizer() const { return tokenizer_; }  // the base model's
  int max_model_len() const { return max_model_len_; }
  int64_t vocab_size() const { return vocab_size_; }
  int max_loras() const { return max_loras_; }

 private:
  struct Submission {
    std::vector<EngineJob> jobs;
    std::shared_ptr<ResponseChannel> channel;
  };
  struct LoraOp {
    bool load = true;
    std::string name;
    std::string path;
    std::vector<std::string> allowlist;
    std::promise<ApiResult<AdapterInfo>> done;
  };
  // A running engine request, owned by the engine thread.
  struct Active {
    std::shared_ptr<ResponseChannel> channel;
    int job = 0;
    std::string lora;
    std::string log_id;
    bool got_first_token = false;
    std::chrono::steady_clock::time_point last_token;
  };

  void run();
  void admit(Submission& s);
  void apply_lora_op(LoraOp& op);
  // The same, turning an exception into that submission's or operation's error.
  void admit_guarded(Submission& s);
  void apply_lora_op_guarded(LoraOp& op);
  void route(std::vector<RequestOutput> outputs);
  void release(const std::string& id);  // a job ended: adapter refs, pending count
  // Every running request gets `error`; queued work gets 503.
  void fail_all(const ApiError& error, bool engine_failed);
  void publish_metrics();

  std::unique_ptr<LLMEngine> engine_;
  ServerMetrics* metrics_;
  const int max_pending_;
  ServingLog* log_;
  const std::string model_name_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  int max_model_len_ = 0;
  int64_t vocab_size_ = 0;
  int max_loras_ = 0;

  mutable std::mutex mu_;  // guards everything up to the thread
  std::condition_variable cv_;
  std::vector<Submission> submissions_;
  std::vector<std::shared_ptr<ResponseChannel>> cancels_;
  std::vector<std::unique_ptr<LoraOp>> lora_ops_;
  std::vector<AdapterInfo> listed_;        // what /v1/models shows and requests may name
  std::set<std::string> pending_unload_;   // unlisted, still used by running requests
  int num_pending_ = 0;                    // jobs submitted and not yet finished
  bool draining_ = false;
  bool abort_all_ = false;
  bool stop_ = false;
  std::atomic<bool> failed_{false};
  std::thread thread_;

  // Engine thread only.
  std::map<std::string, Active> active_;  // engine request id -> owner
  std::map<std::string, int> lora_refs_;  // adapter -> running requests using it
  int64_t next_id_ = 1;
};

}  // namespace quiver
