// Internals of `quiver bench`, shared by its files: the options, the synthetic requests,
// the byte model behind "achieved bandwidth", and the measurements of a run.
//   bench_command.cc  flags, setup, dispatch
//   bench_adapters.cc random PEFT adapters written to a temp folder
//   bench_run.cc      offline passes (batched / adapter by adapter) and the online loop
//   bench_report.cc   statistics, machine facts, the human table and the JSON record
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/engine_flags.h"
#include "core/status.h"
#include "engine/llm_engine.h"

namespace quiver::bench {

struct BenchOptions {
  EngineFlags engine;
  int batch_size = 1;          // offline: requests submitted together
  int input_len = 128;         // prompt tokens per request
  int output_len = 128;        // generated tokens per request (ignore_eos)
  int num_adapters = 0;        // synthesized random adapters
  int lora_rank = 16;
  std::string lora_targets = "all";  // "all" or a comma list of q_proj, ..., down_proj
  std::string lora_dtype = "bfloat16";
  // What the synthesized adapters do to the vocabulary (io/adapter_vocab.h): "none";
  // "added=N", N new tokens as vLLM's added_tokens.json + new_embeddings.safetensors;
  // "lm_head", a whole lm_head replacement (PEFT modules_to_save); "lora", LoRA on
  // embed_tokens and lm_head beside the projections.
  std::string lora_vocab = "none";
  double lora_fraction = 1.0;  // share of requests that carry an adapter (round-robin over them)
  bool sequential_adapters = false;  // offline: one group per adapter, run one after another
  // offline: after (or, every other iteration, before) each measured pass, run the same
  // shape as "base" (no adapters) or "sequential" (adapter by adapter) and report ratios;
  // alternating A/B in one process keeps changing load on a shared machine out of them.
  std::string compare;
  // vLLM's structured_outputs object ({"json": schema}, {"regex": ...}, ...) every request is
  // held to; with --compare structured the comparison passes run without it.
  std::string structured_outputs;
  StructuredOutputSpec structured;  // parsed from structured_outputs
  int num_requests = 0;        // > 0: online mode
  std::string request_rate = "inf";  // online: Poisson arrivals per second, or inf
  int num_iters = 1;           // measured passes (offline)
  int warmup_steps = 4;        // decode steps of the unmeasured warm-up pass (0: none)
  double mem_bandwidth_gbs = 0;      // 0: measured at start (bandwidth_ceiling)
  std::string json_output;
  std::string adapter_dir;     // keep the synthesized adapters here (default: a temp folder, removed)
  std::string commit;          // recorded as git_commit when given (trees copied without .git)
};

// One synthetic request: random prompt token ids and its adapter ("" = base model).
struct BenchRequest {
  std::string id;
  std::vector<int32_t> prompt;
  std::string adapter;
  double arrival_s = 0;  // online mode: seconds after the start
  bool constrained = false;  // held to BenchOptions::structured
};

// n requests with seeded random prompts; a share lora_fraction of them (evenly spread)
// take adapters round-robin from `adapters`.
std::vector<BenchRequest> make_requests(int n, int input_len, const std::vector<std::string>& adapters,
                                        double lora_fraction, int64_t vocab_size, uint64_t seed,
                                        const std::string& id_prefix);

// Writes `count` random PEFT adapters (adapter_config.json + adapter_model.safetensors)
// under dir/bench-<i> and returns (name, path) pairs.
// The slot rows each synthesized adapter sets for BenchOptions::lora_vocab (0: none), or an
// error naming the spelling.
Result<int64_t> vocab_rows_of(const std::string& spec, const ModelConfig& base);
Result<std::vector<std::pair<std::string, std::string>>> synthesize_adapters(const ModelConfig& base,
                                                                            const BenchOptions& o,
                                                                            const std::string& dir);

// What a step must read from memory, and the arithmetic it does (matmul FLOPs counted as 2
// per multiply-add).
struct CostModel {
  double weight_bytes = 0;        // every weight but the input embedding table (when untied)
  double adapter_bytes = 0;       // per distinct adapter in the batch: A and B stacks of 7 targets
  double kv_bytes_per_position = 0;  // K and V of one context position, all layers
  double linear_flops_per_token = 0;   // the 7 projections of every layer
  double lm_head_flops_per_row = 0;    // per sampled row
  double attn_flops_per_position = 0;  // QK^T and PV for one query against one context position
  double adapter_flops_per_token = 0;  // shrink + expand on 7 targets, for a token with an adapter
};
CostModel make_cost_model(const LLMEngine& engine);

// Measurements of one pass (offline) or one online run, step by step.
struct PassStats {
  int prefill_steps = 0, decode_steps = 0, mixed_steps = 0;
  int64_t prefill_tokens = 0, decode_tokens = 0, mixed_tokens = 0, output_tokens = 0;
  double prefill_s = 0, decode_s = 0, mixed_s = 0, total_s = 0;
  std::vector<double> decode_step_ms;
  double decode_bytes = 0;          // bytes read by the decode-only steps, summed
  double decode_adapter_bytes = 0;  // ... of which adapter slices
  double decode_kv_bytes = 0;       // ... of which K/V
  double decode_flops = 0;
  double prefill_linear_flops = 0;  // projections and lm_head of prefill-only steps (attention left out)
  int64_t num_preempted = 0;
  std::map<std::string, int> decode_paths;  // StepStats::path of decode-only steps ("eager", "graph bs=8")
};

// engine.step() under a wall clock; classifies the step (prefill / decode / mixed) into
// `stats` and accounts the bytes and FLOPs of its work.
std::vector<RequestOutput> timed_step(LLMEngine& engine, const CostModel& cost, PassStats* stats);

// Offline: submits `requests` together (or adapter group by group when sequential) and
// steps until all finish.
Result<PassStats> run_offline_pass(LLMEngine& engine, const BenchOptions& o, const CostModel& cost,
                                   const std::vector<BenchRequest>& requests, bool sequential);

struct OnlineStats {
  PassStats steps;
  std::vector<double> ttft_ms, itl_ms, e2e_ms;
  int num_requests = 0;
  double duration_s = 0;  // first arrival to last finish
};
Result<OnlineStats> run_online(LLMEngine& engine, const BenchOptions& o, const CostModel& cost,
                               const std::vector<BenchRequest>& requests);

// Poisson arrival times (seeded) for requests; rate "inf" puts all of them at 0.
Status assign_arrivals(std::vector<BenchRequest>* requests, const std::string& rate, uint64_t seed);

// ---- report ----------------------------------------------------------------------------
double percentile(std::vector<double> values, double p);  // linear interpolation; 0 if empty

nlohmann::json machine_json(const LLMEngine& engine);  // date, commit, CPU/GPU, load
nlohmann::json pass_json(const PassStats& s, const CostModel& b, double bandwidth_gbs);
nlohmann::json online_json(const OnlineStats& s);
void print_pass(const std::string& label, const PassStats& s, const CostModel& b, double bandwidth_gbs);
void print_online(const OnlineStats& s);

}  // namespace quiver::bench
