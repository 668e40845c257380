#include "convert.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "errors.h"
#include "numpy_api.h"
#include "runstore/csv.h"
#include "runstore/text.h"

namespace runstore::python {
namespace {

constexpr const char* kSupported =
    "runstore stores bool, int8..int64, uint8..uint64, float32, float64, str and bytes";

// "complex128", "<U3", "datetime64[s]": str() of a numpy dtype.
std::string DescrName(PyArray_Descr* d) {
  nb::object s = nb::steal(PyObject_Str(reinterpret_cast<PyObject*>(d)));
  if (!s.is_valid()) {
    PyErr_Clear();
    return "?";
  }
  Py_ssize_t n;
  const char* c = PyUnicode_AsUTF8AndSize(s.ptr(), &n);
  return c ? std::string(c, n) : "?";
}

std::string TypeName(PyObject* obj) { return Py_TYPE(obj)->tp_name; }

// Maps a native-or-not numpy dtype to a numeric DType; false if unsupported.
bool DTypeFromDescr(PyArray_Descr* d, DType* out) {
  const npy_intp size = PyDataType_ELSIZE(d);
  switch (d->kind) {
    case 'b':
      if (size == 1) return *out = DType::kBool, true;
      return false;
    case 'i':
      switch (size) {
        case 1:
          return *out = DType::kInt8, true;
        case 2:
          return *out = DType::kInt16, true;
        case 4:
          return *out = DType::kInt32, true;
        case 8:
          return *out = DType::kInt64, true;
      }
      return false;
    case 'u':
      switch (size) {
        case 1:
          return *out = DType::kUInt8, true;
        case 2:
          return *out = DType::kUInt16, true;
        case 4:
          return *out = DType::kUInt32, true;
        case 8:
          return *out = DType::kUInt64, true;
      }
      return false;
    case 'f':
      if (size == 4) return *out = DType::kFloat32, true;
      if (size == 8) return *out = DType::kFloat64, true;
      return false;
  }
  return false;
}

[[noreturn]] void ThrowUnsupportedDType(std::string_view name, PyArray_Descr* d) {
  Throw(PyExc_TypeError, "series '" + std::string(name) + "': dtype " + DescrName(d) +
                             " is not supported (" + kSupported + ")");
}

// numpy.ma.MaskedArray, looked up on first use (numpy is loaded by then). Set
// under the GIL without a static guard: an import may release the GIL, and a
// guard held across it could deadlock with a thread waiting for the GIL.
PyObject* MaskedArrayType() {
  static PyObject* type = nullptr;
  if (type == nullptr) {
    nb::object ma = nb::steal(PyImport_ImportModule("numpy.ma"));
    if (!ma.is_valid()) throw nb::python_error();
    PyObject* t = PyObject_GetAttrString(ma.ptr(), "MaskedArray");
    if (t == nullptr) throw nb::python_error();
    if (type == nullptr) {
      type = t;  // kept for the life of the process
    } else {
      Py_DECREF(t);
    }
  }
  return type;
}

// Whether `obj` is a numpy masked array (np.ma.masked included). Plain arrays
// are told by their exact type, without a lookup.
bool IsMaskedArray(PyObject* obj) {
  if (PyArray_CheckExact(obj) || !PyArray_Check(obj)) return false;
  const int is = PyObject_IsInstance(obj, MaskedArrayType());
  if (is < 0) throw nb::python_error();
  return is == 1;
}

// How many elements of the masked array `obj` its mask hides.
npy_intp MaskedCount(PyObject* obj) {
  nb::object mask = nb::steal(PyObject_GetAttrString(obj, "mask"));
  if (!mask.is_valid()) throw nb::python_error();
  nb::object flags = nb::steal(PyArray_FromAny(mask.ptr(), PyArray_DescrFromType(NPY_BOOL), 0, 0,
                                               NPY_ARRAY_FORCECAST, nullptr));
  if (!flags.is_valid()) throw nb::python_error();
  const npy_intp n = PyArray_CountNonzero(reinterpret_cast<PyArrayObject*>(flags.ptr()));
  if (n < 0) throw nb::python_error();
  return n;
}

// A masked array is stored as its data only when its mask hides nothing: a
// store holds no mask, and a masked element stored would be read back as a
// value. `what` starts the message ("series 'loss'", "log_many: runs").
constexpr const char* kMaskAdvice =
    "store array.filled(fill) with a fill value such as numpy.nan, and the mask as a series of "
    "its own if it matters";

void RefuseMasked(PyObject* obj, const std::string& what, const char* advice = kMaskAdvice) {
  if (!IsMaskedArray(obj)) return;
  const npy_intp masked = MaskedCount(obj);
  if (masked == 0) return;
  const auto* arr = reinterpret_cast<PyArrayObject*>(obj);
  if (PyArray_NDIM(arr) == 0) {
    Throw(PyExc_TypeError, what +
                               ": a masked element (numpy.ma.masked) is a missing value, not a "
                               "value: runstore stores no mask (leave the record out)");
  }
  Throw(PyExc_TypeError, what + ": a numpy masked array with " + std::to_string(masked) + " of " +
                             std::to_string(PyArray_SIZE(arr)) +
                             " elements masked: runstore stores no mask (" + advice + ")");
}

// The first masked element or masked array with a masked element in a list or
// tuple (nested up to numpy's 64 dimensions), which numpy.asarray would turn
// into data; "" if there is none, else where it is ("[2][0]").
std::string FindMasked(PyObject* seq, int depth) {
  if (depth > NPY_MAXDIMS) return "";
  // The size is read again and each item held: reading a mask runs Python.
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); ++i) {
    nb::object held = nb::borrow(PySequence_Fast_GET_ITEM(seq, i));
    PyObject* item = held.ptr();
    PyTypeObject* t = Py_TYPE(item);
    if (t == &PyFloat_Type || t == &PyLong_Type || t == &PyBool_Type) continue;
    std::string inner;
    if (PyList_Check(item) || PyTuple_Check(item)) {
      inner = FindMasked(item, depth + 1);
    } else if (IsMaskedArray(item) && MaskedCount(item) > 0) {
      inner = " ";
    }
    if (!inner.empty()) {
      return "[" + std::to_string(i) + "]" + (inner == " " ? "" : inner);
    }
  }
  return "";
}

}  // namespace

