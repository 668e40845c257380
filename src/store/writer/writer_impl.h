// The Writer implementation (docs/design.md#writer-threads): the writer the
// callers see, with a column builder per series; a queue of finished blocks,
// commits and seals (BlockQueue); the open segment, owned by whichever
// thread runs the queued tasks (OpenSegment); and group commit (GroupCommit),
// whose syncs run on a thread of their own while the next blocks are written.
//
// Threads: any number of callers; the background thread, which runs the
// queued tasks; the sync thread. A caller that must wait for a task or a
// sync anyway (a commit, a large value written from its memory) runs it
// itself when the thread for it is idle.
//
// Processes: a writer belongs to the process that opened it. In a child of
// fork() every call returns FailedPrecondition (the tickets are 0, the stats
// empty), and destroying the writer there only frees memory
// (docs/design.md#fork).
#ifndef RUNSTORE_STORE_WRITER_WRITER_IMPL_H_
#define RUNSTORE_STORE_WRITER_WRITER_IMPL_H_

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "format/block.h"
#include "runstore/env.h"
#include "runstore/writer.h"
#include "store/schema.h"
#include "store/staging/staging.h"
#include "store/writer/block_queue.h"
#include "store/writer/group_commit.h"
#include "store/writer/open_segment.h"
#include "store/writer/staging_roll.h"
#include "store/writer/value_checks.h"
#include "util/fork_guard.h"
#include "util/mutex.h"
#include "util/thread_annotations.h"

namespace runstore::writer {

class WriterImpl final : public Writer {
 public:
  // `segments_dir` is the store's segments/ directory; `existing` the schema
  // of the series in the store's snapshot, and `refresh` what brings it up
  // to date once, when a series not in it is defined (null: never).
  static Result<std::unique_ptr<Writer>> Open(Env* env, std::string segments_dir,
                                              const WriterOptions& options, StoreSchema existing,
                                              SchemaRefresher refresh = nullptr);
  ~WriterImpl() override;

  Status DefineSeries(std::string_view name, const SeriesOptions& options) override;
  Status Append(const RunRef& run, std::string_view name, int64_t step,
                const ValueRef& value) override;
  Status AppendRecord(RunRef run, int64_t step, std::span<const NamedValue> values) override;
  Status AppendBatch(std::span<const RunRef> runs, std::string_view name,
                     std::span<const int64_t> steps, const ValueRef& values) override;
  Status AppendValues(std::span<const RunRef> runs, std::string_view name,
                      std::span<const int64_t> steps, std::span<const ValueRef> values) override;
  Status AppendColumns(std::span<const RunRef> runs, std::span<const int64_t> steps,
                       std::span<const ColumnRef> columns) override;
  using Writer::AppendTimes;
  Status AppendTimes(std::span<const RunRef> runs, std::span<const int64_t> steps,
                     std::span<const double> times) override;
  void HoldAutoCommits() override;
  void ReleaseAutoCommits() override;
  Status Resume(RunRef run, int64_t step) override;
  Status Commit() override;
  Result<uint64_t> CommitAsync() override;
  Status WaitForCommit(uint64_t ticket) override;
  uint64_t DurableTicket() const override;
  uint64_t ShippedTicket() const override;
  Status WaitForShipped(uint64_t ticket) override;
  uint64_t LastTicket() const override;
  Status Flush() override;
  Status FlushAsync() override;
  Status Close() override;
  const std::string& writer_id() const override { return options_.writer_id; }
  WriterStats stats() const override;

 private:
  // A series this writer appends to, and its block being filled.
  struct Series {
    std::string name;
    SeriesSchema schema;
    Codec codec = Codec::kNone;
    size_t record_bytes = 0;  // fixed-shape numeric only
    std::unique_ptr<format::BlockBuilder> builder;
  };

  // With a `shipper` (staging), `segments_dir` is the store's segments/ and
  // segments are written in options.staging_dir.
  WriterImpl(Env* env, std::string segments_dir, const WriterOptions& options, StoreSchema existing,
             SchemaRefresher refresh, uint64_t next_seq, uint64_t sealed_predecessor,
             std::unique_ptr<staging::Shipper> shipper);

