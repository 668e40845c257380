// The step tape of a Python writer: see step_tape.h and
// docs/design.md#step-tape.
#include "step_tape.h"

#include <chrono>
#include <cstring>
#include <utility>

namespace runstore::python {
namespace {

// An exact int that fits int64 (bool is not an exact int).
bool ExactInt64(PyObject* obj, int64_t* out) {
  if (!PyLong_CheckExact(obj)) return false;
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
  if (overflow != 0) return false;
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  *out = v;
  return true;
}

// The str's UTF-8 bytes (cached in the object after the first call), or
// false for a str that has none (lone surrogates).
bool Utf8Of(PyObject* str, std::string_view* out) {
  Py_ssize_t n;
  const char* s = PyUnicode_AsUTF8AndSize(str, &n);
  if (s == nullptr) {
    PyErr_Clear();
    return false;
  }
  *out = std::string_view(s, static_cast<size_t>(n));
  return true;
}

}  // namespace

Status StepTape::Batch::AppendTo(Writer* w) const {
  const size_t m = runs.size();
  if (m == 0) return Status::OK();
  w->HoldAutoCommits();
  struct Release {
    Writer* w;
    ~Release() { w->ReleaseAutoCommits(); }
  } release{w};
  const int64_t shape[1] = {static_cast<int64_t>(m)};
  for (size_t k = 0; k < names.size(); ++k) {
    const ValueRef v{dtypes[k], shape, &values[k * kCapacity], m * 8};
    RUNSTORE_RETURN_IF_ERROR(w->AppendBatch(runs, names[k], steps, v));
  }
  return times.empty() ? Status::OK() : w->AppendTimes(runs, steps, times);
}

void StepTape::Arm(PyObject* run, PyObject* kwnames, Py_ssize_t step_at, PyObject* const* values,
                   size_t n) {
  armed_ = false;
  // Arming after another thread filled the tape meanwhile would give its
  // records the new shape's names.
  if (!enabled_ || count_ != 0 || kwnames == nullptr || n == 0 || n > kMaxValues) return;
  run_str_.reset();
  run_bytes_ = {};
  if (PyUnicode_CheckExact(run)) {
    if (!Utf8Of(run, &run_bytes_)) return;
    run_str_ = nb::borrow(run);
  } else if (int64_t unused; !ExactInt64(run, &unused)) {
    return;
  }
  // Built in place (a loop that alternates two call sites arms at every
  // call): the names are short strings, the vectors keep their capacity.
  dtypes_.clear();
  names_.clear();
  const Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t j = 0; j < nkw; ++j) {
    if (j == step_at) continue;
    PyObject* v = values[j];
    if (PyFloat_CheckExact(v)) {
      dtypes_.push_back(DType::kFloat64);
    } else if (int64_t unused; ExactInt64(v, &unused)) {
      dtypes_.push_back(DType::kInt64);
    } else {
      return;
    }
    std::string_view name;
    if (!Utf8Of(PyTuple_GET_ITEM(kwnames, j), &name)) return;
    names_.emplace_back(name);
  }
  if (names_.size() != n) return;
  if (kwnames != kwnames_.ptr()) kwnames_ = nb::borrow(kwnames);
  step_at_ = step_at;
  n_ = n;
  values_.resize(n * kCapacity);
  runs_.reserve(kCapacity);
  steps_.reserve(kCapacity);
  armed_ = true;
}

bool StepTape::Add(PyObject* run, PyObject* step, PyObject* kwnames, Py_ssize_t step_at,
                   PyObject* const* values, size_t n) {
  if (!armed_ || n != n_ || step_at != step_at_ || kwnames == nullptr) return false;
  if (kwnames != kwnames_.ptr()) {
    // Another call site with the same keywords: its tuple holds the same
    // interned names.
    const Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
    if (nkw != PyTuple_GET_SIZE(kwnames_.ptr())) return false;
    for (Py_ssize_t j = 0; j < nkw; ++j) {
      if (PyTuple_GET_ITEM(kwnames, j) != PyTuple_GET_ITEM(kwnames_.ptr(), j)) return false;
    }
  }
  RunRef r(int64_t{0});
  if (int64_t i; ExactInt64(run, &i)) {
    r = RunRef(i);
  } else if (run_str_.is_valid() && run == run_str_.ptr()) {
    r = RunRef(run_bytes_);
  } else if (std::string_view s; run_str_.is_valid() && PyUnicode_CheckExact(run) &&
                                 Utf8Of(run, &s) && s == run_bytes_) {
    r = RunRef(run_bytes_);  // the armed id's bytes, which run_str_ keeps alive
  } else {
    return false;
  }
  int64_t s = 0;
  if (step != nullptr && !ExactInt64(step, &s)) return false;
  const Py_ssize_t nkw = static_cast<Py_ssize_t>(n) + (step_at >= 0 ? 1 : 0);
  size_t k = 0;
  for (Py_ssize_t j = 0; j < nkw; ++j) {
    if (j == step_at) continue;
    PyObject* v = values[j];
    uint64_t bits;
    if (dtypes_[k] == DType::kFloat64) {
      if (!PyFloat_CheckExact(v)) return false;
      const double d = PyFloat_AS_DOUBLE(v);
      std::memcpy(&bits, &d, 8);
    } else {
      int64_t i;
      if (!ExactInt64(v, &i)) return false;
      std::memcpy(&bits, &i, 8);
    }
    // Written in place before the record counts: a later value that does
    // not fit leaves nothing behind.
    values_[k * kCapacity + count_] = bits;
    ++k;
  }
  runs_.push_back(r);
  steps_.push_back(s);
  if (record_time_) {
    times_.push_back(
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  }
  ++count_;
  return true;
}

StepTape::Batch StepTape::Take() {
  Batch b;
  b.names = names_;
  b.dtypes = dtypes_;
  b.run_str = run_str_;
  b.runs.swap(runs_);
  b.steps.swap(steps_);
  b.values.swap(values_);
  b.times.swap(times_);
  count_ = 0;
  if (spare_runs_.capacity() != 0) {
    runs_.swap(spare_runs_);
    steps_.swap(spare_steps_);
    values_.swap(spare_values_);
    times_.swap(spare_times_);
  }
  runs_.reserve(kCapacity);
  steps_.reserve(kCapacity);
  if (record_time_) times_.reserve(kCapacity);
  values_.resize(n_ * kCapacity);
  return b;
}

void StepTape::Recycle(Batch&& b) {
  if (spare_runs_.capacity() != 0) return;
  b.runs.clear();
  b.steps.clear();
  b.times.clear();
  spare_runs_.swap(b.runs);
  spare_steps_.swap(b.steps);
  spare_values_.swap(b.values);
  spare_times_.swap(b.times);
}

}  // namespace runstore::python
