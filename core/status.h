// core/status.h: the status/result type of every control path.
//
// Contract
//   - Status is [[nodiscard]]; OK carries no allocation (a null pointer), so
//     returning OK from a hot control loop costs one register.
//   - Errors carry a code (machine-readable, stable) and a message (for
//     humans: names the field, the value and the problem).
//   - Result<T> holds either a T or a non-OK Status.
//   - Thread safety: values; no shared state.
//   - Data-plane code never returns Status per packet: a lookup miss is a
//     value, and packet-caused problems are counted, not reported.
#pragma once

#include <cassert>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace sb {

enum class StatusCode : unsigned char {
  kOk = 0,
  kInvalidArgument,   // bad input from a caller, a file or a peer
  kNotFound,          // the thing named does not exist
  kAlreadyExists,     // duplicate add
  kCorrupt,           // checksum/format failure of serialized input
  kCapacity,          // a fixed-capacity structure is full: rebuild/grow
  kUnavailable,       // a peer or owner cannot be reached now
  kFailedPrecondition,// the operation does not apply in this state
  kIo,                // an OS-level failure (open/write/fsync)
  kInternal,          // a bug: an invariant did not hold
};

std::string_view status_code_name(StatusCode c);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string msg)
      : rep_(code == StatusCode::kOk ? nullptr
                                     : std::make_shared<Rep>(Rep{code, std::move(msg)})) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status Corrupt(std::string m) { return {StatusCode::kCorrupt, std::move(m)}; }
  static Status Capacity(std::string m) { return {StatusCode::kCapacity, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
  static Status Io(std::string m) { return {StatusCode::kIo, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool ok() const { return rep_ == nullptr; }
  StatusCode code() const { return rep_ ? rep_->code : StatusCode::kOk; }
  const std::string& message() const {
    static const std::string kEmpty;
    return rep_ ? rep_->msg : kEmpty;
  }
  // "invalid_argument: --keys: bad size suffix 'Q'"
  std::string to_string() const;

  // Prefixes the message with context ("loading foo.yaml: ").
  Status with_context(std::string_view ctx) const {
    if (ok()) return *this;
    return Status(code(), std::string(ctx) + ": " + message());
  }

 private:
  struct Rep {
    StatusCode code;
    std::string msg;
  };
  std::shared_ptr<const Rep> rep_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status st) : status_(std::move(st)) {   // NOLINT
    assert(!status_.ok() && "Result built from an OK status has no value");
    if (status_.ok()) status_ = Status::Internal("Result constructed from OK status without value");
  }
  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { assert(ok()); return *value_; }
  const T& value() const& { assert(ok()); return *value_; }
  T&& value() && { assert(ok()); return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace sb

// Returns early from a function returning Status/Result with a non-OK status.
#define SB_RETURN_IF_ERROR(expr)            \
  do {                                      \
    ::sb::Status sb_status_ = (expr);       \
    if (!sb_status_.ok()) return sb_status_; \
  } while (0)
