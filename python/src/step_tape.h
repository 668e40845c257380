// The step tape of a Python writer (docs/design.md#step-tape): the records
// of Writer.log calls shaped like the call before them, held in columns and
// appended to the core writer as one AppendBatch per series.
//
// A training loop calls w.log(run, step=s, reward=r, loss=l) every step with
// the same keywords and value types. Each such call through
// Writer::AppendRecord takes the writer's lock and finds, checks and appends
// to every series again; a batch of the same records costs a fraction of that
// per record. The tape makes the per-step call cost what a batch costs:
//
// - It is armed by a call that the writer has just appended through
//   AppendRecord (so the series exist and took these names, dtypes and run id):
//   it keeps that call's keyword names, where its step came from and the exact
//   type (float or int) of each value.
// - A later call with the same keyword names (the same tuple, which CPython
//   keeps per call site, or one with the same interned names), the step in
//   the same place, values of the same exact types and an int run id or the
//   armed str run id is added to the tape: nothing is checked or appended
//   then, since the armed call passed every check such a call can fail.
// - Anything else the writer is asked (another call of log, put, log_many,
//   commit, flush, resume, close, stats, and the writer's destruction) drains
//   the tape first, so calls are appended in the order they were made; so
//   does a full tape.
//
// Thread safety: guarded by the GIL. A drain takes the records out first
// (Take), so another thread may fill the tape while they are appended with
// the GIL released.
#ifndef RUNSTORE_PYTHON_STEP_TAPE_H_
#define RUNSTORE_PYTHON_STEP_TAPE_H_

#include <nanobind/nanobind.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runstore/writer.h"

namespace runstore::python {

namespace nb = nanobind;

class StepTape {
 public:
  // Records held before a call drains them: 4 float metrics a step make an
  // 8 KiB batch, a few AppendBatch calls per 256 steps.
  static constexpr size_t kCapacity = 256;
  // Calls with more values than this are not taped.
  static constexpr size_t kMaxValues = 16;
  // Where the armed call's step came from.
  static constexpr Py_ssize_t kStepDefault = -1;     // not given: 0
  static constexpr Py_ssize_t kStepPositional = -2;  // log(run, step, ...)

  // The records a drain appends, taken out of the tape.
  struct Batch {
    std::vector<std::string> names;
    std::vector<DType> dtypes;
    std::vector<RunRef> runs;
    std::vector<int64_t> steps;
    std::vector<uint64_t> values;  // column k at [k * kCapacity, k * kCapacity + runs.size())
    std::vector<double> times;     // with record_time: when each call was made
    nb::object run_str;            // keeps the str run ids' bytes alive
    size_t bytes() const { return runs.size() * (16 + 8 * names.size()); }
    // One AppendBatch per series (and AppendTimes with each call's time),
    // under one hold of the automatic commits (the records of the calls
    // become visible together, as each call's did).
    Status AppendTo(Writer* w) const;
  };

  StepTape() = default;
  StepTape(const StepTape&) = delete;
  StepTape& operator=(const StepTape&) = delete;

  bool enabled() const { return enabled_; }
  // Off for writers with commit_every_s (an automatic commit must find what
  // was logged, and a taped record waits for the next call).
  void set_enabled(bool on) {
    enabled_ = on;
    armed_ = armed_ && on;
  }
  // With WriterOptions::record_time: each taped call's time is taken when
  // it is added, as Append would take it, and appended with its records.
  void set_record_time(bool on) { record_time_ = on; }
  // Until the next Arm, no call is taped (after a drain that failed, so that
  // the next call meets the writer's error at once).
  void Disarm() { armed_ = false; }
  bool empty() const { return count_ == 0; }
  bool full() const { return count_ == kCapacity; }

  // Arms the tape for calls shaped like this one: `values` are its keyword
  // values as given (borrowed), named by `kwnames`, the step's among them at
  // `step_at` (or kStepDefault, kStepPositional); `n` of them are values to
  // log; `run` is its run id. Does nothing (and disarms) if the call
  // cannot be taped: a value that is not an exact float or int, a run id that
  // is neither an exact int nor an exact str, too many values. The tape must
  // be empty.
  void Arm(PyObject* run, PyObject* kwnames, Py_ssize_t step_at, PyObject* const* values, size_t n);
  // Adds the call if it has the armed shape (see above); false, with nothing
  // added, if not. `values`, `n` as for Arm; `step` may be null (step 0).
  bool Add(PyObject* run, PyObject* step, PyObject* kwnames, Py_ssize_t step_at,
           PyObject* const* values, size_t n);
  // Moves the held records out (the tape keeps its shape, and is empty).
  Batch Take();
  // Gives a drained batch's buffers back for reuse.
  void Recycle(Batch&& b);

 private:
  bool enabled_ = false;
  bool record_time_ = false;
  bool armed_ = false;
  // The armed shape.
  nb::object kwnames_;
  Py_ssize_t step_at_ = kStepDefault;
  size_t n_ = 0;
  std::vector<std::string> names_;
  std::vector<DType> dtypes_;  // kFloat64 or kInt64
  nb::object run_str_;         // the str run id the armed call was appended with, if any
  std::string_view run_bytes_;
  // The held records.
  size_t count_ = 0;
  std::vector<RunRef> runs_;
  std::vector<int64_t> steps_;
  std::vector<uint64_t> values_;
  std::vector<double> times_;
  // A drained batch's buffers, for the next Take.
  std::vector<RunRef> spare_runs_;
  std::vector<int64_t> spare_steps_;
  std::vector<uint64_t> spare_values_;
  std::vector<double> spare_times_;
};

}  // namespace runstore::python

#endif  // RUNSTORE_PYTHON_STEP_TAPE_H_
