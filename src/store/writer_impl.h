// The Writer implementation: column buffers per series, a queue of finished
// blocks, one background thread that owns the open segment, and a sync thread
// that makes commits durable while the next blocks are written.
#ifndef RUNSTORE_STORE_WRITER_IMPL_H_
#define RUNSTORE_STORE_WRITER_IMPL_H_

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "format/block.h"
#include "format/segment_writer.h"
#include "runstore/env.h"
#include "runstore/writer.h"

namespace runstore {

// The shape of a series as the store knows it, for conflict checks.
struct SeriesSchema {
  DType dtype = DType::kFloat64;
  bool variable_shape = false;
  std::vector<int64_t> shape;
};
using StoreSchema = std::unordered_map<std::string, SeriesSchema>;

// Reserved series holding resume markers (docs/format.md "Resolving keys").
inline constexpr std::string_view kResumeSeries = "~resume";

// Describes a mismatch of `value` against `schema`, or returns OK.
Status CheckValueAgainst(std::string_view name, const SeriesSchema& schema, const ValueRef& value);
// Checks a value by itself: valid dtype, rank, dimensions and byte count.
Status CheckValue(std::string_view name, const ValueRef& value);

class WriterImpl final : public Writer {
 public:
  // `segments_dir` is the store's segments/ directory; `existing` the schema
  // of the series already in the store.
  static Result<std::unique_ptr<Writer>> Open(Env* env, std::string segments_dir,
                                              const WriterOptions& options, StoreSchema existing);
  ~WriterImpl() override;

  Status DefineSeries(std::string_view name, const SeriesOptions& options) override;
  Status Append(RunRef run, std::string_view name, int64_t step, const ValueRef& value) override;
  Status AppendRecord(RunRef run, int64_t step, std::span<const NamedValue> values) override;
  Status AppendBatch(std::span<const RunRef> runs, std::string_view name,
                     std::span<const int64_t> steps, const ValueRef& values) override;
  Status Resume(RunRef run, int64_t step) override;
  Status Commit() override;
  Result<uint64_t> CommitAsync() override;
  Status WaitForCommit(uint64_t ticket) override;
  uint64_t DurableTicket() const override;
  Status Flush() override;
  Status Close() override;
  const std::string& writer_id() const override { return options_.writer_id; }
  WriterStats stats() const override;

 private:
  struct Series {
    std::string name;
    SeriesSchema schema;
    Codec codec = Codec::kNone;
    size_t record_bytes = 0;  // fixed-shape numeric only
    std::unique_ptr<format::BlockBuilder> builder;
  };
  struct Task {
    enum Kind { kBlock, kCommit, kSeal } kind;
    std::unique_ptr<format::BlockBuilder> block;
    uint64_t ticket = 0;    // commit ticket, or borrowed-block ticket
    size_t bytes = 0;       // accounted in buffered_bytes_
    bool borrowed = false;  // a large value of its own, written from the caller's memory
    bool sync = true;       // kCommit: a Commit (synced), or a Flush (not)
  };

  WriterImpl(Env* env, std::string segments_dir, const WriterOptions& options, StoreSchema existing,
             uint64_t next_seq, uint64_t sealed_predecessor);

  Status CheckUsableLocked() const;
  Result<Series*> GetSeriesLocked(std::string_view name, const ValueRef* first_value,
                                  bool internal = false);
  // Checks `value` against series `s` (the fast path compares with the series'
  // fixed record layout).
  static Status CheckAgainstSeries(const Series& s, std::string_view name, const ValueRef& value);
  Status DefineSeriesLocked(std::string_view name, const SeriesSchema& schema, Codec codec);
  Status AppendLocked(std::unique_lock<std::mutex>& lk, Series* s, const RunRef& run, int64_t step,
                      const ValueRef& value);
  // Adds a small value to the series' open block (which must exist).
  void AddToOpenBlockLocked(std::unique_lock<std::mutex>& lk, Series* s, const RunRef& run,
                            int64_t step, const ValueRef& value);
  Status AppendLarge(std::unique_lock<std::mutex>& lk, Series* s, const RunRef& run, int64_t step,
                     const ValueRef& value);
  std::unique_ptr<format::BlockBuilder> NewBuilderLocked(const Series& s);
  void FlushSeriesLocked(Series* s);
  void FlushAllLocked();
  uint64_t EnqueueCommitLocked(bool sync = true);
  Status CommitLocked(std::unique_lock<std::mutex>& lk, bool sync = true);
  // WaitForCommit of a ticket known to have been given out.
  Status WaitForCommitLocked(std::unique_lock<std::mutex>& lk, uint64_t ticket);
  void WaitForSpaceLocked(std::unique_lock<std::mutex>& lk);
  // Waits, as back-pressure counted in stats_, until `enough`, an error, or
  // an empty queue.
  void BackpressureWaitLocked(std::unique_lock<std::mutex>& lk,
                              const std::function<bool()>& enough);
  void AfterAppendLocked(std::unique_lock<std::mutex>& lk, size_t value_bytes);
  // Automatic commits (commit_every_bytes, commit_every_s) wait while a call
  // that appends several records runs, so that none is split by one; one
  // that came due meanwhile is made when the last hold is released.
  void HoldAutoCommitsLocked();
  void ReleaseAutoCommitsLocked();
  class AutoCommitHold {
   public:
    explicit AutoCommitHold(WriterImpl* w) : w_(w) { w_->HoldAutoCommitsLocked(); }
    ~AutoCommitHold() { w_->ReleaseAutoCommitsLocked(); }
    AutoCommitHold(const AutoCommitHold&) = delete;
    AutoCommitHold& operator=(const AutoCommitHold&) = delete;

