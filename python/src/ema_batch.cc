// EmaBatch: EMA workbench experiments kept as EMA hands them to runstore.ema's
// callback (python/runstore/integrations/ema.py), and the columns of a batch of them. The
// callback keeps each experiment (a reference to it and to its outcomes: one
// C++ call) and, a batch at a time, columns() reads them all, derives their
// ids and builds the columns that one ExperimentWriter.record_many writes: a
// tight loop over a thousand experiments rather than a row of Python dicts
// and a content hash per experiment.
//
// columns() builds exactly what the callback's Python path (ema.py: _values,
// _plain, experiment_id, _write_rows) records, or returns None and the
// Python path writes the batch. It takes a batch whose experiments' scenario
// and policy keep their values in a `.data` dict, with no key in both and
// none named model, scenario or policy; whose values, names and scalar
// outcomes are bool, int (within int64), float or str, or numpy scalars that
// .item() makes such, of one kind per column; whose other outcomes are numpy
// arrays of a dtype runstore stores, of one dtype and shape per outcome; and
// whose experiments all have the same keys in the same order and the same
// outcomes. Anything else (array parameters to flatten, None, a missing
// outcome, kinds or shapes that change) leaves the batch to the Python path.
//
// The columns are what the Python path hands the writer: numbers in the
// array numpy.asarray makes of a list of them, outcome arrays stacked along a
// new first axis, str columns lists of the same str objects.
// python/tests/test_ema_batch.py compares the two paths on the same
// experiments. Needs the GIL.
#include <Python.h>
#include <nanobind/nanobind.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bindings.h"
#include "experiment_id.h"
#include "numpy_api.h"

namespace runstore::python {
namespace {

using namespace nb::literals;

// The kinds of values a column holds (one kind a column).
enum class Kind : uint8_t { kBool, kInt, kFloat, kStr };

// One parameter value, name or scalar outcome as the Python path stores it.
struct Scalar {
  Kind kind = Kind::kBool;
  int64_t i = 0;          // kBool (0 or 1), kInt
  double d = 0;           // kFloat
  PyObject* s = nullptr;  // kStr: an exact str, borrowed
  std::string_view utf8;  // kStr
};

template <typename T>
bool SetInt(T v, Scalar* out) {
  out->kind = Kind::kInt;
  out->i = static_cast<int64_t>(v);
  return true;
}

// `v` as the Python path stores it: an exact bool, int within int64, float
// or str; numpy's float64, int64 and bool (numpy.asarray makes the same
// array of them as of their .item()); with `numpy_scalars` (parameters and
// names, which _plain turns into their .item()) also numpy's other integers
// but uint64, and float32. False for anything else.
bool ReadScalar(PyObject* v, bool numpy_scalars, Scalar* out) {
  PyTypeObject* t = Py_TYPE(v);
  if (t == &PyFloat_Type) {
    out->kind = Kind::kFloat;
    out->d = PyFloat_AS_DOUBLE(v);
    return true;
  }
  if (t == &PyBool_Type) {
    out->kind = Kind::kBool;
    out->i = v == Py_True;
    return true;
  }
  if (t == &PyLong_Type) {
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow != 0 || (x == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return false;
    }
    return SetInt(x, out);
  }
  if (t == &PyUnicode_Type) {
    out->kind = Kind::kStr;
    out->s = v;
    return Utf8Bytes(v, &out->utf8);
  }
  // numpy's float64 and int64 first: what EMA's samplers give.
  if (t == &PyDoubleArrType_Type) {
    out->kind = Kind::kFloat;
    out->d = PyArrayScalar_VAL(v, Double);
    return true;
  }
  if (t == &PyLongArrType_Type && sizeof(npy_long) == 8) {
    return SetInt(PyArrayScalar_VAL(v, Long), out);
  }
  if (t == &PyBoolArrType_Type) {
    out->kind = Kind::kBool;
    out->i = PyArrayScalar_VAL(v, Bool) != 0;
    return true;
  }
  if (!numpy_scalars) return false;
  if (t == &PyFloatArrType_Type) {
    out->kind = Kind::kFloat;
    out->d = PyArrayScalar_VAL(v, Float);  // as float(np.float32): widened exactly
    return true;
  }
  if (t == &PyByteArrType_Type) return SetInt(PyArrayScalar_VAL(v, Byte), out);
  if (t == &PyUByteArrType_Type) return SetInt(PyArrayScalar_VAL(v, UByte), out);
  if (t == &PyShortArrType_Type) return SetInt(PyArrayScalar_VAL(v, Short), out);
  if (t == &PyUShortArrType_Type) return SetInt(PyArrayScalar_VAL(v, UShort), out);
  if (t == &PyIntArrType_Type && sizeof(npy_int) == 4) {
    return SetInt(PyArrayScalar_VAL(v, Int), out);
  }
  if (t == &PyUIntArrType_Type && sizeof(npy_uint) == 4) {
    return SetInt(PyArrayScalar_VAL(v, UInt), out);
  }
  if (t == &PyLongLongArrType_Type) return SetInt(PyArrayScalar_VAL(v, LongLong), out);
  return false;
}

// The canonical encoder's text of a value.
bool AppendJson(std::string* text, const Scalar& v) {
  switch (v.kind) {
    case Kind::kBool:
      text->append(v.i ? "true" : "false");
      return true;
    case Kind::kInt:
      AppendJsonInt(text, v.i);
      return true;
    case Kind::kFloat:
      return AppendJsonFloat(text, v.d);
    case Kind::kStr:
      AppendJsonString(text, v.utf8);
      return true;
  }
  return false;
}

// A new 1-d numpy array of n values of type `type_num`, filled by fill(data).
template <typename T, typename Fill>
nb::object NewArray(int type_num, size_t n, Fill&& fill) {
  npy_intp dims[1] = {static_cast<npy_intp>(n)};
  nb::object arr = nb::steal(PyArray_SimpleNew(1, dims, type_num));
  if (!arr.is_valid()) throw nb::python_error();
  fill(static_cast<T*>(PyArray_DATA(reinterpret_cast<PyArrayObject*>(arr.ptr()))));
  return arr;
}

// One column of values (parameters, names, scalar outcomes), a value per
// experiment, all of the first one's kind.
class ScalarColumn {
 public:
  explicit ScalarColumn(Kind kind) : kind_(kind) {}