std::string_view Utf8(PyObject* str, const char* what) {
  if (!PyUnicode_Check(str)) {
    Throw(PyExc_TypeError, std::string(what) + " must be a str, got " + TypeName(str));
  }
  Py_ssize_t n;
  const char* s = PyUnicode_AsUTF8AndSize(str, &n);
  if (s == nullptr) ThrowNotUnicode(str, what);
  return {s, static_cast<size_t>(n)};
}

void ThrowNotUnicode(PyObject* str, const std::string& what) {
  // A str with a lone surrogate (from surrogateescape, or built by hand) has no
  // UTF-8 form; its repr escapes the surrogate, so the message can show it.
  PyErr_Clear();
  std::string shown = "?";
  nb::object r = nb::steal(PyObject_Repr(str));
  if (r.is_valid()) {
    Py_ssize_t len;
    const char* c = PyUnicode_AsUTF8AndSize(r.ptr(), &len);
    if (c != nullptr) shown = std::string(c, static_cast<size_t>(std::min<Py_ssize_t>(len, 80)));
  }
  PyErr_Clear();
  Throw(PyExc_ValueError, what + " " + shown +
                              " is not valid Unicode text (it holds a lone surrogate); runstore "
                              "keeps text as UTF-8");
}

namespace {

// The start of a message about an argument: "log_many: runs[3]: ", "scan: "
// or "".
std::string Where(const char* what, const char* seq, Py_ssize_t index) {
  std::string s;
  if (what != nullptr) s += std::string(what) + ": ";
  if (index >= 0) s += std::string(seq) + "[" + std::to_string(index) + "]: ";
  return s;
}

bool IsBool(PyObject* obj) { return PyBool_Check(obj) || PyArray_IsScalar(obj, Bool); }

// Sets *out to `obj` if it is an integer: an int, or an object with __index__
// (numpy integers), but not a bool. Returns false for anything else. Raises
// OverflowError ("<where><kind> N does not fit a 64-bit signed integer")
// outside int64; `where` is called only then.
template <typename WhereFn>
bool IntegerValue(PyObject* obj, const char* kind, WhereFn where, int64_t* out) {
  if (IsBool(obj) || !(PyLong_Check(obj) || PyIndex_Check(obj))) return false;
  nb::object index;
  if (!PyLong_Check(obj)) {
    index = nb::steal(PyNumber_Index(obj));
    if (!index.is_valid()) throw nb::python_error();
    obj = index.ptr();
  }
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
  if (overflow != 0) {
    Throw(PyExc_OverflowError, where() + kind + " " + nb::str(nb::handle(obj)).c_str() +
                                   " does not fit a 64-bit signed integer");
  }
  if (v == -1 && PyErr_Occurred()) throw nb::python_error();
  *out = static_cast<int64_t>(v);
  return true;
}

// A 1-d numpy array of integers as a C-contiguous int64 array; TypeError for
// any other dtype (bool included), OverflowError for a uint64 beyond int64.
// `kind` and `kinds` name an element and the elements ("step", "steps").
nb::object Int64Array(PyObject* obj, const char* what, const char* kind, const char* kinds) {
  RefuseMasked(obj, Where(what, nullptr, -1) + kinds, "give only the unmasked ones");
  auto* arr = reinterpret_cast<PyArrayObject*>(obj);
  PyArray_Descr* d = PyArray_DESCR(arr);
  if (d->kind != 'i' && d->kind != 'u') {
    Throw(PyExc_TypeError,
          Where(what, nullptr, -1) + kinds + " must be ints, got an array of " + DescrName(d));
  }
  nb::object out;
  if (d->kind == 'u' && PyDataType_ELSIZE(d) == 8) {
    nb::object u = nb::steal(PyArray_FromAny(obj, PyArray_DescrFromType(NPY_UINT64), 1, 1,
                                             NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED, nullptr));
    if (!u.is_valid()) throw nb::python_error();
    auto* a = reinterpret_cast<PyArrayObject*>(u.ptr());
    const auto* data = static_cast<const uint64_t*>(PyArray_DATA(a));
    for (npy_intp i = 0; i < PyArray_DIM(a, 0); ++i) {
      if (data[i] > static_cast<uint64_t>(INT64_MAX)) {
        Throw(PyExc_OverflowError, Where(what, kinds, i) + kind + " " + std::to_string(data[i]) +
                                       " does not fit a 64-bit signed integer");
      }
    }
  }
  out = nb::steal(PyArray_FromAny(obj, PyArray_DescrFromType(NPY_INT64), 1, 1,
                                  NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_FORCECAST,
                                  nullptr));
  if (!out.is_valid()) throw nb::python_error();
  return out;
}

}  // namespace

RunRef ToRunRef(PyObject* obj, const char* what, Py_ssize_t index) {
  if (PyUnicode_Check(obj)) return RunRef(Utf8(obj, "run id"));
  auto where = [&] { return Where(what, "runs", index); };
  if (PyArray_Check(obj)) RefuseMasked(obj, where() + "run id", "give only the unmasked ones");
  int64_t v;
  if (!IntegerValue(obj, "run id", where, &v)) {
    Throw(PyExc_TypeError, where() + "run id must be an int or a str, got " + TypeName(obj));
  }
  return RunRef(v);
}

