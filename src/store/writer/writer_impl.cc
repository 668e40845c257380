#include "store/writer/writer_impl.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>
#include <utility>

#include "env/path.h"
#include "format/format.h"
#include "format/segment_reader.h"
#include "store/compact/compacted.h"
#include "util/coding.h"
#include "util/shape.h"
#include "util/utf8.h"

namespace runstore::writer {
using compact::NextSequencePastReplaced;

namespace {

// The number a writer of `writer_id` takes first: past every segment of the
// id in `segments_dir`, and past every number a compacted segment names for
// it. *sealed_predecessor: the previous life's last segment, when it was
// sealed, else 0.
Result<uint64_t> NextSequenceOf(Env* env, const std::string& segments_dir,
                                const std::string& writer_id, uint64_t* sealed_predecessor) {
  RUNSTORE_ASSIGN_OR_RETURN(auto children, env->GetChildren(segments_dir));
  uint64_t next_seq = 1;
  for (const auto& c : children) {
    std::string id;
    uint64_t seq;
    if (format::ParseSegmentFileName(c, &id, &seq) && id == writer_id) {
      next_seq = std::max(next_seq, seq + 1);
    }
  }
  // ... and after every number a compacted segment names for the id: the
  // segment compaction removed must not come back under a new file of the
  // same name (docs/design.md#compaction). Readers tell the two apart by
  // created_ns anyway; this keeps names unique as well.
  RUNSTORE_ASSIGN_OR_RETURN(const uint64_t past_replaced,
                            NextSequencePastReplaced(env, segments_dir, children, writer_id));
  const uint64_t next_present = next_seq;
  next_seq = std::max(next_seq, past_replaced);
  // The previous life's last segment, when it was sealed, is this writer's
  // sealed predecessor: a reader that later finds it without its seal knows
  // it was damaged. One left open by a crash is not named.
  // A seal torn by a power cut (trailer on disk, footer not) reads as a
  // crashed tail, so it is judged by the readers' rule, not the trailer alone.
  if (next_present > 1 && next_present == next_seq) {
    const std::string last_name = format::SegmentFileName(writer_id, next_seq - 1);
    auto last = env->NewRandomAccessFile(segments_dir + "/" + last_name);
    if (last.ok() && format::ReadsAsSealed(**last, last_name)) *sealed_predecessor = next_seq - 1;
  }
  return next_seq;
}

}  // namespace

Result<std::unique_ptr<Writer>> WriterImpl::Open(Env* env, std::string segments_dir,
                                                 const WriterOptions& options_in,
                                                 StoreSchema existing, SchemaRefresher refresh) {
  WriterOptions options = options_in;
  // A default id (host, pid, 64 bits of randomness and clock) names no
  // segment yet: there is nothing to number past, so opening its writer
  // lists nothing and reads no other segment (docs/design.md#writer-ids).
  // Were a file of its name there all the same, the exclusive create of the
  // first segment would take the next free number.
  const bool new_id = options.writer_id.empty();
  if (new_id) options.writer_id = DefaultWriterId();
  RUNSTORE_RETURN_IF_ERROR(ValidateWriterId(options.writer_id));
  if (options.buffer_bytes < (1u << 16)) {
    return Status::InvalidArgument("buffer_bytes must be at least 64 KiB, got " +
                                   std::to_string(options.buffer_bytes));
  }
  if (options.commit_every_s < 0) return Status::InvalidArgument("commit_every_s is negative");
  if (options.segment_bytes < (1u << 16)) {
    return Status::InvalidArgument("segment_bytes must be at least 64 KiB");
  }
  // Blocks are a fraction of the buffer so that several series fit in it.
  options.block_bytes = std::clamp<size_t>(options.block_bytes, 4096, options.buffer_bytes / 8);
  options.large_value_bytes = std::max<size_t>(options.large_value_bytes, 4096);
  Status w = env->CheckWritableDir(segments_dir);
  if (!w.ok()) return w.WithContext("store is not writable");
  // Continue this writer id's numbering, so a restarted writer that reuses its
  // id never touches the segments of its previous life (invariant 4).
  uint64_t next_seq = 1;
  uint64_t sealed_predecessor = 0;
  if (!new_id) {
    RUNSTORE_ASSIGN_OR_RETURN(
        next_seq, NextSequenceOf(env, segments_dir, options.writer_id, &sealed_predecessor));
  }
  // Node-local staging (docs/design.md#staging): the lease exists before
  // the first segment does, so that a sync never takes that segment for a
  // dead writer's.
  if (!options.staging_dir) {
    const char* from_env = std::getenv(staging::kStagingDirVariable);
    options.staging_dir = from_env ? from_env : "";
  }
  if (options.ship_every_s < 0) return Status::InvalidArgument("ship_every_s is negative");
  std::unique_ptr<staging::Shipper> shipper;
  if (!options.staging_dir->empty()) {
    const std::string& dir = *options.staging_dir;
    RUNSTORE_RETURN_IF_ERROR(staging::CheckApart(env, dir, ParentDir(segments_dir)));
    if (Status c = env->CreateDir(dir); !c.ok() && c.code() != StatusCode::kAlreadyExists) {
      return c.WithContext("creating staging directory " + dir);
    }
    auto is_dir = env->IsDirectory(dir);
    if (!is_dir.ok()) return is_dir.status().WithContext("staging directory " + dir);
    if (!*is_dir)
      return Status::InvalidArgument("staging directory " + dir + " is not a directory");
    if (Status c = env->CheckWritableDir(dir); !c.ok()) {
      return c.WithContext("staging directory " + dir + " is not writable");
    }
    const std::string token = staging::NewOwnerToken();
    RUNSTORE_ASSIGN_OR_RETURN(auto lease,
                              staging::Lease::Start(env, dir, token, "writer", options.writer_id));
    shipper = std::make_unique<staging::Shipper>(env, dir, segments_dir, token, std::move(lease),
                                                 options.writer_id, next_seq);
  }
  std::unique_ptr<WriterImpl> impl(new WriterImpl(env, std::move(segments_dir), options,
                                                  std::move(existing), std::move(refresh), next_seq,
                                                  sealed_predecessor, std::move(shipper)));
  return std::unique_ptr<Writer>(std::move(impl));
}

WriterImpl::WriterImpl(Env* env, std::string segments_dir, const WriterOptions& options,
                       StoreSchema existing, SchemaRefresher refresh, uint64_t next_seq,
                       uint64_t sealed_predecessor, std::unique_ptr<staging::Shipper> shipper)
    : env_(env),
      options_(options),
      refresh_schema_(std::move(refresh)),
      shipper_(std::move(shipper)),
      existing_(std::move(existing)),
      queue_(options.buffer_bytes, options.block_bytes),
      roll_(options.ship_every_s),
      open_(env, shipper_ ? *options.staging_dir : segments_dir, options.writer_id,
            options.zstd_level, next_seq, sealed_predecessor, shipper_.get()) {
  bg_ = std::thread([this] { BackgroundLoop(); });
  sync_thread_ = std::thread([this] { SyncLoop(); });
}

WriterImpl::~WriterImpl() {
  if (fork_guard_.InOtherProcess()) {
    AbandonAfterFork();
    return;
  }
  (void)Close();
}

namespace {

// Ends a std::thread object's life without joining or detaching it: in a
// child of fork() its handle names a thread of the parent, which does not
// exist here (and whose descriptor glibc may have handed to a new thread of
// this process).
void AbandonThread(std::thread* t) {
  alignas(std::thread) unsigned char grave[sizeof(std::thread)];
  new (grave) std::thread(std::move(*t));  // *t is empty now; the grave is never destroyed
}

// Puts a new T in *x without destroying the old one, which a thread of the
// parent may have left half changed (or been waiting on) at the fork.
template <typename T, typename... Args>
void Renew(T* x, Args&&... args) {
  new (x) T(std::forward<Args>(args)...);
}

}  // namespace

Status WriterImpl::ForkedError() const {
  return Status::FailedPrecondition(
      "writer '" + options_.writer_id + "' was opened in process " +
      std::to_string(fork_guard_.owner_pid()) + " and this is process " + std::to_string(getpid()) +
      ", a child of fork(): a writer's threads and open segment stay with the process that "
      "opened it, so nothing can be appended, committed or closed through it here (nothing was, "
      "and the parent's writer goes on unharmed). Open a writer in this process "
      "(Store::NewWriter; store.writer() in Python)");
}

// The analysis is off: this runs in a child of fork(), whose one thread is the
// caller, and it is the fork, not a lock, that makes the members its own.
void WriterImpl::AbandonAfterFork() RUNSTORE_NO_THREAD_SAFETY_ANALYSIS {
  AbandonThread(&bg_);
  AbandonThread(&sync_thread_);
  // A thread of the parent may have waited on them: destroying them would
  // wait for it for ever (glibc's pthread_cond_destroy waits for waiters).
  Renew(&work_cv_);
  Renew(&done_cv_);
  Renew(&sync_cv_);
  // Its destructor would ship, stop the parent's lease and remove the lease
  // file and the number claimed ahead: left to the child's exit.
  (void)shipper_.release();
  // The mutex free at the fork: no thread of the parent was changing what it
  // guards. No task and no sync running: nor the open segment.
  const bool settled = mu_.TryLock();
  const bool busy = !settled || running_ || group_.running();
  if (settled) mu_.Unlock();
  if (!settled) {
    Renew(&mu_);
    Renew(&series_);
    Renew(&series_order_);
    Renew(&last_record_);
    Renew(&queue_, options_.buffer_bytes, options_.block_bytes);
    Renew(&bg_error_);
  }
  // Its descriptor (this process's copy) is closed by the destructor, which
  // writes nothing; one a thread of the parent was using is left open.
  if (busy) Renew(&open_, env_, std::string(), options_.writer_id, options_.zstd_level, 0, 0);
}

Status WriterImpl::CheckUsableLocked() const {
  if (!closed_ && !stopping_ && !closing_ && bg_error_.ok()) return Status::OK();  // no copy
  if (closed_ || stopping_ || closing_)
    return Status::FailedPrecondition("writer " + options_.writer_id + " is closed");
  return bg_error_;
}

Result<const SeriesSchema*> WriterImpl::ExistingSchemaLocked(std::string_view name) {
  auto it = existing_.find(std::string(name));
  if (it == existing_.end() && !schema_refreshed_ && refresh_schema_) {
    // A series the store's snapshot did not know: it may have been defined
    // since, so the schema is brought up to date, once per writer (a refresh
    // that fails fails this call, and the next series not known tries again).
    RUNSTORE_ASSIGN_OR_RETURN(std::optional<StoreSchema> now, refresh_schema_());
    schema_refreshed_ = true;
    if (now) existing_ = std::move(*now);
    it = existing_.find(std::string(name));
  }
  return it == existing_.end() ? nullptr : &it->second;
}

Status WriterImpl::DefineSeriesLocked(std::string_view name, const SeriesSchema& schema,
                                      Codec codec) {
  RUNSTORE_ASSIGN_OR_RETURN(const SeriesSchema* existing, ExistingSchemaLocked(name));
  if (existing != nullptr) {
    const SeriesSchema& e = *existing;
    if (e.dtype != schema.dtype || e.variable_shape != schema.variable_shape ||
        (!e.variable_shape && e.shape != schema.shape)) {
      return Status::InvalidArgument(
          "series '" + std::string(name) + "' exists in the store as " +
          std::string(DTypeName(e.dtype)) +
          (e.variable_shape ? " variable-shape" : " " + ShapeString(e.shape)) +
          ", conflicting with " + std::string(DTypeName(schema.dtype)) +
          (schema.variable_shape ? " variable-shape" : " " + ShapeString(schema.shape)));
    }
  }
  auto s = std::make_unique<Series>();
  s->name = std::string(name);
  s->schema = schema;
  s->codec = codec;
  if (!IsVarLength(schema.dtype) && !schema.variable_shape) {
    s->record_bytes = DTypeSize(schema.dtype);
    for (int64_t d : schema.shape) s->record_bytes *= static_cast<size_t>(d);
  }
  series_order_.push_back(s.get());
  series_.emplace(s->name, std::move(s));
  return Status::OK();
}

Status WriterImpl::DefineSeries(std::string_view name, const SeriesOptions& o) {
  if (fork_guard_.InOtherProcess()) return ForkedError();
  RUNSTORE_RETURN_IF_ERROR(ValidateSeriesName(name, options_.allow_reserved_names));
  SeriesSchema schema{o.dtype, o.variable_shape,
                      o.variable_shape ? std::vector<int64_t>{} : o.shape};
  if (!IsValidDType(static_cast<uint8_t>(o.dtype))) return Status::InvalidArgument("invalid dtype");
  if (IsVarLength(o.dtype) && (!o.shape.empty() || o.variable_shape)) {
    return Status::InvalidArgument("series '" + std::string(name) +
                                   "': " + std::string(DTypeName(o.dtype)) + " values are rank 0");
  }
  for (int64_t d : schema.shape) {
    if (d < 0)
      return Status::InvalidArgument("series '" + std::string(name) + "': negative dimension");
  }
  if (schema.shape.size() > static_cast<size_t>(kMaxRank))
    return Status::InvalidArgument("rank exceeds 32");
  if (uint64_t bytes;
      !IsVarLength(o.dtype) && !ShapeBytes(schema.shape, DTypeSize(o.dtype), &bytes)) {
    return Status::InvalidArgument("series '" + std::string(name) + "': shape " +
                                   ShapeString(schema.shape) +
                                   " is too large: a value holds at most 2^48 bytes");
  }
  MutexLock lock(&mu_);
  RUNSTORE_RETURN_IF_ERROR(CheckUsableLocked());
  if (auto it = series_.find(name); it != series_.end()) {
    const SeriesSchema& e = it->second->schema;
    if (e.dtype == schema.dtype && e.variable_shape == schema.variable_shape &&
        e.shape == schema.shape) {
      it->second->codec = o.codec;
      return Status::OK();
    }
    return Status::InvalidArgument(
        "series '" + std::string(name) +
        "' was already written by this writer with another dtype or shape");
  }
  return DefineSeriesLocked(name, schema, o.codec);
}

Result<WriterImpl::Series*> WriterImpl::GetSeriesLocked(std::string_view name,
                                                        const ValueRef* first_value,
                                                        bool internal) {
  // Reserved names are refused even when this writer already has the series
  // (its own resume markers live in one).
  if (!name.empty() && name[0] == '~' && !internal && !options_.allow_reserved_names) {
    return ValidateSeriesName(name);
  }
  if (last_series_ != nullptr && last_series_->name == name) return last_series_;
  auto it = series_.find(name);
  if (it == series_.end()) {
    RUNSTORE_RETURN_IF_ERROR(ValidateSeriesName(name, /*allow_reserved=*/true));
    // The first value defines the series, so it must be valid by itself
    // (the fast path below only compares later values with it).
    RUNSTORE_RETURN_IF_ERROR(CheckValue(name, *first_value));
    SeriesSchema schema{first_value->dtype, false,
                        std::vector<int64_t>(first_value->shape.begin(), first_value->shape.end())};
    RUNSTORE_ASSIGN_OR_RETURN(const SeriesSchema* existing, ExistingSchemaLocked(name));
    if (existing != nullptr && existing->variable_shape) {
      schema.variable_shape = true;  // adopt the store's variable-shape series
      schema.shape.clear();
    }
    RUNSTORE_RETURN_IF_ERROR(DefineSeriesLocked(name, schema, options_.codec));
    it = series_.find(name);
  }
  last_series_ = it->second.get();
  return last_series_;
}

void WriterImpl::QueueBlockOfLocked(Series* s) {
  if (!s->builder || s->builder->count() == 0) return;
  queue_.PushBlock(std::move(s->builder));
  work_cv_.Signal();
}

void WriterImpl::QueueAllBlocksLocked() {
  for (Series* s : series_order_) QueueBlockOfLocked(s);
}

uint64_t WriterImpl::QueueCommitLocked(bool sync) {
  QueueAllBlocksLocked();
  const uint64_t ticket = ++commit_requested_;
  if (sync) last_sync_ticket_ = ticket;
  queue_.PushCommit(ticket, sync);
  // The automatic commits bound what a power cut can take; a flush does not
  // make anything durable, so it leaves their clocks running.
  if (sync) {
    bytes_since_commit_ = 0;
    first_uncommitted_.reset();
  }
  work_cv_.Signal();
  return ticket;
}

Status WriterImpl::CommitLocked(bool sync) {
  RUNSTORE_RETURN_IF_ERROR(CheckUsableLocked());
  const uint64_t ticket = QueueCommitLocked(sync);
  if (!sync) {
    WaitForTaskLocked([&]() RUNSTORE_REQUIRES(mu_) { return commit_done_ >= ticket; });
    return bg_error_;
  }
  return WaitForCommitLocked(ticket);
}

Status WriterImpl::Commit() {
  if (fork_guard_.InOtherProcess()) return ForkedError();
  MutexLock lock(&mu_);
  return CommitLocked();
}

Result<uint64_t> WriterImpl::CommitAsync() {
  if (fork_guard_.InOtherProcess()) return ForkedError();
  MutexLock lock(&mu_);
  RUNSTORE_RETURN_IF_ERROR(CheckUsableLocked());
  return QueueCommitLocked(/*sync=*/true);
}

Status WriterImpl::WaitForCommit(uint64_t ticket) {
  if (fork_guard_.InOtherProcess()) return ForkedError();
  MutexLock lock(&mu_);
  if (ticket == 0 || ticket > commit_requested_) {
    return Status::InvalidArgument("writer '" + options_.writer_id +
                                   "' gave out no commit ticket " + std::to_string(ticket));
  }
  return WaitForCommitLocked(ticket);
}

Status WriterImpl::WaitForCommitLocked(uint64_t ticket) {
  // A commit is durable once a sync covers it; a flush's ticket, once a later
  // commit is.
  WaitForTaskLocked(
      [&]() RUNSTORE_REQUIRES(mu_) {
        return group_.durable() >= ticket || (commit_done_ >= ticket && last_sync_ticket_ < ticket);
      },
      /*run_syncs=*/true);
  // An error after the commit leaves it durable; one before it, not.
  if (group_.durable() >= ticket) return Status::OK();
  if (!bg_error_.ok()) return bg_error_;
  return Status::FailedPrecondition("ticket " + std::to_string(ticket) + " of writer '" +
                                    options_.writer_id +
                                    "' is a flush's: it is durable only after a later commit");
}

uint64_t WriterImpl::DurableTicket() const {
  if (fork_guard_.InOtherProcess()) return 0;  // nothing of this process
  MutexLock lock(&mu_);
  return group_.durable();
}

uint64_t WriterImpl::ShippedTicket() const {
  if (fork_guard_.InOtherProcess()) return 0;  // nothing of this process
  if (!shipper_) return DurableTicket();
  return shipper_->shipped();
}

uint64_t WriterImpl::LastTicket() const {
  if (fork_guard_.InOtherProcess()) return 0;  // nothing of this process
  MutexLock lock(&mu_);
  return commit_requested_;
}

Status WriterImpl::WaitForShipped(uint64_t ticket) {
  if (fork_guard_.InOtherProcess()) return ForkedError();
  if (!shipper_) return WaitForCommit(ticket);
  MutexLock lock(&mu_);
  if (ticket == 0 || ticket > commit_requested_) {
    return Status::InvalidArgument("writer '" + options_.writer_id +
                                   "' gave out no commit ticket " + std::to_string(ticket));
  }
  // The commit's record must be written (and so in a segment) first.
  WaitForTaskLocked([&]() RUNSTORE_REQUIRES(mu_) { return commit_done_ >= ticket; });
  if (shipper_->shipped() < ticket && !closed_ && !stopping_) {
    // Ship it now rather than at the segment's size target: seal the open
    // segment when idle (or at the next commit, if later frames are not
    // committed yet).
    roll_.Request();
    work_cv_.Signal();
  }
  // The shipper has a thread and a mutex of its own; its progress and the
  // writer's errors are polled together.
  while (shipper_->shipped() < ticket) {
    if (Status s = shipper_->status(); !s.ok()) return s;
    // A writer that failed seals nothing more: once what was sealed before
    // is shipped, the rest stays in staging.
    if (!bg_error_.ok() && shipper_->idle()) {
      return shipper_->shipped() >= ticket ? Status::OK() : bg_error_;
    }
    if (closed_) return shipper_->WaitShipped(ticket);
    // A seal put off (uncommitted frames, or no number claimed yet) is tried
    // again while someone waits for it.
    if (roll_.RetryDeferred()) work_cv_.Signal();
    done_cv_.WaitUntil(&mu_, std::chrono::steady_clock::now() + std::chrono::milliseconds(20));
  }
  return Status::OK();
}

Status WriterImpl::Flush() {
  if (fork_guard_.InOtherProcess()) return ForkedError();
  MutexLock lock(&mu_);
  return CommitLocked(/*sync=*/false);
}

Status WriterImpl::FlushAsync() {
  if (fork_guard_.InOtherProcess()) return ForkedError();
  MutexLock lock(&mu_);
  RUNSTORE_RETURN_IF_ERROR(CheckUsableLocked());
  (void)QueueCommitLocked(/*sync=*/false);
  return Status::OK();
}

void WriterImpl::BackpressureWaitLocked(const std::function<bool()>& enough) {
  const auto start = std::chrono::steady_clock::now();
  ++stats_.backpressure_waits;
  while (!enough() && bg_error_.ok() && !queue_.empty()) done_cv_.Wait(&mu_);
  stats_.backpressure_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void WriterImpl::WaitForSpaceLocked() {
  if (queue_.QueueFull()) {
    BackpressureWaitLocked(
        [&]() RUNSTORE_REQUIRES(mu_) { return queue_.queued() <= queue_.QueueLimit() / 2; });
  }
  if (!queue_.OverBudget()) return;
  // Pooled builders are only a cache: give their memory back first.
  if (queue_.TrimPool()) return;
  // Hand partly filled blocks to the background thread so that it can free
  // their memory, then wait for it (back-pressure).
  QueueAllBlocksLocked();
  BackpressureWaitLocked(
      [&]() RUNSTORE_REQUIRES(mu_) { return queue_.buffered() <= options_.buffer_bytes / 2; });
}

void WriterImpl::AfterAppendLocked(size_t value_bytes) {
  ++stats_.records_appended;
  stats_.bytes_appended += value_bytes;
  bytes_since_commit_ += value_bytes;
  if (queue_.buffered() > stats_.peak_buffered_bytes) {
    stats_.peak_buffered_bytes = queue_.buffered();
  }
  // The common case: nothing to do (one branch on the append path).
  if (!queue_.OverBudget() && !queue_.QueueFull() &&
      (options_.commit_every_bytes == 0 || bytes_since_commit_ < options_.commit_every_bytes) &&
      (first_uncommitted_ || options_.commit_every_s <= 0)) {
    return;
  }
  if (!first_uncommitted_ && options_.commit_every_s > 0) {
    first_uncommitted_ = std::chrono::steady_clock::now();
    work_cv_.Signal();  // the background thread arms its timer
  }
  if (options_.commit_every_bytes > 0 && bytes_since_commit_ >= options_.commit_every_bytes &&
      auto_commit_holds_ == 0) {
    QueueCommitLocked();  // asynchronous: the appender does not wait for it
  }
  WaitForSpaceLocked();
}

void WriterImpl::HoldAutoCommitsLocked() { ++auto_commit_holds_; }

void WriterImpl::HoldAutoCommits() {
  if (fork_guard_.InOtherProcess()) return;
  MutexLock lock(&mu_);
  HoldAutoCommitsLocked();
}

void WriterImpl::ReleaseAutoCommits() {
  if (fork_guard_.InOtherProcess()) return;
  MutexLock lock(&mu_);
  if (auto_commit_holds_ > 0) ReleaseAutoCommitsLocked();  // one without a hold: nothing
}

void WriterImpl::ReleaseAutoCommitsLocked() {
  if (--auto_commit_holds_ != 0) return;
  // An automatic commit that came due while the call appended is made now,
  // after its last record.
  if (time_commit_due_ ||
      (options_.commit_every_bytes > 0 && bytes_since_commit_ >= options_.commit_every_bytes)) {
    time_commit_due_ = false;
    if (CheckUsableLocked().ok()) QueueCommitLocked();
  }
}

Status WriterImpl::AppendLocked(Series* s, const RunRef& run, int64_t step, const ValueRef& value) {
  if (value.nbytes >= options_.large_value_bytes) return AppendLarge(s, run, step, value);
  if (!s->builder) {
    s->builder = queue_.TakeBuilder(format::BlockSchema{
        s->name, s->schema.dtype, s->schema.variable_shape, s->schema.shape, s->codec});
  }
  AddToOpenBlockLocked(s, run, step, value);
  return Status::OK();
}

void WriterImpl::AddToOpenBlockLocked(Series* s, const RunRef& run, int64_t step,
                                      const ValueRef& value) {
  format::BlockBuilder* b = s->builder.get();
  // The budget counts what is allocated (column capacity), not what is used.
  const size_t before = b->memory_bytes();
  b->Add(run, step, value);
  queue_.Grew(b->memory_bytes() - before);
  if (b->raw_bytes() >= options_.block_bytes || b->count() >= (1u << 24)) QueueBlockOfLocked(s);
  AfterAppendLocked(value.nbytes);
}

Status WriterImpl::AppendLarge(Series* s, const RunRef& run, int64_t step, const ValueRef& value) {
  // Keep the series' blocks in append order: a later record of the same key
  // must land later in the file (docs/format.md "Resolving keys").
  QueueBlockOfLocked(s);
  auto block = std::make_unique<format::BlockBuilder>(format::BlockSchema{
      s->name, s->schema.dtype, s->schema.variable_shape, s->schema.shape, s->codec});
  block->AddBorrowed(run, step, value);
  const uint64_t ticket = ++borrowed_requested_;
  queue_.PushBorrowed(std::move(block), ticket);
  work_cv_.Signal();
  // The value is written straight from the caller's memory: wait until it is.
  WaitForTaskLocked([&]() RUNSTORE_REQUIRES(mu_) { return borrowed_done_ >= ticket; });
  RUNSTORE_RETURN_IF_ERROR(bg_error_);
  AfterAppendLocked(value.nbytes);
  return Status::OK();
}

Status WriterImpl::Append(const RunRef& run, std::string_view name, int64_t step,
                          const ValueRef& value) {
  if (fork_guard_.InOtherProcess()) return ForkedError();
  if (run.is_string) RUNSTORE_RETURN_IF_ERROR(ValidateRunId(run));
  MutexLock lock(&mu_);
  // The hot path: another small fixed-shape value of the series appended
  // last, into its open block, on a healthy writer.
  if (Series* s = last_series_;
      s != nullptr && s->builder != nullptr && s->record_bytes != 0 &&
      value.nbytes == s->record_bytes && value.dtype == s->schema.dtype &&
      value.nbytes < options_.large_value_bytes && !closed_ && !stopping_ && bg_error_.ok() &&
      s->name.size() == name.size() && std::memcmp(s->name.data(), name.data(), name.size()) == 0 &&
      (s->name[0] != '~' || options_.allow_reserved_names) &&
      value.shape.size() == s->schema.shape.size() &&
      std::equal(value.shape.begin(), value.shape.end(), s->schema.shape.begin())) {
    AddToOpenBlockLocked(s, run, step, value);
    if (options_.record_time) {
      const int64_t steps[1] = {step};
      return AppendTimesLocked({&run, 1}, steps);
    }
    return Status::OK();
  }
  RUNSTORE_RETURN_IF_ERROR(CheckUsableLocked());
  RUNSTORE_ASSIGN_OR_RETURN(Series * s, GetSeriesLocked(name, &value));
  RUNSTORE_RETURN_IF_ERROR(CheckAgainstSeries(*s, name, value));
  RUNSTORE_RETURN_IF_ERROR(AppendLocked(s, run, step, value));
  if (options_.record_time) {
    const int64_t steps[1] = {step};
    return AppendTimesLocked({&run, 1}, steps);
  }
  return Status::OK();
}

Status WriterImpl::CheckAgainstSeries(const Series& s, std::string_view name,
                                      const ValueRef& value) {
  if (s.record_bytes != 0 && value.dtype == s.schema.dtype && value.nbytes == s.record_bytes &&
      value.shape.size() == s.schema.shape.size() &&
      std::equal(value.shape.begin(), value.shape.end(), s.schema.shape.begin())) {
    return Status::OK();  // a fixed-shape numeric value of the series' exact type
  }
  RUNSTORE_RETURN_IF_ERROR(CheckValue(name, value));
  return CheckValueAgainst(name, s.schema, value);
}

Status WriterImpl::AppendRecord(RunRef run, int64_t step, std::span<const NamedValue> values) {
  if (fork_guard_.InOtherProcess()) return ForkedError();
  if (run.is_string) RUNSTORE_RETURN_IF_ERROR(ValidateRunId(run));
  MutexLock lock(&mu_);
  RUNSTORE_RETURN_IF_ERROR(CheckUsableLocked());
  const AutoCommitHold hold(this);
  // Every value is checked before any is appended, so a bad one appends nothing.
  Series* one[16];
  std::vector<Series*> many;
  Series** series = one;
  if (values.size() > 16) {
    many.resize(values.size());
    series = many.data();
  }
  // The same names as the last record, in the same order (a training loop's
  // metrics): its series, found by comparing names. They passed the
  // reserved-name check then, and the writer's options do not change.
  bool same = values.size() == last_record_.size();
  for (size_t i = 0; same && i < values.size(); ++i) {
    same = last_record_[i]->name == values[i].name;
  }
  for (size_t i = 0; i < values.size(); ++i) {
    if (same) {
      series[i] = last_record_[i];
    } else {
      RUNSTORE_ASSIGN_OR_RETURN(series[i], GetSeriesLocked(values[i].name, &values[i].value));
    }
    RUNSTORE_RETURN_IF_ERROR(CheckAgainstSeries(*series[i], values[i].name, values[i].value));
  }
  if (!same) last_record_.assign(series, series + values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    // Within a call only a background error stops it: Close waits for it.
    if (!bg_error_.ok()) return bg_error_;
    RUNSTORE_RETURN_IF_ERROR(AppendLocked(series[i], run, step, values[i].value));
  }
  if (options_.record_time && !values.empty()) {
    const int64_t steps[1] = {step};
    return AppendTimesLocked({&run, 1}, steps);
  }
  return Status::OK();
}

Status WriterImpl::AppendTimes(std::span<const RunRef> runs, std::span<const int64_t> steps,
                               std::span<const double> times) {
  if (fork_guard_.InOtherProcess()) return ForkedError();
  if (!options_.record_time) return Status::OK();
  if (runs.size() != steps.size() || (!times.empty() && times.size() != runs.size())) {
    return Status::InvalidArgument("AppendTimes: " + std::to_string(runs.size()) + " runs but " +
                                   std::to_string(steps.size()) + " steps and " +
                                   std::to_string(times.size()) + " times");
  }
  RUNSTORE_RETURN_IF_ERROR(ValidateRunIds(runs));
  MutexLock lock(&mu_);
  RUNSTORE_RETURN_IF_ERROR(CheckUsableLocked());
  const AutoCommitHold hold(this);
  return AppendTimesLocked(runs, steps, times);
}

Status WriterImpl::AppendTimesLocked(std::span<const RunRef> runs, std::span<const int64_t> steps,
                                     std::span<const double> times) {
  double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const ValueRef v = ValueRef::Scalar(now);
  if (time_series_ == nullptr) {
    Series* last = last_series_;  // "~time" is not what the caller appends to next
    RUNSTORE_ASSIGN_OR_RETURN(time_series_, GetSeriesLocked(kTimeSeries, &v, /*internal=*/true));
    last_series_ = last;
    RUNSTORE_RETURN_IF_ERROR(CheckAgainstSeries(*time_series_, kTimeSeries, v));
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    if (!times.empty()) now = times[i];  // v views `now`
    RUNSTORE_RETURN_IF_ERROR(AppendLocked(time_series_, runs[i], steps[i], v));
  }
  return Status::OK();
}

namespace {

// The first of a batch's n > 0 values, as a value of its own.
ValueRef FirstOfBatch(const ValueRef& values, size_t n) {
  return ValueRef{values.dtype, values.shape.subspan(1), values.data, values.nbytes / n};
}

}  // namespace

Status WriterImpl::AppendBatch(std::span<const RunRef> runs, std::string_view name,
                               std::span<const int64_t> steps, const ValueRef& values) {
  if (fork_guard_.InOtherProcess()) return ForkedError();
  const size_t n = runs.size();
  if (steps.size() != n) {
    return Status::InvalidArgument("AppendBatch of '" + std::string(name) +
                                   "': " + std::to_string(n) + " runs but " +
                                   std::to_string(steps.size()) + " steps");
  }
  RUNSTORE_RETURN_IF_ERROR(CheckBatchValues("AppendBatch", name, n, values));
  RUNSTORE_RETURN_IF_ERROR(ValidateRunIds(runs));
  if (n == 0) return Status::OK();
  const ValueRef one = FirstOfBatch(values, n);
  MutexLock lock(&mu_);
  RUNSTORE_RETURN_IF_ERROR(CheckUsableLocked());
  const AutoCommitHold hold(this);
  RUNSTORE_ASSIGN_OR_RETURN(Series * s, GetSeriesLocked(name, &one));
  RUNSTORE_RETURN_IF_ERROR(CheckValueAgainst(name, s->schema, one));
  return AppendBatchLocked(s, runs, steps, values);
}

Status WriterImpl::AppendBatchLocked(Series* s, std::span<const RunRef> runs,
                                     std::span<const int64_t> steps, const ValueRef& values) {
  const size_t n = runs.size();
  ValueRef one = FirstOfBatch(values, n);
  const size_t per = one.nbytes;
  const char* base = static_cast<const char*>(values.data);
  if (s->record_bytes == 0 || per >= options_.large_value_bytes) {
    for (size_t i = 0; i < n; ++i) {
      one.data = base + i * per;
      if (!bg_error_.ok()) return bg_error_;  // (Close waits for the call)
      RUNSTORE_RETURN_IF_ERROR(AppendLocked(s, runs[i], steps[i], one));
    }
    return Status::OK();
  }
  // Fixed-shape values: copy as many whole records as fit in the open block
  // at once.
  for (size_t i = 0; i < n;) {
    if (!bg_error_.ok()) return bg_error_;  // (Close waits for the call)
    if (!s->builder) {
      s->builder = queue_.TakeBuilder(format::BlockSchema{
          s->name, s->schema.dtype, s->schema.variable_shape, s->schema.shape, s->codec});
    }
    format::BlockBuilder* b = s->builder.get();
    const size_t room = options_.block_bytes > b->raw_bytes()
                            ? (options_.block_bytes - b->raw_bytes()) / (per + 16) + 1
                            : 1;
    const size_t k = std::min(n - i, room);
    const size_t before = b->memory_bytes();
    b->AddFixed(runs.subspan(i, k), steps.subspan(i, k), base + i * per, per);
    queue_.Grew(b->memory_bytes() - before);
    if (b->raw_bytes() >= options_.block_bytes) QueueBlockOfLocked(s);
    stats_.records_appended += k - 1;  // AfterAppendLocked counts one
    AfterAppendLocked(k * per);
    i += k;
  }
  return Status::OK();
}

Status WriterImpl::AppendValues(std::span<const RunRef> runs, std::string_view name,
                                std::span<const int64_t> steps, std::span<const ValueRef> values) {
  if (fork_guard_.InOtherProcess()) return ForkedError();
  const size_t n = runs.size();
  if (steps.size() != n || values.size() != n) {
    return Status::InvalidArgument(
        "AppendValues of '" + std::string(name) + "': " + std::to_string(n) + " runs, " +
        std::to_string(steps.size()) + " steps and " + std::to_string(values.size()) + " values");
  }
  RUNSTORE_RETURN_IF_ERROR(ValidateRunIds(runs));
  if (n == 0) return Status::OK();
  MutexLock lock(&mu_);
  RUNSTORE_RETURN_IF_ERROR(CheckUsableLocked());
  const AutoCommitHold hold(this);
  RUNSTORE_ASSIGN_OR_RETURN(Series * s, GetSeriesLocked(name, &values[0]));
  RUNSTORE_RETURN_IF_ERROR(CheckValuesAgainst(*s, name, values));
  return AppendValuesLocked(s, runs, steps, values);
}

Status WriterImpl::CheckValuesAgainst(const Series& s, std::string_view name,
                                      std::span<const ValueRef> values) {
  const ValueRef* checked = nullptr;
  for (const ValueRef& v : values) {
    // A column of one state or name repeats one value: checked once.
    if (checked != nullptr && v.data == checked->data && v.nbytes == checked->nbytes &&
        v.dtype == checked->dtype && v.shape.data() == checked->shape.data() &&
        v.shape.size() == checked->shape.size()) {
      continue;
    }
    RUNSTORE_RETURN_IF_ERROR(CheckAgainstSeries(s, name, v));
    checked = &v;
  }
  return Status::OK();
}

Status WriterImpl::AppendValuesLocked(Series* s, std::span<const RunRef> runs,
                                      std::span<const int64_t> steps,
                                      std::span<const ValueRef> values) {
  for (size_t i = 0; i < runs.size(); ++i) {
    if (!bg_error_.ok()) return bg_error_;  // (Close waits for the call)
    RUNSTORE_RETURN_IF_ERROR(AppendLocked(s, runs[i], steps[i], values[i]));
  }
  return Status::OK();
}

Status WriterImpl::AppendColumns(std::span<const RunRef> runs, std::span<const int64_t> steps,
                                 std::span<const ColumnRef> columns) {
  if (fork_guard_.InOtherProcess()) return ForkedError();
  const size_t n = runs.size();
  if (steps.size() != n) {
    return Status::InvalidArgument("AppendColumns: " + std::to_string(n) + " runs but " +
                                   std::to_string(steps.size()) + " steps");
  }
  for (const ColumnRef& c : columns) {
    if (!c.each.empty()) {
      if (c.each.size() != n) {
        return Status::InvalidArgument("AppendColumns: column '" + std::string(c.name) + "' has " +
                                       std::to_string(c.each.size()) + " values for " +
                                       std::to_string(n) + " runs");
      }
    } else {
      RUNSTORE_RETURN_IF_ERROR(CheckBatchValues("AppendColumns", c.name, n, c.values));
    }
  }
  RUNSTORE_RETURN_IF_ERROR(ValidateRunIds(runs));  // once for every column
  if (n == 0 || columns.empty()) return Status::OK();
  MutexLock lock(&mu_);
  RUNSTORE_RETURN_IF_ERROR(CheckUsableLocked());
  // Every column is checked against its series before any is appended; the
  // series this call defined are forgotten again if one fails.
  std::vector<Series*> series(columns.size());
  std::vector<Series*> defined;
  const Status checked = [&]() RUNSTORE_REQUIRES(mu_) -> Status {
    for (size_t i = 0; i < columns.size(); ++i) {
      const ColumnRef& c = columns[i];
      const ValueRef first = c.each.empty() ? FirstOfBatch(c.values, n) : c.each[0];
      const bool known = series_.find(c.name) != series_.end();
      RUNSTORE_ASSIGN_OR_RETURN(series[i], GetSeriesLocked(c.name, &first));
      if (!known) defined.push_back(series[i]);
      RUNSTORE_RETURN_IF_ERROR(c.each.empty() ? CheckValueAgainst(c.name, series[i]->schema, first)
                                              : CheckValuesAgainst(*series[i], c.name, c.each));
    }
    return Status::OK();
  }();
  if (!checked.ok()) {
    ForgetSeriesLocked(defined);
    return checked;
  }
  const AutoCommitHold hold(this);
  for (size_t i = 0; i < columns.size(); ++i) {
    const ColumnRef& c = columns[i];
    RUNSTORE_RETURN_IF_ERROR(c.each.empty() ? AppendBatchLocked(series[i], runs, steps, c.values)
                                            : AppendValuesLocked(series[i], runs, steps, c.each));
  }
  return options_.record_time ? AppendTimesLocked(runs, steps) : Status::OK();
}

void WriterImpl::ForgetSeriesLocked(std::span<Series* const> defined) {
  for (Series* s : defined) {
    if (last_series_ == s) last_series_ = nullptr;
    if (std::find(last_record_.begin(), last_record_.end(), s) != last_record_.end()) {
      last_record_.clear();
    }
    std::erase(series_order_, s);
    series_.erase(series_.find(s->name));  // frees *s
  }
}

Status WriterImpl::Resume(RunRef run, int64_t step) {
  if (fork_guard_.InOtherProcess()) return ForkedError();
  if (run.is_string) RUNSTORE_RETURN_IF_ERROR(ValidateRunId(run));
  MutexLock lock(&mu_);
  // The marker hides records of commits strictly before its own, so
  // everything appended so far is committed first.
  RUNSTORE_RETURN_IF_ERROR(CommitLocked());
  const ValueRef marker = ValueRef::Scalar(step);
  RUNSTORE_ASSIGN_OR_RETURN(Series * s, GetSeriesLocked(kResumeSeries, &marker, /*internal=*/true));
  RUNSTORE_RETURN_IF_ERROR(AppendLocked(s, run, step, marker));
  return CommitLocked();
}

Status WriterImpl::Close() {
  if (fork_guard_.InOtherProcess()) return ForkedError();
  {
    MutexLock lock(&mu_);
    if (closed_) return !bg_error_.ok() ? bg_error_ : shipper_ ? shipper_->status() : Status::OK();
    // Calls appending several records that are under way end first (their
    // records wholly in the last commit); calls from now on are refused.
    closing_ = true;
    while (calls_appending_ > 0 && !stopping_) done_cv_.Wait(&mu_);
    if (!stopping_) {
      QueueAllBlocksLocked();
      queue_.PushSeal();
      stopping_ = true;
      work_cv_.Signal();
    }
  }
  if (bg_.joinable()) bg_.join();
  {
    MutexLock lock(&mu_);
    sync_stop_ = true;
    sync_cv_.Signal();
  }
  if (sync_thread_.joinable()) sync_thread_.join();
  // Staging: ship what was sealed, then drop the lease (a sync may then take
  // whatever a failure left in staging).
  const Status shipped = shipper_ ? shipper_->Close() : Status::OK();
  MutexLock lock(&mu_);
  closed_ = true;
  done_cv_.SignalAll();
  return bg_error_.ok() ? shipped : bg_error_;
}

WriterStats WriterImpl::stats() const {
  if (fork_guard_.InOtherProcess()) return {};
  MutexLock lock(&mu_);
  return stats_;
}

Status WriterImpl::WriteBlock(BlockQueue::Task* t) {
  uint64_t bytes = 0;
  Status s = open_.AddBlock(t->block.get(), t->borrowed, &bytes);
  MutexLock lock(&mu_);
  stats_.bytes_written += bytes;
  return s;
}

Status WriterImpl::WriteCommit(bool sync, uint64_t* sync_length) {
  bool wrote = false;
  uint64_t bytes = 0;
  Status s = open_.Commit(sync, env_->NowNanos(), sync_length, &wrote, &bytes);
  MutexLock lock(&mu_);
  stats_.bytes_written += bytes;
  if (wrote) {
    ++stats_.commits;
    if (!sync) ++stats_.flushes;
  }
  return s;
}

Status WriterImpl::SealSegment(uint64_t covers) {
  if (!open_.is_open()) {
    // Nothing unshipped holds those commits but what is queued already.
    if (shipper_) shipper_->Enqueue("", covers);
    return Status::OK();
  }
  {
    MutexLock lock(&mu_);
    group_.BeginSeal();  // ended by RunTaskLocked once the seal is done
    while (group_.running()) done_cv_.Wait(&mu_);
    // A sync that failed stopped the writer: the seal must not sync again
    // (after EIO the kernel may have dropped the pages that failed, and a
    // second fdatasync succeeds without writing them), nor write a footer
    // that claims every commit before it durable.
    if (!bg_error_.ok()) return bg_error_;
  }
  uint64_t unused;
  RUNSTORE_RETURN_IF_ERROR(WriteCommit(/*sync=*/true, &unused));
  RUNSTORE_RETURN_IF_ERROR(open_.Seal());
  // Sealed and synced in staging: the shipper publishes it on its own
  // thread, never holding up the writer on the shared file system.
  if (shipper_) shipper_->Enqueue(open_.last_sealed_name(), covers);
  MutexLock lock(&mu_);
  ++stats_.segments_sealed;
  roll_.Sealed();
  return Status::OK();
}

void WriterImpl::RollIdleLocked() {
  const uint64_t covers = commit_done_;
  running_ = true;
  mu_.Unlock();
  task_role_.Take();
  Status s;
  bool sealed = false;
  // Not before the next segment's number is claimed: see RunTaskLocked.
  if (!open_.has_uncommitted() && shipper_->ClaimReady()) {
    s = SealSegment(covers);
    sealed = true;
  }
  task_role_.GiveBack();
  mu_.Lock();
  running_ = false;
  if (!s.ok() && bg_error_.ok()) bg_error_ = s;
  if (sealed) group_.EndSeal(s.ok(), commit_done_);
  roll_.AfterIdleRoll(sealed);  // not sealed: the next commit seals (or WaitForShipped asks again)
  done_cv_.SignalAll();
}

void WriterImpl::SyncLoop() {
  MutexLock lock(&mu_);
  while (true) {
    while (!SyncPendingLocked() && !sync_stop_) sync_cv_.Wait(&mu_);
    if (!SyncPendingLocked()) break;  // stopping, with nothing left that may be synced
    RunSyncLocked();
  }
}

void WriterImpl::RunSyncLocked() {
  const GroupCommit::Sync job = group_.Start();  // the segment is not sealed while it runs
  mu_.Unlock();
  Status s = job.segment->SyncPrefix(job.length);
  mu_.Lock();
  group_.Finish(job, s.ok());
  if (s.ok()) {
    ++stats_.syncs;
  } else if (bg_error_.ok()) {
    bg_error_ = s;
  }
  done_cv_.SignalAll();  // waiters for the commit, and a seal waiting for the sync
  if (SyncPendingLocked()) sync_cv_.Signal();
}

void WriterImpl::BackgroundLoop() {
  MutexLock lock(&mu_);
  while (true) {
    if (queue_.empty() || running_) {
      // A caller may be running a task (WaitForTaskLocked): never leave
      // before it is done, and keep the commit timer while it runs.
      if (queue_.empty() && stopping_ && !running_) break;
      // Staging: a seal for shipping is made while nothing else runs.
      if (roll_.IdleRollDue() && queue_.empty() && !running_ && !stopping_) {
        RollIdleLocked();
        continue;
      }
      // ship_every_s bounds how long a commit stays unshipped.
      const std::optional<StagingRoll::Clock::time_point> ship_deadline =
          shipper_ ? roll_.ShipDeadline() : std::nullopt;
      if (first_uncommitted_ && options_.commit_every_s > 0 && !time_commit_due_) {
        const auto deadline =
            *first_uncommitted_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                      std::chrono::duration<double>(options_.commit_every_s));
        if (!work_cv_.WaitUntil(&mu_,
                                ship_deadline ? std::min(deadline, *ship_deadline) : deadline) &&
            queue_.empty() && !running_ && first_uncommitted_ &&
            std::chrono::steady_clock::now() >= deadline) {
          if (auto_commit_holds_ == 0) {
            QueueCommitLocked();
          } else {
            // A call is appending several records (AppendRecord, AppendBatch)
            // and waits for buffer space: it commits when it is done.
            time_commit_due_ = true;
          }
        }
      } else if (ship_deadline) {
        work_cv_.WaitUntil(&mu_, *ship_deadline);
      } else {
        work_cv_.Wait(&mu_);
      }
      roll_.Tick(ship_deadline, StagingRoll::Clock::now());
      continue;
    }
    RunTaskLocked(/*by_background=*/true);
  }
  // Anyone still waiting learns that the writer is gone.
  done_cv_.SignalAll();
}

void WriterImpl::WaitForTaskLocked(const std::function<bool()>& done, bool run_syncs) {
  while (!done() && bg_error_.ok()) {
    // A thread is idle: do its work here rather than wake it and sleep (two
    // thread hand-offs per commit or large value).
    if (run_syncs && SyncPendingLocked()) {
      RunSyncLocked();
    } else if (!running_ && !queue_.empty()) {
      RunTaskLocked(/*by_background=*/false);
    } else {
      done_cv_.Wait(&mu_);
    }
  }
}

void WriterImpl::RunTaskLocked(bool by_background) {
  BlockQueue::Task t = queue_.Pop();
  const bool failed = !bg_error_.ok();
  const uint64_t commits_before = commit_done_;  // what a seal task covers
  const bool roll_for_shipping = roll_.requested();
  running_ = true;
  mu_.Unlock();
  task_role_.Take();
  uint64_t sync_length = 0;
  Status s;
  bool sealed = false;  // a seal syncs every commit before it
  if (!failed) {
    switch (t.kind) {
      case BlockQueue::Task::kBlock:
        s = WriteBlock(&t);
        break;
      case BlockQueue::Task::kCommit:
        s = WriteCommit(t.sync, &sync_length);
        // Roll the segment at its size target, or when its index would hold
        // too much memory, right after a commit: sealing commits nothing the
        // caller has not, and a commit never spans two segments. A batch that
        // crosses the target while uncommitted stays in this segment until
        // its commit (docs/design.md#segments).
        // With staging, also when shipping asked for it (ship_every_s,
        // WaitForShipped).
        // With staging, a roll for its size or for shipping waits (the
        // segment grows past its target) until the next segment's number
        // is claimed in the store, so that the writer never waits for the
        // shared file system, nor stops when it is gone. One for the
        // memory its index holds does not (invariant 1).
        if (s.ok() &&
            (open_.WantsRoll(UINT64_MAX, std::min<size_t>(options_.buffer_bytes / 8, 16u << 20)) ||
             ((open_.WantsRoll(options_.segment_bytes, SIZE_MAX) ||
               (roll_for_shipping && open_.is_open())) &&
              (!shipper_ || shipper_->ClaimReady())))) {
          s = SealSegment(t.ticket);
          sealed = true;
          sync_length = 0;  // the seal synced everything
        } else if (s.ok() && shipper_ && !open_.is_open()) {
          shipper_->Enqueue("", t.ticket);  // the commit wrote nothing
        }
        break;
      case BlockQueue::Task::kSeal:
        s = SealSegment(commits_before);
        sealed = true;
        break;
    }
  }
  format::SegmentWriter* const segment = open_.segment();
  const bool holds_commits = t.kind == BlockQueue::Task::kCommit && open_.is_open();
  task_role_.GiveBack();
  mu_.Lock();
  running_ = false;
  if (!s.ok() && bg_error_.ok()) bg_error_ = s;
  if (t.kind == BlockQueue::Task::kBlock) {
    if (t.borrowed) borrowed_done_ = t.ticket;
    queue_.Done(&t);
  } else if (t.kind == BlockQueue::Task::kCommit) {
    commit_done_ = t.ticket;
    if (t.sync && !failed && s.ok()) {
      if (sync_length == 0) {
        group_.MarkDurable(t.ticket);  // nothing left to sync
      } else {
        // For the sync thread (or a waiting caller); a sync already running
        // leaves it to the next, which covers every commit written until then.
        group_.Want(t.ticket, sync_length, segment);
        if (SyncPendingLocked()) sync_cv_.Signal();
      }
    }
  }
  if (sealed) {
    // The seal synced every commit before it; a sync still wanted for the
    // sealed segment is moot.
    group_.EndSeal(s.ok(), commit_done_);
  }
  // A commit that could not seal for shipping leaves it to the next one.
  if (roll_for_shipping) roll_.AfterTask(sealed, t.kind == BlockQueue::Task::kCommit);
  if (shipper_ && holds_commits) roll_.Committed(StagingRoll::Clock::now());
  done_cv_.SignalAll();
  // Run by a caller: the background thread may be waiting for running_ to
  // clear (more tasks, its commit timer, or Close).
  if (!by_background) work_cv_.Signal();
}

}  // namespace runstore::writer