  bool Takes(const Scalar& v) const { return v.kind == kind_; }

  void Push(const Scalar& v) {
    switch (kind_) {
      case Kind::kFloat:
        floats_.push_back(v.d);
        break;
      case Kind::kStr:
        strs_.push_back(nb::borrow(v.s));
        break;
      default:
        ints_.push_back(v.i);
    }
  }

  // What numpy.asarray makes of the list of the values; a list for str.
  nb::object Take() const {
    switch (kind_) {
      case Kind::kFloat:
        return NewArray<double>(NPY_DOUBLE, floats_.size(),
                                [&](double* p) { std::copy(floats_.begin(), floats_.end(), p); });
      case Kind::kInt:
        return NewArray<int64_t>(NPY_INT64, ints_.size(),
                                 [&](int64_t* p) { std::copy(ints_.begin(), ints_.end(), p); });
      case Kind::kBool:
        return NewArray<npy_bool>(NPY_BOOL, ints_.size(), [&](npy_bool* p) {
          for (const int64_t x : ints_) *p++ = x != 0;
        });
      case Kind::kStr:
        break;
    }
    nb::list out;
    for (const nb::object& s : strs_) out.append(s);
    return out;
  }

 private:
  Kind kind_;
  std::vector<double> floats_;
  std::vector<int64_t> ints_;  // kInt; kBool as 0 or 1
  std::vector<nb::object> strs_;
};

// The dtypes of outcome arrays the batch stacks: those runstore stores.
bool StackableArray(PyArrayObject* a) {
  switch (PyArray_TYPE(a)) {
    case NPY_BOOL:
    case NPY_BYTE:
    case NPY_UBYTE:
    case NPY_SHORT:
    case NPY_USHORT:
    case NPY_INT:
    case NPY_UINT:
    case NPY_LONG:
    case NPY_ULONG:
    case NPY_LONGLONG:
    case NPY_ULONGLONG:
    case NPY_FLOAT:
    case NPY_DOUBLE:
      return PyArray_ISNOTSWAPPED(a);
  }
  return false;
}

// One outcome of an experiment as read.
struct OutcomeValue {
  PyObject* obj = nullptr;         // null when the outcome is absent or None
  PyArrayObject* array = nullptr;  // obj, when it is an array
  Scalar scalar;                   // obj, when it is not
};

// One outcome's column: scalars of one kind, or arrays of one dtype and
// shape (borrowed: the batch keeps them while its columns are built).
class OutcomeColumn {
 public:
  explicit OutcomeColumn(const OutcomeValue& first) : scalars_(first.scalar.kind) {
    if (first.array == nullptr) return;
    descr_ = nb::borrow(reinterpret_cast<PyObject*>(PyArray_DESCR(first.array)));
    type_num_ = PyArray_TYPE(first.array);
    shape_.assign(PyArray_DIMS(first.array), PyArray_DIMS(first.array) + PyArray_NDIM(first.array));
    nbytes_ = static_cast<size_t>(PyArray_NBYTES(first.array));
  }