int64_t ToStep(PyObject* obj, const char* what, Py_ssize_t index) {
  if (PyLong_CheckExact(obj)) {  // the common case, without the checks below
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow == 0 && !(v == -1 && PyErr_Occurred())) return v;
  }
  auto where = [&] { return Where(what, "steps", index); };
  if (PyArray_Check(obj)) RefuseMasked(obj, where() + "step", "give only the unmasked ones");
  int64_t v;
  if (!IntegerValue(obj, "step", where, &v)) {
    Throw(PyExc_TypeError, where() + "step must be an int, got " + TypeName(obj));
  }
  return v;
}

bool IsOneRunId(PyObject* obj) {
  return PyUnicode_Check(obj) || (PyLong_Check(obj) && !IsBool(obj)) ||
         PyArray_IsScalar(obj, Integer);
}

Runs RepeatRun(nb::handle run, size_t n, const char* what) {
  Runs out;
  out.keep = nb::borrow(run);  // a str's bytes, viewed by every RunRef
  out.refs.assign(n, ToRunRef(run.ptr(), what, 0));
  return out;
}

Runs ParseRunList(nb::handle runs, const char* what) {
  if (PyUnicode_Check(runs.ptr()) || PyBytes_Check(runs.ptr())) {
    Throw(PyExc_TypeError,
          std::string("runs must be a list of run ids (int or str), got a single ") +
              Py_TYPE(runs.ptr())->tp_name + "; use runs=[...]");
  }
  return ParseRuns(runs, what);
}

namespace {

// The str run ids of an array of dtype S: each element the UTF-8 bytes of one
// (numpy's fixed-width bytes, whose trailing NUL bytes are padding), viewed
// where they lie.
Runs StrRunsOfBytesArray(PyArrayObject* arr, const char* what) {
  Runs out;
  out.keep = nb::steal(PyArray_FROM_OF(reinterpret_cast<PyObject*>(arr), NPY_ARRAY_C_CONTIGUOUS));
  if (!out.keep.is_valid()) throw nb::python_error();
  auto* a = reinterpret_cast<PyArrayObject*>(out.keep.ptr());
  const auto width = static_cast<size_t>(PyArray_ITEMSIZE(a));
  const auto n = static_cast<Py_ssize_t>(PyArray_DIM(a, 0));
  const char* data = static_cast<const char*>(PyArray_DATA(a));
  out.refs.reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    const char* p = data + static_cast<size_t>(i) * width;
    size_t len = width;
    while (len > 0 && p[len - 1] == '\0') --len;
    const RunRef id(std::string_view(p, len));
    if (Status st = ValidateRunId(id); !st.ok()) {
      Throw(PyExc_ValueError, Where(what, "runs", i) + st.message() +
                                  " (an array of dtype S holds str ids as their UTF-8 bytes)");
    }
    out.refs.push_back(id);
  }
  return out;
}

}  // namespace

Runs ParseRuns(nb::handle runs_obj, const char* what) {
  Runs out;
  PyObject* obj = runs_obj.ptr();
  if (PyArray_Check(obj)) {
    auto* arr = reinterpret_cast<PyArrayObject*>(obj);
    const char kind = PyArray_DESCR(arr)->kind;
    if (PyArray_NDIM(arr) != 1) {
      Throw(PyExc_ValueError, std::string(what) + ": runs must be one-dimensional, got " +
                                  std::to_string(PyArray_NDIM(arr)) + " dimensions");
    }
    if (kind == 'i' || kind == 'u') {
      // Fast path: an integer array, as int64.
      out.keep = Int64Array(obj, what, "run id", "runs");
      auto* a = reinterpret_cast<PyArrayObject*>(out.keep.ptr());
      const auto* data = static_cast<const int64_t*>(PyArray_DATA(a));
      const size_t n = static_cast<size_t>(PyArray_DIM(a, 0));
      out.refs.reserve(n);
      for (size_t i = 0; i < n; ++i) out.refs.emplace_back(data[i]);
      return out;
    }
    if (kind == 'S') return StrRunsOfBytesArray(arr, what);
    if (kind != 'U' && kind != 'O') {
      Throw(PyExc_TypeError, std::string(what) +
                                 ": run ids must be ints or strs, got an array of " +
                                 DescrName(PyArray_DESCR(arr)));
    }
    out.keep = nb::steal(PyObject_CallMethod(runs_obj.ptr(), "tolist", nullptr));
    if (!out.keep.is_valid()) throw nb::python_error();
    out.keep = nb::steal(PySequence_Tuple(out.keep.ptr()));
    if (!out.keep.is_valid()) throw nb::python_error();
  } else {
    // A tuple copy: immutable, so its strings stay alive with the GIL released.
    out.keep = nb::steal(PySequence_Tuple(obj));
    if (!out.keep.is_valid()) {
      nb::python_error err;
      Throw(PyExc_TypeError,
            std::string(what) + ": runs must be a list of run ids (int or str): " + err.what());
    }
  }
  const Py_ssize_t n = PyTuple_GET_SIZE(out.keep.ptr());
  out.refs.reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i)
    out.refs.push_back(ToRunRef(PyTuple_GET_ITEM(out.keep.ptr(), i), what, i));
  return out;
}