   private:
    WriterImpl* const w_;
  };

  void BackgroundLoop();
  // Runs the task at the front of the queue (mu_ held on entry and exit,
  // released while the task runs). Tasks run one at a time, in queue order,
  // on the background thread or on a caller waiting for one (running_).
  void RunTaskLocked(std::unique_lock<std::mutex>& lk, bool by_background);
  // Waits until `done` or a background error; while the background thread is
  // idle, runs queued tasks itself instead of waiting for it to wake, and
  // with `run_syncs` (a caller waiting for a commit) a pending sync too.
  void WaitForTaskLocked(std::unique_lock<std::mutex>& lk, const std::function<bool()>& done,
                         bool run_syncs = false);
  // Writes a task's block to the segment; a borrowed one header last
  // (format::SegmentWriter::AddBlock).
  Status ProcessBlock(Task* t);
  // Writes a commit record for the frames since the last one (none if there
  // are none). For a commit (`sync`), sets `*sync_length` to the bytes a sync
  // must cover to make it and everything before it durable, 0 if they are.
  Status CommitSegment(bool sync, uint64_t* sync_length);
  // Whether the open segment has reached its size target (or its index its
  // memory bound): it is sealed after the next commit.
  bool SegmentWantsRoll() const;
  // Commits what is left, writes the footer and syncs. No SyncPrefix runs
  // meanwhile (sealing_).
  Status SealSegment();

  // The sync thread's loop, and the one sync it runs at a time (mu_ held on
  // entry and exit, released during the fdatasync). A caller waiting for a
  // commit runs a pending sync itself when none is running.
  void SyncLoop();
  bool SyncPendingLocked() const {
    return sync_want_ticket_ > sync_taken_ticket_ && !sync_running_ && !sealing_ && bg_error_.ok();
  }
  void RunSyncLocked(std::unique_lock<std::mutex>& lk);
  Status EnsureSegment();

  Env* const env_;
  const std::string segments_dir_;
  WriterOptions options_;
  const StoreSchema existing_;

  mutable std::mutex mu_;
  std::condition_variable cv_work_;  // the background thread waits here
  std::condition_variable cv_done_;  // appenders and committers wait here
  std::deque<Task> queue_;
  std::unordered_map<std::string, std::unique_ptr<Series>> series_;
  Series* last_series_ = nullptr;
  std::vector<std::unique_ptr<format::BlockBuilder>> free_builders_;
  size_t buffered_bytes_ = 0;
  // Of buffered_bytes_, the finished blocks in the queue. Past QueueLimit()
  // appenders wait: the background thread stays busy with a few blocks
  // queued, and a deeper queue only costs memory (fresh pages to fault in).
  size_t queued_bytes_ = 0;
  size_t QueueLimit() const {
    return std::max<size_t>(4 * options_.block_bytes, options_.buffer_bytes / 8);
  }
  size_t pooled_bytes_ = 0;
  uint64_t bytes_since_commit_ = 0;
  int auto_commit_holds_ = 0;     // calls appending several records (AutoCommitHold)
  bool time_commit_due_ = false;  // commit_every_s came due during a hold
  std::optional<std::chrono::steady_clock::time_point> first_uncommitted_;
  uint64_t commit_requested_ = 0;
  uint64_t commit_done_ = 0;
  uint64_t durable_done_ = 0;      // every ticket up to this one is durable
  uint64_t last_sync_ticket_ = 0;  // the newest commit (not flush) enqueued
  // Group commit: the newest commit whose record is written and that waits
  // for a sync of the first `sync_want_length_` bytes of `sync_segment_`.
  // Commits written while a sync runs wait for the next one, which covers
  // them all.
  uint64_t sync_want_ticket_ = 0;
  uint64_t sync_want_length_ = 0;
  format::SegmentWriter* sync_segment_ = nullptr;
  uint64_t sync_taken_ticket_ = 0;  // the want the last sync started on
  bool sync_running_ = false;
  bool sealing_ = false;  // the segment is being sealed: no sync may start
  bool sync_stop_ = false;
  std::condition_variable cv_sync_;  // the sync thread waits here
  bool running_ = false;             // a thread is running a task (see RunTaskLocked)
  uint64_t borrowed_requested_ = 0;
  uint64_t borrowed_done_ = 0;
  Status bg_error_;
  bool stopping_ = false;
  bool closed_ = false;
  WriterStats stats_;
  std::thread bg_;
  std::thread sync_thread_;

  // Owned by the background thread.
  std::unique_ptr<format::SegmentWriter> segment_;
  uint64_t next_seq_;            // the number to try for the next segment
  uint64_t segment_seq_ = 0;     // the number of segment_
  uint64_t sealed_predecessor_;  // the last segment this writer saw sealed (SegmentHeader)
  int64_t last_commit_time_ = 0;
  std::vector<std::string_view> pieces_;
};

}  // namespace runstore

#endif  // RUNSTORE_STORE_WRITER_IMPL_H_
