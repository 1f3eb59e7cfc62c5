// Server metrics in Prometheus text format under vLLM's names (`vllm:` prefix), so dashboards
// built for vLLM work unchanged: request gauges, KV cache usage, token counters, latency and
// length histograms, LoRA and cache-config info. What vLLM has no name for keeps `quiver:`.
// The engine thread writes (observe/set_engine_state), /metrics reads; one mutex.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace quiver {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  // "<name>_bucket{le=...} ... <name>_sum ... <name>_count" lines; `labels` like model_name="x".
  std::string render(const std::string& name, const std::string& labels) const;
  int64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket, not cumulative
  double sum_ = 0;
  int64_t count_ = 0;
};

// What the engine loop reports after each step.
struct EngineGauges {
  int num_running = 0;
  int num_waiting = 0;      // in the engine's queue plus accepted by the server, not yet added
  int kv_blocks_used = 0;
  int kv_blocks_total = 0;
  int64_t prompt_tokens = 0;      // cumulative
  int64_t generation_tokens = 0;  // cumulative
  int64_t preemptions = 0;        // cumulative
  std::set<std::string> running_adapters;
  std::set<std::string> waiting_adapters;
  int max_loras = 0;
};

// The KV pool as vLLM's cache_config_info reports it; fixed at start-up.
struct CacheConfigInfo {
  int block_size = 0;
  int num_blocks = 0;
  bool prefix_caching = false;
};

class ServerMetrics {
 public:
  // max_model_len bounds the token-count histograms (vLLM's 1-2-5 buckets up to it).
  ServerMetrics(std::string model_name, CacheConfigInfo cache, int max_model_len);

  void set_engine_state(const EngineGauges& gauges);
  void observe_ttft(double seconds);
  void observe_inter_token(double seconds);
  void observe_e2e(double seconds);
  void observe_request_tokens(int64_t prompt_tokens, int64_t generation_tokens);
  void count_finished(const std::string& finish_reason);  // stop, length, abort, error
  void set_engine_failed(bool failed);

  std::string render() const;
  EngineGauges engine_state() const;

 private:
  std::string model_name_;
  CacheConfigInfo cache_;
  mutable std::mutex mu_;
  EngineGauges gauges_;
  Histogram ttft_;
  Histogram inter_token_;
  Histogram e2e_;
  Histogram request_prompt_tokens_;
  Histogram request_generation_tokens_;
  std::map<std::string, int64_t> finished_;
  bool engine_failed_ = false;
};

// 1, 2, 5, 10, 20, 50, ... while <= max_value (vLLM's bounds for token-count histograms).
std::vector<double> one_two_five_buckets(int64_t max_value);

// "a,b,c" (sorted, as the set holds them); "" for none.
std::string comma_joined(const std::set<std::string>& names);

// Escapes a Prometheus label value (backslash, quote, newline).
std::string prometheus_label_value(const std::string& s);

}  // namespace quiver
