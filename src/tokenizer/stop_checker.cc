#include "tokenizer/stop_checker.h"

#include <algorithm>

namespace quiver {

StopChecker::StopChecker(std::vector<std::string> stops, bool include_stop_in_output)
    : stops_(std::move(stops)), include_(include_stop_in_output) {
  for (const auto& s : stops_) max_len_ = std::max(max_len_, s.size());
}

StopChecker::Result StopChecker::push(const std::string& piece) {
  Result r;
  if (done_) return r;
  held_ += piece;
  if (stops_.empty()) {
    r.emit.swap(held_);
    return r;
  }
  // Earliest stop string occurrence wins.
  size_t best = std::string::npos;
  const std::string* which = nullptr;
  for (const auto& s : stops_) {
    size_t at = held_.find(s);
    if (at != std::string::npos && (at < best || (at == best && s.size() > which->size()))) {
      best = at;
      which = &s;
    }
  }
  if (which != nullptr) {
    r.emit = held_.substr(0, best + (include_ ? which->size() : 0));
    r.stopped = *which;
    held_.clear();
    done_ = true;
    return r;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const auto& s : stops_) {
    for (size_t len = std::min(s.size() - 1, held_.size()); len > keep; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  r.emit = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return r;
}

std::string StopChecker::flush() {
  std::string out;
  if (!done_) out.swap(held_);
  return out;
}

}  // namespace quiver
