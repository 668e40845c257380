// bindings.h: the classes of runstore._core. The Python package
// (python/runstore) wraps Store; Writer is exported as it is, so that
// Writer.log is one C++ call.
//
// GIL policy: the GIL is released around everything that may wait or touch
// much memory: commit, resume, close, refresh, opening a writer, get, scans,
// listing runs and series, verify, and appends whose values add up to at
// least kReleaseGilBytes. A small append (one experiment's scalars) keeps the
// GIL: releasing and re-taking it costs more than the append, and would hand
// the GIL to busy threads on every call. If such an append has to wait for
// buffer space (back-pressure), the writer releases the GIL for all its
// appends during the next kPressureWindowNs, so that other threads go on.
#ifndef RUNSTORE_PYTHON_BINDINGS_H_
#define RUNSTORE_PYTHON_BINDINGS_H_

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "fork_guard.h"
#include "runstore/arrow.h"
#include "runstore/store.h"
#include "step_tape.h"

namespace runstore::python {

namespace nb = nanobind;

inline constexpr size_t kReleaseGilBytes = 64 << 10;
// An append that held the GIL for longer than this waited for buffer space
// (measured with a coarse clock: in effect max(this, 2 clock ticks)).
inline constexpr int64_t kSlowAppendNs = 2'000'000;
inline constexpr int64_t kPressureWindowNs = 2'000'000'000;

class PyWriter {
 public:
  // `tape`: whether Writer.log calls may be held on the step tape
  // (step_tape.h; off with commit_every_s); `record_time`: the writer's.
  PyWriter(std::unique_ptr<Writer> writer, bool tape, bool record_time)
      : writer_(std::move(writer)) {
    tape_.set_enabled(tape);
    tape_.set_record_time(record_time);
  }
  // Appends what the tape holds before the writer closes (errors are lost, as
  // the core writer's own close on destruction loses them). In a child of
  // fork(), appends nothing: the core writer there only frees memory.
  ~PyWriter();
  PyWriter(const PyWriter&) = delete;
  PyWriter& operator=(const PyWriter&) = delete;

  // Run ids and steps are taken as handles and converted by ToRunRef and
  // ToStep (convert.h), which say what was wrong with them.
  void Log(nb::handle run, nb::handle step, nb::kwargs values);
  // Log's work on `n` (name, value) pairs, which `pair(i, &name, &value)`
  // gives (borrowed references).
  template <typename Pair>
  void LogPairs(nb::handle run, nb::handle step, size_t n, Pair&& pair);
  // Writer.log's fast form, log(run[, step], name=value, ...): `values` are
  // the keyword values, named by `kwnames`, with the step's at `step_at`
  // (StepTape's kStepDefault, kStepPositional or its index). Taped when it
  // has the armed shape, else appended (draining the tape first).
  void LogKeywords(PyObject* run, PyObject* step, PyObject* kwnames, Py_ssize_t step_at,
                   PyObject* const* values);
  // Appends what the step tape holds; every other call of the writer does
  // this first, so that calls are appended in the order they were made.
  void DrainTape();
  void Put(nb::handle run, nb::handle name, nb::handle value, nb::handle step);
  void LogMany(nb::handle runs, nb::handle steps, nb::kwargs columns);
  void Define(nb::handle name, nb::handle dtype, nb::handle shape, bool variable_shape,
              nb::handle codec);
  uint64_t Commit(bool wait);
  void WaitForCommit(uint64_t ticket);
  uint64_t durable_ticket() const {
    CheckProcess();
    return writer_->DurableTicket();
  }
  uint64_t shipped_ticket() const {
    CheckProcess();
    return writer_->ShippedTicket();
  }
  void WaitForShipped(nb::handle ticket);
  void Flush(bool wait);
  void Resume(nb::handle run, nb::handle step);
  void Close();
  // A with-block: while it runs, SIGTERM raises in the main thread
  // (runstore._signals, through the hooks set by set_signal_hooks), so that
  // leaving it commits.
  void Enter();
  bool Exit(nb::handle exc_type, nb::handle exc, nb::handle tb);
  nb::dict Stats();
  const std::string& writer_id() const { return writer_->writer_id(); }
  bool closed() const { return closed_.load(std::memory_order_relaxed); }

  // Raises RuntimeError in a child of fork() (docs/design.md#fork): every
  // method calls it first, the step tape's path included, so that no call
  // there returns as if it had appended or committed.
  void CheckProcess() const {
    if (fork_guard_.InOtherProcess()) [[unlikely]]
      ThrowForked();
  }

 private:
  [[noreturn]] void ThrowForked() const;
  // Runs `append` (a callable returning Status) with or without the GIL, by
  // the policy above, and raises its error.
  template <typename F>
  void RunAppend(size_t bytes, F&& append);
  template <typename F>
  Status RunAppendStatus(size_t bytes, F&& append);
  Status DrainTapeStatus();
  // Undoes the signal hooks' enters of this writer's with-blocks.
  void LeaveSignals();
  // Waits (without the GIL) until no batch taken off the tape is still being
  // appended by another thread.
  void WaitForDrains();