Steps ParseSteps(nb::handle steps_obj, size_t n, const char* what) {
  Steps out;
  PyObject* obj = steps_obj.ptr();
  if (obj == Py_None || PyUnicode_Check(obj) || PyBytes_Check(obj) ||
      (!PyArray_Check(obj) && !PySequence_Check(obj))) {
    // One step for every record (None: 0); ToStep refuses what is not an int
    // (a str too, rather than taking it for a sequence of characters).
    out.own.assign(n, obj == Py_None ? 0 : ToStep(obj, what));
    out.data = out.own.data();
    return out;
  }
  nb::object items;
  if (PyArray_Check(obj)) {
    auto* arr = reinterpret_cast<PyArrayObject*>(obj);
    if (PyArray_NDIM(arr) != 1) {
      Throw(PyExc_ValueError, std::string(what) + ": steps must be one-dimensional, got " +
                                  std::to_string(PyArray_NDIM(arr)) + " dimensions");
    }
    const char kind = PyArray_DESCR(arr)->kind;
    if (kind == 'O') {
      items = nb::steal(PyObject_CallMethod(obj, "tolist", nullptr));
      if (!items.is_valid()) throw nb::python_error();
    } else if (PyArray_SIZE(arr) == 0) {
      items = nb::steal(PyTuple_New(0));  // np.array([]) is float64, and holds no float
    } else {
      out.keep = Int64Array(obj, what, "step", "steps");
    }
  } else {
    items = nb::borrow(obj);
  }
  if (items.is_valid()) {
    nb::object tuple = nb::steal(PySequence_Tuple(items.ptr()));
    if (!tuple.is_valid()) throw nb::python_error();
    const Py_ssize_t len = PyTuple_GET_SIZE(tuple.ptr());
    out.own.resize(static_cast<size_t>(len));
    for (Py_ssize_t i = 0; i < len; ++i) {
      out.own[static_cast<size_t>(i)] = ToStep(PyTuple_GET_ITEM(tuple.ptr(), i), what, i);
    }
    out.data = out.own.data();
  } else {
    out.data =
        static_cast<const int64_t*>(PyArray_DATA(reinterpret_cast<PyArrayObject*>(out.keep.ptr())));
  }
  const size_t len =
      out.keep.is_valid()
          ? static_cast<size_t>(PyArray_DIM(reinterpret_cast<PyArrayObject*>(out.keep.ptr()), 0))
          : out.own.size();
  if (len != n) {
    Throw(PyExc_ValueError, std::string(what) + ": " + std::to_string(n) + " runs but " +
                                std::to_string(len) + " steps");
  }
  return out;
}

nb::object RunIdToPython(const RunId& run) {
  if (run.is_int()) return nb::steal(PyLong_FromLongLong(run.int_value()));
  const std::string& s = run.string_value();
  return nb::steal(
      PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "surrogateescape"));
}

void ValueSlot::SetScalar(DType dtype, size_t nbytes) {
  dtype_ = dtype;
  is_scalar_ = true;
  nbytes_ = nbytes;
  data_ = nullptr;
  shape_ = nullptr;
  rank_ = 0;
}

void ValueSlot::Set(PyObject* obj, std::string_view name) {
  keep_.reset();
  PyTypeObject* type = Py_TYPE(obj);
  // The common cases first, by exact type.
  if (type == &PyFloat_Type) {
    scalar_.d = PyFloat_AS_DOUBLE(obj);
    return SetScalar(DType::kFloat64, 8);
  }
  if (type == &PyBool_Type) {
    scalar_.b = obj == Py_True ? 1 : 0;
    return SetScalar(DType::kBool, 1);
  }
  if (type == &PyLong_Type) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow != 0) {
      Throw(PyExc_OverflowError,
            "series '" + std::string(name) + "': int " + nb::str(nb::handle(obj)).c_str() +
                " does not fit int64 (pass a numpy.uint64 for values up to 2**64-1)");
    }
    if (v == -1 && PyErr_Occurred()) throw nb::python_error();
    scalar_.i = v;
    return SetScalar(DType::kInt64, 8);
  }
  // numpy's own float64 and int64 scalars (what np.mean, arr[i] and friends
  // return), by exact type: the generic path below asks numpy for a
  // descriptor, which costs more than the rest of a log call's value.
  if (type == &PyDoubleArrType_Type) {
    scalar_.d = PyArrayScalar_VAL(obj, Double);
    return SetScalar(DType::kFloat64, 8);
  }
  if (type == &PyLongArrType_Type && sizeof(npy_long) == 8) {
    scalar_.i = PyArrayScalar_VAL(obj, Long);
    return SetScalar(DType::kInt64, 8);
  }
  is_scalar_ = false;
  shape_ = nullptr;
  rank_ = 0;
  if (PyUnicode_Check(obj)) {
    Py_ssize_t len;
    const char* c = PyUnicode_AsUTF8AndSize(obj, &len);
    if (c == nullptr) ThrowNotUnicode(obj, "series '" + std::string(name) + "': the str");
    const std::string_view s(c, static_cast<size_t>(len));
    dtype_ = DType::kString;
    data_ = s.data();
    nbytes_ = s.size();
    keep_ = nb::borrow(obj);
    return;
  }
  if (PyBytes_Check(obj)) {
    dtype_ = DType::kBytes;
    data_ = PyBytes_AS_STRING(obj);
    nbytes_ = static_cast<size_t>(PyBytes_GET_SIZE(obj));
    keep_ = nb::borrow(obj);
    return;
  }
  if (PyByteArray_Check(obj)) {
    // A bytearray may be resized by another thread while the GIL is released:
    // append an immutable copy.
    keep_ =
        nb::steal(PyBytes_FromStringAndSize(PyByteArray_AS_STRING(obj), PyByteArray_GET_SIZE(obj)));
    if (!keep_.is_valid()) throw nb::python_error();
    dtype_ = DType::kBytes;
    data_ = PyBytes_AS_STRING(keep_.ptr());
    nbytes_ = static_cast<size_t>(PyBytes_GET_SIZE(keep_.ptr()));
    return;
  }
  if (PyArray_Check(obj)) return SetArray(obj, name);
  if (PyArray_IsScalar(obj, Generic)) return SetNumpyScalar(obj, name);
  if (PyFloat_Check(obj)) {  // subclasses of float
    double d = PyFloat_AsDouble(obj);
    if (d == -1.0 && PyErr_Occurred()) throw nb::python_error();
    scalar_.d = d;
    return SetScalar(DType::kFloat64, 8);
  }
  if (PyLong_Check(obj)) {  // subclasses of int (IntEnum, ...)
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow != 0)
      Throw(PyExc_OverflowError, "series '" + std::string(name) + "': int does not fit int64");
    if (v == -1 && PyErr_Occurred()) throw nb::python_error();
    scalar_.i = v;
    return SetScalar(DType::kInt64, 8);
  }
  if (obj == Py_None) {
    Throw(PyExc_TypeError,
          "series '" + std::string(name) + "': None is not a value (" + kSupported + ")");
  }
  // Lists, tuples, memoryviews and objects with __array__ go through numpy,
  // which would turn a masked element inside a list into data.
  if (PyList_Check(obj) || PyTuple_Check(obj)) {
    const std::string at = FindMasked(obj, 1);
    if (!at.empty()) {
      Throw(PyExc_TypeError, "series '" + std::string(name) + "': element " + at +
                                 " is masked (numpy.ma): runstore stores no mask (" + kMaskAdvice +
                                 ")");
    }
  }
  PyObject* arr = PyArray_FromAny(obj, nullptr, 0, 0, 0, nullptr);
  if (arr == nullptr) {
    nb::python_error err;
    Throw(PyExc_TypeError, "series '" + std::string(name) + "': cannot convert " + TypeName(obj) +
                               " to an array: " + err.what());
  }
  nb::object holder = nb::steal(arr);
  if (PyArray_DESCR(reinterpret_cast<PyArrayObject*>(arr))->kind == 'O') {
    Throw(PyExc_TypeError, "series '" + std::string(name) + "': values of type " + TypeName(obj) +
                               " are not supported (" + kSupported + ")");
  }
  SetArray(arr, name);
}

