// An fdatasync that fails (STYLE.md "Tests that try to break it";
// docs/design.md#invariant-2).
//
// After a failed fdatasync the kernel may already have dropped the dirty
// pages it could not write (PostgreSQL's "fsyncgate", 2018): a later fsync
// that succeeds proves nothing about them. FaultInjectionEnv models exactly
// that -- a failed Sync makes nothing of its file durable, then or later --
// and power_loss_test's InjectedErrorTest fails every operation of a scripted
// workload in turn and checks that the error is reported and sticky. This
// test looks at what that sweep does not:
//  - the commits in flight around the failure: a Commit whose sync fails
//    returns the error; WaitForCommit of its ticket and of every later one
//    returns it; DurableTicket never reaches them;
//  - the retry: no Sync or SyncPrefix of the file runs after the failure
//    (counted by a wrapper Env, below), so nothing could ever report data
//    written before it as durable; the writer stays failed with the
//    original error, and Close reports it;
//  - the threads: the sync run by a caller's Commit, and by the writer's
//    sync thread with several commits of a group commit in flight, also
//    while the background thread seals the segment (Close, or a segment
//    reaching its size);
//  - after a power cut (SimulatePowerLoss, every DropMode, several seeds),
//    every commit the writer reported durable is intact, and the commits in
//    flight are each whole or absent, in order.
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "runstore/env.h"
#include "runstore/store.h"
#include "testing/fault_injection_env.h"
#include "testing/test_util.h"

namespace runstore {
namespace {

using ::runstore::testing::Contents;
using ::runstore::testing::DiffContents;
using ::runstore::testing::FailureSummary;
using ::runstore::testing::KeyString;
using ::runstore::testing::Problems;
using ::runstore::testing::RecordKey;
using ::runstore::testing::RecordValue;
using ::runstore::testing::RecordValueAt;
using ::runstore::testing::ScanAll;
using ::runstore::testing::TestSeed;

constexpr char kStorePath[] = "/store";
constexpr auto kPatience = std::chrono::seconds(120);  // a hang, not a speed

// ---------------------------------------------------------------------------
// An Env over the FaultInjectionEnv that sees every mutating call the writer
// makes, numbers it, and can fail the next Sync or SyncPrefix of a segment
// file -- optionally holding it at a gate first, so that a test can line up
// the writer's threads behind it (commits in flight, a seal waiting for the
// sync). The failure is injected by the FaultInjectionEnv (FailOperation of
// the very next operation, armed under this env's lock, which every mutating
// call takes), so the file's data is treated as a failed sync's: never
// durable.
class WatchEnv final : public EnvWrapper {
 public:
  enum class Kind { kAppend, kWriteAt, kSync, kSyncPrefix, kClose, kOther };
  struct Call {
    uint64_t number;
    std::string path;
    Kind kind;
    bool ok;
    bool injected;  // the failure this env armed
    std::thread::id thread;
  };

  explicit WatchEnv(FaultInjectionEnv* base) : EnvWrapper(base), base_(base) {}

  // The next Sync or SyncPrefix of a segment file fails with `err`; with
  // `hold`, it first waits until Release().
  void FailNextSync(int err, bool hold) {
    std::lock_guard lk(gate_mu_);
    armed_ = true;
    err_ = err;
    hold_ = hold;
    held_ = released_ = false;
  }
  // Waits until the armed sync is held at the gate.
  bool WaitUntilHeld() {
    std::unique_lock lk(gate_mu_);
    return gate_cv_.wait_for(lk, kPatience, [&] { return held_; });
  }
  void Release() {
    std::lock_guard lk(gate_mu_);
    released_ = true;
    gate_cv_.notify_all();
  }