  bool Takes(const OutcomeValue& v) const {
    if (!descr_.is_valid()) return v.array == nullptr && scalars_.Takes(v.scalar);
    return v.array != nullptr && PyArray_TYPE(v.array) == type_num_ &&
           static_cast<size_t>(PyArray_NDIM(v.array)) == shape_.size() &&
           std::equal(shape_.begin(), shape_.end(), PyArray_DIMS(v.array));
  }

  void Push(const OutcomeValue& v) {
    if (descr_.is_valid()) {
      arrays_.push_back(v.array);
    } else {
      scalars_.Push(v.scalar);
    }
  }

  // What numpy.asarray makes of the list of the values: arrays stacked along
  // a new first axis, scalars in an array of their kind.
  nb::object Take() const {
    if (!descr_.is_valid()) return scalars_.Take();
    std::vector<npy_intp> dims{static_cast<npy_intp>(arrays_.size())};
    dims.insert(dims.end(), shape_.begin(), shape_.end());
    auto* d = reinterpret_cast<PyArray_Descr*>(descr_.ptr());
    Py_INCREF(d);  // PyArray_NewFromDescr steals it
    nb::object out = nb::steal(PyArray_NewFromDescr(&PyArray_Type, d, static_cast<int>(dims.size()),
                                                    dims.data(), nullptr, nullptr, 0, nullptr));
    if (!out.is_valid()) throw nb::python_error();
    auto* dst = static_cast<char*>(PyArray_DATA(reinterpret_cast<PyArrayObject*>(out.ptr())));
    for (PyArrayObject* a : arrays_) {
      nb::object copy;
      if (!PyArray_IS_C_CONTIGUOUS(a)) {
        copy = nb::steal(PyArray_NewCopy(a, NPY_CORDER));
        if (!copy.is_valid()) throw nb::python_error();
        a = reinterpret_cast<PyArrayObject*>(copy.ptr());
      }
      if (nbytes_ != 0) std::memcpy(dst, PyArray_DATA(a), nbytes_);
      dst += nbytes_;
    }
    return out;
  }

 private:
  ScalarColumn scalars_;  // scalar outcomes
  nb::object descr_;      // of arrays (null for scalars), with their type, shape and size
  int type_num_ = 0;
  std::vector<npy_intp> shape_;
  size_t nbytes_ = 0;
  std::vector<PyArrayObject*> arrays_;
};

PyObject* Interned(const char* s) { return PyUnicode_InternFromString(s); }

PyObject* ModelKey() {
  static PyObject* const s = Interned("model");
  return s;
}
PyObject* ScenarioKey() {
  static PyObject* const s = Interned("scenario");
  return s;
}
PyObject* PolicyKey() {
  static PyObject* const s = Interned("policy");
  return s;
}

// An attribute (a new reference), or null with no Python error set.
nb::object Attr(PyObject* obj, PyObject* name) {
  PyObject* v = PyObject_GetAttr(obj, name);
  if (v == nullptr) PyErr_Clear();
  return nb::steal(v);
}

// The columns of a batch, built one experiment at a time. The first one sets
// the batch's schema (keys, kinds, outcomes); Add refuses any that does not
// fit it, and the whole batch then goes the Python path.
class BatchColumns {
 public:
  static constexpr size_t kIdSize = 17;  // "e" and 16 hex digits

  BatchColumns(const std::vector<nb::object>& outcome_names, int64_t first_row)
      : outcome_names_(outcome_names), first_row_(first_row) {}

