#include "core/check.h"

#include <cstdio>
#include <cstdlib>

namespace quiver {

void check_failed(std::string_view message, const std::source_location& where) {
  std::fprintf(stderr, "quiver: internal error: %.*s (%s:%u in %s)\n", static_cast<int>(message.size()),
               message.data(), where.file_name(), static_cast<unsigned>(where.line()), where.function_name());
  std::abort();
}

}  // namespace quiver
