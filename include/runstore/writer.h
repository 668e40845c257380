// writer.h: appending records to a store.
//
// A Writer belongs to one process and writes only its own segment files, so
// any number of writers (threads, processes, nodes) append to one store at
// once without locks. Records are buffered column-wise per series and written
// by a background thread (a call that must wait for a write anyway, Commit or
// the Append of a large value, does the queued writes itself when that thread
// is idle); the memory held is bounded by WriterOptions::buffer_bytes: an
// Append that would exceed it waits (back-pressure) until the background
// thread has written enough. A second thread makes commits durable
// (fdatasync) while the background thread goes on writing the next ones.
//
// Durability: Commit() returns only when everything appended before it is on
// stable storage and visible to readers that refresh. A crash never exposes a
// part of a commit (docs/format.md, "Commit records"). Flush() is the cheaper
// step between commits: visible at once and safe from a crash of the process,
// durable at the next Commit().
//
// Thread safety: every method may be called from several threads at once.
//
// fork(): a writer belongs to the process that opened it. In a child of
// fork() every method that returns a Status returns FailedPrecondition
// saying to open a writer in the child (the tickets are 0 there, the stats
// empty), and destroying the writer there only frees memory: nothing of the
// parent's is written, synced, closed or removed, and the parent's writer
// goes on unharmed (docs/design.md#fork).
#ifndef RUNSTORE_WRITER_H_
#define RUNSTORE_WRITER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "runstore/status.h"
#include "runstore/types.h"

namespace runstore {

struct WriterOptions {
  // Unique id of this writer: [A-Za-z0-9._-]{1,64}. Empty: derived from host,
  // pid, time and randomness. Segment files are named <writer_id>-<seq>.rss.
  std::string writer_id;
  // Upper bound on bytes of records held in memory (column buffers plus
  // blocks queued for the background thread).
  size_t buffer_bytes = 64ull << 20;
  // Codec for series not given one by DefineSeries.
  Codec codec = Codec::kNone;
  int zstd_level = 3;
  // Auto-commit once this many bytes were appended since the last commit (0:
  // never by size). Flushes do not count as commits here.
  uint64_t commit_every_bytes = 0;
  // Auto-commit this many seconds after the first uncommitted append (0:
  // never by time). Flushes do not count as commits here: records flushed
  // but not committed are made durable within this time too.
  double commit_every_s = 0;
  // A segment is sealed and a new one started at the first commit (or flush)
  // after it reaches this size. Sealing never commits what the caller has
  // not, so a segment exceeds the target by what was appended between two
  // commits, and every commit lies in one segment.
  uint64_t segment_bytes = 1ull << 30;
  // Values of at least this many bytes are written as a block of their own,
  // straight from the caller's memory, with a 64-byte-aligned payload.
  size_t large_value_bytes = 1ull << 20;
  // Target raw size of a column block.
  size_t block_bytes = 1ull << 20;
  // Lets runstore's own layers write reserved '~' names.
  bool allow_reserved_names = false;
  // Keeps the wall-clock time of every Append and AppendRecord (and of the
  // keys given to AppendTimes) as a record of the reserved series "~time" at
  // the same (run, step): float64 seconds since the Unix epoch, from the
  // system clock (microsecond resolution). One record per call and key, not
  // per series: the time a step was logged, as TensorBoard keeps it per point.
  bool record_time = false;
  // Node-local staging (docs/design.md#staging): segments are written and
  // committed in this directory (a commit is durable there when Commit
  // returns) and each sealed one is shipped into the store by a thread of
  // the writer's own, then removed from staging. Readers of the store see a
  // commit once it is shipped (ShippedTicket). Unset: $RUNSTORE_STAGING_DIR
  // if set; empty: no staging. The directory is created (one level) if
  // missing. What a crash leaves there is shipped by SyncStaging
  // (runstore/sync.h, `runstore sync`).
  std::optional<std::string> staging_dir;
  // With staging: seal and ship the open segment at least this often while
  // it holds committed data that is not shipped (0: only when it reaches
  // segment_bytes, on WaitForShipped, and at Close). A segment whose last
  // frames are not committed yet is sealed at the next commit, and none is
  // sealed before the next one's number is claimed in the store (a store
  // that cannot be reached holds the seal off; the writer goes on).
  double ship_every_s = 0;
};

// Per-series settings, fixed when the series is first written by this writer.
struct SeriesOptions {
  DType dtype = DType::kFloat64;
  // Shape of every record. Ignored when variable_shape is set.
  std::vector<int64_t> shape;
  // Records may have any shape (and rank).
  bool variable_shape = false;
  Codec codec = Codec::kNone;
};

struct WriterStats {
  uint64_t records_appended = 0;
  uint64_t bytes_appended = 0;  // value bytes as given to Append
  uint64_t bytes_written = 0;   // bytes written to segment files
  uint64_t commits = 0;         // commit records written, by Commit and by Flush
  uint64_t flushes = 0;         // of those, the ones Flush wrote (not synced when written)
  uint64_t syncs = 0;           // fdatasyncs made for commits: one may cover several (CommitAsync)
  uint64_t segments_sealed = 0;
  uint64_t backpressure_waits = 0;  // Appends that had to wait for buffer space
  double backpressure_seconds = 0;
  size_t peak_buffered_bytes = 0;
};

// A value under a series name, for Writer::AppendRecord.
struct NamedValue {
  std::string_view name;
  ValueRef value;
};

// One series' values for Writer::AppendColumns: n values in one array whose
// first dimension is n (numbers of one fixed shape, as AppendBatch takes
// them), or, when `each` is not empty, one ValueRef a value (strings, bytes,
// arrays of differing shapes, as AppendValues takes them).
struct ColumnRef {
  std::string_view name;
  ValueRef values;
  std::span<const ValueRef> each;
};

class Writer {
 public:
  virtual ~Writer() = default;

