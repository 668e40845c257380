// status.h: error values for the whole library.
//
// Every fallible function returns a Status or a Result<T>. A Status carries a
// code that callers branch on (a torn tail is Corruption and expected during
// recovery; an EIO from fsync is IOError and fatal for that segment) and a
// message naming the file, the offset, what was expected and what was found.
//
// Thread safety: Status and Result are values; distinct objects may be used
// from different threads without synchronisation.
#ifndef RUNSTORE_STATUS_H_
#define RUNSTORE_STATUS_H_

#include <cassert>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace runstore {

enum class StatusCode : int {
  kOk = 0,
  kNotFound = 1,
  kCorruption = 2,
  kIOError = 3,
  kInvalidArgument = 4,
  kNotSupported = 5,
  kAlreadyExists = 6,
  kFailedPrecondition = 7,  // e.g. appending to a closed writer
  // The process ran out of a resource (file descriptors, memory or memory
  // mappings): nothing is wrong with the store, and the same call may succeed
  // with more of it. Never damage, never skipped as damage.
  kResourceExhausted = 8,
};

// Human-readable name of a code ("Corruption").
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message, int sys_errno = 0);

  static Status OK() { return Status(); }
  static Status NotFound(std::string msg) { return {StatusCode::kNotFound, std::move(msg)}; }
  static Status Corruption(std::string msg) { return {StatusCode::kCorruption, std::move(msg)}; }
  static Status IOError(std::string msg, int sys_errno = 0) {
    return {StatusCode::kIOError, std::move(msg), sys_errno};
  }
  static Status InvalidArgument(std::string msg) {
    return {StatusCode::kInvalidArgument, std::move(msg)};
  }
  static Status NotSupported(std::string msg) {
    return {StatusCode::kNotSupported, std::move(msg)};
  }
  static Status AlreadyExists(std::string msg) {
    return {StatusCode::kAlreadyExists, std::move(msg)};
  }
  static Status FailedPrecondition(std::string msg) {
    return {StatusCode::kFailedPrecondition, std::move(msg)};
  }
  static Status ResourceExhausted(std::string msg, int sys_errno = 0) {
    return {StatusCode::kResourceExhausted, std::move(msg), sys_errno};
  }

  bool ok() const { return state_ == nullptr; }
  StatusCode code() const { return state_ ? state_->code : StatusCode::kOk; }
  // The message alone, without the code name. Empty for OK.
  const std::string& message() const;
  // errno of the system call that failed, or 0.
  int sys_errno() const { return state_ ? state_->sys_errno : 0; }
  // "Corruption: segments/a-000001.rss: offset 4096: block header checksum mismatch".
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context: ` (one ": ",
  // whether or not `context` ends with one), or unchanged when the message
  // already starts with `context`, so that a path is never said twice.
  Status WithContext(std::string_view context) const;

 private:
  struct State {
    StatusCode code;
    int sys_errno;
    std::string message;
  };
  // Shared so that copying a Status on the error path is cheap; never mutated.
  std::shared_ptr<const State> state_;
};

// Result<T>: a T or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    assert(!status_.ok() && "Result constructed from an OK Status");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  T& value() & {
    assert(ok());
    return *value_;
  }
  const T& value() const& {
    assert(ok());
    return *value_;
  }
  T&& value() && {
    assert(ok());
    return std::move(*value_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace runstore

#define RUNSTORE_CONCAT_INNER_(a, b) a##b
#define RUNSTORE_CONCAT_(a, b) RUNSTORE_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define RUNSTORE_RETURN_IF_ERROR(expr)       \
  do {                                       \
    ::runstore::Status _rs_status = (expr);  \
    if (!_rs_status.ok()) return _rs_status; \
  } while (0)

// `RUNSTORE_ASSIGN_OR_RETURN(auto x, F())` declares x from a Result, or returns its Status.
#define RUNSTORE_ASSIGN_OR_RETURN(lhs, expr) \
  RUNSTORE_ASSIGN_OR_RETURN_IMPL_(RUNSTORE_CONCAT_(_rs_result_, __LINE__), lhs, expr)
#define RUNSTORE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  if (!tmp.ok()) return tmp.status();                   \
  lhs = std::move(tmp).value()

#endif  // RUNSTORE_STATUS_H_