void ValueSlot::SetNumpyScalar(PyObject* obj, std::string_view name) {
  nb::object descr_holder = nb::steal(reinterpret_cast<PyObject*>(PyArray_DescrFromScalar(obj)));
  if (!descr_holder.is_valid()) throw nb::python_error();
  auto* d = reinterpret_cast<PyArray_Descr*>(descr_holder.ptr());
  DType dtype;
  if (!DTypeFromDescr(d, &dtype)) ThrowUnsupportedDType(name, d);
  PyArray_ScalarAsCtype(obj, scalar_.raw);
  SetScalar(dtype, static_cast<size_t>(PyDataType_ELSIZE(d)));
}

void ValueSlot::SetArray(PyObject* obj, std::string_view name) {
  // Subclasses of ndarray are stored as their data (numpy.matrix, numpy.memmap),
  // a masked array only if its mask hides nothing.
  RefuseMasked(obj, "series '" + std::string(name) + "'");
  auto* arr = reinterpret_cast<PyArrayObject*>(obj);
  PyArray_Descr* d = PyArray_DESCR(arr);
  DType dtype;
  if (!DTypeFromDescr(d, &dtype)) {
    if (PyArray_NDIM(arr) == 0 && (d->kind == 'U' || d->kind == 'S')) {
      // A 0-d string array: its one element as str / bytes.
      nb::object item = nb::steal(PyArray_ToScalar(PyArray_DATA(arr), arr));
      if (!item.is_valid()) throw nb::python_error();
      return Set(item.ptr(), name);
    }
    if (d->kind == 'U' || d->kind == 'S' || d->kind == 'O') {
      Throw(PyExc_TypeError, "series '" + std::string(name) + "': numpy arrays of dtype " +
                                 DescrName(d) +
                                 " are not supported: a str or bytes value is one record (use "
                                 "log_many or a loop for many strings)");
    }
    ThrowUnsupportedDType(name, d);
  }
  nb::object keep = nb::borrow(obj);
  if (!PyArray_ISNBO(d->byteorder)) {
    PyArray_Descr* native = PyArray_DescrNewByteorder(d, NPY_NATIVE);
    if (native == nullptr) throw nb::python_error();
    // PyArray_FromAny steals `native`.
    keep = nb::steal(PyArray_FromAny(obj, native, 0, 0, NPY_ARRAY_C_CONTIGUOUS, nullptr));
    if (!keep.is_valid()) throw nb::python_error();
  } else if (!PyArray_IS_C_CONTIGUOUS(arr)) {
    keep = nb::steal(PyArray_NewCopy(arr, NPY_CORDER));
    if (!keep.is_valid()) throw nb::python_error();
  }
  auto* c = reinterpret_cast<PyArrayObject*>(keep.ptr());
  dtype_ = dtype;
  data_ = PyArray_DATA(c);
  nbytes_ = static_cast<size_t>(PyArray_NBYTES(c));
  shape_ = reinterpret_cast<const int64_t*>(PyArray_DIMS(c));
  rank_ = PyArray_NDIM(c);
  keep_ = std::move(keep);
}