  std::vector<Call> calls() const {
    std::lock_guard lk(op_mu_);
    return calls_;
  }
  // The injected failure, if it happened.
  std::optional<Call> failure() const {
    for (const Call& c : calls()) {
      if (c.injected) return c;
    }
    return std::nullopt;
  }
  // Calls on `path` of one of `kinds` numbered after `after`.
  size_t CountAfter(uint64_t after, const std::string& path, std::set<Kind> kinds,
                    size_t* succeeded = nullptr) const {
    size_t n = 0, ok = 0;
    for (const Call& c : calls()) {
      if (c.number > after && c.path == path && kinds.count(c.kind)) {
        ++n;
        ok += c.ok;
      }
    }
    if (succeeded) *succeeded = ok;
    return n;
  }
  size_t CountAfter(uint64_t after) const {
    size_t n = 0;
    for (const Call& c : calls()) n += c.number > after;
    return n;
  }

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        bool exclusive) override;
  Status CreateDir(const std::string& path) override {
    return Run(path, Kind::kOther, [&] { return base_->CreateDir(path); });
  }
  Status RemoveFile(const std::string& path) override {
    return Run(path, Kind::kOther, [&] { return base_->RemoveFile(path); });
  }
  Status RenameFile(const std::string& from, const std::string& to) override {
    return Run(to, Kind::kOther, [&] { return base_->RenameFile(from, to); });
  }
  Status SyncDir(const std::string& dir) override {
    return Run(dir, Kind::kOther, [&] { return base_->SyncDir(dir); });
  }

 private:
  friend class WatchFile;

  // Runs a mutating call under op_mu_ and records it.
  Status Run(const std::string& path, Kind kind, const std::function<Status()>& call,
             bool inject = false) {
    std::lock_guard lk(op_mu_);
    if (inject) base_->FailOperation(1, err_);
    Status s = call();
    calls_.push_back(
        Call{calls_.size() + 1, path, kind, s.ok(), inject, std::this_thread::get_id()});
    return s;
  }

  // Whether this sync of `path` is the armed one (after holding it).
  bool TakeArmedSync(const std::string& path) {
    if (path.size() < 4 || path.compare(path.size() - 4, 4, ".rss") != 0) return false;
    std::unique_lock lk(gate_mu_);
    if (!armed_) return false;
    armed_ = false;
    if (hold_) {
      held_ = true;
      gate_cv_.notify_all();
      gate_cv_.wait(lk, [&] { return released_; });
    }
    return true;
  }

  Status Sync(WritableFile* file, const std::string& path, bool prefix, uint64_t length) {
    const bool inject = TakeArmedSync(path);
    return Run(
        path, prefix ? Kind::kSyncPrefix : Kind::kSync,
        [&] { return prefix ? file->SyncPrefix(length) : file->Sync(); }, inject);
  }

  FaultInjectionEnv* const base_;
  mutable std::mutex op_mu_;
  std::vector<Call> calls_;  // guarded by op_mu_

  std::mutex gate_mu_;
  std::condition_variable gate_cv_;
  bool armed_ = false;  // guarded by gate_mu_, as are the next four
  int err_ = EIO;
  bool hold_ = false;
  bool held_ = false;
  bool released_ = false;
};

class WatchFile final : public WritableFile {
 public:
  WatchFile(WatchEnv* env, std::string path, std::unique_ptr<WritableFile> base)
      : env_(env), path_(std::move(path)), base_(std::move(base)) {}
  using WritableFile::Append;
  Status Append(std::span<const std::string_view> pieces) override {
    return env_->Run(path_, WatchEnv::Kind::kAppend, [&] { return base_->Append(pieces); });
  }
  Status WriteAt(uint64_t offset, std::string_view data) override {
    return env_->Run(path_, WatchEnv::Kind::kWriteAt, [&] { return base_->WriteAt(offset, data); });
  }
  Status Sync() override { return env_->Sync(base_.get(), path_, false, 0); }
  Status SyncPrefix(uint64_t length) override {
    return env_->Sync(base_.get(), path_, true, length);
  }
  Status Close() override {
    return env_->Run(path_, WatchEnv::Kind::kClose, [&] { return base_->Close(); });
  }
  uint64_t Size() const override { return base_->Size(); }