  // ---- The writer the callers see (mu_ held).
  Status CheckUsableLocked() const RUNSTORE_REQUIRES(mu_);
  Result<Series*> GetSeriesLocked(std::string_view name, const ValueRef* first_value,
                                  bool internal = false) RUNSTORE_REQUIRES(mu_);
  // Checks `value` against series `s` (the fast path compares with the series'
  // fixed record layout).
  static Status CheckAgainstSeries(const Series& s, std::string_view name, const ValueRef& value);
  // CheckAgainstSeries of each value; a value repeated (the same bytes as the
  // one before it, as a column of one state holds) is checked once.
  static Status CheckValuesAgainst(const Series& s, std::string_view name,
                                   std::span<const ValueRef> values);
  // The store's schema of `name` (null: none), refreshed the first time a
  // series is not in it.
  Result<const SeriesSchema*> ExistingSchemaLocked(std::string_view name) RUNSTORE_REQUIRES(mu_);
  Status DefineSeriesLocked(std::string_view name, const SeriesSchema& schema, Codec codec)
      RUNSTORE_REQUIRES(mu_);
  Status AppendLocked(Series* s, const RunRef& run, int64_t step, const ValueRef& value)
      RUNSTORE_REQUIRES(mu_);
  // The appends of AppendBatch and AppendValues, once their values were
  // checked against `s`.
  Status AppendBatchLocked(Series* s, std::span<const RunRef> runs, std::span<const int64_t> steps,
                           const ValueRef& values) RUNSTORE_REQUIRES(mu_);
  Status AppendValuesLocked(Series* s, std::span<const RunRef> runs, std::span<const int64_t> steps,
                            std::span<const ValueRef> values) RUNSTORE_REQUIRES(mu_);
  // Undoes the definition of series that have no record yet (a call whose
  // checks failed after it defined them).
  void ForgetSeriesLocked(std::span<Series* const> defined) RUNSTORE_REQUIRES(mu_);
  // With record_time: appends the time now to "~time" at each key.
  Status AppendTimesLocked(std::span<const RunRef> runs, std::span<const int64_t> steps,
                           std::span<const double> times = {}) RUNSTORE_REQUIRES(mu_);
  // Adds a small value to the series' open block (which must exist).
  void AddToOpenBlockLocked(Series* s, const RunRef& run, int64_t step, const ValueRef& value)
      RUNSTORE_REQUIRES(mu_);
  Status AppendLarge(Series* s, const RunRef& run, int64_t step, const ValueRef& value)
      RUNSTORE_REQUIRES(mu_);
  // Hands a series' block being filled (or every series') to the queue.
  void QueueBlockOfLocked(Series* s) RUNSTORE_REQUIRES(mu_);
  void QueueAllBlocksLocked() RUNSTORE_REQUIRES(mu_);
  // Queues a commit (`sync`) or a flush of everything appended; its ticket.
  uint64_t QueueCommitLocked(bool sync = true) RUNSTORE_REQUIRES(mu_);
  Status CommitLocked(bool sync = true) RUNSTORE_REQUIRES(mu_);
  // WaitForCommit of a ticket known to have been given out.
  Status WaitForCommitLocked(uint64_t ticket) RUNSTORE_REQUIRES(mu_);
  void WaitForSpaceLocked() RUNSTORE_REQUIRES(mu_);
  // Waits, as back-pressure counted in stats_, until `enough`, an error, or
  // an empty queue.
  void BackpressureWaitLocked(const std::function<bool()>& enough) RUNSTORE_REQUIRES(mu_);
  void AfterAppendLocked(size_t value_bytes) RUNSTORE_REQUIRES(mu_);
  // Automatic commits (commit_every_bytes, commit_every_s) wait while a call
  // that appends several records runs, so that none is split by one; one
  // that came due meanwhile is made when the last hold is released. So does
  // Close (calls_appending_): such a call may wait for buffer space or for a
  // large value to be written, and a close that came in between would leave
  // the records appended before it in the last commit and fail the call.
  void HoldAutoCommitsLocked() RUNSTORE_REQUIRES(mu_);
  void ReleaseAutoCommitsLocked() RUNSTORE_REQUIRES(mu_);
  class AutoCommitHold {
   public:
    explicit AutoCommitHold(WriterImpl* w) RUNSTORE_REQUIRES(w->mu_) : w_(w) {
      w_->HoldAutoCommitsLocked();
      ++w_->calls_appending_;
    }
    // Runs with the writer's mutex held: the hold is made and released
    // inside one locked call (the analysis cannot see that from here).
    ~AutoCommitHold() RUNSTORE_NO_THREAD_SAFETY_ANALYSIS {
      w_->ReleaseAutoCommitsLocked();
      if (--w_->calls_appending_ == 0) w_->done_cv_.SignalAll();  // Close may wait
    }
    AutoCommitHold(const AutoCommitHold&) = delete;
    AutoCommitHold& operator=(const AutoCommitHold&) = delete;

