// Weight-loading progress for the commands that load a model: a bar redrawn in place on a
// terminal, and a few plain lines (every quarter) when stderr is a file or a pipe, so logs
// stay readable.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

namespace quiver {

// A callback for EngineArgs::on_load_progress writing to `out` (which must outlive it).
std::function<void(int64_t, int64_t)> load_progress_printer(std::ostream* out, bool terminal, std::string label);

// The same, for stderr: a bar when stderr is a terminal.
std::function<void(int64_t, int64_t)> stderr_load_progress(std::string label);

}  // namespace quiver
