// A real disk that fills up (STYLE.md "Tests that try to break it").
//
// The ENOSPC cases of power_loss_test inject the error into one operation of
// an in-memory env. Here the disk really is full: each test mounts a tmpfs of
// kDiskBytes under a temporary directory (as root; otherwise it is skipped,
// saying why), fills most of it with a file of its own so that the writer
// reaches the end quickly, and lets the writer run into the end through the
// POSIX env, with short writes, a partly written frame and a file system that
// refuses every later page.
//
// What must hold:
//  - the call that meets the full disk returns IOError carrying ENOSPC, whose
//    message names the segment file (once) and says "No space left on
//    device"; the writer then refuses all further work;
//  - a new Store::Open shows every commit acknowledged before, byte for byte,
//    and of the commit in flight all of it or nothing (records are written
//    once per test, so "a whole number of commits" is exact);
//  - the store stays usable: with space freed (the filler removed) a new
//    writer commits, and a writer on a disk that is already full fails
//    cleanly without damaging what is there.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "runstore/store.h"
#include "testing/test_util.h"

namespace runstore {
namespace {

using Clock = std::chrono::steady_clock;
using ::runstore::testing::Contents;
using ::runstore::testing::DiffContents;
using ::runstore::testing::KeyString;
using ::runstore::testing::RecordKey;
using ::runstore::testing::RecordValue;
using ::runstore::testing::RecordValueAt;
using ::runstore::testing::ScanAll;
using ::runstore::testing::StatusIs;
using ::runstore::testing::TempDir;

constexpr uint64_t kDiskBytes = 4 << 20;
constexpr char kNoSpace[] = "No space left on device";

size_t Occurrences(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + needle.size())) {
    ++n;
  }
  return n;
}

// What a test wrote, commit by commit. groups[i] holds the records of the
// i-th commit; groups [0, acked) were acknowledged, and the groups after them
// were in flight when the disk filled: committed (CommitAsync) but not
// durable yet, or still being appended when a call failed.
struct Written {
  std::vector<Contents> groups;
  size_t ended = 0;  // groups a commit call was made for
  size_t acked = 0;
  std::set<std::string> series;

  Contents& Current() {
    if (groups.size() == ended) groups.emplace_back();
    return groups.back();
  }
  // Records (run, series, step) -> v in the group in flight, before the call
  // that appends it: a large value may reach the file even if Append fails.
  void Record(RunRef run, std::string_view series_name, int64_t step, const ValueRef& v) {
    series.insert(std::string(series_name));
    Current()[RecordKey{std::string(series_name), run.ToRunId(), step}] =
        RecordValue{v.dtype, std::vector<int64_t>(v.shape.begin(), v.shape.end()),
                    std::string(static_cast<const char*>(v.data), v.nbytes)};
  }
  // A commit call was made for the current group: later records go to the
  // next one.
  void End() {
    if (groups.size() > ended) ++ended;
  }
  // The commit call of the current group returned OK.
  void Acknowledge() {
    End();
    acked = ended;
  }
  size_t records(size_t n) const {
    size_t r = 0;
    for (size_t i = 0; i < n && i < groups.size(); ++i) r += groups[i].size();
    return r;
  }
};

Contents Union(const std::vector<Contents>& groups, size_t n) {
  Contents c;
  for (size_t i = 0; i < n; ++i) c.insert(groups[i].begin(), groups[i].end());
  return c;
}

// Deterministic values for commit c.
double LossValue(int c, int step) { return c * 1000.0 + step * 0.5; }
std::vector<double> BigArray(int c, size_t n) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = c + static_cast<double>(i) / 1024.0;
  return v;
}

class DiskFullTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) {
      GTEST_SKIP() << "not running as root: cannot mount a tmpfs of " << kDiskBytes
                   << " bytes to fill";
    }
    disk_ = tmp_.path() + "/disk";
    ASSERT_EQ(::mkdir(disk_.c_str(), 0755), 0) << std::strerror(errno);
    const std::string options = "size=" + std::to_string(kDiskBytes) + ",mode=0755";
    if (::mount("tmpfs", disk_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
      GTEST_SKIP() << "mount -t tmpfs -o " << options << " tmpfs " << disk_
                   << " failed: " << std::strerror(errno);
    }
    mounted_ = true;
    store_path_ = disk_ + "/store";
    segments_ = store_path_ + "/segments/";
    start_ = Clock::now();
  }

  void TearDown() override {
    // Lazily: a mapping a failed assertion left alive keeps the mount busy.
    if (mounted_ && ::umount2(disk_.c_str(), MNT_DETACH) != 0) {
      ADD_FAILURE() << "umount " << disk_ << ": " << std::strerror(errno);
    }
  }

  uint64_t FreeBytes() const {
    struct statvfs st;
    if (::statvfs(disk_.c_str(), &st) != 0) return 0;
    return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  }

  // Writes `name` on the disk until at most `leave` bytes are free (0: until
  // the disk refuses a single byte more). Returns the bytes written.
  uint64_t Fill(const std::string& name, uint64_t leave = 0) {
    const std::string path = disk_ + "/" + name;
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    EXPECT_GE(fd, 0) << path << ": " << std::strerror(errno);
    if (fd < 0) return 0;
    static const char kZeros[64 << 10] = {};
    uint64_t written = 0;
    for (size_t chunk = sizeof kZeros; chunk > 0; chunk /= 2) {
      while (true) {
        const uint64_t free = FreeBytes();
        if (leave > 0 && free <= leave) break;
        const size_t n = leave > 0 ? std::min<uint64_t>(chunk, free - leave) : chunk;
        const ssize_t w = ::write(fd, kZeros, n);
        if (w <= 0) break;  // ENOSPC
        written += static_cast<uint64_t>(w);
      }
      if (leave > 0) break;
    }
    ::fsync(fd);
    ::close(fd);
    return written;
  }

  void RemoveFiller(const std::string& name) {
    ASSERT_EQ(::unlink((disk_ + "/" + name).c_str()), 0) << std::strerror(errno);
  }

  // The error of a call that met the full disk: IOError(ENOSPC), naming a
  // segment file of `writer_id` and the cause. `where` says which call.
  void ExpectDiskFull(const Status& s, const std::string& writer_id, const std::string& where,
                      bool print = true) {
    EXPECT_EQ(s.code(), StatusCode::kIOError) << where << ": " << s.ToString();
    EXPECT_EQ(s.sys_errno(), ENOSPC) << where << ": " << s.ToString();
    EXPECT_NE(s.message().find(kNoSpace), std::string::npos) << where << ": " << s.ToString();
    EXPECT_NE(s.message().find(segments_ + writer_id + "-"), std::string::npos)
        << where << ": the message does not name the segment file: " << s.ToString();
    if (print) {
      std::printf("[ figures  ] %s failed with: %s\n", where.c_str(), s.ToString().c_str());
      std::fflush(stdout);
    }
  }

  // The segment file named in `s`, or "" if none is.
  std::string NamedSegment(const Status& s) const {
    const std::string& m = s.message();
    const size_t at = m.find(segments_);
    if (at == std::string::npos) return "";
    const size_t end = m.find(".rss", at);
    return end == std::string::npos ? "" : m.substr(at, end + 4 - at);
  }

  // A writer that failed stays failed, and says so again.
  void ExpectStaysFailed(Writer* w) {
    EXPECT_FALSE(w->Append(999999, "loss", 0, 1.0).ok()) << "Append after the failure";
    EXPECT_FALSE(w->Commit().ok()) << "Commit after the failure";
    EXPECT_FALSE(w->Close().ok()) << "Close after the failure";
  }

  // Opens the store anew, read-only, and checks it against `written`: every
  // acknowledged commit byte for byte (Scan and Get), and a whole number of
  // the commits after them, in order. Returns how many commits are visible.
  size_t CheckReopened(const Written& written, const std::string& what) {
    StoreOptions ro;
    ro.read_only = true;
    auto store = Store::Open(store_path_, ro);
    EXPECT_TRUE(store.ok()) << what << ": reopening: " << store.status().ToString();
    if (!store.ok()) return 0;
    auto snap = (*store)->GetSnapshot();
    auto actual = ScanAll(*snap, written.series);
    EXPECT_TRUE(actual.ok()) << what << ": scan: " << actual.status().ToString();
    if (!actual.ok()) return 0;
    size_t m = written.acked;
    for (; m <= written.groups.size(); ++m) {
      if (*actual == Union(written.groups, m)) break;
    }
    if (m > written.groups.size()) {
      ADD_FAILURE() << what << ": the visible records are not the " << written.acked
                    << " acknowledged commits"
                    << DiffContents(Union(written.groups, written.acked), *actual)
                    << "\n  nor those and whole commits after them"
                    << DiffContents(Union(written.groups, written.groups.size()), *actual);
      return 0;
    }
    for (const auto& [k, v] : Union(written.groups, m)) {
      auto got = snap->Get(k.run, k.series, k.step);
      if (!got.ok()) {
        ADD_FAILURE() << what << ": Get " << KeyString(k) << ": " << got.status().ToString();
        break;
      }
      if (!(RecordValue{got->dtype(), got->shape(), std::string(got->data(), got->nbytes())} ==
            v)) {
        ADD_FAILURE() << what << ": Get " << KeyString(k) << " differs from what was written";
        break;
      }
    }
    const VerifyReport r = snap->VerifyAll();
    for (const Status& p : r.problems) ADD_FAILURE() << what << ": VerifyAll: " << p.ToString();
    return m;
  }

  double Seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  TempDir tmp_;
  std::string disk_;
  std::string store_path_;
  std::string segments_;
  bool mounted_ = false;
  Clock::time_point start_;
};

