// runstore._core.Writer: appending from Python.
#include <time.h>

#include <algorithm>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bindings.h"
#include "convert.h"
#include "errors.h"
#include "numpy_api.h"

namespace runstore::python {
namespace {

using namespace nb::literals;

// A coarse clock (a few ns per read instead of ~25): it only has to notice
// appends that waited for milliseconds.
int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// An append that held the GIL for this long waited for buffer space: twice
// the coarse clock's resolution, and at least kSlowAppendNs.
int64_t SlowAppendNs() {
  static const int64_t ns = [] {
    timespec res;
    clock_getres(CLOCK_MONOTONIC_COARSE, &res);
    return std::max<int64_t>(kSlowAppendNs,
                             2 * (int64_t{res.tv_sec} * 1'000'000'000 + res.tv_nsec));
  }();
  return ns;
}

std::string ShapeString(const ValueRef& v) {
  if (IsVarLength(v.dtype)) return std::string(DTypeName(v.dtype));
  std::string s = "(";
  for (size_t i = 0; i < v.shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(v.shape[i]);
  }
  return s + (v.shape.size() == 1 ? ",)" : ")");
}

// One column of log_many: a numeric array appended with AppendBatch, or one
// value per record (strings, bytes, arrays of differing shapes).
struct Column {
  std::string_view name;
  bool batch = true;
  ValueSlot values;
  // Per record: one slot for each run of the same object (a column of one
  // state or model name converts it once), and a value for each record.
  std::vector<ValueSlot> slots;
  std::vector<ValueRef> records;
  nb::object keep;
  size_t bytes = 0;
};

bool IsPerRecordItem(PyObject* item) {
  return PyUnicode_Check(item) || PyBytes_Check(item) || PyByteArray_Check(item) ||
         PyArray_Check(item);
}

void ParseColumn(Column* c, PyObject* col, size_t n) {
  PyObject* items = nullptr;
  if (PyArray_Check(col)) {
    const char kind = PyArray_DESCR(reinterpret_cast<PyArrayObject*>(col))->kind;
    if ((kind == 'U' || kind == 'S' || kind == 'O') &&
        PyArray_NDIM(reinterpret_cast<PyArrayObject*>(col)) == 1) {
      c->keep = nb::steal(PyObject_CallMethod(col, "tolist", nullptr));
      if (!c->keep.is_valid()) throw nb::python_error();
      items = c->keep.ptr();
    }
  } else if (PyList_Check(col) || PyTuple_Check(col)) {
    if (PySequence_Size(col) > 0) {
      nb::object first = nb::steal(PySequence_GetItem(col, 0));
      if (!first.is_valid()) throw nb::python_error();
      if (IsPerRecordItem(first.ptr())) items = col;
    }
  }
  if (items == nullptr) {
    c->batch = true;
    c->values.Set(col, c->name);
    const ValueRef v = c->values.ref();
    if (IsVarLength(v.dtype) || v.shape.empty() || static_cast<size_t>(v.shape[0]) != n) {
      Throw(PyExc_ValueError, "log_many: column '" + std::string(c->name) +
                                  "' needs a first axis of " + std::to_string(n) +
                                  " (one entry per run), got shape " + ShapeString(v));
    }
    c->bytes = v.nbytes;
    return;
  }
  c->batch = false;
  nb::object tuple = nb::steal(PySequence_Tuple(items));
  if (!tuple.is_valid()) throw nb::python_error();
  const size_t len = static_cast<size_t>(PyTuple_GET_SIZE(tuple.ptr()));
  if (len != n) {
    Throw(PyExc_ValueError, "log_many: column '" + std::string(c->name) + "' has " +
                                std::to_string(len) + " entries for " + std::to_string(n) +
                                " runs");
  }
  // Reserved, never grown: a record's value may point into its slot.
  c->slots.reserve(n);
  c->records.reserve(n);
  PyObject* last = nullptr;
  for (size_t i = 0; i < n; ++i) {
    PyObject* item = PyTuple_GET_ITEM(tuple.ptr(), i);
    if (item != last) {
      c->slots.emplace_back().Set(item, c->name);
      last = item;
    }
    c->records.push_back(c->slots.back().ref());
    c->bytes += c->records.back().nbytes;
  }
  c->keep = std::move(tuple);
}

Codec ParseCodecArg(nb::handle codec) {
  if (codec.is_none()) return Codec::kNone;
  return Unwrap(ParseCodec(Utf8(codec.ptr(), "codec")));
}

// The keywords of a log call with the dict under `mapping_key` ("values" for
// log, "columns" for log_many) merged in: how a series is logged whose name
// is that of a parameter (run, step, runs, steps) or is not a Python
// identifier. A dict is no value a series holds, so a dict there is always
// the mapping; anything else is a series of that name. Null when there is no
// such dict (the common case, which copies nothing); else a new dict.
nb::object MergedKeywords(PyObject* kwargs, const char* mapping_key, const char* what) {
  // mapping_key is "values" or "columns".
  // Looked up by an interned key made once: this runs on every log call.
  static PyObject* const values_key = PyUnicode_InternFromString("values");
  static PyObject* const columns_key = PyUnicode_InternFromString("columns");
  PyObject* const k = std::string_view(mapping_key) == "values" ? values_key : columns_key;
  PyObject* mapping = PyDict_GetItemWithError(kwargs, k);  // borrowed
  if (mapping == nullptr) {
    if (PyErr_Occurred()) throw nb::python_error();
    return nb::object();
  }
  if (!PyDict_Check(mapping)) return nb::object();
  nb::object merged = nb::steal(PyDict_Copy(kwargs));
  if (!merged.is_valid() || PyDict_DelItem(merged.ptr(), k) != 0) {
    throw nb::python_error();
  }
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  while (PyDict_Next(mapping, &pos, &key, &value)) {
    if (!PyUnicode_Check(key)) {
      Throw(PyExc_TypeError, std::string(what) + ": the names in " + mapping_key +
                                 "= must be str, got " + Py_TYPE(key)->tp_name);
    }
    const int present = PyDict_Contains(merged.ptr(), key);
    if (present < 0) throw nb::python_error();
    if (present) {
      Throw(PyExc_ValueError, std::string(what) + ": series '" +
                                  std::string(Utf8(key, "series name")) +
                                  "' is given twice (as a "
                                  "keyword and in " +
                                  mapping_key + "=)");
    }
    if (PyDict_SetItem(merged.ptr(), key, value) != 0) throw nb::python_error();
  }
  return merged;
}

}  // namespace

template <typename F>
void PyWriter::RunAppend(size_t bytes, F&& append) {
  Check(RunAppendStatus(bytes, std::forward<F>(append)));
}

template <typename F>
Status PyWriter::RunAppendStatus(size_t bytes, F&& append) {
  Status s;
  int64_t until = release_until_ns_.load(std::memory_order_relaxed);
  bool release = bytes >= kReleaseGilBytes;
  if (!release && until != 0) {
    if (NowNs() < until) {
      release = true;
    } else {
      release_until_ns_.store(0, std::memory_order_relaxed);
    }
  }
  if (release) {
    nb::gil_scoped_release nogil;
    s = append();
  } else {
    const int64_t t0 = NowNs();
    s = append();
    const int64_t t1 = NowNs();
    if (t1 - t0 >= SlowAppendNs())
      release_until_ns_.store(t1 + kPressureWindowNs, std::memory_order_relaxed);
  }
  return s;
}

PyWriter::~PyWriter() {
  // Still open: the core writer's destruction commits what was appended,
  // so what the tape holds is appended first. Not in a child of fork():
  // what the tape holds there is the parent's, and so is the writer.
  if (!tape_.empty() && !closed() && !fork_guard_.InOtherProcess()) (void)DrainTapeStatus();
}

namespace {

std::string ForkedMessage(const std::string& writer_id, int owner_pid) {
  return "runstore.Writer '" + writer_id + "' was opened in process " + std::to_string(owner_pid) +
         " and this is process " + std::to_string(getpid()) +
         ", a child of fork(): a writer's threads and open segment stay with the process that "
         "opened it, so nothing can be logged, committed or closed through it here (nothing "
         "was, and the parent's writer goes on unharmed). Open a writer in this process: "
         "store.writer()";
}

}  // namespace

void PyWriter::ThrowForked() const {
  Throw(PyExc_RuntimeError, ForkedMessage(writer_->writer_id(), fork_guard_.owner_pid()));
}

Status PyWriter::DrainTapeStatus() {
  if (tape_.empty()) return Status::OK();
  // Taken out first: with the GIL released meanwhile, another thread may
  // fill the tape again.
  StepTape::Batch batch = tape_.Take();
  {
    const std::lock_guard lock(drain_mu_);
    ++draining_;
  }
  Writer* w = writer_.get();
  const Status s = RunAppendStatus(batch.bytes(), [&] { return batch.AppendTo(w); });
  {
    const std::lock_guard lock(drain_mu_);
    if (--draining_ == 0) drains_done_.notify_all();
  }
  tape_.Recycle(std::move(batch));
  if (!s.ok()) tape_.Disarm();
  return s;
}

void PyWriter::WaitForDrains() {
  std::unique_lock lock(drain_mu_);
  drains_done_.wait(lock, [&] { return draining_ == 0; });
}

void PyWriter::DrainTape() {
  CheckProcess();  // every method but the taped log comes here first
  Check(DrainTapeStatus());
}

void PyWriter::LogKeywords(PyObject* run, PyObject* step, PyObject* kwnames, Py_ssize_t step_at,
                           PyObject* const* values) {
  CheckProcess();  // a taped call reaches no core writer that would refuse it
  const Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
  const size_t n = static_cast<size_t>(nkw - (step_at >= 0 ? 1 : 0));
  if (tape_.Add(run, step, kwnames, step_at, values, n)) {
    if (tape_.full()) DrainTape();
    return;
  }
  nb::object step_default;
  if (step == nullptr) {
    step_default = nb::int_(0);
    step = step_default.ptr();
  }
  Py_ssize_t j = 0;
  LogPairs(nb::handle(run), nb::handle(step), n, [&](size_t, PyObject** key, PyObject** value) {
    if (j == step_at) ++j;
    *key = PyTuple_GET_ITEM(kwnames, j);
    *value = values[j];
    ++j;
  });
  // Appended: calls shaped like it may be taped.
  tape_.Arm(run, kwnames, step_at, values, n);
}

void PyWriter::Log(nb::handle run, nb::handle step_obj, nb::kwargs values) {
  const nb::object merged = MergedKeywords(values.ptr(), "values", "log");
  PyObject* dict = merged.is_valid() ? merged.ptr() : values.ptr();
  Py_ssize_t pos = 0;
  LogPairs(run, step_obj, static_cast<size_t>(PyDict_GET_SIZE(dict)),
           [&](size_t, PyObject** key, PyObject** value) { PyDict_Next(dict, &pos, key, value); });
}

template <typename Pair>
void PyWriter::LogPairs(nb::handle run, nb::handle step_obj, size_t n, Pair&& pair) {
  DrainTape();
  const RunRef r = ToRunRef(run.ptr());
  const int64_t step = ToStep(step_obj.ptr());
  struct Item {
    std::string_view name;
    ValueSlot slot;
  };
  // Every value is converted before any is appended, so a TypeError appends nothing.
  // A few metrics per step is the common call: on the stack, no allocation.
  constexpr size_t kOnStack = 8;
  Item stack_items[kOnStack];
  NamedValue stack_named[kOnStack];
  std::vector<Item> heap_items;
  std::vector<NamedValue> heap_named;
  Item* items = stack_items;
  NamedValue* named = stack_named;
  if (n > kOnStack) {
    heap_items.resize(n);
    heap_named.resize(n);
    items = heap_items.data();
    named = heap_named.data();
  }
  size_t bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    PyObject *key, *value;
    pair(i, &key, &value);
    items[i].name = Utf8(key, "series name");
    items[i].slot.Set(value, items[i].name);
    bytes += items[i].slot.nbytes();
  }
  // One call under one lock; the core checks every value before appending
  // any, so a dtype conflict appends nothing either.
  for (size_t k = 0; k < n; ++k) named[k] = NamedValue{items[k].name, items[k].slot.ref()};
  Writer* w = writer_.get();
  const std::span<const NamedValue> record(named, n);
  RunAppend(bytes, [&] { return w->AppendRecord(r, step, record); });
}

namespace {

// Writer.log as a METH_FASTCALL | METH_KEYWORDS method: the keywords arrive
// as a tuple of names beside their values, so a call makes no dict and goes
// through no argument matching (a per-step loop's cost is mostly that). Any
// call but log(run[, step], name=value, ...) goes to the bound method it
// replaces (the `values=` mapping, `run=` by keyword, wrong arity), which
// says what is wrong with it.
PyObject* g_log_fallback = nullptr;  // the nanobind method, owned for the process

PyObject* FastLog(PyObject* self, PyObject* const* args, Py_ssize_t nargsf,
                  PyObject* kwnames) noexcept {
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  PyObject* step = nullptr;
  bool fast = nargs == 1 || nargs == 2;
  Py_ssize_t step_at = -1;
  // Keywords written in the source are interned: the names are told apart by
  // pointer, and only a name that is not interned is compared by content.
  static PyObject* const s_step = PyUnicode_InternFromString("step");
  static PyObject* const s_run = PyUnicode_InternFromString("run");
  static PyObject* const s_values = PyUnicode_InternFromString("values");
  for (Py_ssize_t j = 0; fast && j < nkw; ++j) {
    PyObject* k = PyTuple_GET_ITEM(kwnames, j);
    const bool step_kw =
        k == s_step || (!PyUnicode_CHECK_INTERNED(k) && PyUnicode_Compare(k, s_step) == 0);
    if (step_kw && nargs == 1 && step_at < 0) {
      step_at = j;
    } else if (step_kw || k == s_run || k == s_values ||
               (!PyUnicode_CHECK_INTERNED(k) &&
                (PyUnicode_Compare(k, s_run) == 0 || PyUnicode_Compare(k, s_values) == 0))) {
      fast = false;
    }
  }
  if (!fast) {
    // self first, then the arguments as given.
    std::vector<PyObject*> all(static_cast<size_t>(nargs + nkw + 1));
    all[0] = self;
    std::copy(args, args + nargs + nkw, all.begin() + 1);
    return PyObject_Vectorcall(g_log_fallback, all.data(), static_cast<size_t>(nargs + 1), kwnames);
  }
  if (nargs == 2) step = args[1];
  if (step_at >= 0) step = args[nargs + step_at];
  if (nkw == 0) {
    // log(run[, step]) with nothing to log: the general method's business.
    std::vector<PyObject*> all{self, args[0]};
    if (nargs == 2) all.push_back(args[1]);
    return PyObject_Vectorcall(g_log_fallback, all.data(), all.size(), nullptr);
  }
  if (step_at < 0) step_at = nargs == 2 ? StepTape::kStepPositional : StepTape::kStepDefault;
  try {
    nb::inst_ptr<PyWriter>(nb::handle(self))
        ->LogKeywords(args[0], step, kwnames, step_at, args + nargs);
  } catch (nb::python_error& e) {
    e.restore();
    return nullptr;
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
    return nullptr;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  Py_RETURN_NONE;
}

}  // namespace

void PyWriter::Put(nb::handle run, nb::handle name, nb::handle value, nb::handle step_obj) {
  DrainTape();
  const RunRef r = ToRunRef(run.ptr());
  const int64_t step = ToStep(step_obj.ptr());
  const std::string_view n = Utf8(name.ptr(), "series name");
  ValueSlot slot;
  slot.Set(value.ptr(), n);
  Writer* w = writer_.get();
  RunAppend(slot.nbytes(), [&] { return w->Append(r, n, step, slot.ref()); });
}

void PyWriter::LogMany(nb::handle runs_obj, nb::handle steps_obj, nb::kwargs keywords) {
  DrainTape();
  const nb::object merged = MergedKeywords(keywords.ptr(), "columns", "log_many");
  PyObject* dict = merged.is_valid() ? merged.ptr() : keywords.ptr();
  Runs runs;
  if (IsOneRunId(runs_obj.ptr())) {
    // One run for the whole batch: as many records as steps, else as the
    // first column has values.
    PyObject* steps = steps_obj.ptr();
    PyObject* sized = nullptr;
    if (PyArray_Check(steps) || (steps != Py_None && PySequence_Check(steps) &&
                                 !PyUnicode_Check(steps) && !PyBytes_Check(steps))) {
      sized = steps;
    } else if (PyDict_GET_SIZE(dict) > 0) {
      Py_ssize_t pos = 0;
      PyObject *key, *value;
      PyDict_Next(dict, &pos, &key, &value);
      sized = value;
    }
    Py_ssize_t len = 0;
    if (sized) {
      len = PyObject_Length(sized);
      if (len < 0) {
        PyErr_Clear();
        Throw(PyExc_TypeError,
              "log_many: with one run id, steps or the columns must be sequences, got " +
                  std::string(Py_TYPE(sized)->tp_name));
      }
    }
    runs = RepeatRun(runs_obj, static_cast<size_t>(len), "log_many");
  } else {
    runs = ParseRuns(runs_obj, "log_many");
  }
  const size_t n = runs.refs.size();
  Steps steps = ParseSteps(steps_obj, n, "log_many");
  std::vector<Column> cols(static_cast<size_t>(PyDict_GET_SIZE(dict)));
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  size_t i = 0, bytes = n * 16;
  while (PyDict_Next(dict, &pos, &key, &value)) {
    cols[i].name = Utf8(key, "series name");
    ParseColumn(&cols[i], value, n);
    bytes += cols[i].bytes;
    ++i;
  }
  Writer* w = writer_.get();
  const std::span<const RunRef> run_span(runs.refs);
  const std::span<const int64_t> step_span(steps.data, n);
  std::vector<ColumnRef> refs;
  refs.reserve(cols.size());
  for (const Column& c : cols) {
    refs.push_back(c.batch ? ColumnRef{c.name, c.values.ref(), {}}
                           : ColumnRef{c.name, ValueRef{}, c.records});
  }
  // One call: every column checked before any is appended, visible together,
  // and with record_time one time per key.
  RunAppend(bytes, [&] { return w->AppendColumns(run_span, step_span, refs); });
}

void PyWriter::Define(nb::handle name, nb::handle dtype, nb::handle shape, bool variable_shape,
                      nb::handle codec) {
  DrainTape();
  SeriesOptions o;
  const std::string_view n = Utf8(name.ptr(), "series name");
  o.dtype = ParseDTypeSpec(dtype);
  if (!shape.is_none()) {
    for (nb::handle d : nb::iter(shape)) o.shape.push_back(nb::cast<int64_t>(d));
  }
  o.variable_shape = variable_shape;
  o.codec = ParseCodecArg(codec);
  Check(writer_->DefineSeries(n, o));
}

uint64_t PyWriter::Commit(bool wait) {
  DrainTape();
  Result<uint64_t> ticket = uint64_t{0};
  Status s;
  {
    nb::gil_scoped_release nogil;
    ticket = writer_->CommitAsync();
    if (ticket.ok() && wait) s = writer_->WaitForCommit(*ticket);
  }
  const uint64_t t = Unwrap(std::move(ticket));
  Check(s);
  return t;
}

void PyWriter::WaitForCommit(uint64_t ticket) {
  CheckProcess();
  Status s;
  {
    nb::gil_scoped_release nogil;
    s = writer_->WaitForCommit(ticket);
  }
  Check(s);
}

void PyWriter::WaitForShipped(nb::handle ticket) {
  CheckProcess();
  Status s;
  const uint64_t t = ticket.is_none() ? writer_->LastTicket() : nb::cast<uint64_t>(ticket);
  if (t == 0) return;  // nothing committed yet: nothing to ship
  {
    nb::gil_scoped_release nogil;
    s = writer_->WaitForShipped(t);
  }
  Check(s);
}

void PyWriter::Flush(bool wait) {
  DrainTape();
  if (!wait) return Check(writer_->FlushAsync());  // queues: nothing to wait for
  Status s;
  {
    nb::gil_scoped_release nogil;
    s = writer_->Flush();
  }
  Check(s);
}

void PyWriter::Resume(nb::handle run, nb::handle step_obj) {
  DrainTape();
  const RunRef r = ToRunRef(run.ptr());
  const int64_t step = ToStep(step_obj.ptr());
  Status s;
  {
    nb::gil_scoped_release nogil;
    s = writer_->Resume(r, step);
  }
  Check(s);
}

void PyWriter::Close() {
  CheckProcess();  // the writer stays open, in the process it belongs to
  // Off before the drain: the drain may release the GIL (under back-pressure),
  // and a call another thread taped meanwhile would return as logged and
  // never be appended. Off, a call from another thread, or any call after,
  // meets the closing writer.
  tape_.set_enabled(false);
  const Status drained = DrainTapeStatus();  // the writer closes whatever it says
  Status s;
  {
    nb::gil_scoped_release nogil;
    WaitForDrains();  // batches other threads took off the tape before it was off
    s = writer_->Close();
  }
  closed_.store(true, std::memory_order_relaxed);
  Check(drained.ok() ? s : drained);
}

namespace {

// runstore._signals.enter and leave, set by _set_signal_hooks (owned for the
// process); null until then.
PyObject* g_enter_hook = nullptr;
PyObject* g_leave_hook = nullptr;

void SetSignalHooks(nb::handle enter, nb::handle leave) {
  Py_XSETREF(g_enter_hook, nb::borrow(enter).release().ptr());
  Py_XSETREF(g_leave_hook, nb::borrow(leave).release().ptr());
}

}  // namespace

void PyWriter::Enter() {
  CheckProcess();
  if (g_enter_hook == nullptr) return;
  nb::object entered = nb::steal(PyObject_CallNoArgs(g_enter_hook));
  if (!entered.is_valid()) throw nb::python_error();
  if (PyObject_IsTrue(entered.ptr()) == 1) ++signal_entries_;
}

void PyWriter::LeaveSignals() {
  for (; signal_entries_ > 0 && g_leave_hook != nullptr; --signal_entries_) {
    nb::object left = nb::steal(PyObject_CallOneArg(g_leave_hook, Py_True));
    if (left.is_valid()) continue;
    // A SIGTERM that came while the writer closed was raised before the
    // hook undid the enter: undo it now (the handler ignores later ones),
    // then raise that.
    nb::python_error raised;
    for (; signal_entries_ > 0; --signal_entries_) {
      nb::object again = nb::steal(PyObject_CallOneArg(g_leave_hook, Py_True));
      if (!again.is_valid()) PyErr_Clear();
    }
    throw raised;
  }
}

bool PyWriter::Exit(nb::handle exc_type, nb::handle exc, nb::handle) {
  if (fork_guard_.InOtherProcess()) {
    LeaveSignals();
    if (exc_type.is_none() || exc.is_none()) ThrowForked();
    // The block raised already: that exception goes on, saying that nothing
    // of the block was committed.
    nb::object note = MessageText("runstore: nothing the block logged was committed: " +
                                  ForkedMessage(writer_->writer_id(), fork_guard_.owner_pid()));
    PyObject* r = PyObject_CallMethod(exc.ptr(), "add_note", "O", note.ptr());
    if (r == nullptr) PyErr_Clear();
    Py_XDECREF(r);
    return false;
  }
  tape_.set_enabled(false);  // before the drain, as in Close
  const Status drained = DrainTapeStatus();
  Status s;
  {
    nb::gil_scoped_release nogil;
    WaitForDrains();       // as in Close
    s = writer_->Close();  // commits what was appended, even when the block raised
  }
  if (!drained.ok()) s = drained;
  closed_.store(true, std::memory_order_relaxed);
  LeaveSignals();  // after the commit: a SIGTERM during it is raised now
  if (exc_type.is_none()) {
    Check(s);
  } else if (!s.ok() && !exc.is_none()) {
    // Keep the original exception; say that its records could not be committed.
    nb::object note = nb::str(
        ("runstore: committing the writer's records on exit failed: " + s.ToString()).c_str());
    PyObject* r = PyObject_CallMethod(exc.ptr(), "add_note", "O", note.ptr());
    if (r == nullptr) PyErr_Clear();
    Py_XDECREF(r);
  }
  return false;  // never swallow the exception
}

nb::dict PyWriter::Stats() {
  DrainTape();  // counts what was logged
  const WriterStats s = writer_->stats();
  nb::dict d;
  d["records_appended"] = s.records_appended;
  d["bytes_appended"] = s.bytes_appended;
  d["bytes_written"] = s.bytes_written;
  d["commits"] = s.commits;
  d["flushes"] = s.flushes;
  d["syncs"] = s.syncs;
  d["segments_sealed"] = s.segments_sealed;
  d["backpressure_waits"] = s.backpressure_waits;
  d["backpressure_seconds"] = s.backpressure_seconds;
  d["peak_buffered_bytes"] = s.peak_buffered_bytes;
  return d;
}

void BindWriter(nb::module_& m) {
  auto cls =
      nb::class_<PyWriter>(
          m, "Writer",
          "Appends records to a store; made by Store.writer(). Use it as a context manager: "
          "leaving the block commits and closes (also when the block raised).\n\n"
          "A writer writes only its own segment files, so any number of writers (threads, "
          "processes, nodes) may append to one store at once. Its methods may be called from "
          "several threads.\n\n"
          "A writer belongs to the process that made it. In a child of fork() (multiprocessing's "
          "fork start method) every method raises RuntimeError saying to open a writer in the "
          "child, leaving a with-block too; garbage collection there raises nothing and writes "
          "nothing; the parent's writer goes on unharmed.")
          .def("log", &PyWriter::Log, "run"_a.none(), "step"_a.none() = 0, "values"_a,
               nb::sig("def log(self, run: int | str, step: int = 0, **values: object) -> None"),
               "Appends one record per keyword: (run, name, step) -> value. ``run`` is an int or a "
               "str. "
               "A series whose name is not a keyword Python allows here (``run``, ``step``, or not "
               "an "
               "identifier) goes in a dict: ``values={'step': 3.0, 'loss/train': 0.5}``. "
               "Values: int -> int64, float -> float64, bool -> bool, numpy scalars keep their "
               "dtype, "
               "numpy "
               "arrays (any shape; copied, made C-contiguous) -> arrays, str -> string, bytes -> "
               "bytes, "
               "lists "
               "-> numpy.asarray(list); a numpy masked array only if nothing is masked (a "
               "store holds no mask).\n\n"
               "Raises TypeError for an unsupported type or dtype (nothing is appended) and "
               "ValueError "
               "when a "
               "value conflicts with its series' dtype or shape (values before it in keyword order "
               "stay "
               "appended). Records are durable after commit().")
          .def(
              "put", &PyWriter::Put, "run"_a.none(), "name"_a, "value"_a.none(),
              "step"_a.none() = 0,
              nb::sig(
                  "def put(self, run: int | str, name: str, value: object, step: int = 0) -> None"),
              "Appends one value (typically a large array) under (run, name, step). Arrays of 1 "
              "MiB or "
              "more "
              "are written straight from the caller's memory into a block of their own, 64-byte "
              "aligned, "
              "with the GIL released.")
          .def(
              "log_many", &PyWriter::LogMany, "runs"_a.none(), "steps"_a.none() = nb::none(),
              "columns"_a,
              nb::sig("def log_many(self, runs: int | str | typing.Sequence[int | str] | "
                      "numpy.ndarray, steps: int | typing.Sequence[int] | numpy.ndarray | None = "
                      "None, **columns: object) -> None"),
              "Vectorised log: record i is (runs[i], name, steps[i]) -> columns[name][i]. ``runs`` "
              "is one run id (an int or a str: every record is of that run, as many as ``steps`` "
              "or the columns have) or a sequence or 1-d array of ints/strs (an integer array is "
              "the fast path; an array of dtype S holds str ids as their UTF-8 bytes, also "
              "without a Python object per id); ``steps`` is None (all 0), an int, or an integer "
              "array of "
              "len(runs). "
              "A numeric column is an array whose first axis has len(runs) entries; a column of "
              "str, bytes or arrays of differing shapes is a list with one entry per run. Columns "
              "named ``runs`` or ``steps`` (or not identifiers) go in a dict: "
              "``columns={'steps': ...}``. An automatic commit (commit_every_bytes, "
              "commit_every_s) never falls inside one call: its columns become visible together.")
          .def("define", &PyWriter::Define, "name"_a, "dtype"_a, "shape"_a = nb::none(),
               "variable_shape"_a = false, "codec"_a = nb::none(),
               nb::sig("def define(self, name: str, dtype: str | type | numpy.dtype, "
                       "shape: typing.Sequence[int] | None = None, variable_shape: bool = False, "
                       "codec: str | None = None) -> None"),
               "Declares a series before its first record: needed for variable-shape series and to "
               "give "
               "it a "
               "codec ('none', 'lz4', 'zstd') other than the writer's. ``dtype``: a runstore name "
               "('float64', "
               "'string', 'bytes'), a numpy dtype, or float/int/bool/str/bytes. Raises ValueError "
               "if it "
               "conflicts with the series as it exists.")
          .def(
              "commit", &PyWriter::Commit, "wait"_a = true,
              "Makes every record appended before the call durable (fsync) and visible to readers "
              "that "
              "refresh, and returns the commit's ticket. Raises OSError if the data could not be "
              "written. With wait=False it returns at once: the writer's background thread writes "
              "and "
              "syncs the commit while the caller goes on (converting the next batch, say), and "
              "wait_for_commit(ticket) returns when it is durable, as commit() would have. Commits "
              "made faster than the disk syncs share one fsync (group commit): a loop that commits "
              "with wait=False and waits only for its last ticket pays one fsync per burst, not "
              "one "
              "per commit.")
          .def(
              "wait_for_commit", &PyWriter::WaitForCommit, "ticket"_a,
              "Returns when the commit of ``ticket`` (from commit(wait=False)) is durable, or "
              "raises "
              "the error that stopped the writer. ValueError for a ticket this writer did not give "
              "out.")
          .def(
              "wait_for_shipped", &PyWriter::WaitForShipped, "ticket"_a = nb::none(),
              nb::sig("def wait_for_shipped(self, ticket: int | None = None) -> None"),
              "With staging_dir: seals the segment that holds the commit of ``ticket`` (default: "
              "the "
              "last commit or flush) and returns once it is published in the store, visible to its "
              "readers; raises the error that stopped shipping (the segment then stays in staging "
              "for runstore.sync). Without staging, as wait_for_commit. ValueError for a ticket "
              "this writer did not give out.")
          .def("flush", &PyWriter::Flush, "wait"_a = true,
               "Like commit(), without the fsync: every record appended before the call is visible "
               "to readers that refresh, all-or-nothing, and survives a crash or kill -9 of this "
               "process, but a power cut before the next commit() (or close) may take it away "
               "again, whole flushes at a time. What h5py's File.flush() or SQLite's "
               "synchronous=NORMAL promise, at the cost of a write instead of an fdatasync. Raises "
               "OSError if the data could not be written. With wait=False it returns at once: the "
               "background thread writes the flush a moment later (and an error doing so is raised "
               "by a later call).")
          .def("resume", &PyWriter::Resume, "run"_a.none(), "step"_a.none(),
               nb::sig("def resume(self, run: int | str, step: int) -> None"),
               "Hides this run's records at steps >= step written by earlier commits (of any "
               "writer), "
               "for a "
               "run restarted from a checkpoint taken at ``step``. Commits what was appended "
               "before it; "
               "records appended after it are not hidden.")
          .def("close", &PyWriter::Close,
               "Commits, seals the open segment and stops the writer. Further appends raise "
               "RuntimeError. "
               "Closing twice is harmless.")
          .def("stats", &PyWriter::Stats,
               "Counters: records_appended, bytes_appended, bytes_written, commits, flushes, syncs "
               "(fdatasyncs for commits; one covers several commits made with wait=False), "
               "segments_sealed, "
               "backpressure_waits, backpressure_seconds, peak_buffered_bytes.")
          .def_prop_ro(
              "durable_ticket", &PyWriter::durable_ticket,
              "The newest commit ticket that is durable with every one before it (0: none "
              "yet), without waiting: after commit(wait=False), the results of every commit "
              "whose ticket is at most this may be acknowledged.")
          .def_prop_ro("shipped_ticket", &PyWriter::shipped_ticket,
                       "The newest ticket shipped into the store with every one before it (0: none "
                       "yet), without waiting; without staging_dir, durable_ticket.")
          .def_prop_ro("writer_id", &PyWriter::writer_id,
                       "This writer's id; its segment files are named after it.")
          .def_prop_ro("closed", &PyWriter::closed,
                       "True after close() or the end of a with-block.")
          .def(
              "__enter__",
              [](nb::handle self) {
                nb::inst_ptr<PyWriter>(self)->Enter();
                return self;
              },
              "Returns the writer itself. In the main thread, until the block is left, SIGTERM "
              "raises SystemExit(143) there (where the program has no SIGTERM handler of its "
              "own), so that leaving the block commits, as Ctrl-C's KeyboardInterrupt does.")
          .def("__exit__", &PyWriter::Exit, "exc_type"_a.none(), "exc"_a.none(), "tb"_a.none(),
               nb::sig("def __exit__(self, exc_type: type[BaseException] | None, "
                       "exc: BaseException | None, tb: types.TracebackType | None) -> bool"),
               "Commits and closes. If the block raised, what was logged before is still committed "
               "and "
               "the "
               "original exception propagates (with a note if committing failed).")
          .def("__repr__", [](const PyWriter& w) {
            return "<runstore.Writer " + w.writer_id() + (w.closed() ? " (closed)>" : ">");
          });
  // log as FastLog, with the method above (its signature and doc) for every
  // other call.
  m.def("_set_signal_hooks", &SetSignalHooks, "enter"_a, "leave"_a,
        "Sets the functions a writer's with-block calls on entry (no argument; true if it took "
        "SIGTERM) and exit (True): runstore._signals.enter and leave.");
  g_log_fallback = nb::getattr(cls, "log").release().ptr();
  static const std::string doc = nb::cast<std::string>(nb::getattr(g_log_fallback, "__doc__"));
  static PyMethodDef def = {"log",
                            reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(FastLog)),
                            METH_FASTCALL | METH_KEYWORDS, doc.c_str()};
  nb::object descr = nb::steal(PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(cls.ptr()), &def));
  if (!descr.is_valid()) throw nb::python_error();
  nb::setattr(cls, "log", descr);
}

}  // namespace runstore::python