  // Declares a series before its first Append: needed for variable-shape
  // series and for a codec other than WriterOptions::codec. Without it the
  // first Append fixes dtype and shape. InvalidArgument if it conflicts with
  // the series as it exists in the store or in this writer.
  virtual Status DefineSeries(std::string_view name, const SeriesOptions& options) = 0;

  // Appends one record. The value's bytes are copied (or written) before the
  // call returns. InvalidArgument (and nothing appended) if the name or run id
  // is invalid, or the dtype or shape conflicts with the series. The run is
  // taken by reference: a RunRef made for the call and copied into it by value
  // stalled the processor (the copy loads 16 bytes stored a field at a time).
  virtual Status Append(const RunRef& run, std::string_view name, int64_t step,
                        const ValueRef& value) = 0;
  template <typename T>
  requires std::is_arithmetic_v<T> Status Append(const RunRef& run, std::string_view name,
                                                 int64_t step, T value) {
    return Append(run, name, step, ValueRef::Scalar(value));
  }

  // Appends one record to each of several series under the same (run, step),
  // e.g. every outcome of one experiment. Every value is checked before any
  // is appended: on InvalidArgument nothing was appended.
  virtual Status AppendRecord(RunRef run, int64_t step, std::span<const NamedValue> values) = 0;

  // Appends n records of one series at once: runs[i], steps[i] and the i-th
  // value of `values`, whose first dimension is n (for strings, use
  // AppendValues).
  virtual Status AppendBatch(std::span<const RunRef> runs, std::string_view name,
                             std::span<const int64_t> steps, const ValueRef& values) = 0;

  // Appends n records of one series whose values are given one by one
  // (strings, bytes, arrays of differing shapes): runs[i], steps[i],
  // values[i], as n calls of Append would, under one lock and one series
  // lookup. Every value is checked before any is appended (InvalidArgument,
  // nothing appended). Like AppendBatch, records no time (AppendTimes does).
  virtual Status AppendValues(std::span<const RunRef> runs, std::string_view name,
                              std::span<const int64_t> steps, std::span<const ValueRef> values) = 0;

  // Appends n records to each of several series under the same n keys
  // (runs[i], steps[i]): a table's columns, e.g. the parameters and outcomes
  // of a batch of experiments. The run ids are checked once, and every column
  // is checked before any record is appended: on InvalidArgument nothing was
  // appended and no series was defined. The records of one call are never
  // split by an automatic commit. With WriterOptions::record_time, one time
  // per key (as AppendRecord), when there is a column.
  virtual Status AppendColumns(std::span<const RunRef> runs, std::span<const int64_t> steps,
                               std::span<const ColumnRef> columns) = 0;

  // With WriterOptions::record_time, records the time now at these keys (what
  // Append and AppendRecord do by themselves), for a caller that appends a
  // batch's columns with one AppendBatch each; without it, does nothing.
  Status AppendTimes(std::span<const RunRef> runs, std::span<const int64_t> steps) {
    return AppendTimes(runs, steps, {});
  }
  // The same with the time of each key given (float64 seconds since the Unix
  // epoch, as record_time keeps them: when the caller logged it), or now for
  // every key if `times` is empty. InvalidArgument if the sizes differ.
  virtual Status AppendTimes(std::span<const RunRef> runs, std::span<const int64_t> steps,
                             std::span<const double> times) = 0;

  // Holds the automatic commits (commit_every_bytes, commit_every_s) until
  // the matching ReleaseAutoCommits, so that the records of several calls
  // (the columns of one batch, each an AppendBatch) become visible together;
  // an automatic commit that came due meanwhile is made at the release.
  // Holds nest. Commit() is never held, and appends still wait for buffer
  // space meanwhile (the buffer is then flushed, not committed).
  virtual void HoldAutoCommits() = 0;
  virtual void ReleaseAutoCommits() = 0;