WriterOptions Options(const char* id) {
  WriterOptions o;
  o.writer_id = id;
  o.buffer_bytes = 1 << 20;
  o.block_bytes = 16 << 10;
  o.large_value_bytes = 16 << 10;
  return o;
}

// Appends commit c of the "sweep" workload: 200 float64 records, 300
// strings of about 60 bytes (several blocks between them), and a 32 KiB
// array, a block of its own. Stops at the first error.
Status AppendSweepCommit(Writer* w, Written* written, int c) {
  for (int step = 0; step < 200; ++step) {
    const double x = LossValue(c, step);  // ValueRef borrows it
    const ValueRef v = ValueRef::Scalar(x);
    written->Record(c, "loss", step, v);
    RUNSTORE_RETURN_IF_ERROR(w->Append(c, "loss", step, v));
  }
  const std::vector<double> big = BigArray(c, 4096);
  const int64_t shape[] = {4096};
  const ValueRef bv = ValueRef::Array(big.data(), shape);
  written->Record(c, "big", 0, bv);
  RUNSTORE_RETURN_IF_ERROR(w->Append(c, "big", 0, bv));
  for (int step = 0; step < 300; ++step) {
    const std::string text = "commit " + std::to_string(c) + ", step " + std::to_string(step) +
                             std::string(static_cast<size_t>(40 + step % 7), '.');
    written->Record(c, "text", step, ValueRef::String(text));
    RUNSTORE_RETURN_IF_ERROR(w->Append(c, "text", step, ValueRef::String(text)));
  }
  return Status::OK();
}

// Commits sweep commits until a call fails; returns that call's error.
Status CommitUntilFull(Writer* w, Written* written, int first, const char** failed_call) {
  for (int c = first; c < first + 1000; ++c) {
    Status s = AppendSweepCommit(w, written, c);
    if (!s.ok()) {
      *failed_call = "Append";
      return s;
    }
    s = w->Commit();
    if (!s.ok()) {
      *failed_call = "Commit";
      return s;
    }
    written->Acknowledge();
  }
  return Status::OK();
}

