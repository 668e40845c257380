#include "errors.h"

namespace runstore::python {
namespace {

PyObject* corruption_error = nullptr;
PyObject* unsupported_format_error = nullptr;
PyObject* resource_exhausted_error = nullptr;

PyObject* NewException(nb::module_& m, const char* name, PyObject* base, const char* doc) {
  const std::string qualified = std::string("runstore.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base, nullptr);
  if (type == nullptr) throw nb::python_error();
  m.attr(name) = nb::borrow(type);  // the module keeps a reference; so does this file
  return type;
}

}  // namespace

void InitErrors(nb::module_& m) {
  corruption_error = NewException(
      m, "CorruptionError", PyExc_Exception,
      "Stored bytes failed a check (checksum, length, magic). The message names the segment "
      "file and the offset. Data committed elsewhere in the store is unaffected.");
  unsupported_format_error = NewException(
      m, "UnsupportedFormatError", PyExc_NotImplementedError,
      "The store or segment uses a format version or feature this build of runstore cannot "
      "read (e.g. a store written by a newer runstore). A subclass of NotImplementedError.");
  resource_exhausted_error = NewException(
      m, "ResourceExhaustedError", PyExc_OSError,
      "The process ran out of a resource: file descriptors (EMFILE, ENFILE: raise ulimit -n), "
      "memory or memory mappings (ENOMEM). Nothing is wrong with the store; the same call "
      "may succeed with more of it. A subclass of OSError, with errno set.");
}

nb::object MessageText(std::string_view message) {
  nb::object text = nb::steal(
      PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()), "replace"));
  if (!text.is_valid()) throw nb::python_error();
  return text;
}

void Throw(PyObject* type, const std::string& message) {
  PyErr_SetObject(type, MessageText(message).ptr());
  throw nb::python_error();
}

// Raises `type(errno, message)` (so that OSError and its subclasses get
// errno and strerror), or `type(message)` without an errno.
[[noreturn]] void ThrowOSError(PyObject* type, int err, const std::string& msg) {
  if (err == 0) Throw(type, msg);
  nb::object args = nb::steal(Py_BuildValue("(iN)", err, MessageText(msg).release().ptr()));
  if (!args.is_valid()) throw nb::python_error();
  PyErr_SetObject(type, args.ptr());
  throw nb::python_error();
}

void ThrowStatus(const Status& s) {
  const std::string& msg = s.message();
  switch (s.code()) {
    case StatusCode::kOk:
      Throw(PyExc_SystemError, "runstore: ThrowStatus called with an OK status");
    case StatusCode::kNotFound:
      Throw(PyExc_KeyError, msg);
    case StatusCode::kCorruption:
      Throw(corruption_error, msg);
    case StatusCode::kIOError:
      // OSError(errno, message) picks the subclass (PermissionError, ...).
      ThrowOSError(PyExc_OSError, s.sys_errno(), msg);
    case StatusCode::kInvalidArgument:
      Throw(PyExc_ValueError, msg);
    case StatusCode::kNotSupported:
      Throw(unsupported_format_error, msg);
    case StatusCode::kAlreadyExists:
      Throw(PyExc_FileExistsError, msg);
    case StatusCode::kFailedPrecondition:
      Throw(PyExc_RuntimeError, msg);
    case StatusCode::kResourceExhausted:
      ThrowOSError(resource_exhausted_error, s.sys_errno(), msg);
  }
  Throw(PyExc_RuntimeError, s.ToString());
}

}  // namespace runstore::python