   private:
    WriterImpl* const w_;
  };

  // ---- Running the queued tasks.
  void BackgroundLoop() RUNSTORE_EXCLUDES(mu_);
  // Runs the task at the front of the queue (mu_ held on entry and exit,
  // released while the task runs). Tasks run one at a time, in queue order,
  // on the background thread or on a caller waiting for one (running_).
  void RunTaskLocked(bool by_background) RUNSTORE_REQUIRES(mu_);
  // Waits until `done` or a background error; while the background thread
  // is idle, runs queued tasks itself instead of waiting for it to wake, and
  // with `run_syncs` (a caller waiting for a commit) a pending sync too.
  void WaitForTaskLocked(const std::function<bool()>& done, bool run_syncs = false)
      RUNSTORE_REQUIRES(mu_);
  // The parts of a task that touch the open segment (task_role_ held, mu_ not).
  Status WriteBlock(BlockQueue::Task* t) RUNSTORE_REQUIRES(task_role_) RUNSTORE_EXCLUDES(mu_);
  Status WriteCommit(bool sync, uint64_t* sync_length) RUNSTORE_REQUIRES(task_role_)
      RUNSTORE_EXCLUDES(mu_);
  // Commits what is left, then seals: waits for a running sync first, and
  // lets no sync start meanwhile. With staging, hands the sealed segment to
  // the shipper as holding every commit up to ticket `covers`.
  Status SealSegment(uint64_t covers) RUNSTORE_REQUIRES(task_role_) RUNSTORE_EXCLUDES(mu_);
  // Staging: seals the open segment for shipping while the queue is empty
  // and no task runs (roll_.IdleRollDue()), taking the task role; when its
  // last frames are not committed, leaves the seal to the next commit.
  void RollIdleLocked() RUNSTORE_REQUIRES(mu_);

  // ---- fork() (docs/design.md#fork).
  // The error of every call made in a child of fork().
  Status ForkedError() const;
  // Destruction in a child: the parent's threads are not joined, its files
  // not written, synced, sealed or removed, and what one of its threads may
  // have been changing at the fork is left as it is rather than freed.
  void AbandonAfterFork();

  // ---- Group commit: the sync thread's loop, and the one sync it runs at a
  // time (mu_ held on entry and exit, released during the fdatasync).
  void SyncLoop() RUNSTORE_EXCLUDES(mu_);
  bool SyncPendingLocked() const RUNSTORE_REQUIRES(mu_) {
    return group_.Pending() && bg_error_.ok();
  }
  void RunSyncLocked() RUNSTORE_REQUIRES(mu_);

  // ---- Constant after construction.
  Env* const env_;
  const WriterOptions options_;
  // The store's schema, brought up to date by refresh_schema_ the first
  // time a series not in it is defined.
  const SchemaRefresher refresh_schema_;
  const ForkGuard fork_guard_;  // the process the writer belongs to
  // Staging only (null otherwise); thread-safe, with a thread of its own.
  // Released without being destroyed in a child of fork() (its destructor
  // would stop the parent's lease).
  std::unique_ptr<staging::Shipper> shipper_;

