// ResponseChannel: hands one HTTP request's engine outputs from the engine thread to the
// HTTP thread serving it. One HTTP request may own several engine requests (a completion
// with a list of prompts): each is a "job" with its own index. The engine thread first
// admits or rejects every job, then pushes outputs; the HTTP thread waits on the
// condition variable with a timeout so it can also watch its client's connection.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "engine/request_output.h"
#include "server/openai_protocol.h"

namespace quiver {

class ResponseChannel {
 public:
  explicit ResponseChannel(int num_jobs) : num_jobs_(num_jobs), finished_(num_jobs, false) {}

  // ---- engine thread ----
  void admit() {
    std::lock_guard<std::mutex> lock(mu_);
    ++num_admitted_;
    cv_.notify_all();
  }
  // Rejects the whole HTTP request (the first error wins); later outputs are dropped.
  void reject(ApiError error) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) error_ = std::move(error);
    cv_.notify_all();
  }
  void push(int job, RequestOutput output) {
    std::lock_guard<std::mutex> lock(mu_);
    if (output.finished && !finished_[job]) {
      finished_[job] = true;
      ++num_finished_;
    }
    events_.emplace_back(job, std::move(output));
    cv_.notify_all();
  }

  // ---- HTTP thread ----
  // Waits until every job is admitted or the request is rejected: nullopt = admitted.
  // `timed_out` is set when the wait ran out first.
  std::optional<ApiError> wait_admitted(std::chrono::milliseconds timeout, bool* timed_out) {
    std::unique_lock<std::mutex> lock(mu_);
    *timed_out = !cv_.wait_for(lock, timeout, [&] { return error_.has_value() || num_admitted_ == num_jobs_; });
    return error_;
  }
  // Outputs since the last call (waits up to `timeout` for the first one).
  std::vector<std::pair<int, RequestOutput>> take(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !events_.empty() || error_.has_value(); });
    std::vector<std::pair<int, RequestOutput>> out(std::make_move_iterator(events_.begin()),
                                                   std::make_move_iterator(events_.end()));
    events_.clear();
    return out;
  }
  // True once every job reported its final output (events may still be queued).
  bool all_finished() const {
    std::lock_guard<std::mutex> lock(mu_);
    return num_finished_ == num_jobs_;
  }
  std::optional<ApiError> error() const {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }
  int num_jobs() const { return num_jobs_; }

 private:
  const int num_jobs_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int num_admitted_ = 0;
  int num_finished_ = 0;
  std::vector<bool> finished_;
  std::optional<ApiError> error_;
  std::deque<std::pair<int, RequestOutput>> events_;
};

}  // namespace quiver