  // Adds an experiment, its outcomes (one per outcome name, null where it
  // has none) and its finishing time; false if it is not one the batch takes.
  bool Add(PyObject* experiment, const nb::object* outcomes, double finished) {
    if (!Read(experiment, outcomes)) return false;
    if (n_ == 0 ? !NewSchema() : !Matches()) return false;
    char id[kIdSize];
    if (!IdText() || !HexId(text_, id)) return false;
    ids_.append(id, kIdSize);
    for (size_t k = 0; k < values_.size(); ++k) params_[k].Push(values_[k]);
    models_.Push(model_);
    scenario_names_.Push(scenario_name_);
    policy_names_.Push(policy_name_);
    for (size_t k = 0; k < outcome_columns_.size(); ++k) {
      outcome_columns_[k].Push(outcome_values_[present_[k]]);
    }
    rows_.push_back(first_row_ + experiment_id_);
    finished_.push_back(finished);
    ++n_;
    return true;
  }

  // (ids, params, outcomes, rows, finished) as record_many takes them.
  nb::tuple Take() const {
    nb::list ids;
    for (size_t k = 0; k < n_; ++k) {
      nb::object id = nb::steal(PyUnicode_FromStringAndSize(ids_.data() + kIdSize * k, kIdSize));
      if (!id.is_valid()) throw nb::python_error();
      ids.append(id);
    }
    nb::dict params;
    nb::dict outcomes;
    if (n_ != 0) {
      for (size_t k = 0; k < params_.size(); ++k) params[keys_[k]] = params_[k].Take();
      params[nb::handle(ModelKey())] = models_.Take();
      params[nb::handle(ScenarioKey())] = scenario_names_.Take();
      params[nb::handle(PolicyKey())] = policy_names_.Take();
      for (size_t k = 0; k < outcome_columns_.size(); ++k) {
        outcomes[outcome_names_[present_[k]]] = outcome_columns_[k].Take();
      }
    }
    nb::object rows = NewArray<int64_t>(
        NPY_INT64, n_, [&](int64_t* p) { std::copy(rows_.begin(), rows_.end(), p); });
    nb::object finished = NewArray<double>(
        NPY_DOUBLE, n_, [&](double* p) { std::copy(finished_.begin(), finished_.end(), p); });
    return nb::make_tuple(ids, params, outcomes, rows, finished);
  }

 private:
  // Reads an experiment into the members below; false if it is not one a
  // batch takes, whatever its schema.
  bool Read(PyObject* experiment, const nb::object* outcomes) {
    static PyObject* const scenario_attr = Interned("scenario");
    static PyObject* const policy_attr = Interned("policy");
    static PyObject* const model_attr = Interned("model_name");
    static PyObject* const id_attr = Interned("experiment_id");
    static PyObject* const data_attr = Interned("data");
    static PyObject* const name_attr = Interned("name");
    scenario_ = Attr(experiment, scenario_attr);
    policy_ = Attr(experiment, policy_attr);
    model_obj_ = Attr(experiment, model_attr);
    nb::object eid = Attr(experiment, id_attr);
    if (!scenario_.is_valid() || !policy_.is_valid() || !model_obj_.is_valid() || !eid.is_valid()) {
      return false;
    }
    scenario_data_ = Attr(scenario_.ptr(), data_attr);
    policy_data_ = Attr(policy_.ptr(), data_attr);
    // scenario_name_ and policy_name_ may borrow these until they are pushed.
    scenario_name_obj_ = Attr(scenario_.ptr(), name_attr);
    policy_name_obj_ = Attr(policy_.ptr(), name_attr);
    if (!scenario_data_.is_valid() || !policy_data_.is_valid() || !scenario_name_obj_.is_valid() ||
        !policy_name_obj_.is_valid() || !PyDict_CheckExact(scenario_data_.ptr()) ||
        !PyDict_CheckExact(policy_data_.ptr())) {
      return false;
    }
    Scalar id;
    if (!ReadScalar(model_obj_.ptr(), false, &model_) || model_.kind != Kind::kStr ||
        !ReadScalar(eid.ptr(), false, &id) || id.kind != Kind::kInt ||
        !ReadScalar(scenario_name_obj_.ptr(), true, &scenario_name_) ||
        !ReadScalar(policy_name_obj_.ptr(), true, &policy_name_)) {
      return false;
    }
    experiment_id_ = id.i;

    keys_read_.clear();
    values_.clear();
    PyObject* sdata = scenario_data_.ptr();
    PyObject* pdata = policy_data_.ptr();
    for (PyObject* data : {sdata, pdata}) {
      Py_ssize_t pos = 0;
      PyObject* key;
      PyObject* value;
      while (PyDict_Next(data, &pos, &key, &value)) {
        if (!PyUnicode_CheckExact(key)) return false;
        if (data == pdata) {
          const int in_scenario = PyDict_Contains(sdata, key);
          if (in_scenario != 0) {  // the policy's value replaces it: the Python path
            PyErr_Clear();
            return false;
          }
        }
        Scalar v;
        if (!ReadScalar(value, true, &v)) return false;
        keys_read_.push_back(key);
        values_.push_back(v);
      }
    }
    n_scenario_keys_read_ = static_cast<size_t>(PyDict_GET_SIZE(sdata));

    outcome_values_.assign(outcome_names_.size(), OutcomeValue{});
    for (size_t k = 0; k < outcome_names_.size(); ++k) {
      PyObject* v = outcomes[k].ptr();
      OutcomeValue& o = outcome_values_[k];
      if (v == nullptr) continue;
      o.obj = v;
      if (PyArray_CheckExact(v)) {
        o.array = reinterpret_cast<PyArrayObject*>(v);
        if (!StackableArray(o.array)) return false;
      } else if (!ReadScalar(v, false, &o.scalar) || o.scalar.kind == Kind::kStr) {
        return false;
      }
    }
    return true;
  }

