// Status and Result<T>: how errors a user or a file can cause travel back to the caller.
// Programmer bugs use check() (core/check.h) instead.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace quiver {

class Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(std::string message) { return Status(std::move(message), true); }

  bool is_ok() const { return !failed_; }
  explicit operator bool() const { return is_ok(); }
  const std::string& message() const { return message_; }

  // Prefixes the message with context, e.g. "model.safetensors: " + message.
  Status with_context(const std::string& context) const {
    return failed_ ? Status(context + ": " + message_, true) : *this;
  }

 private:
  Status(std::string message, bool failed) : message_(std::move(message)), failed_(failed) {}
  std::string message_;
  bool failed_ = false;
};

template <typename T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}          // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}   // NOLINT: must be an error status

  bool is_ok() const { return v_.index() == 0; }
  explicit operator bool() const { return is_ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() { return value(); }
  Status status() const { return is_ok() ? Status::ok() : std::get<1>(v_); }
  const std::string& message() const { return std::get<1>(v_).message(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace quiver

// Propagates an error Status/Result from an expression that yields a Status.
#define QV_RETURN_IF_ERROR(expr)            \
  do {                                      \
    ::quiver::Status qv_s_ = (expr);        \
    if (!qv_s_.is_ok()) return qv_s_;       \
  } while (0)

#define QV_CONCAT_INNER(a, b) a##b
#define QV_CONCAT(a, b) QV_CONCAT_INNER(a, b)
// Declares `lhs` from a Result expression, or returns its error.
#define QV_ASSIGN_OR_RETURN(lhs, expr)                             \
  auto QV_CONCAT(qv_r_, __LINE__) = (expr);                        \
  if (!QV_CONCAT(qv_r_, __LINE__).is_ok())                         \
    return QV_CONCAT(qv_r_, __LINE__).status();                    \
  lhs = std::move(QV_CONCAT(qv_r_, __LINE__)).value()
