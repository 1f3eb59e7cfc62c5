// Always-on invariant checks for programmer bugs (also in release builds).
// Anything a user or file can cause must return a Status instead.
#pragma once

#include <source_location>
#include <string_view>

namespace quiver {

[[noreturn]] void check_failed(std::string_view message, const std::source_location& where);

inline void check(bool condition, std::string_view message = "check failed",
                  const std::source_location where = std::source_location::current()) {
  if (!condition) [[unlikely]] check_failed(message, where);
}

}  // namespace quiver
