// clang 14 with libstdc++ 12 has no std::source_location (it needs a builtin clang gained
// in 15), which core/check.h uses. The fuzz builds force-include this stand-in, built on
// the __builtin_FILE/LINE/FUNCTION that clang 14 does have. Only the fuzz builds see it.
#pragma once
#include <source_location>
#include <version>
#if !defined(__cpp_lib_source_location)
namespace std {
struct source_location {
  static constexpr source_location current(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE(),
                                           const char* function = __builtin_FUNCTION()) noexcept {
    source_location s;
    s.file_ = file;
    s.line_ = line;
    s.function_ = function;
    return s;
  }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr const char* function_name() const noexcept { return function_; }
  constexpr unsigned line() const noexcept { return line_; }
  constexpr unsigned column() const noexcept { return 0; }

 private:
  const char* file_ = "";
  const char* function_ = "";
  unsigned line_ = 0;
};
}  // namespace std
#endif
