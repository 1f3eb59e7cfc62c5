#include "cli/load_progress.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>

namespace quiver {

namespace {

constexpr int kBarWidth = 30;

std::string bar_line(const std::string& label, int64_t done, int64_t total, double seconds) {
  const int filled = total > 0 ? static_cast<int>(kBarWidth * done / total) : kBarWidth;
  char tail[96];
  std::snprintf(tail, sizeof tail, "] %lld/%lld layers, %.1fs", static_cast<long long>(done),
                static_cast<long long>(total), seconds);
  return "\r" + label + " [" + std::string(filled, '#') + std::string(kBarWidth - filled, ' ') + tail;
}

}  // namespace

std::function<void(int64_t, int64_t)> load_progress_printer(std::ostream* out, bool terminal, std::string label) {
  struct State {
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    int64_t next_quarter = 1;
  };
  auto state = std::make_shared<State>();
  return [out, terminal, label = std::move(label), state](int64_t done, int64_t total) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - state->start).count();
    if (terminal) {
      *out << bar_line(label, done, total, s) << (done >= total ? "\n" : "") << std::flush;
      return;
    }
    // Plain lines at 25, 50, 75 and 100%: enough to see progress in a log, not one per layer.
    if (total <= 0 || done * 4 < state->next_quarter * total) return;
    while (state->next_quarter <= 4 && done * 4 >= state->next_quarter * total) ++state->next_quarter;
    char line[128];
    std::snprintf(line, sizeof line, "%s: %lld of %lld layers (%lld%%), %.1fs\n", label.c_str(),
                  static_cast<long long>(done), static_cast<long long>(total),
                  static_cast<long long>(100 * done / total), s);
    *out << line << std::flush;
  };
}

std::function<void(int64_t, int64_t)> stderr_load_progress(std::string label) {
  return load_progress_printer(&std::cerr, ::isatty(STDERR_FILENO) != 0, std::move(label));
}

}  // namespace quiver