// The free space left is stepped a page at a time over more than one
// commit's bytes, so that the disk fills at every point of a commit: in the
// large array's frame (Append), in a block, or in the commit record
// (Commit).
TEST_F(DiskFullTest, CommitsUntilTheDiskIsFullThenEveryAcknowledgedOneReadsBack) {
  constexpr int kPages = 16;  // a commit takes about 14 pages
  std::map<std::string, int> failed_in;
  size_t acked = 0, records = 0, in_flight_visible = 0;
  uint64_t bytes = 0;
  for (int k = 0; k < kPages; ++k) {
    SCOPED_TRACE("free space left by the filler: 512 KiB + " + std::to_string(k) + " pages");
    std::filesystem::remove_all(store_path_);
    ::unlink((disk_ + "/filler").c_str());
    ASSERT_OK(Store::Open(store_path_, {}).status());
    Fill("filler", (512 << 10) + k * 4096);
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(store_path_, {}));
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(Options("w")));
    Written written;
    const char* call = "";
    const Status s = CommitUntilFull(w.get(), &written, 0, &call);
    ASSERT_FALSE(s.ok()) << "the disk never filled";
    ExpectDiskFull(s, "w", call, /*print=*/failed_in[call]++ == 0);
    bytes += w->stats().bytes_written;
    ExpectStaysFailed(w.get());
    w.reset();
    store.reset();
    const size_t visible = CheckReopened(written, "after the disk filled");
    EXPECT_GE(written.acked, 3u);
    acked += written.acked;
    records += written.records(written.acked);
    if (visible > written.acked) ++in_flight_visible;
  }
  std::string calls;
  for (const auto& [call, n] : failed_in) calls += " " + call + "=" + std::to_string(n);
  std::printf(
      "[ figures  ] commits until full, %d fill levels: tmpfs %llu bytes, commits acknowledged "
      "before ENOSPC %zu (%zu records, %.1f commits per level), commit in flight visible "
      "(whole) %zu times, absent %zu, writer bytes written %llu, calls that met the full "
      "disk:%s, %.2f s\n",
      kPages, static_cast<unsigned long long>(kDiskBytes), acked, records,
      static_cast<double>(acked) / kPages, in_flight_visible, kPages - in_flight_visible,
      static_cast<unsigned long long>(bytes), calls.c_str(), Seconds());
}

// The message of a failed write names the segment file once: the env's
// error names the path, and the layers above must not add it again.
TEST_F(DiskFullTest, TheErrorNamesTheSegmentFileOnce) {
  ASSERT_OK(Store::Open(store_path_, {}).status());
  Fill("filler", 1 << 20);
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(store_path_, {}));
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(Options("w")));
  Written written;
  const char* call = "";
  const Status s = CommitUntilFull(w.get(), &written, 0, &call);
  ASSERT_FALSE(s.ok()) << "the disk never filled";
  const std::string file = NamedSegment(s);
  ASSERT_FALSE(file.empty()) << s.ToString();
  EXPECT_EQ(Occurrences(s.message(), file), 1u) << "the error of " << call << ": " << s.ToString();
}

// The disk fills while Close writes the footer: every commit was
// acknowledged before, so all of them read back, from a segment that is now
// read as unsealed.
TEST_F(DiskFullTest, DiskFillsDuringTheSeal) {
  ASSERT_OK(Store::Open(store_path_, {}).status());
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(store_path_, {}));
  WriterOptions o = Options("w");
  o.block_bytes = 4096;  // many blocks: a footer index of several pages
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(o));
  Written written;
  for (int c = 0; c < 6; ++c) {
    for (int run = 0; run < 20; ++run) {
      for (int step = 0; step < 100; ++step) {
        const double x = LossValue(c * 100 + run, step);
        const ValueRef v = ValueRef::Scalar(x);
        written.Record(c * 100 + run, "loss", step, v);
        ASSERT_OK(w->Append(c * 100 + run, "loss", step, v));
      }
    }
    ASSERT_OK(w->Commit());
    written.Acknowledge();
  }
  const uint64_t filler = Fill("filler");
  ASSERT_LT(FreeBytes(), 4096u);
  const Status s = w->Close();
  ASSERT_FALSE(s.ok()) << "Close succeeded on a full disk (the footer fit in the file's last "
                          "page): make the index larger";
  ExpectDiskFull(s, "w", "Close");
  EXPECT_FALSE(w->Close().ok()) << "a second Close";
  w.reset();
  store.reset();
  const size_t visible = CheckReopened(written, "after the seal failed");
  EXPECT_EQ(visible, written.acked);
  StoreOptions ro;
  ro.read_only = true;
  ASSERT_OK_AND_ASSIGN(auto reopened, Store::Open(store_path_, ro));
  const auto segments = reopened->GetSnapshot()->ListSegments();
  ASSERT_EQ(segments.size(), 1u);
  EXPECT_FALSE(segments[0].sealed) << "a segment whose footer did not fit reads as sealed";
  EXPECT_EQ(segments[0].commits, written.acked);
  std::printf(
      "[ figures  ] seal on a full disk: commits acknowledged %zu (%zu records), blocks %llu, "
      "segment %llu bytes (committed %llu), filler %llu bytes, %.2f s\n",
      written.acked, written.records(written.acked),
      static_cast<unsigned long long>(segments[0].blocks),
      static_cast<unsigned long long>(segments[0].file_bytes),
      static_cast<unsigned long long>(segments[0].committed_bytes),
      static_cast<unsigned long long>(filler), Seconds());
}