  // The batch's schema from its first experiment: false if its keys cannot
  // be a batch's (one named as a column the callback adds).
  bool NewSchema() {
    for (PyObject* key : keys_read_) {
      if (PyUnicode_Compare(key, ModelKey()) == 0 || PyUnicode_Compare(key, ScenarioKey()) == 0 ||
          PyUnicode_Compare(key, PolicyKey()) == 0) {
        return false;
      }
    }
    n_scenario_keys_ = n_scenario_keys_read_;
    for (size_t k = 0; k < keys_read_.size(); ++k) {
      std::string_view u;
      if (!Utf8Bytes(keys_read_[k], &u)) return false;
      keys_.push_back(nb::borrow(keys_read_[k]));
      key_utf8_.emplace_back(u);
      params_.emplace_back(values_[k].kind);
    }
    scenario_names_ = ScalarColumn(scenario_name_.kind);
    policy_names_ = ScalarColumn(policy_name_.kind);
    for (size_t k = 0; k < outcome_values_.size(); ++k) {
      if (outcome_values_[k].obj == nullptr) continue;
      present_.push_back(k);
      outcome_columns_.emplace_back(outcome_values_[k]);
    }
    // The canonical text's keys: the parameters and "model", sorted by their
    // UTF-8 bytes (the order of code points: sort_keys=True).
    model_index_ = keys_.size();
    std::vector<std::string_view> names(key_utf8_.begin(), key_utf8_.end());
    names.push_back("model");
    order_.resize(names.size());
    std::iota(order_.begin(), order_.end(), size_t{0});
    std::sort(order_.begin(), order_.end(),
              [&](size_t a, size_t b) { return names[a] < names[b]; });
    for (size_t j = 0; j < order_.size(); ++j) {
      std::string p = j == 0 ? "{" : ",";
      AppendJsonString(&p, names[order_[j]]);
      p.push_back(':');
      prefixes_.push_back(std::move(p));
    }
    return true;
  }

  // Whether the experiment just read fits the batch's schema.
  bool Matches() const {
    if (keys_read_.size() != keys_.size() || n_scenario_keys_read_ != n_scenario_keys_) {
      return false;
    }
    for (size_t k = 0; k < keys_.size(); ++k) {
      PyObject* key = keys_read_[k];
      if (key != keys_[k].ptr()) {
        std::string_view u;
        if (!Utf8Bytes(key, &u) || u != key_utf8_[k]) return false;
      }
      if (!params_[k].Takes(values_[k])) return false;
    }
    if (!scenario_names_.Takes(scenario_name_) || !policy_names_.Takes(policy_name_)) {
      return false;
    }
    size_t next = 0;
    for (size_t k = 0; k < outcome_values_.size(); ++k) {
      const bool in_schema = next < present_.size() && present_[next] == k;
      if ((outcome_values_[k].obj != nullptr) != in_schema) return false;
      if (in_schema && !outcome_columns_[next++].Takes(outcome_values_[k])) return false;
    }
    return true;
  }