  std::unique_ptr<Writer> writer_;
  const ForkGuard fork_guard_;  // the process the writer belongs to
  StepTape tape_;               // guarded by the GIL
  std::atomic<int64_t> release_until_ns_{0};
  std::atomic<bool> closed_{false};
  // Batches taken off the tape and being appended, perhaps with the GIL
  // released: close waits for them, or a call that returned as logged would
  // meet the closed writer and be lost. Never held while blocking on the GIL.
  std::mutex drain_mu_;
  std::condition_variable drains_done_;
  int draining_ = 0;        // guarded by drain_mu_
  int signal_entries_ = 0;  // with-blocks whose enter hook took SIGTERM; the GIL guards it
};

// A store across fork() (docs/design.md#fork). A store at rest holds no
// thread, and its snapshot reads through mappings and pread, which a child
// shares safely with its parent; but a thread of the parent inside a call of
// the store at the fork (a refresh, a scan) may hold its locks, or be
// building what a first read builds once, and the child would wait for that
// thread for ever. So calls are counted while they run without the GIL (the
// thread that forks holds it), and in a child the first call finds out
// whether one was under way: then every call raises RuntimeError, otherwise
// the store is the child's own from then on.
struct StoreForkState {
  std::atomic<int> busy{0};  // calls in flight
  // The following with the GIL held.
  ForkGuard guard;      // the process the store was last checked in
  bool broken = false;  // unusable in this process
};

// Held by each call of a store that reaches the core, made with the GIL
// held: raises RuntimeError in a child of fork() if the store was in use at
// the fork, and counts the call while it runs.
class StoreUse {
 public:
  StoreUse(StoreForkState& state, const std::string& path);
  ~StoreUse() { state_.busy.fetch_sub(1, std::memory_order_relaxed); }
  StoreUse(const StoreUse&) = delete;
  StoreUse& operator=(const StoreUse&) = delete;

 private:
  StoreForkState& state_;
};

class PyStore {
 public:
  // skip_damaged: StoreOptions::on_damaged = OnDamaged::kSkip; otherwise an
  // error met in one segment file ends with a hint that names the option.
  PyStore(const std::string& path, bool read_only, bool create, bool skip_damaged);

  const std::string& path() const { return store_->path(); }
  Store* store() const { return store_.get(); }
  bool read_only() const { return read_only_; }
  bool skip_damaged() const { return skip_damaged_; }
  PyWriter* NewWriter(nb::handle writer_id, nb::handle buffer_bytes, nb::handle codec,
                      nb::handle zstd_level, nb::handle commit_every_s,
                      nb::handle commit_every_bytes, nb::handle segment_bytes, bool allow_reserved,
                      nb::handle staging_dir, nb::handle ship_every_s, bool record_time);
  void Refresh();
  nb::list Names(bool include_reserved);
  nb::list Runs();
  nb::list Series(bool include_reserved, bool counts);
  nb::dict SeriesInfoOf(const std::string& name);
  nb::list Segments();
  // Snapshot::DamagedSegments(): one dict {file, kind, message} each.
  nb::list DamagedSegments();
  // Snapshot::VerifyAll(): {segments, blocks_checked, bytes_checked,
  // problems: [(kind, message), ...]}.
  // progress(done_bytes, total_bytes) as it reads, or None (PyProgress).
  nb::dict VerifyAll(nb::handle progress);
  nb::object Get(nb::handle run, const std::string& name, nb::handle step);
  // A numeric value whose bytes are checked as they are read (LazyValue).
  nb::object GetLazy(nb::handle run, const std::string& name, nb::handle step);
  nb::dict Scan(const std::string& name, bool keys, nb::handle runs,
                std::optional<std::pair<int64_t, int64_t>> step_range);
  // Scalar series `names` at `step`, placed on the runs of series `base`
  // (python/src/aligned_scan.cc).
  nb::dict ScanAligned(const std::string& base, const std::vector<std::string>& names, int64_t step,
                       bool with_ids, bool ordered);
  // Scalar series `names` at `step`, placed on the runs of the list `runs`,
  // reading only the blocks that may hold them (python/src/aligned_scan.cc).
  nb::dict ReadAligned(nb::handle runs, const std::vector<std::string>& names, int64_t step);
  // Series `name` as an Arrow C stream in a PyCapsule ("arrow_array_stream"), of the runs
  // `runs` and the inclusive steps `steps` when given (python/src/arrow_stream.cc); its
  // schema alone ("arrow_schema").
  nb::object ArrowStream(const std::string& name, nb::handle runs,
                         std::optional<std::pair<int64_t, int64_t>> steps, int64_t batch_rows);
  nb::object ArrowSchemaOf(const std::string& name);
  // Series joined on the keys of series `base` (include/runstore/arrow.h JoinedArrowStream),
  // each of `columns` a tuple (series, name, fill, empty_is_null, missing_dtype); the stream
  // in a PyCapsule, or with schema_only its schema (python/src/arrow_stream.cc).
  nb::object ArrowJoin(const std::string& base, nb::list columns, const std::string& run_field,
                       const std::string& step_field, const std::string& where_series,
                       const std::vector<std::string>& where_values,
                       std::optional<std::string> where_fill, nb::handle runs,
                       std::optional<std::pair<int64_t, int64_t>> steps, int64_t batch_rows,
                       uint64_t window_bytes, bool order_by_base_value, bool schema_only);

 private:
  // Check() for what opening or refreshing the store returned.
  void CheckOpen(const Status& s) const;
  static ArrowStreamOptions StreamOptions(nb::handle runs,
                                          std::optional<std::pair<int64_t, int64_t>> steps,
                                          int64_t batch_rows);

  std::unique_ptr<Store> store_;
  bool read_only_;
  bool skip_damaged_;
  // Shared with the store's lazy values.
  std::shared_ptr<StoreForkState> fork_ = std::make_shared<StoreForkState>();

 public:
  // Held by a call (see StoreUse).
  StoreUse Use() { return StoreUse(*fork_, store_->path()); }
  const std::shared_ptr<StoreForkState>& fork_state() const { return fork_; }
};

void BindWriter(nb::module_& m);
void BindStore(nb::module_& m);
void BindExperimentId(nb::module_& m);
void BindEmaBatch(nb::module_& m);

}  // namespace runstore::python

#endif  // RUNSTORE_PYTHON_BINDINGS_H_
