// errors.h: runstore Status codes as Python exceptions.
//
//   InvalidArgument    -> ValueError
//   NotFound           -> KeyError
//   IOError            -> OSError (errno set, so e.g. PermissionError, when the Status has one)
//   Corruption         -> runstore.CorruptionError (an Exception)
//   NotSupported       -> runstore.UnsupportedFormatError (a NotImplementedError)
//   AlreadyExists      -> FileExistsError
//   FailedPrecondition -> RuntimeError
//   ResourceExhausted  -> runstore.ResourceExhaustedError (an OSError, errno set)
//
// Every function here needs the GIL.
#ifndef RUNSTORE_PYTHON_ERRORS_H_
#define RUNSTORE_PYTHON_ERRORS_H_

#include <nanobind/nanobind.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "runstore/status.h"

namespace runstore::python {

namespace nb = nanobind;

// Creates CorruptionError, UnsupportedFormatError and ResourceExhaustedError
// and adds them to `m`.
void InitErrors(nb::module_& m);

// A Python callable (or None) called from C++ work that runs without the
// GIL (a compaction, a sync, a verify), for progress: each call takes the
// GIL; the first exception the callable raises stops the calls and is
// raised by Rethrow once the work is done (the work itself is not stopped).
class PyProgress {
 public:
  explicit PyProgress(nb::handle fn) : fn_(nb::borrow(fn)) {}
  bool enabled() const { return fn_.is_valid() && !fn_.is_none(); }
  template <typename... Args>
  void operator()(Args... args) {
    if (!enabled()) return;
    nb::gil_scoped_acquire gil;  // also orders the calls of several threads
    if (error_) return;
    try {
      fn_(args...);
    } catch (nb::python_error& e) {
      error_ = std::make_unique<nb::python_error>(std::move(e));
    }
  }
  // With the GIL held.
  void Rethrow() {
    if (error_) {
      nb::python_error e = std::move(*error_);
      error_.reset();
      throw e;
    }
  }

 private:
  nb::object fn_;
  std::unique_ptr<nb::python_error> error_;
};

// Sets the Python exception for `s` (not OK) and throws nb::python_error,
// which nanobind hands back to Python.
[[noreturn]] void ThrowStatus(const Status& s);

// `message` as a str. Messages quote what the engine found (file names, a
// damaged marker, the start of a name) and so need not be UTF-8: bytes that
// are not become U+FFFD, so that the error is raised and not a
// UnicodeDecodeError in its place.
nb::object MessageText(std::string_view message);

// Throws `type(message)`.
[[noreturn]] void Throw(PyObject* type, const std::string& message);

inline void Check(const Status& s) {
  if (!s.ok()) ThrowStatus(s);
}

template <typename T>
T Unwrap(Result<T>&& r) {
  if (!r.ok()) ThrowStatus(r.status());
  return std::move(r).value();
}

}  // namespace runstore::python

#endif  // RUNSTORE_PYTHON_ERRORS_H_