  // text_: what runstore.experiment_id hashes for the parameters and the model.
  bool IdText() {
    text_.clear();
    for (size_t j = 0; j < order_.size(); ++j) {
      text_.append(prefixes_[j]);
      const Scalar& v = order_[j] == model_index_ ? model_ : values_[order_[j]];
      if (!AppendJson(&text_, v)) return false;
    }
    text_.push_back('}');
    return true;
  }

  const std::vector<nb::object>& outcome_names_;
  const int64_t first_row_;

  // The schema, set by the first experiment.
  std::vector<nb::object> keys_;       // the scenario's keys, then the policy's
  std::vector<std::string> key_utf8_;  // the same, as UTF-8
  size_t n_scenario_keys_ = 0;
  std::vector<size_t> present_;  // the outcomes present, as indexes in outcome_names_
  std::vector<size_t> order_;    // the canonical text's keys: indexes in keys_, or model_index_
  std::vector<std::string> prefixes_;  // before each value of the text: {"key": or ,"key":
  size_t model_index_ = 0;

  // The columns.
  size_t n_ = 0;
  std::vector<ScalarColumn> params_;
  ScalarColumn models_{Kind::kStr};
  ScalarColumn scenario_names_{Kind::kStr};
  ScalarColumn policy_names_{Kind::kStr};
  std::vector<OutcomeColumn> outcome_columns_;
  std::string ids_;  // kIdSize characters each
  std::vector<int64_t> rows_;
  std::vector<double> finished_;

  // The experiment being added (borrowed pointers live as long as these).
  nb::object scenario_, policy_, model_obj_, scenario_data_, policy_data_;
  nb::object scenario_name_obj_, policy_name_obj_;
  std::vector<PyObject*> keys_read_;
  std::vector<Scalar> values_;
  size_t n_scenario_keys_read_ = 0;
  Scalar model_, scenario_name_, policy_name_;
  int64_t experiment_id_ = 0;
  std::vector<OutcomeValue> outcome_values_;
  std::string text_;
};

}  // namespace

// The experiments of a batch as EMA hands them over, kept until the batch is
// written: a reference to each, to each of its outcomes as the outcomes dict
// holds them at the time (EMA's model fills the same dict again for its next
// experiment) and its finishing time. It makes no Python container per
// experiment, so the garbage collector has no more to do than with EMA's own
// loop.
class EmaBatch {
 public:
  EmaBatch(nb::handle outcome_names, int64_t first_row, size_t batch, double flush_every_s)
      : first_row_(first_row), batch_(batch), flush_every_s_(flush_every_s) {
    for (nb::handle name : nb::iter(outcome_names)) {
      if (!PyUnicode_CheckExact(name.ptr())) {
        throw nb::type_error("EmaBatch: outcome names must be str");
      }
      outcome_names_.push_back(nb::borrow(name));
    }
    SetDeadline();
  }

  size_t size() const { return experiments_.size(); }

  // What Keep asks of the callback (bits of its result).
  static constexpr int kWrite = 1;     // batch_ kept, or flush_every_s_ passed: write them
  static constexpr int kNewModel = 2;  // a model other than the last experiment's

