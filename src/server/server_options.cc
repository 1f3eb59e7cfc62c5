#include "server/server_options.h"

#include <string>

namespace quiver {

namespace {

// Upper bounds keep a typo from becoming threads, descriptors or waits nobody meant:
// each HTTP worker is a thread with its own stack, each connection a descriptor.
constexpr int kMaxHttpThreads = 4096;
constexpr int kMaxConnections = 1 << 20;
constexpr int kMaxPendingRequests = 1 << 20;
constexpr double kMaxSeconds = 86400;

template <typename T>
Status in_range(const char* flag, T v, T lo, T hi) {
  if (v >= lo && v <= hi) return Status::ok();
  return Status::error(std::string(flag) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                       "], got " + std::to_string(v));
}

Status positive_seconds(const char* flag, double v) {
  if (v > 0 && v <= kMaxSeconds) return Status::ok();
  return Status::error(std::string(flag) + " must be in (0, " + std::to_string(static_cast<int>(kMaxSeconds)) +
                       "] seconds, got " + std::to_string(v));
}

}  // namespace

Status validate(const ServerOptions& o) {
  QV_RETURN_IF_ERROR(in_range("--port", o.port, 0, 65535));
  QV_RETURN_IF_ERROR(in_range("--http-threads", o.http_threads, 1, kMaxHttpThreads));
  QV_RETURN_IF_ERROR(in_range("--http-max-connections", o.http_max_connections, 1, kMaxConnections));
  QV_RETURN_IF_ERROR(positive_seconds("--http-header-timeout", o.http_header_timeout_s));
  QV_RETURN_IF_ERROR(in_range("--max-pending-requests", o.max_pending_requests, 1, kMaxPendingRequests));
  QV_RETURN_IF_ERROR(in_range("--shutdown-timeout", o.shutdown_timeout_s, 0.0, kMaxSeconds));
  QV_RETURN_IF_ERROR(positive_seconds("--log-stats-interval", o.log_stats_interval_s));
  if (o.max_body_bytes == 0) return Status::error("--max-body-bytes must be positive");
  return Status::ok();
}

}  // namespace quiver