// Group commit: many small commits in flight (CommitAsync, waited for four
// behind) until the disk is full. Every ticket that WaitForCommit reported
// durable reads back; the tickets after the failure all report it.
TEST_F(DiskFullTest, DiskFillsDuringGroupCommitOfSmallRecords) {
  ASSERT_OK(Store::Open(store_path_, {}).status());
  const uint64_t filler = Fill("filler", 512 << 10);
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(store_path_, {}));
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(Options("w")));
  Written written;
  std::vector<uint64_t> tickets;
  Status first_error;
  for (int c = 0; c < 100000 && first_error.ok(); ++c) {
    for (int step = 0; step < 40 && first_error.ok(); ++step) {
      const double x = LossValue(c, step);
      const ValueRef v = ValueRef::Scalar(x);
      written.Record(c, "loss", step, v);
      first_error = w->Append(c, "loss", step, v);
      if (first_error.ok() && step % 8 == 0) {
        const int32_t i = c * 100 + step;
        const ValueRef n = ValueRef::Scalar(i);
        written.Record(c, "n", step, n);
        first_error = w->Append(c, "n", step, n);
      }
    }
    if (!first_error.ok()) break;
    auto t = w->CommitAsync();
    if (!t.ok()) {
      first_error = t.status();
      break;
    }
    tickets.push_back(*t);
    written.End();  // groups[i] is the commit of tickets[i]
    if (tickets.size() > 4) first_error = w->WaitForCommit(tickets[tickets.size() - 5]);
  }
  ASSERT_FALSE(first_error.ok()) << "the disk never filled";
  ExpectDiskFull(first_error, "w", "Append, CommitAsync or WaitForCommit");
  // Which tickets were durable: a prefix, and DurableTicket says where it ends.
  size_t durable = 0;
  bool failed = false;
  for (size_t i = 0; i < tickets.size(); ++i) {
    const Status s = w->WaitForCommit(tickets[i]);
    if (s.ok()) {
      EXPECT_FALSE(failed) << "ticket " << tickets[i] << " durable after a failed one";
      durable = i + 1;
    } else {
      failed = true;
      EXPECT_THAT(s, StatusIs(StatusCode::kIOError)) << "ticket " << tickets[i];
      EXPECT_EQ(s.sys_errno(), ENOSPC) << s.ToString();
    }
  }
  EXPECT_EQ(w->DurableTicket(), durable ? tickets[durable - 1] : 0);
  const WriterStats stats = w->stats();
  ExpectStaysFailed(w.get());
  w.reset();
  store.reset();
  written.acked = durable;
  const size_t visible = CheckReopened(written, "after the disk filled under group commit");
  std::printf(
      "[ figures  ] group commit until full: filler %llu bytes, commits issued %zu, durable "
      "before ENOSPC %zu (%zu records), visible after reopening %zu, fdatasyncs %llu, writer "
      "bytes written %llu, %.2f s\n",
      static_cast<unsigned long long>(filler), tickets.size(), durable, written.records(durable),
      visible, static_cast<unsigned long long>(stats.syncs),
      static_cast<unsigned long long>(stats.bytes_written), Seconds());
  EXPECT_GT(durable, 10u);
}