 private:
  WatchEnv* const env_;
  const std::string path_;
  const std::unique_ptr<WritableFile> base_;
};

Result<std::unique_ptr<WritableFile>> WatchEnv::NewWritableFile(const std::string& path,
                                                                bool exclusive) {
  std::unique_ptr<WritableFile> file;
  Status s = Run(path, Kind::kOther, [&] {
    auto f = base_->NewWritableFile(path, exclusive);
    if (!f.ok()) return f.status();
    file = std::move(f).value();
    return Status::OK();
  });
  if (!s.ok()) return s;
  return std::unique_ptr<WritableFile>(new WatchFile(this, path, std::move(file)));
}

// ---------------------------------------------------------------------------
// What a case wrote, and what must be there after the power cut.

// groups[i] holds the records of the i-th commit. The writer reported
// groups [0, durable) durable (Commit, WaitForCommit or Close returned OK);
// the groups after them were in flight when the sync failed.
struct Written {
  std::vector<Contents> groups;
  size_t durable = 0;
  std::set<std::string> series;
};

Contents Union(const std::vector<Contents>& groups, size_t n) {
  Contents c;
  for (size_t i = 0; i < n; ++i) c.insert(groups[i].begin(), groups[i].end());
  return c;
}

// Totals over the tries of a case, printed at its end.
struct Figures {
  int tries = 0;
  int in_flight_commits = 0;
  int in_flight_visible = 0;  // commits in flight that survived the power cut whole
  int failed_on_caller = 0;   // the failing sync ran on the thread that called Commit
  size_t syncs_after = 0;     // Sync/SyncPrefix of the file after the failure
  size_t syncs_after_ok = 0;
  size_t calls_after = 0;      // mutating calls of any kind after the failure
  int failed_sync = 0;         // the injected failure hit a Sync (a seal's) ...
  int failed_sync_prefix = 0;  // ... or a SyncPrefix (a commit's)
  int refused = 0;             // tries whose store did not reopen after the power cut

  void CountFailure(const WatchEnv::Call& c) {
    failed_sync += c.kind == WatchEnv::Kind::kSync;
    failed_sync_prefix += c.kind == WatchEnv::Kind::kSyncPrefix;
  }
};

// One case: a writer over a WatchEnv over a FaultInjectionEnv over memory.
class Harness {
 public:
  Harness() : fault_(mem_.get()), watch_(&fault_) {}

  WatchEnv& watch() { return watch_; }
  FaultInjectionEnv& fault() { return fault_; }
  Writer* writer() { return w_.get(); }
  Written& written() { return written_; }

  void Open(WriterOptions o, Problems* p) {
    StoreOptions so;
    so.env = &watch_;
    auto store = Store::Open(kStorePath, so);
    if (!store.ok()) return p->Check(false, "Store::Open: " + store.status().ToString());
    store_ = std::move(store).value();
    auto w = store_->NewWriter(o);
    if (!w.ok()) return p->Check(false, "NewWriter: " + w.status().ToString());
    w_ = std::move(w).value();
  }

  // Appends the records of a new group: 30 float64 and a float32[8] under
  // run g, and with `big` a 16 KiB array (a block of its own). Returns the
  // first error.
  Status AppendGroup(bool big = false) {
    const int g = static_cast<int>(written_.groups.size());
    written_.groups.emplace_back();
    Status s;
    for (int step = 0; step < 30 && s.ok(); ++step) {
      const double v = g * 100.0 + step;
      s = Put(g, "loss", step, ValueRef::Scalar(v));
    }
    float vec[8];
    for (int i = 0; i < 8; ++i) vec[i] = static_cast<float>(g) + 0.125f * static_cast<float>(i);
    const int64_t vshape[] = {8};
    if (s.ok()) s = Put(g, "vec", 0, ValueRef::Array(vec, vshape));
    if (big && s.ok()) {
      std::vector<double> a(2048);
      for (size_t i = 0; i < a.size(); ++i) a[i] = g + static_cast<double>(i) * 0.5;
      const int64_t shape[] = {2048};
      s = Put(g, "big", 0, ValueRef::Array(a.data(), shape));
    }
    return s;
  }

  // The writer reported groups [0, n) durable.
  void Durable(size_t n) { written_.durable = std::max(written_.durable, n); }

  void DropWriter() {
    w_.reset();
    store_.reset();
  }

 private:
  Status Put(RunRef run, std::string_view series, int64_t step, const ValueRef& v) {
    written_.series.insert(std::string(series));
    written_.groups.back()[RecordKey{std::string(series), run.ToRunId(), step}] =
        RecordValue{v.dtype, std::vector<int64_t>(v.shape.begin(), v.shape.end()),
                    std::string(static_cast<const char*>(v.data), v.nbytes)};
    return w_->Append(run, series, step, v);
  }