  // Keeps an experiment, finished at `finished` (Unix seconds; None: now,
  // as time.time() tells it). `outcomes` is a mapping; an outcome it lacks
  // or holds as None is kept as absent. Returns kWrite | kNewModel bits: the
  // per-experiment work of the callback is this one call.
  int Keep(nb::handle experiment, nb::handle outcomes, nb::handle finished_obj) {
    const double finished =
        finished_obj.is_none()
            ? std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                  .count()
            : nb::cast<double>(finished_obj);
    nb::object dict = nb::borrow(outcomes);
    if (!PyDict_CheckExact(dict.ptr())) dict = nb::steal(PyDict_New());
    if (!dict.is_valid() ||
        (dict.ptr() != outcomes.ptr() && PyDict_Merge(dict.ptr(), outcomes.ptr(), 1) != 0)) {
      throw nb::python_error();
    }
    for (const nb::object& name : outcome_names_) {
      PyObject* v = PyDict_GetItemWithError(dict.ptr(), name.ptr());
      if (v == nullptr && PyErr_Occurred()) throw nb::python_error();
      outcomes_.push_back(v == nullptr || v == Py_None ? nb::object() : nb::borrow(v));
    }
    experiments_.push_back(nb::borrow(experiment));
    finished_.push_back(finished);
    int due = 0;
    if (experiments_.size() >= batch_ || std::chrono::steady_clock::now() >= flush_at_) {
      due |= kWrite;
    }
    static PyObject* const model_attr = Interned("model_name");
    nb::object model = nb::steal(PyObject_GetAttr(experiment.ptr(), model_attr));
    if (!model.is_valid()) throw nb::python_error();
    if (!model_.is_valid() || !model.equal(model_)) {
      due |= kNewModel;
      model_ = std::move(model);
    }
    return due;
  }

  // The batch's columns, or None if it is not one the C++ path takes.
  nb::object Columns() const {
    BatchColumns columns(outcome_names_, first_row_);
    const size_t m = outcome_names_.size();
    for (size_t k = 0; k < experiments_.size(); ++k) {
      if (!columns.Add(experiments_[k].ptr(), outcomes_.data() + k * m, finished_[k])) {
        return nb::none();
      }
    }
    return columns.Take();
  }

  // The experiments kept, as (experiment, outcomes, finished) for the Python
  // path: the outcomes a dict of those present.
  nb::list Items() const {
    nb::list out;
    const size_t m = outcome_names_.size();
    for (size_t k = 0; k < experiments_.size(); ++k) {
      nb::dict outcomes;
      for (size_t j = 0; j < m; ++j) {
        if (outcomes_[k * m + j].is_valid()) outcomes[outcome_names_[j]] = outcomes_[k * m + j];
      }
      out.append(nb::make_tuple(experiments_[k], outcomes, finished_[k]));
    }
    return out;
  }

  // Forgets the experiments kept; the flush interval starts again.
  void Clear() {
    experiments_.clear();
    outcomes_.clear();
    finished_.clear();
    SetDeadline();
  }

 private:
  void SetDeadline() {
    flush_at_ = std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::duration<double>(flush_every_s_));
  }

  std::vector<nb::object> outcome_names_;
  const int64_t first_row_;
  const size_t batch_;
  const double flush_every_s_;
  std::chrono::steady_clock::time_point flush_at_;
  nb::object model_;  // the last experiment's model_name
  std::vector<nb::object> experiments_;
  std::vector<nb::object> outcomes_;  // outcome_names_.size() an experiment; null: absent
  std::vector<double> finished_;
};

void BindEmaBatch(nb::module_& m) {
  nb::class_<EmaBatch>(m, "EmaBatch",
                       "EMA workbench experiments kept until their batch is written "
                       "(runstore.ema's callback; private).")
      .def(nb::init<nb::handle, int64_t, size_t, double>(), "outcomes"_a, "first_row"_a,
           "batch"_a = 1000, "flush_every_s"_a = 1.0,
           "A batch for a model's outcomes (their names, in order); rows count from first_row. "
           "keep() says to write it once it holds `batch` experiments or flush_every_s has "
           "passed since it was last cleared.")
      .def("keep", &EmaBatch::Keep, "experiment"_a, "outcomes"_a, "finished"_a = nb::none(),
           "Keeps an experiment, its outcomes as they are now and its finishing time (None: "
           "now). Returns bits: 1, write the batch now; 2, the experiment's model_name differs "
           "from the last kept one's (the first's too).")
      .def("columns", &EmaBatch::Columns,
           "(ids, params, outcomes, rows, finished) of the experiments kept, as "
           "ExperimentWriter.record_many takes them; None if the batch is not one this takes "
           "(the Python path then writes its items()).")
      .def("items", &EmaBatch::Items,
           "The experiments kept as (experiment, outcomes, finished), the outcomes a dict of "
           "those present.")
      .def("clear", &EmaBatch::Clear, "Forgets the experiments kept.")
      .def("__len__", &EmaBatch::size);
}

}  // namespace runstore::python