  // Hides this run's records at steps >= step written by earlier commits of
  // any writer (docs/design.md#invariant-6). Commits what was appended before it,
  // then writes and commits the resume marker, so records appended after it
  // are not hidden. Use when a run restarts from a checkpoint taken at `step`.
  virtual Status Resume(RunRef run, int64_t step) = 0;

  // Makes everything appended before the call durable and visible. A commit is
  // all-or-nothing for readers. The writer commits by itself only when asked
  // to (commit_every_bytes, commit_every_s), and then between calls, never
  // inside one: the records of one Append, AppendRecord or AppendBatch become
  // visible together, though those of several calls between two Commit()s
  // may then become visible in more than one commit.
  virtual Status Commit() = 0;

  // Starts a Commit of everything appended before the call and returns at
  // once with its ticket: the background thread writes and syncs it while the
  // caller goes on (converting and appending the next batch, say).
  // WaitForCommit(ticket) returns when that commit is durable, as Commit()
  // would have, or with the error that stopped the writer. Until then it is
  // as a Commit() that has not returned yet: readers may already see it, and
  // a crash may or may not keep it. A later commit's ticket covers every
  // earlier one. Records appended after the call belong to later commits.
  //
  // Group commit: the background thread writes a commit's record and goes
  // on with the next blocks while the writer's sync thread runs the
  // fdatasync; commits written while a sync runs share the next one. A
  // caller that commits faster than the disk syncs (a batch loop that never
  // waits) thus pays one fdatasync per burst instead of one per commit, its
  // writes never stop for a sync, and every commit is durable at most two
  // syncs after it is written. On disk a commit written during a sync reads
  // as a flush until a later sync (docs/format.md "Recovery", rule 6).
  virtual Result<uint64_t> CommitAsync() = 0;
  // InvalidArgument for a ticket this writer has not given out;
  // FailedPrecondition for a Flush's ticket that no later commit has made
  // durable yet.
  virtual Status WaitForCommit(uint64_t ticket) = 0;
  // The newest ticket that is durable with every one before it (0: none
  // yet), without waiting: for a caller that acknowledges results upstream
  // as their commits become durable.
  virtual uint64_t DurableTicket() const = 0;

  // Shipping (WriterOptions::staging_dir): a commit is visible to readers of
  // the store once the segment that holds it is shipped. ShippedTicket is
  // the newest ticket (of CommitAsync; Commit and Flush take one each too)
  // shipped with every one before it, without waiting. WaitForShipped
  // seals the open segment if it holds the ticket's commit (at once, or, if
  // later frames are not committed yet, at the next commit; and only once
  // the next segment's number is claimed in the store) and waits until it
  // is published, or returns the error of the failed publication or claim
  // (the segment then stays in staging for SyncStaging). Without staging a
  // commit is in the store when it is durable: these are DurableTicket and
  // WaitForCommit.
  virtual uint64_t ShippedTicket() const = 0;
  virtual Status WaitForShipped(uint64_t ticket) = 0;
  // The ticket of the newest commit or flush queued so far (0: none), for
  // WaitForShipped after a Commit().
  virtual uint64_t LastTicket() const = 0;

  // Like Commit, but without waiting for stable storage: everything appended
  // before the call is written to the operating system, visible to readers
  // that refresh, all-or-nothing like a commit, and survives a crash of this
  // process (kill -9, an exception, the OOM killer). A power cut or kernel
  // crash before the next Commit (or Close, or an automatic commit) may take
  // flushed records away again, whole flushes at a time, newest first; it
  // never exposes part of one, and never loses a record of a Commit that
  // returned. The same guarantee as h5py's File.flush or SQLite's
  // synchronous=NORMAL, at the cost of a write instead of an fdatasync.
  // A reader that opens the segment verifies every block flushed since the
  // last sync (docs/format.md "Recovery", rule 6), so a writer that flushes
  // often should still commit now and then (commit_every_s).
  virtual Status Flush() = 0;
  // Flush without waiting: queues it and returns at once. The records
  // appended before the call become visible and safe from a kill -9 of this
  // process when the background thread has written them, a moment later,
  // all-or-nothing as with Flush; an error doing so is returned by a later
  // call (the next Append, Commit or Close).
  virtual Status FlushAsync() = 0;

  // Commits, seals the open segment and stops the background thread; with
  // staging, ships what is left and removes the writer's lease. The
  // destructor closes too, ignoring errors. Further calls fail with
  // FailedPrecondition.
  virtual Status Close() = 0;

  virtual const std::string& writer_id() const = 0;
  virtual WriterStats stats() const = 0;
};

}  // namespace runstore

#endif  // RUNSTORE_WRITER_H_
