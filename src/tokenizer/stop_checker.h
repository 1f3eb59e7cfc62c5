// StopChecker: finds stop strings in streamed text that arrives in pieces. Text that
// might be the start of a stop string is held back until it is known not to be; the
// stop string and everything after it are never emitted (unless asked to include it).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace quiver {

class StopChecker {
 public:
  StopChecker(std::vector<std::string> stops, bool include_stop_in_output);

  struct Result {
    std::string emit;                  // text safe to show now
    std::optional<std::string> stopped;  // the stop string found, if any
  };
  // Feeds the next piece of text. After a stop was found, further pieces are ignored.
  Result push(const std::string& piece);
  // End of generation: releases any held-back text.
  std::string flush();

 private:
  std::vector<std::string> stops_;
  bool include_;
  size_t max_len_ = 0;
  std::string held_;  // text not yet emitted (possible stop-string prefix)
  bool done_ = false;
};

}  // namespace quiver