int NumpyTypeNum(DType dtype) {
  switch (dtype) {
    case DType::kBool:
      return NPY_BOOL;
    case DType::kInt8:
      return NPY_INT8;
    case DType::kInt16:
      return NPY_INT16;
    case DType::kInt32:
      return NPY_INT32;
    case DType::kInt64:
      return NPY_INT64;
    case DType::kUInt8:
      return NPY_UINT8;
    case DType::kUInt16:
      return NPY_UINT16;
    case DType::kUInt32:
      return NPY_UINT32;
    case DType::kUInt64:
      return NPY_UINT64;
    case DType::kFloat32:
      return NPY_FLOAT32;
    case DType::kFloat64:
      return NPY_FLOAT64;
    case DType::kString:
    case DType::kBytes:
      return NPY_OBJECT;
  }
  return NPY_OBJECT;
}

nb::object MakeArrayView(const Value& v) {
  npy_intp dims[kMaxRank + 1];  // + 1: scan batches add the record axis
  const int rank = v.rank();
  if (rank > kMaxRank + 1)
    Throw(PyExc_ValueError, "rank " + std::to_string(rank) + " exceeds the limit");
  for (int i = 0; i < rank; ++i) dims[i] = v.shape()[i];
  PyArray_Descr* descr = PyArray_DescrFromType(NumpyTypeNum(v.dtype()));  // stolen below
  PyObject* arr;
  if (v.data() == nullptr || v.nbytes() == 0) {
    arr = PyArray_Empty(rank, dims, descr, 0);
    if (arr == nullptr) throw nb::python_error();
    PyArray_CLEARFLAGS(reinterpret_cast<PyArrayObject*>(arr), NPY_ARRAY_WRITEABLE);
    return nb::steal(arr);
  }
  // No NPY_ARRAY_WRITEABLE in the flags: the view is read-only.
  arr = PyArray_NewFromDescr(&PyArray_Type, descr, rank, dims, nullptr, const_cast<char*>(v.data()),
                             0, nullptr);
  if (arr == nullptr) throw nb::python_error();
  nb::object result = nb::steal(arr);
  nb::object owner = nb::cast(ArrayOwner(v), nb::rv_policy::move);
  if (PyArray_SetBaseObject(reinterpret_cast<PyArrayObject*>(arr), owner.release().ptr()) != 0) {
    throw nb::python_error();
  }
  return result;
}

nb::object ValueToPython(const Value& v) {
  if (v.dtype() == DType::kString) {
    return nb::steal(
        PyUnicode_DecodeUTF8(v.data(), static_cast<Py_ssize_t>(v.nbytes()), "surrogateescape"));
  }
  if (v.dtype() == DType::kBytes) {
    return nb::steal(PyBytes_FromStringAndSize(v.data(), static_cast<Py_ssize_t>(v.nbytes())));
  }
  return MakeArrayView(v);
}

DType ParseDTypeSpec(nb::handle spec) {
  PyObject* obj = spec.ptr();
  if (PyUnicode_Check(obj)) {
    std::string_view s = Utf8(obj, "dtype");
    if (s == "string" || s == "str") return DType::kString;
    if (s == "bytes") return DType::kBytes;
    Result<DType> r = ParseDType(s);
    if (r.ok()) return *r;
  }
  if (obj == reinterpret_cast<PyObject*>(&PyUnicode_Type)) return DType::kString;
  if (obj == reinterpret_cast<PyObject*>(&PyBytes_Type)) return DType::kBytes;
  PyArray_Descr* d = nullptr;
  if (!PyArray_DescrConverter(obj, &d)) {
    nb::python_error err;
    Throw(PyExc_TypeError, std::string("not a dtype: ") + err.what());
  }
  nb::object holder = nb::steal(reinterpret_cast<PyObject*>(d));
  if (d->kind == 'U') return DType::kString;
  if (d->kind == 'S') return DType::kBytes;
  DType dtype;
  if (!DTypeFromDescr(d, &dtype)) {
    Throw(PyExc_TypeError, "dtype " + DescrName(d) + " is not supported (" + kSupported + ")");
  }
  return dtype;
}

