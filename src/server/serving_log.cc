#include "server/serving_log.h"

#include <cstdio>

namespace quiver {

namespace {

std::string seconds_text(double s) {
  if (s < 0) return "-";
  char buf[32];
  // Milliseconds below a second: small models answer in well under one.
  if (s < 1.0) std::snprintf(buf, sizeof buf, "%.1fms", s * 1e3);
  else std::snprintf(buf, sizeof buf, "%.3fs", s);
  return buf;
}

}  // namespace

std::string request_log_line(const RequestLogEntry& e) {
  return "request " + e.id + " model=" + e.model + " prompt_tokens=" + std::to_string(e.prompt_tokens) +
         " output_tokens=" + std::to_string(e.output_tokens) + " ttft=" + seconds_text(e.ttft_s) +
         " total=" + seconds_text(e.total_s) + " finish=" + (e.finish_reason.empty() ? "-" : e.finish_reason);
}

std::string stats_line(const EngineGauges& before, const EngineGauges& now, double seconds) {
  const double s = seconds > 0 ? seconds : 1.0;
  const double usage = now.kv_blocks_total > 0 ? 100.0 * now.kv_blocks_used / now.kv_blocks_total : 0.0;
  std::set<std::string> adapters = now.running_adapters;
  adapters.insert(now.waiting_adapters.begin(), now.waiting_adapters.end());
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "stats: prompt throughput %.1f tokens/s, generation throughput %.1f tokens/s, running %d, "
                "waiting %d, KV cache usage %.1f%% (%d of %d blocks), adapters ",
                static_cast<double>(now.prompt_tokens - before.prompt_tokens) / s,
                static_cast<double>(now.generation_tokens - before.generation_tokens) / s, now.num_running,
                now.num_waiting, usage, now.kv_blocks_used, now.kv_blocks_total);
  const std::string names = adapters.empty() ? "none" : comma_joined(adapters);
  return buf + names + " (max " + std::to_string(now.max_loras) + ")";
}

void ServingLog::line(const std::string& text) {
  std::lock_guard<std::mutex> lock(out_mu_);
  *out_ << "quiver serve: " << text << "\n" << std::flush;
}

void ServingLog::request_finished(const RequestLogEntry& e) {
  if (log_requests_) line(request_log_line(e));
}

void ServingLog::start_stats(const ServerMetrics* metrics, double interval_s) {
  stats_thread_ = std::thread([this, metrics, interval_s] {
    EngineGauges before = metrics->engine_state();
    auto last = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(stats_mu_);
    for (;;) {
      if (stats_cv_.wait_for(lock, std::chrono::duration<double>(interval_s), [this] { return stats_stop_; })) return;
      const EngineGauges now = metrics->engine_state();
      const auto t = std::chrono::steady_clock::now();
      const bool idle = now.num_running == 0 && now.num_waiting == 0 && now.prompt_tokens == before.prompt_tokens &&
                        now.generation_tokens == before.generation_tokens;
      if (!idle) line(stats_line(before, now, std::chrono::duration<double>(t - last).count()));
      before = now;
      last = t;
    }
  });
}

void ServingLog::stop_stats() {
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_stop_ = true;
  }
  stats_cv_.notify_all();
  if (stats_thread_.joinable()) stats_thread_.join();
}

}  // namespace quiver
