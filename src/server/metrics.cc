// Prometheus exposition (text format 0.0.4). Bucket bounds are vLLM's, so dashboards built
// for vLLM read quiver's histograms the same way.
#include "server/metrics.h"

#include <chrono>
#include <cstdio>

namespace quiver {

namespace {

std::string format_double(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

}  // namespace

std::string comma_joined(const std::set<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ",") + n;
  return s;
}

std::string prometheus_label_value(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

std::string Histogram::render(const std::string& name, const std::string& labels) const {
  std::string out;
  int64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? format_double(bounds_[i]) : "+Inf";
    out += name + "_bucket{" + labels + ",le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_sum{" + labels + "} " + format_double(sum_) + "\n";
  out += name + "_count{" + labels + "} " + std::to_string(count_) + "\n";
  return out;
}

std::vector<double> one_two_five_buckets(int64_t max_value) {
  std::vector<double> bounds;
  for (int64_t scale = 1;; scale *= 10) {
    for (int64_t m : {1, 2, 5}) {
      if (m * scale > max_value) return bounds;
      bounds.push_back(static_cast<double>(m * scale));
    }
  }
}

ServerMetrics::ServerMetrics(std::string model_name, CacheConfigInfo cache, int max_model_len)
    : model_name_(std::move(model_name)),
      cache_(cache),
      ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
             80.0, 160.0, 640.0, 2560.0}),
      inter_token_({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                    40.0, 80.0}),
      e2e_({0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
            960.0, 1920.0, 7680.0}),
      request_prompt_tokens_(one_two_five_buckets(max_model_len)),
      request_generation_tokens_(one_two_five_buckets(max_model_len)) {
  gauges_.kv_blocks_total = cache.num_blocks;
}

void ServerMetrics::set_engine_state(const EngineGauges& gauges) {
  std::lock_guard<std::mutex> lock(mu_);
  gauges_ = gauges;
}

EngineGauges ServerMetrics::engine_state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return gauges_;
}

void ServerMetrics::observe_ttft(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  ttft_.observe(s);
}

void ServerMetrics::observe_inter_token(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  inter_token_.observe(s);
}

void ServerMetrics::observe_e2e(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  e2e_.observe(s);
}

void ServerMetrics::observe_request_tokens(int64_t prompt_tokens, int64_t generation_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  request_prompt_tokens_.observe(static_cast<double>(prompt_tokens));
  request_generation_tokens_.observe(static_cast<double>(generation_tokens));
}

void ServerMetrics::count_finished(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  ++finished_[reason];
}

void ServerMetrics::set_engine_failed(bool failed) {
  std::lock_guard<std::mutex> lock(mu_);
  engine_failed_ = failed;
}

std::string ServerMetrics::render() const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string labels = "model_name=\"" + prometheus_label_value(model_name_) + "\"";
  std::string out;
  auto gauge = [&](const std::string& name, const char* help, const std::string& value) {
    header(out, name, "gauge", help);
    out += name + "{" + labels + "} " + value + "\n";
  };
  auto counter = [&](const std::string& name, const char* help, int64_t value) {
    header(out, name, "counter", help);
    out += name + "{" + labels + "} " + std::to_string(value) + "\n";
  };
  auto histogram = [&](const std::string& name, const char* help, const Histogram& h) {
    header(out, name, "histogram", help);
    out += h.render(name, labels);
  };
  const EngineGauges& g = gauges_;
  const double usage = g.kv_blocks_total > 0 ? static_cast<double>(g.kv_blocks_used) / g.kv_blocks_total : 0.0;
  gauge("vllm:num_requests_running", "Requests in the running batch.", std::to_string(g.num_running));
  gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled.", std::to_string(g.num_waiting));
  gauge("vllm:kv_cache_usage_perc", "KV cache usage (1 = all blocks in use).", format_double(usage));
  gauge("vllm:gpu_cache_usage_perc", "KV cache usage (1 = all blocks in use); older vLLM name.", format_double(usage));
  counter("vllm:prompt_tokens_total", "Prompt tokens computed (prefix-cache hits excluded).", g.prompt_tokens);
  counter("vllm:generation_tokens_total", "Generated tokens.", g.generation_tokens);
  counter("vllm:num_preemptions_total", "Sequences preempted (recomputed later).", g.preemptions);

  header(out, "vllm:request_success_total", "counter", "Finished requests by finish reason.");
  for (const char* reason : {"stop", "length", "abort", "error"}) {
    auto it = finished_.find(reason);
    out += "vllm:request_success_total{" + labels + ",finished_reason=\"" + reason + "\"} " +
           std::to_string(it == finished_.end() ? 0 : it->second) + "\n";
  }

  histogram("vllm:time_to_first_token_seconds", "Time to the first generated token.", ttft_);
  histogram("vllm:inter_token_latency_seconds", "Time between generated tokens.", inter_token_);
  histogram("vllm:time_per_output_token_seconds", "Time between generated tokens (older name).", inter_token_);
  histogram("vllm:e2e_request_latency_seconds", "Request latency from arrival to finish.", e2e_);
  histogram("vllm:request_prompt_tokens", "Prompt length of finished requests.", request_prompt_tokens_);
  histogram("vllm:request_generation_tokens", "Generated tokens of finished requests.", request_generation_tokens_);

  // vLLM's info-style gauges: the labels carry the data.
  header(out, "vllm:cache_config_info", "gauge", "KV cache configuration.");
  out += "vllm:cache_config_info{block_size=\"" + std::to_string(cache_.block_size) + "\",enable_prefix_caching=\"" +
         (cache_.prefix_caching ? "True" : "False") + "\",num_gpu_blocks=\"" + std::to_string(cache_.num_blocks) +
         "\"} 1\n";
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  header(out, "vllm:lora_requests_info", "gauge", "Running and waiting LoRA adapters.");
  out += "vllm:lora_requests_info{running_lora_adapters=\"" +
         prometheus_label_value(comma_joined(g.running_adapters)) + "\",waiting_lora_adapters=\"" +
         prometheus_label_value(comma_joined(g.waiting_adapters)) + "\",max_lora=\"" + std::to_string(g.max_loras) +
         "\"} " + format_double(now) + "\n";

  // No vLLM name for these.
  gauge("quiver:kv_cache_used_blocks", "KV cache blocks referenced by requests.", std::to_string(g.kv_blocks_used));
  gauge("quiver:kv_cache_total_blocks", "KV cache blocks in the pool.", std::to_string(g.kv_blocks_total));
  gauge("quiver:engine_failed", "1 once the engine has failed (health answers 503).", engine_failed_ ? "1" : "0");
  return out;
}

}  // namespace quiver