// -- csv_rows: numpy columns -> CSV text ---------------------------------------------------
//
// The hot loop of Store.export_tar: formatting numbers as text costs far more
// than reading them, so it is done here rather than in Python. The choices
// are the library's (runstore/text.h, shared with the CLI): integers exactly, floats in the
// shortest form that reads back to the same float32/float64, nan / inf /
// -inf, bool as true / false, strings quoted per RFC 4180 when they hold a
// comma, a quote, CR or LF, bytes as standard base64.
namespace {

using text::AppendCsvCell;

void AppendBase64Cell(std::string* out, const unsigned char* p, size_t n) {
  text::AppendBase64(out, std::string_view(reinterpret_cast<const char*>(p), n));
}

void AppendElementCell(std::string* out, DType dtype, const char* p) {
  text::AppendElement(out, dtype, p, text::OutFormat::kCsv);
}

// `text_cells`: str and bytes cells as text cells that no spreadsheet takes for a formula
// (runstore/csv.h: a single quote before a text that would begin with = + - @ TAB CR).
void AppendObjectCell(std::string* out, PyObject* o, size_t column, bool text_cells) {
  if (o == Py_None) return;
  if (PyUnicode_Check(o)) {
    Py_ssize_t n;
    const char* s = PyUnicode_AsUTF8AndSize(o, &n);
    if (s == nullptr) throw nb::python_error();
    if (text_cells) {
      text::AppendCsvTextCell(out, {s, static_cast<size_t>(n)});
    } else {
      AppendCsvCell(out, {s, static_cast<size_t>(n)});
    }
  } else if (PyBytes_Check(o) && text_cells) {
    std::string b64;
    AppendBase64Cell(&b64, reinterpret_cast<const unsigned char*>(PyBytes_AS_STRING(o)),
                     static_cast<size_t>(PyBytes_GET_SIZE(o)));
    text::AppendCsvTextCell(out, b64);
  } else if (PyBool_Check(o)) {
    out->append(o == Py_True ? "true" : "false");
  } else if (PyLong_Check(o)) {
    nb::object t = nb::steal(PyObject_Str(o));
    if (!t.is_valid()) throw nb::python_error();
    out->append(Utf8(t.ptr(), "int"));
  } else if (PyFloat_Check(o)) {
    const double d = PyFloat_AS_DOUBLE(o);
    AppendElementCell(out, DType::kFloat64, reinterpret_cast<const char*>(&d));
  } else if (PyBytes_Check(o)) {
    AppendBase64Cell(out, reinterpret_cast<const unsigned char*>(PyBytes_AS_STRING(o)),
                     static_cast<size_t>(PyBytes_GET_SIZE(o)));
  } else {
    Throw(PyExc_TypeError, "csv_rows: column " + std::to_string(column) + " holds a " +
                               TypeName(o) +
                               " (object columns hold str, bytes, int, float, bool or None)");
  }
}

struct CsvColumn {
  nb::object array;  // C-contiguous, aligned, native byte order
  bool is_object = false;
  DType dtype = DType::kFloat64;
  size_t cells = 1;  // cells per row
  size_t row_bytes = 0;
  const char* data = nullptr;
  nb::object missing;  // bool array of n, or invalid
  const npy_bool* missing_data = nullptr;
};

// Text handed to `write` at a time when CsvRows streams.
constexpr size_t kCsvPieceBytes = 1 << 20;

nb::object CsvRows(nb::handle columns_obj, nb::handle missing_obj, nb::handle write,
                   nb::handle text_cells_obj) {
  nb::object columns = nb::steal(PySequence_Tuple(columns_obj.ptr()));
  if (!columns.is_valid()) throw nb::python_error();
  nb::object missing = nb::steal(PySequence_Tuple(missing_obj.ptr()));
  if (!missing.is_valid()) throw nb::python_error();
  const Py_ssize_t ncols = PyTuple_GET_SIZE(columns.ptr());
  if (!write.is_none() && !PyCallable_Check(write.ptr())) {
    Throw(PyExc_TypeError, "csv_rows: write must be callable (e.g. a file's write method)");
  }
  if (PyTuple_GET_SIZE(missing.ptr()) != ncols) {
    Throw(PyExc_ValueError, "csv_rows: one missing mask (or None) per column is needed");
  }
  // text_cells: one bool for every column, or one per column.
  std::vector<bool> text_cells(static_cast<size_t>(ncols), false);
  if (PyBool_Check(text_cells_obj.ptr())) {
    text_cells.assign(static_cast<size_t>(ncols), text_cells_obj.ptr() == Py_True);
  } else {
    nb::object flags = nb::steal(PySequence_Tuple(text_cells_obj.ptr()));
    if (!flags.is_valid()) throw nb::python_error();
    if (PyTuple_GET_SIZE(flags.ptr()) != ncols) {
      Throw(PyExc_ValueError, "csv_rows: text_cells is a bool or one bool per column");
    }
    for (Py_ssize_t c = 0; c < ncols; ++c) {
      text_cells[static_cast<size_t>(c)] = PyObject_IsTrue(PyTuple_GET_ITEM(flags.ptr(), c)) == 1;
    }
  }
  std::vector<CsvColumn> cols(static_cast<size_t>(ncols));
  npy_intp rows = -1;
  for (Py_ssize_t c = 0; c < ncols; ++c) {
    CsvColumn& col = cols[c];
    PyObject* a = PyArray_FromAny(PyTuple_GET_ITEM(columns.ptr(), c), nullptr, 1, 0,
                                  NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED, nullptr);
    if (a == nullptr) throw nb::python_error();
    col.array = nb::steal(a);
    auto* arr = reinterpret_cast<PyArrayObject*>(a);
    PyArray_Descr* d = PyArray_DESCR(arr);
    if (rows < 0) rows = PyArray_DIM(arr, 0);
    if (PyArray_DIM(arr, 0) != rows) {
      Throw(PyExc_ValueError, "csv_rows: columns differ in length");
    }
    col.data = static_cast<const char*>(PyArray_DATA(arr));
    for (int k = 1; k < PyArray_NDIM(arr); ++k)
      col.cells *= static_cast<size_t>(PyArray_DIM(arr, k));
    if (d->kind == 'O') {
      if (PyArray_NDIM(arr) != 1) Throw(PyExc_ValueError, "csv_rows: object columns must be 1-d");
      col.is_object = true;
    } else {
      if (!PyArray_ISNBO(d->byteorder) || !DTypeFromDescr(d, &col.dtype)) {
        Throw(PyExc_TypeError,
              "csv_rows: column " + std::to_string(c) + " has dtype " + DescrName(d));
      }
      col.row_bytes = col.cells * static_cast<size_t>(PyDataType_ELSIZE(d));
    }
    PyObject* m = PyTuple_GET_ITEM(missing.ptr(), c);
    if (m != Py_None) {
      PyObject* ma = PyArray_FromAny(
          m, PyArray_DescrFromType(NPY_BOOL), 1, 1,
          NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_FORCECAST, nullptr);
      if (ma == nullptr) throw nb::python_error();
      col.missing = nb::steal(ma);
      if (PyArray_DIM(reinterpret_cast<PyArrayObject*>(ma), 0) != rows) {
        Throw(PyExc_ValueError, "csv_rows: a missing mask differs in length from its column");
      }
      col.missing_data =
          static_cast<const npy_bool*>(PyArray_DATA(reinterpret_cast<PyArrayObject*>(ma)));
    }
  }
  const bool streaming = !write.is_none();
  uint64_t written = 0;
  std::string out;
  // Hands the text so far to `write` (streaming) and starts again.
  auto flush = [&] {
    nb::object piece =
        nb::steal(PyBytes_FromStringAndSize(out.data(), static_cast<Py_ssize_t>(out.size())));
    if (!piece.is_valid()) throw nb::python_error();
    written += out.size();
    out.clear();
    write(piece);
  };
  if (streaming) out.reserve(kCsvPieceBytes + (64 << 10));
  for (npy_intp r = 0; r < rows; ++r) {
    if (r == 1 && !streaming) {
      // Sized from the first row (plus a margin), so that the text is not
      // reallocated, and with it copied, as it grows.
      out.reserve(out.size() * static_cast<size_t>(rows) * 5 / 4 + 64);
    }
    if (streaming && out.size() >= kCsvPieceBytes) flush();
    bool first = true;
    for (size_t c = 0; c < cols.size(); ++c) {
      const CsvColumn& col = cols[c];
      const bool absent = col.missing_data != nullptr && col.missing_data[r];
      if (col.is_object) {
        if (!first) out.push_back(',');
        first = false;
        if (!absent) {
          PyObject* o = reinterpret_cast<PyObject* const*>(col.data)[r];
          AppendObjectCell(&out, o, c, text_cells[c]);
        }
        continue;
      }
      const size_t elsize = col.cells ? col.row_bytes / col.cells : 0;
      const char* p = col.data + static_cast<size_t>(r) * col.row_bytes;
      for (size_t e = 0; e < col.cells; ++e) {
        if (!first) out.push_back(',');
        first = false;
        if (!absent) AppendElementCell(&out, col.dtype, p + e * elsize);
      }
    }
    out.push_back('\n');
  }
  if (!streaming) return nb::bytes(out.data(), out.size());
  if (!out.empty()) flush();
  return nb::int_(written);
}

}  // namespace