  std::unique_ptr<Env> mem_ = NewMemEnv();
  FaultInjectionEnv fault_;
  WatchEnv watch_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Writer> w_;
  Written written_;
};

WriterOptions Options() {
  WriterOptions o;
  o.writer_id = "w";
  o.buffer_bytes = 1 << 20;
  o.block_bytes = 4096;
  o.large_value_bytes = 4096;
  return o;
}

bool SameError(const Status& a, const Status& b) {
  return a.code() == b.code() && a.sys_errno() == b.sys_errno() && a.message() == b.message();
}

// The checks of every case once the sync has failed with `error` (the
// status the first failing call returned; `before` is DurableTicket() from
// before the failing commit): the failure was the injected one, of a sync;
// the writer stays failed with that error, touches no file again and never
// syncs the failed file again; DurableTicket did not move.
void CheckAfterFailure(Harness& h, const Status& error, uint64_t before, Figures* fig,
                       Problems* p) {
  Writer* w = h.writer();
  p->Check(error.code() == StatusCode::kIOError && error.sys_errno() == EIO,
           "the failed sync surfaced as " + error.ToString() + " (errno " +
               std::to_string(error.sys_errno()) + "), not IOError(EIO)");
  p->Check(error.message().find("injected") != std::string::npos,
           "the error is not the injected one: " + error.ToString());
  const auto failure = h.watch().failure();
  if (!failure) return p->Check(false, "no sync failed: the armed failure was never reached");
  p->Check(failure->kind == WatchEnv::Kind::kSync || failure->kind == WatchEnv::Kind::kSyncPrefix,
           "the injected failure hit a call other than a sync");
  fig->CountFailure(*failure);
  const uint64_t at = failure->number;
  p->Check(w->DurableTicket() == before, "DurableTicket moved from " + std::to_string(before) +
                                             " to " + std::to_string(w->DurableTicket()) +
                                             " although the sync failed");
  // Sticky, with the original error.
  const double x = 1.0;
  const Status calls[] = {
      w->Append(0, "loss", 999, x),
      w->Commit(),
      w->CommitAsync().status(),
      w->Flush(),
      w->Resume(0, 5),
  };
  const char* names[] = {"Append", "Commit", "CommitAsync", "Flush", "Resume"};
  for (size_t i = 0; i < std::size(calls); ++i) {
    p->Check(SameError(calls[i], error), std::string(names[i]) + " after the failure returned " +
                                             calls[i].ToString() + ", not the original error");
  }
  const Status closed = w->Close();
  p->Check(SameError(closed, error),
           "Close after the failure returned " + closed.ToString() + ", not the original error");
  p->Check(w->DurableTicket() == before, "DurableTicket moved after Close");
  h.DropWriter();
  // No retry: the failed file is never synced again, and nothing is written.
  size_t ok = 0;
  const size_t syncs = h.watch().CountAfter(
      at, failure->path, {WatchEnv::Kind::kSync, WatchEnv::Kind::kSyncPrefix}, &ok);
  const size_t after = h.watch().CountAfter(at);
  fig->syncs_after += syncs;
  fig->syncs_after_ok += ok;
  fig->calls_after += after;
  p->Check(syncs == 0, std::to_string(syncs) + " sync(s) of " + failure->path +
                           " after its fdatasync failed, " + std::to_string(ok) +
                           " of them reported success: a retry after EIO proves nothing");
  p->Check(after == 0, std::to_string(after) + " file operation(s) after the failure");
}

// Power is cut; a fresh store must show every group the writer reported
// durable, byte for byte, and a whole number of the groups after them.
void CheckAfterPowerLoss(Harness& h, DropMode mode, uint64_t seed, Figures* fig, Problems* p) {
  const Written& wr = h.written();
  const Status lost = h.fault().SimulatePowerLoss(mode, seed);
  if (!lost.ok()) return p->Check(false, "SimulatePowerLoss: " + lost.ToString());
  StoreOptions ro;
  ro.env = &h.fault();
  ro.read_only = true;
  auto store = Store::Open(kStorePath, ro);
  if (!store.ok()) {
    ++fig->refused;
    return p->Check(false, "reopening: " + store.status().ToString());
  }
  auto snap = (*store)->GetSnapshot();
  auto actual = ScanAll(*snap, wr.series);
  if (!actual.ok()) return p->Check(false, "scan: " + actual.status().ToString());
  size_t m = wr.durable;
  while (m <= wr.groups.size() && !(*actual == Union(wr.groups, m))) ++m;
  if (m > wr.groups.size()) {
    size_t lost_records = 0;
    for (const auto& [k, v] : Union(wr.groups, wr.durable)) lost_records += !actual->count(k);
    return p->Check(false, "after the power cut the records are not the " +
                               std::to_string(wr.durable) + " commits reported durable (" +
                               std::to_string(lost_records) + " of their records lost)" +
                               DiffContents(Union(wr.groups, wr.durable), *actual) +
                               "\n  nor those and whole commits after them" +
                               DiffContents(Union(wr.groups, wr.groups.size()), *actual));
  }
  fig->in_flight_commits += static_cast<int>(wr.groups.size() - wr.durable);
  fig->in_flight_visible += static_cast<int>(m - wr.durable);
  const VerifyReport r = snap->VerifyAll();
  for (const Status& s : r.problems) p->Check(false, "VerifyAll: " + s.ToString());
}

const char* ModeName(DropMode m) {
  switch (m) {
    case DropMode::kDropUnsynced:
      return "DropUnsynced";
    case DropMode::kKeepRandomPrefix:
      return "KeepRandomPrefix";
    case DropMode::kTornGarbage:
      return "TornGarbage";
  }
  return "?";
}

// Runs `scenario` once per power-cut outcome: every DropMode, the random
// ones with several seeds. Failing tries go to `failures`.
void RunTries(const char* title, const std::function<void(Harness&, Figures*, Problems*)>& scenario,
              FailureSummary* failures, int seeds_per_mode = 4) {
  const uint64_t seed = TestSeed();
  Figures fig;
  for (DropMode mode :
       {DropMode::kDropUnsynced, DropMode::kKeepRandomPrefix, DropMode::kTornGarbage}) {
    const int seeds = mode == DropMode::kDropUnsynced ? 1 : seeds_per_mode;
    for (int t = 0; t < seeds; ++t) {
      const uint64_t case_seed = seed ^ (uint64_t(t + 1) * 0x9e3779b97f4a7c15ULL);
      Problems p;
      {
        Harness h;
        scenario(h, &fig, &p);
        CheckAfterPowerLoss(h, mode, case_seed, &fig, &p);
      }
      ++fig.tries;
      const std::string where = std::string(title) + ", " + ModeName(mode) + " try " +
                                std::to_string(t) + " (RUNSTORE_SEED=" + std::to_string(seed) + ")";
      failures->Add(where, p);
    }
  }
  std::printf(
      "[ figures  ] %s: tries=%d, failed calls Sync=%d SyncPrefix=%d, run by the committing "
      "caller's thread in %d tries; commits in flight at the failure (not reported durable)=%d, "
      "whole after the power cut=%d, absent=%d; syncs of the failed file afterwards=%zu "
      "(succeeded=%zu), file operations afterwards=%zu; store refused to reopen after the "
      "power cut in %d tries\n",
      title, fig.tries, fig.failed_sync, fig.failed_sync_prefix, fig.failed_on_caller,
      fig.in_flight_commits, fig.in_flight_visible, fig.in_flight_commits - fig.in_flight_visible,
      fig.syncs_after, fig.syncs_after_ok, fig.calls_after, fig.refused);
  failures->Print(title);
}

// Whether the segment `path` (as the env names it) reads as sealed now,
// before any power cut.
bool IsSealed(Harness& h, const std::string& path) {
  StoreOptions ro;
  ro.env = &h.fault();
  ro.read_only = true;
  auto store = Store::Open(kStorePath, ro);
  if (!store.ok()) return false;
  for (const SegmentInfo& s : (*store)->GetSnapshot()->ListSegments()) {
    if (std::string(kStorePath) + "/" + s.file == path) return s.sealed;
  }
  return false;
}

// How long a test lets the background thread start a seal that then waits
// for the held sync (nothing it does before that wait is observable). Too
// short a time only makes a try miss the race, never fail.
constexpr auto kSealStarts = std::chrono::milliseconds(50);

// Waits until `done`, polling; false after kPatience.
bool Eventually(const std::function<bool()>& done) {
  const auto until = std::chrono::steady_clock::now() + kPatience;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// n commits made durable, one after another.
void CommitDurably(Harness& h, int n, bool async, Problems* p) {
  for (int i = 0; i < n; ++i) {
    Status s = h.AppendGroup(/*big=*/i == 1);
    if (s.ok() && async) {
      auto t = h.writer()->CommitAsync();
      s = t.ok() ? h.writer()->WaitForCommit(*t) : t.status();
    } else if (s.ok()) {
      s = h.writer()->Commit();
    }
    if (!s.ok()) return p->Check(false, "a commit before the failure: " + s.ToString());
    h.Durable(h.written().groups.size());
  }
}

// ---------------------------------------------------------------------------

// A caller's Commit whose fdatasync fails returns the error, and the commit
// is not durable; nothing syncs the file again.
TEST(FsyncFailureTest, CommitWhoseSyncFailsReturnsTheErrorAndIsNeverDurable) {
  FailureSummary failures(3);
  RunTries(
      "Commit",
      [](Harness& h, Figures* fig, Problems* p) {
        h.Open(Options(), p);
        if (!h.writer()) return;
        CommitDurably(h, 3, /*async=*/false, p);
        const uint64_t before = h.writer()->DurableTicket();
        p->Check(h.AppendGroup(/*big=*/true).ok(), "append before the failing commit");
        h.watch().FailNextSync(EIO, /*hold=*/false);
        const Status s = h.writer()->Commit();
        p->Check(!s.ok(), "the Commit whose sync failed returned OK");
        if (fig->tries == 0)
          std::printf("[ figures  ] Commit returned: %s\n", s.ToString().c_str());
        if (const auto f = h.watch().failure()) {
          fig->failed_on_caller += f->thread == std::this_thread::get_id();
        }
        p->Check(!h.writer()->WaitForCommit(before + 1).ok(),
                 "WaitForCommit of the failed commit's ticket returned OK");
        CheckAfterFailure(h, s, before, fig, p);
      },
      &failures);
  EXPECT_EQ(failures.failing(), 0u);
}

// Group commit: the sync thread's fdatasync of the first of three commits
// in flight fails while the background thread writes the other two. Every
// one of them reports the error; none is ever durable.
TEST(FsyncFailureTest, FailedSyncOnTheSyncThreadFailsEveryCommitInFlight) {
  FailureSummary failures(3);
  RunTries(
      "group commit",
      [](Harness& h, Figures* fig, Problems* p) {
        h.Open(Options(), p);
        if (!h.writer()) return;
        Writer* w = h.writer();
        CommitDurably(h, 2, /*async=*/true, p);
        const uint64_t before = w->DurableTicket();
        h.watch().FailNextSync(EIO, /*hold=*/true);
        p->Check(h.AppendGroup().ok(), "append");
        auto t1 = w->CommitAsync();
        if (!t1.ok()) return p->Check(false, "CommitAsync: " + t1.status().ToString());
        if (!h.watch().WaitUntilHeld()) {
          h.watch().Release();
          return p->Check(false, "the commit's sync never started");
        }
        const uint64_t records = w->stats().commits;
        p->Check(h.AppendGroup(/*big=*/true).ok(), "append while the sync runs");
        auto t2 = w->CommitAsync();
        p->Check(h.AppendGroup().ok(), "append while the sync runs");
        auto t3 = w->CommitAsync();
        if (!t2.ok() || !t3.ok()) {
          h.watch().Release();
          return p->Check(false, "CommitAsync while the sync runs failed");
        }
        // Both written (their records in the file) while the first one's
        // sync is held: three commits in flight.
        p->Check(Eventually([&] { return w->stats().commits >= records + 2; }),
                 "the commits behind the held sync were never written");
        p->Check(w->DurableTicket() == before, "DurableTicket moved while the sync was held");
        h.watch().Release();
        Status first;
        for (uint64_t t : {*t1, *t2, *t3}) {
          const Status s = w->WaitForCommit(t);
          p->Check(!s.ok(), "WaitForCommit(" + std::to_string(t) +
                                ") returned OK: a commit behind a failed sync reported durable");
          if (first.ok()) first = s;
          if (!s.ok() && !first.ok()) {
            p->Check(SameError(s, first), "WaitForCommit(" + std::to_string(t) +
                                              ") returned another error: " + s.ToString());
          }
        }
        if (const auto f = h.watch().failure()) {
          fig->failed_on_caller += f->thread == std::this_thread::get_id();
        }
        CheckAfterFailure(h, first, before, fig, p);
      },
      &failures);
  EXPECT_EQ(failures.failing(), 0u);
}

// The fdatasync of the seal fails (Close, with a flush and appended records
// to commit first): Close reports it, and the segment is not sealed.
TEST(FsyncFailureTest, FailedSyncOfTheSealIsReportedByClose) {
  FailureSummary failures(3);
  RunTries(
      "seal",
      [](Harness& h, Figures* fig, Problems* p) {
        h.Open(Options(), p);
        if (!h.writer()) return;
        Writer* w = h.writer();
        CommitDurably(h, 2, /*async=*/false, p);
        const uint64_t before = w->DurableTicket();
        p->Check(h.AppendGroup().ok(), "append");
        p->Check(w->Flush().ok(), "Flush");  // visible, not durable
        p->Check(h.AppendGroup().ok(), "append");
        h.watch().FailNextSync(EIO, /*hold=*/false);
        const Status s = w->Close();
        p->Check(!s.ok(), "Close returned OK although the seal's fdatasync failed");
        p->Check(w->DurableTicket() == before, "DurableTicket moved although the seal failed");
        // Close is done: the writer is closed, so the sticky checks do not
        // apply; no retry and no more writes do.
        const auto f = h.watch().failure();
        p->Check(f.has_value(), "no sync failed");
        if (f) {
          fig->CountFailure(*f);
          size_t ok = 0;
          const size_t syncs = h.watch().CountAfter(
              f->number, f->path, {WatchEnv::Kind::kSync, WatchEnv::Kind::kSyncPrefix}, &ok);
          fig->syncs_after += syncs;
          fig->syncs_after_ok += ok;
          fig->calls_after += h.watch().CountAfter(f->number);
          p->Check(f->kind == WatchEnv::Kind::kSync,
                   "the failure hit a call other than the seal's Sync");
          p->Check(syncs == 0, "the failed file was synced again after its fdatasync failed");
          p->Check(s.message().find("injected") != std::string::npos && s.sys_errno() == EIO,
                   "Close returned " + s.ToString() + ", not the failed sync's error");
        }
        h.DropWriter();
      },
      &failures);
  EXPECT_EQ(failures.failing(), 0u);
}

// Close while the sync thread's fdatasync of a commit is failing: the seal
// waits for the running sync and must then stop, not seal the file with a
// second fdatasync that "succeeds" over pages the failed one may have lost,
// and must not report the commit durable.
TEST(FsyncFailureTest, CloseDuringAFailingSyncNeitherSealsNorReportsTheCommitDurable) {
  FailureSummary failures(3);
  RunTries(
      "Close during a failing sync",
      [](Harness& h, Figures* fig, Problems* p) {
        h.Open(Options(), p);
        if (!h.writer()) return;
        Writer* w = h.writer();
        CommitDurably(h, 2, /*async=*/true, p);
        const uint64_t before = w->DurableTicket();
        h.watch().FailNextSync(EIO, /*hold=*/true);
        p->Check(h.AppendGroup(/*big=*/true).ok(), "append");
        auto t1 = w->CommitAsync();
        if (!t1.ok()) return p->Check(false, "CommitAsync: " + t1.status().ToString());
        if (!h.watch().WaitUntilHeld()) {
          h.watch().Release();
          return p->Check(false, "the commit's sync never started");
        }
        Status closed;
        std::thread closer([&] { closed = w->Close(); });
        // Time for the background thread to start the seal, which waits for
        // the running sync (nothing observable happens before it does).
        std::this_thread::sleep_for(kSealStarts);
        h.watch().Release();
        closer.join();
        const Status waited = w->WaitForCommit(*t1);
        if (waited.ok()) h.Durable(h.written().groups.size());  // what the writer claims
        p->Check(!waited.ok(), "WaitForCommit of the commit whose sync failed returned OK");
        p->Check(w->DurableTicket() == before, "DurableTicket reached " +
                                                   std::to_string(w->DurableTicket()) +
                                                   ", the ticket of the commit whose sync failed");
        p->Check(!closed.ok(), "Close returned OK");
        p->Check(
            closed.sys_errno() == EIO && closed.message().find("injected") != std::string::npos,
            "Close returned " + closed.ToString() + ", not the failed sync's error");
        const auto f = h.watch().failure();
        p->Check(f.has_value(), "no sync failed");
        if (f) {
          fig->CountFailure(*f);
          size_t ok = 0;
          const size_t syncs = h.watch().CountAfter(
              f->number, f->path, {WatchEnv::Kind::kSync, WatchEnv::Kind::kSyncPrefix}, &ok);
          const size_t after = h.watch().CountAfter(f->number);
          fig->syncs_after += syncs;
          fig->syncs_after_ok += ok;
          fig->calls_after += after;
          p->Check(syncs == 0, std::to_string(syncs) + " sync(s) of " + f->path +
                                   " after its fdatasync failed (" + std::to_string(ok) +
                                   " reported success), and " + std::to_string(after) +
                                   " file operation(s) in all: the seal went on");
          h.DropWriter();
          p->Check(!IsSealed(h, f->path), f->path + " was sealed after its fdatasync failed");
        }
        h.DropWriter();
      },
      &failures, /*seeds_per_mode=*/8);
  EXPECT_EQ(failures.failing(), 0u);
}

// The same on the background thread without Close: a large value makes the
// segment reach its size while the sync of the commit before it is failing,
// and the writer seals the segment by itself.
TEST(FsyncFailureTest, SegmentRollDuringAFailingSyncNeitherSealsNorReportsTheCommitDurable) {
  FailureSummary failures(3);
  RunTries(
      "segment roll during a failing sync",
      [](Harness& h, Figures* fig, Problems* p) {
        WriterOptions o = Options();
        o.segment_bytes = 64 << 10;
        h.Open(o, p);
        if (!h.writer()) return;
        Writer* w = h.writer();
        CommitDurably(h, 2, /*async=*/true, p);
        const uint64_t before = w->DurableTicket();
        h.watch().FailNextSync(EIO, /*hold=*/true);
        p->Check(h.AppendGroup().ok(), "append");
        auto t1 = w->CommitAsync();
        if (!t1.ok()) return p->Check(false, "CommitAsync: " + t1.status().ToString());
        if (!h.watch().WaitUntilHeld()) {
          h.watch().Release();
          return p->Check(false, "the commit's sync never started");
        }
        // 64 KiB: the segment passes segment_bytes with this block.
        std::vector<double> huge(8192, 1.5);
        const int64_t shape[] = {8192};
        h.written().groups.emplace_back();
        h.written().series.insert("huge");
        h.written().groups.back()[RecordKey{"huge", RunId(0), 0}] =
            RecordValue{DType::kFloat64,
                        {8192},
                        std::string(reinterpret_cast<const char*>(huge.data()), huge.size() * 8)};
        Status appended;
        std::thread appender(
            [&] { appended = w->Append(0, "huge", 0, ValueRef::Array(huge.data(), shape)); });
        std::this_thread::sleep_for(kSealStarts);
        h.watch().Release();
        appender.join();
        const Status waited = w->WaitForCommit(*t1);
        if (waited.ok()) h.Durable(h.written().groups.size() - 1);  // what the writer claims
        p->Check(!waited.ok(), "WaitForCommit of the commit whose sync failed returned OK");
        p->Check(w->DurableTicket() == before, "DurableTicket reached " +
                                                   std::to_string(w->DurableTicket()) +
                                                   " past the ticket " + std::to_string(before) +
                                                   " durable before the failed sync");
        p->Check(!appended.ok() || !w->Commit().ok(),
                 "the writer went on after the failed sync: the large Append and a Commit "
                 "returned OK");
        const auto f = h.watch().failure();
        p->Check(f.has_value(), "no sync failed");
        if (f) {
          fig->CountFailure(*f);
          size_t ok = 0;
          const size_t syncs = h.watch().CountAfter(
              f->number, f->path, {WatchEnv::Kind::kSync, WatchEnv::Kind::kSyncPrefix}, &ok);
          fig->syncs_after += syncs;
          fig->syncs_after_ok += ok;
          fig->calls_after += h.watch().CountAfter(f->number);
          p->Check(syncs == 0, std::to_string(syncs) + " sync(s) of " + f->path +
                                   " after its fdatasync failed (" + std::to_string(ok) +
                                   " reported success): the roll sealed the segment anyway");
        }
        p->Check(!w->Close().ok(), "Close returned OK after the failed sync");
        h.DropWriter();
        if (f) p->Check(!IsSealed(h, f->path), f->path + " was sealed after its fdatasync failed");
      },
      &failures, /*seeds_per_mode=*/8);
  EXPECT_EQ(failures.failing(), 0u);
}

}  // namespace
}  // namespace runstore
