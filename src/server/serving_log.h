// What `quiver serve` prints while it runs, as vLLM's server does: one line per finished
// request (unless --disable-log-requests) and, every --stats-interval seconds while there is
// work, a line of throughput, queue, KV and adapter figures (unless --disable-log-stats).
// Lines go to one stream under a lock, so lines from the engine thread and the stats thread
// never interleave.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>

#include "server/metrics.h"

namespace quiver {

struct RequestLogEntry {
  std::string id;     // the response id the client saw (cmpl-..., chatcmpl-...)
  std::string model;  // the adapter's name, or the served model's
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  double ttft_s = -1;   // -1: no token was generated
  double total_s = -1;  // arrival to finish
  std::string finish_reason;
};

std::string request_log_line(const RequestLogEntry& e);

// Two snapshots of the engine gauges `seconds` apart -> the stats line.
std::string stats_line(const EngineGauges& before, const EngineGauges& now, double seconds);

class ServingLog {
 public:
  ServingLog(std::ostream* out, bool log_requests) : out_(out), log_requests_(log_requests) {}
  ~ServingLog() { stop_stats(); }

  bool logs_requests() const { return log_requests_; }
  void request_finished(const RequestLogEntry& e);
  void line(const std::string& text);

  // Starts a thread that writes a stats line every `interval_s` from `metrics`, skipping
  // intervals in which nothing ran, waited or was computed.
  void start_stats(const ServerMetrics* metrics, double interval_s);
  void stop_stats();

 private:
  std::ostream* out_;
  const bool log_requests_;
  std::mutex out_mu_;

  std::mutex stats_mu_;
  std::condition_variable stats_cv_;
  bool stats_stop_ = false;
  std::thread stats_thread_;
};

}  // namespace quiver