void BindConvert(nb::module_& m) {
  m.def(
      "check_series_name",
      [](nb::handle name) { Check(ValidateSeriesName(Utf8(name.ptr(), "series name"))); },
      nb::arg("name"), nb::sig("def check_series_name(name: str) -> None"),
      "Raises ValueError if a writer would refuse ``name`` as a series name (empty, longer "
      "than 255 bytes, with a NUL, not Unicode, or starting with '~'), saying why; for front "
      "ends that check names before any record is written (private).");
  m.def("csv_rows", &CsvRows, nb::arg("columns"), nb::arg("missing"), nb::arg("write") = nb::none(),
        nb::kw_only(), nb::arg("text_cells") = false,
        nb::sig("def csv_rows(columns: typing.Sequence[numpy.ndarray], "
                "missing: typing.Sequence[numpy.ndarray | None], "
                "write: typing.Callable[[bytes], object] | None = None, *, "
                "text_cells: bool | typing.Sequence[bool] = False) -> bytes | int"),
        "CSV lines (UTF-8, each ending in \\n) of equal-length columns, side by side: a numeric "
        "column of shape (n, *shape) gives prod(shape) cells per row (C order), a 1-d object "
        "column one cell of str (RFC 4180 quoting), bytes (base64), int, float or bool, None "
        "giving an empty cell. missing[i] (None or a bool array of n) empties every cell of "
        "column i in the rows where it is True. Floats are written in the shortest form that "
        "reads back exactly; NaN and infinities as nan, inf, -inf; bool as true / false. With "
        "``write`` (e.g. a file's write method), the text is passed to it in pieces of about 1 MiB "
        "and the number of bytes is returned, so that it is never held whole. With "
        "``text_cells`` (for every column, or a bool per column), a str or bytes cell that a "
        "spreadsheet would take for a formula (after "
        "its leading single quotes it begins with = + - @ TAB or CR) gets one more single quote "
        "first (runstore/csv.h). Used by Store.export_tar (private).");
  nb::class_<ArrayOwner>(
      m, "ArrayOwner",
      "Keeps the bytes of arrays returned by runstore alive: the base of every "
      "array that Store.get and Store.scan return. For uncompressed data it holds "
      "the memory mapping of the segment file, which stays valid after the Store "
      "is gone.")
      .def_prop_ro(
          "zero_copy", [](const ArrayOwner& o) { return o.value.zero_copy(); },
          "True if the bytes are a view into a memory-mapped segment file.")
      .def_prop_ro(
          "address",
          [](const ArrayOwner& o) { return reinterpret_cast<uintptr_t>(o.value.data()); },
          "Address of the first byte (for tests and debugging).")
      .def_prop_ro(
          "nbytes", [](const ArrayOwner& o) { return o.value.nbytes(); }, "Number of bytes viewed.")
      .def_prop_ro(
          "dtype", [](const ArrayOwner& o) { return std::string(DTypeName(o.value.dtype())); },
          "runstore dtype name of the bytes.")
      .def("__repr__", [](const ArrayOwner& o) {
        return "<runstore.ArrayOwner " + std::string(DTypeName(o.value.dtype())) + " " +
               std::to_string(o.value.nbytes()) + " bytes" +
               (o.value.zero_copy() ? ", zero-copy>" : ">");
      });
}

nb::object NewArray(int type_num, const std::vector<int64_t>& dims) {
  PyObject* a = PyArray_SimpleNew(static_cast<int>(dims.size()), const_cast<npy_intp*>(dims.data()),
                                  type_num);
  if (a == nullptr) throw nb::python_error();
  return nb::steal(a);
}

char* ArrayData(const nb::object& a) {
  return static_cast<char*>(PyArray_DATA(reinterpret_cast<PyArrayObject*>(a.ptr())));
}

void MakeReadOnly(const nb::object& a) {
  PyArray_CLEARFLAGS(reinterpret_cast<PyArrayObject*>(a.ptr()), NPY_ARRAY_WRITEABLE);
}

}  // namespace runstore::python