  // ---- Protected by mu_.
  mutable Mutex mu_;
  CondVar work_cv_;  // the background thread waits here, with mu_
  CondVar done_cv_;  // appenders and committers wait here, with mu_
  CondVar sync_cv_;  // the sync thread waits here, with mu_
  // The callers' side.
  // Looked up by string_view, without making a std::string per value.
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::unique_ptr<Series>, NameHash, std::equal_to<>> series_
      RUNSTORE_GUARDED_BY(mu_);
  // series_ in the order they were created: a commit's blocks are queued in
  // it, so that readers see series in the order they were first logged.
  std::vector<Series*> series_order_ RUNSTORE_GUARDED_BY(mu_);
  StoreSchema existing_ RUNSTORE_GUARDED_BY(mu_);
  bool schema_refreshed_ RUNSTORE_GUARDED_BY(mu_) = false;
  Series* last_series_ RUNSTORE_GUARDED_BY(mu_) = nullptr;
  // The series of the last AppendRecord, in its order: a loop that logs the
  // same metrics every step finds them by comparing names, not by hashing.
  std::vector<Series*> last_record_ RUNSTORE_GUARDED_BY(mu_);
  Series* time_series_ RUNSTORE_GUARDED_BY(mu_) = nullptr;  // "~time", once record_time wrote it
  uint64_t bytes_since_commit_ RUNSTORE_GUARDED_BY(mu_) = 0;
  std::optional<std::chrono::steady_clock::time_point> first_uncommitted_ RUNSTORE_GUARDED_BY(mu_);
  int auto_commit_holds_ RUNSTORE_GUARDED_BY(mu_) = 0;     // AutoCommitHold
  int calls_appending_ RUNSTORE_GUARDED_BY(mu_) = 0;       // AutoCommitHold, not the API's
  bool time_commit_due_ RUNSTORE_GUARDED_BY(mu_) = false;  // during a hold
  // Tickets: commits (and flushes) are numbered 1, 2, ... as they are
  // queued; large values written from the caller's memory likewise.
  uint64_t commit_requested_ RUNSTORE_GUARDED_BY(mu_) = 0;
  uint64_t commit_done_ RUNSTORE_GUARDED_BY(mu_) = 0;       // its record is written
  uint64_t last_sync_ticket_ RUNSTORE_GUARDED_BY(mu_) = 0;  // the newest commit (not flush)
  uint64_t borrowed_requested_ RUNSTORE_GUARDED_BY(mu_) = 0;
  uint64_t borrowed_done_ RUNSTORE_GUARDED_BY(mu_) = 0;
  BlockQueue queue_ RUNSTORE_GUARDED_BY(mu_);
  GroupCommit group_ RUNSTORE_GUARDED_BY(mu_);
  bool running_ RUNSTORE_GUARDED_BY(mu_) = false;   // a thread holds task_role_
  Status bg_error_ RUNSTORE_GUARDED_BY(mu_);        // the first error of a task or sync: sticky
  bool closing_ RUNSTORE_GUARDED_BY(mu_) = false;   // Close waits for calls_appending_
  bool stopping_ RUNSTORE_GUARDED_BY(mu_) = false;  // Close queued the seal
  bool sync_stop_ RUNSTORE_GUARDED_BY(mu_) = false;
  bool closed_ RUNSTORE_GUARDED_BY(mu_) = false;
  WriterStats stats_ RUNSTORE_GUARDED_BY(mu_);
  // Staging: when to seal the open segment for shipping (ship_every_s came
  // due, or WaitForShipped).
  StagingRoll roll_ RUNSTORE_GUARDED_BY(mu_);

  // ---- Owned by the thread that runs tasks: it set running_ under mu_, and
  // holds task_role_ (to the analysis) until it clears it.
  Role task_role_;
  OpenSegment open_ RUNSTORE_GUARDED_BY(task_role_);

  // ---- Started by the constructor, joined by Close.
  std::thread bg_;
  std::thread sync_thread_;
};

}  // namespace runstore::writer

#endif  // RUNSTORE_STORE_WRITER_WRITER_IMPL_H_
