// convert.h: Python objects <-> runstore values, run ids and dtypes.
//
// Conversions follow the Python package's contract (python/runstore/__init__.py):
//   int -> int64, float -> float64, bool -> bool, numpy scalars and 0-d arrays keep
//   their dtype, numpy arrays (made C-contiguous and native-endian when needed) ->
//   arrays, str -> string, bytes/bytearray -> bytes, lists -> numpy.asarray(list).
// Subclasses of ndarray (numpy.matrix, numpy.memmap) are stored as their data.
// A store holds no mask, so a numpy masked array (numpy.ma) is stored only when
// its mask hides nothing; one with a masked element, numpy.ma.masked itself,
// and a list holding either raise TypeError, as do arrays of run ids or steps
// with a masked element. Unsupported dtypes raise TypeError naming the series
// and the dtype.
//
// Every function here needs the GIL, except ValueSlot::ref() and nbytes().
#ifndef RUNSTORE_PYTHON_CONVERT_H_
#define RUNSTORE_PYTHON_CONVERT_H_

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runstore/types.h"

namespace runstore::python {

namespace nb = nanobind;

// The UTF-8 bytes of a Python str; valid while the str lives. TypeError for
// other types, ValueError for a str that has no UTF-8 form (a lone surrogate);
// `what` names the argument in the message.
std::string_view Utf8(PyObject* str, const char* what);
// Raises that ValueError: "<what> '<the str, escaped>' is not valid Unicode
// text ...".
[[noreturn]] void ThrowNotUnicode(PyObject* str, const std::string& what);

// Every run id and step that Python hands to the core goes through ToRunRef
// and ToStep (one element at a time) or ParseRuns and ParseSteps (many), so
// that they are refused the same way everywhere: bool (Python's or numpy's)
// and anything that is not an integer (float, None, ...) raise TypeError
// naming the type given ("run id must be an int or a str, got bool", "step
// must be an int, got float"), and an integer outside int64 OverflowError. A
// bool is an int to Python, but True as a run id or step is a mistake, not run
// or step 1. In messages, `what` names the caller ("log_many") and `index` the
// element of a sequence (both omitted when null or negative).

// A run id from a Python int (or an integer with __index__, like numpy.int64)
// or str. A str run's bytes are borrowed: keep `obj` alive while the RunRef is
// used.
RunRef ToRunRef(PyObject* obj, const char* what = nullptr, Py_ssize_t index = -1);
nb::object RunIdToPython(const RunId& run);

// A step from a Python int or an integer with __index__.
int64_t ToStep(PyObject* obj, const char* what = nullptr, Py_ssize_t index = -1);

// Run ids from a sequence or 1-d array of ints and strs: borrowed RunRefs and
// what keeps their strings alive (an immutable copy, so that they stay valid
// with the GIL released).
struct Runs {
  std::vector<RunRef> refs;
  nb::object keep;
};
Runs ParseRuns(nb::handle runs, const char* what);
// ParseRuns of a list of runs a read asks for (scan, read_aligned): a single
// str or bytes is refused (TypeError), as a sequence it would be taken for
// its characters.
Runs ParseRunList(nb::handle runs, const char* what);
// Whether `obj` is one run id (an int, a numpy integer scalar or a str)
// rather than a sequence of them.
bool IsOneRunId(PyObject* obj);
// The run id `run` for each of `n` records (log_many with one run).
Runs RepeatRun(nb::handle run, size_t n, const char* what);

// The steps of `n` records: None (all 0), one step for all, or a sequence or
// 1-d integer array of n steps. `data` points into `own` or `keep`.
struct Steps {
  std::vector<int64_t> own;
  const int64_t* data = nullptr;
  nb::object keep;
};
Steps ParseSteps(nb::handle steps, size_t n, const char* what);

// A Python value converted for appending to series `name`. The slot keeps
// alive whatever its ValueRef points at (a temporary contiguous copy, the
// caller's array), so the ValueRef may be used with the GIL released. A slot
// may be moved: ref() is computed on demand.
class ValueSlot {
 public:
  ValueSlot() = default;
  // Raises TypeError (unsupported type or dtype) or OverflowError (an int
  // outside int64) through nb::python_error.
  void Set(PyObject* obj, std::string_view name);

  ValueRef ref() const {
    return ValueRef{
        dtype_, {shape_, static_cast<size_t>(rank_)}, is_scalar_ ? scalar_.raw : data_, nbytes_};
  }
  size_t nbytes() const { return nbytes_; }
  DType dtype() const { return dtype_; }

 private:
  void SetScalar(DType dtype, size_t nbytes);
  void SetArray(PyObject* arr, std::string_view name);
  void SetNumpyScalar(PyObject* obj, std::string_view name);

  DType dtype_ = DType::kFloat64;
  bool is_scalar_ = false;
  union {
    int64_t i;
    double d;
    uint8_t b;
    char raw[16];
  } scalar_{};
  const void* data_ = nullptr;
  size_t nbytes_ = 0;
  const int64_t* shape_ = nullptr;
  int rank_ = 0;
  nb::object keep_;
};

// A read-only numpy array viewing `v`'s bytes (no copy); its base is an
// ArrayOwner holding a copy of `v`, which keeps the mapping or buffer alive.
nb::object MakeArrayView(const Value& v);
// A new, uninitialised C-contiguous array; its data; making it read-only.
nb::object NewArray(int type_num, const std::vector<int64_t>& dims);
char* ArrayData(const nb::object& a);
void MakeReadOnly(const nb::object& a);
// `v` as Python: str for strings (undecodable bytes become surrogate
// escapes), bytes for bytes, otherwise MakeArrayView.
nb::object ValueToPython(const Value& v);

// numpy type number of a numeric dtype.
int NumpyTypeNum(DType dtype);
// Parses a dtype given as a runstore name ("float64", "string"), a numpy
// dtype or dtype-like ("f8", np.int32) or a Python type (float, int, bool,
// str, bytes). TypeError if runstore cannot store it.
DType ParseDTypeSpec(nb::handle spec);

// The base object of every array returned by MakeArrayView. When the last
// array using it is gone, the pages of a large view are dropped from resident
// memory (Value::ReleasePages), so that a reader going through many arrays of
// a store holds the pages of the arrays it still has, not of every array it
// has read (the mapping of a segment lives as long as the store).
struct ArrayOwner {
  explicit ArrayOwner(Value v) : value(std::move(v)) {}
  ArrayOwner(ArrayOwner&&) = default;
  ArrayOwner& operator=(ArrayOwner&&) = default;
  ArrayOwner(const ArrayOwner&) = delete;
  ArrayOwner& operator=(const ArrayOwner&) = delete;
  ~ArrayOwner() {
    if (value.nbytes() >= kReleaseAtFreeBytes) value.ReleasePages();  // a no-op if moved from
  }
  static constexpr size_t kReleaseAtFreeBytes = size_t{64} << 10;
  Value value;
};
void BindConvert(nb::module_& m);

}  // namespace runstore::python

#endif  // RUNSTORE_PYTHON_CONVERT_H_
