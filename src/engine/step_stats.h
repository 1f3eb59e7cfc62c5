// Per-step and cumulative engine counters: for --trace lines, benchmarks and /metrics.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace quiver {

struct StepStats {
  int64_t step = 0;
  int num_prefill_tokens = 0;
  int num_decode_tokens = 0;
  int num_seqs = 0;
  std::vector<std::string> adapters;  // distinct adapters in the batch
  int kv_blocks_used = 0;
  int kv_blocks_total = 0;
  int num_preempted = 0;  // this step
  int num_running = 0;
  int num_waiting = 0;
  std::string path;       // "eager", "graph bs=8", ...
  bool lora_active = false;
  std::string plan;       // StepPlan::describe(): the kernels of each projection group
  double ms = 0;           // the whole step
  double schedule_ms = 0;  // scheduler
  double model_ms = 0;     // inputs, forward, sampling, results back on the host (the device's part)

  std::string trace_line() const;
};

struct EngineCounters {
  int64_t steps = 0;
  int64_t prompt_tokens = 0;       // prompt tokens computed (prefix-cache hits excluded)
  int64_t generation_tokens = 0;
  int64_t preemptions = 0;
  int64_t requests_finished = 0;
  int64_t prefix_cache_hit_blocks = 0;
  double step_seconds = 0;         // wall time inside step(), summed: callers subtract it to see their own share
};

}  // namespace quiver