// Freeing space lets the store go on: a new life of the same writer id (its
// next segment) commits, and what it commits reads back beside the
// acknowledged commits of the life that met the full disk.
TEST_F(DiskFullTest, AfterSpaceIsFreedANewWriterCommits) {
  ASSERT_OK(Store::Open(store_path_, {}).status());
  Fill("filler", 1 << 20);
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(store_path_, {}));
  Written written;
  {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(Options("w")));
    const char* call = "";
    const Status s = CommitUntilFull(w.get(), &written, 0, &call);
    ASSERT_FALSE(s.ok()) << "the disk never filled";
    ExpectDiskFull(s, "w", call);
  }
  const size_t first_life = CheckReopened(written, "after the disk filled");
  // The commit in flight is decided now: keep what the store shows.
  written.groups.resize(first_life);
  written.ended = written.acked = first_life;
  RemoveFiller("filler");
  const uint64_t freed = FreeBytes();
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(Options("w")));
  for (int c = 1000; c < 1003; ++c) {
    ASSERT_OK(AppendSweepCommit(w.get(), &written, c));
    ASSERT_OK(w->Commit());
    written.Acknowledge();
  }
  ASSERT_OK(w->Close());
  w.reset();
  const size_t visible = CheckReopened(written, "after space was freed");
  EXPECT_EQ(visible, written.groups.size());
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  std::set<std::string> files;
  for (const SegmentInfo& s : snap->ListSegments()) files.insert(s.file);
  EXPECT_TRUE(files.count("segments/w-00000002.rss")) << "the new life's segment";
  std::printf(
      "[ figures  ] after freeing space: commits of the first life kept %zu, free after removing "
      "the filler %llu bytes, commits of the new life 3, %.2f s\n",
      first_life, static_cast<unsigned long long>(freed), Seconds());
}

// A writer started on a disk that is already full fails at its first write
// with a clear error, and leaves the store as it was: readable in full, and
// usable again once there is space.
TEST_F(DiskFullTest, NewWriterOnAFullDiskFailsCleanly) {
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(store_path_, {}));
  Written written;
  {
    ASSERT_OK_AND_ASSIGN(auto a, store->NewWriter(Options("a")));
    for (int c = 0; c < 2; ++c) {
      ASSERT_OK(AppendSweepCommit(a.get(), &written, c));
      ASSERT_OK(a->Commit());
      written.Acknowledge();
    }
    ASSERT_OK(a->Close());
  }
  const uint64_t filler = Fill("filler");
  const uint64_t free_bytes = FreeBytes();
  ASSERT_LT(free_bytes, 4096u);
  // Opening needs no space.
  ASSERT_OK_AND_ASSIGN(auto full, Store::Open(store_path_, {}));
  auto b = full->NewWriter(Options("b"));
  Status s = b.status();
  if (b.ok()) {
    // The writer creates its segment at its first write.
    s = (*b)->Append(7, "loss", 0, 7.0);
    if (s.ok()) s = (*b)->Commit();
    ASSERT_FALSE(s.ok()) << "a commit succeeded on a full disk";
    ExpectDiskFull(s, "b", "the first Commit on a full disk");
    ExpectStaysFailed(b->get());
    b->reset();
  } else {
    EXPECT_EQ(s.sys_errno(), ENOSPC) << s.ToString();
    EXPECT_NE(s.message().find(kNoSpace), std::string::npos) << s.ToString();
  }
  const size_t kept = CheckReopened(written, "after a writer failed on the full disk");
  EXPECT_EQ(kept, written.acked);
  RemoveFiller("filler");
  {
    ASSERT_OK_AND_ASSIGN(auto again, full->NewWriter(Options("b")));
    ASSERT_OK(AppendSweepCommit(again.get(), &written, 10));
    ASSERT_OK(again->Close());
    written.Acknowledge();
  }
  EXPECT_EQ(CheckReopened(written, "after space was freed"), written.acked);
  std::printf(
      "[ figures  ] writer on a full disk: filler %llu bytes, free %llu bytes, commits kept %zu, "
      "error: %s, %.2f s\n",
      static_cast<unsigned long long>(filler), static_cast<unsigned long long>(free_bytes), kept,
      s.ToString().c_str(), Seconds());
}

}  // namespace
}  // namespace runstore
