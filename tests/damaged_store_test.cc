// Damage to whole stores (DESIGN invariant 3, docs/design.md#damaged-segments):
// a sealed segment that is damaged is Corruption naming the file and offset,
// never read as a shorter segment or a crashed writer's tail; one damaged
// segment does not make the rest of the store unreachable once the reader
// asks to skip it (OnDamaged::kSkip), and the snapshot then says exactly
// what was left out.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "format/segment_reader.h"
#include "runstore/store.h"
#include "testing/test_util.h"

namespace runstore {
namespace {

namespace fs = std::filesystem;
using ::runstore::testing::StatusIs;
using ::runstore::testing::StatusIsWith;
using ::runstore::testing::TempDir;

class DamagedStoreTest : public ::testing::Test {
 protected:
  std::string StorePath() const { return dir_.path() + "/store"; }
  std::string SegmentPath(const std::string& id, int seq) const {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "-%08d.rss", seq);
    return StorePath() + "/segments/" + id + buf;
  }
  std::unique_ptr<Store> OpenStore(OnDamaged on_damaged = OnDamaged::kFail) {
    auto s = Store::Open(StorePath(), {.read_only = true, .on_damaged = on_damaged});
    EXPECT_OK(s);
    return s.ok() ? std::move(s).value() : nullptr;
  }
  Status OpenStatus() { return Store::Open(StorePath(), {.read_only = true}).status(); }

  // Writer `id` logs `records` float64 records of run `run` (steps 0..n-1,
  // value run * 1000 + step), a commit per 100, and closes: one sealed
  // segment unless `segment_bytes` makes it roll.
  void WriteRun(const std::string& id, int run, int records, uint64_t segment_bytes = 1 << 30) {
    auto store = Store::Open(StorePath(), {});
    ASSERT_OK(store);
    WriterOptions wo;
    wo.writer_id = id;
    wo.segment_bytes = segment_bytes;
    auto w = (*store)->NewWriter(wo);
    ASSERT_OK(w);
    for (int step = 0; step < records; ++step) {
      ASSERT_OK((*w)->Append(run, "x", step, double(run * 1000 + step)));
      if (step % 100 == 99) ASSERT_OK((*w)->Commit());
    }
    ASSERT_OK((*w)->Close());
  }
  // Every record of run `run` reads back as WriteRun wrote it.
  void ExpectRun(const Snapshot& snap, int run, int records) {
    for (int step = 0; step < records; ++step) {
      auto v = snap.Get(run, "x", step);
      ASSERT_TRUE(v.ok()) << "run " << run << " step " << step << ": " << v.status().ToString();
      EXPECT_EQ(v->scalar<double>(), double(run * 1000 + step));
    }
  }
  void Zero(const std::string& path, uint64_t offset, uint64_t n) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(std::string(n, '\0').data(), static_cast<std::streamsize>(n));
  }
  void FlipBit(const std::string& path, uint64_t offset, int bit) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(offset));
    char c;
    f.get(c);
    c ^= static_cast<char>(1 << bit);
    f.seekp(static_cast<std::streamoff>(offset));
    f.put(c);
  }

  TempDir dir_;
};

TEST_F(DamagedStoreTest, ZeroedHeaderOfASealedSegmentIsCorruptionNotAnEmptySegment) {
  WriteRun("w", 1, 1000);
  Zero(SegmentPath("w", 1), 0, 128);
  EXPECT_THAT(OpenStatus(),
              StatusIsWith(StatusCode::kCorruption, "segments/w-00000001.rss: offset 0"));
  auto store = OpenStore(OnDamaged::kSkip);
  ASSERT_NE(store, nullptr);
  const VerifyReport r = store->GetSnapshot()->VerifyAll();
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_THAT(r.problems[0], StatusIsWith(StatusCode::kCorruption, "header is damaged"));
}

TEST_F(DamagedStoreTest, SealedSegmentCutInHalfIsCorruptionWhenItsWriterWentOn) {
  WriteRun("w", 1, 20000, /*segment_bytes=*/64 << 10);
  ASSERT_TRUE(fs::exists(SegmentPath("w", 2))) << "the writer should have rolled";
  const std::string first = SegmentPath("w", 1);
  fs::resize_file(first, fs::file_size(first) / 2);
  EXPECT_THAT(OpenStatus(),
              StatusIsWith(StatusCode::kCorruption, "segments/w-00000001.rss: offset"));
  EXPECT_THAT(OpenStatus(), StatusIsWith(StatusCode::kCorruption, "seal is missing"));
}

// The records a resume marker hid must not come back when the marker's
// commit is cut away: a cut sealed segment is refused, not read short.
TEST_F(DamagedStoreTest, CutThatRemovesAResumeMarkerDoesNotBringBackWhatItHid) {
  {
    auto store = Store::Open(StorePath(), {});
    ASSERT_OK(store);
    WriterOptions wo;
    wo.writer_id = "w";
    wo.segment_bytes = 64 << 10;
    ASSERT_OK_AND_ASSIGN(auto w, (*store)->NewWriter(wo));
    for (int step = 0; step < 100; ++step) ASSERT_OK(w->Append("r", "x", step, -1.0));
    ASSERT_OK(w->Commit());
    ASSERT_OK(w->Resume("r", 50));  // the first attempt's steps 50.. are void
    for (int step = 50; step < 60; ++step) ASSERT_OK(w->Append("r", "x", step, double(step)));
    ASSERT_OK(w->Commit());
    // Enough afterwards to roll into a second segment.
    for (int i = 0; i < 20000; ++i) ASSERT_OK(w->Append("other", "y", i, double(i)));
    ASSERT_OK(w->Commit());  // rolls: the next record goes to segment 2
    ASSERT_OK(w->Append("other", "y", 20000, 0.0));
    ASSERT_OK(w->Close());
  }
  ASSERT_TRUE(fs::exists(SegmentPath("w", 2)));
  ASSERT_OK_AND_ASSIGN(auto before, Store::Open(StorePath(), {.read_only = true}));
  EXPECT_THAT(before->GetSnapshot()->Get("r", "x", 70), StatusIs(StatusCode::kNotFound));
  // Cut the first segment right after its first commit: the marker is gone,
  // and what is left is a well-formed prefix of whole commits.
  format::SegmentIndex index;
  {
    ASSERT_OK_AND_ASSIGN(auto f, Env::Default()->NewRandomAccessFile(SegmentPath("w", 1)));
    ASSERT_OK(format::LoadSegmentIndex(*f, "w-00000001.rss", &index));
  }
  ASSERT_GE(index.commits.size(), 3u);
  fs::resize_file(SegmentPath("w", 1), index.commits[0].end_offset);
  EXPECT_THAT(OpenStatus(), StatusIsWith(StatusCode::kCorruption, "w-00000001.rss"));
  auto skipping = OpenStore(OnDamaged::kSkip);
  ASSERT_NE(skipping, nullptr);
  auto snap = skipping->GetSnapshot();
  ASSERT_EQ(snap->DamagedSegments().size(), 1u);
  EXPECT_EQ(snap->DamagedSegments()[0].file, "segments/w-00000001.rss");
  // Left out whole: neither the first attempt's nor the second's records.
  EXPECT_THAT(snap->Get("r", "x", 70), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(snap->Get("r", "x", 10), StatusIs(StatusCode::kNotFound));
}

// A writer that crashed leaves its last segment unsealed; a writer that
// restarts with the same id goes on in a new segment. That is not damage.
TEST_F(DamagedStoreTest, RestartAfterACrashIsNotMistakenForDamage) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto store = Store::Open(StorePath(), {});
    if (!store.ok()) _exit(1);
    auto w = (*store)->NewWriter({.writer_id = "w"});
    if (!w.ok()) _exit(2);
    for (int step = 0; step < 250; ++step) {
      if (!(*w)->Append(1, "x", step, double(1000 + step)).ok()) _exit(3);
      if (step % 100 == 99 && !(*w)->Commit().ok()) _exit(4);
    }
    _exit(0);  // a crash: no Close, the segment stays unsealed
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  WriteRun("w", 2, 500);  // the restart: segment 2
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(StorePath(), {.read_only = true}));
  auto snap = store->GetSnapshot();
  EXPECT_TRUE(snap->DamagedSegments().empty());
  ExpectRun(*snap, 1, 200);  // the crashed life's two commits
  EXPECT_THAT(snap->Get(1, "x", 210), StatusIs(StatusCode::kNotFound));
  ExpectRun(*snap, 2, 500);
  EXPECT_OK(snap->Verify());
}

// A writer restarted after a clean close names the previous life's last
// segment, which it found sealed, as its sealed predecessor.
TEST_F(DamagedStoreTest, RestartAfterACleanCloseProtectsThePreviousLifesSegment) {
  WriteRun("w", 1, 1000);
  WriteRun("w", 2, 1000);
  const std::string first = SegmentPath("w", 1);
  fs::resize_file(first, fs::file_size(first) - 100);  // trailer and footer torn away
  EXPECT_THAT(OpenStatus(), StatusIsWith(StatusCode::kCorruption, "seal is missing"));
}

// The last segment of a writer that closed cleanly, cut at a commit
// boundary, is indistinguishable from a crashed writer's tail: nothing in
// the store proves it was sealed. It reads as the commits it still holds
// (docs/reliability.md, "What is not detected").
TEST_F(DamagedStoreTest, CutOfAWritersLastSegmentReadsAsACrashedTail) {
  WriteRun("w", 1, 1000);
  const std::string f = SegmentPath("w", 1);
  fs::resize_file(f, fs::file_size(f) / 2);
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(StorePath(), {.read_only = true}));
  ASSERT_OK_AND_ASSIGN(SeriesInfo info, store->GetSnapshot()->GetSeriesInfo("x"));
  EXPECT_GT(info.count, 0u);
  EXPECT_LT(info.count, 1000u);
  EXPECT_EQ(info.count % 100, 0u) << "whole commits only";
}

TEST_F(DamagedStoreTest, OneDamagedSegmentLeavesTheOthersReadableWhenSkipped) {
  for (int w = 0; w < 4; ++w) WriteRun("w" + std::to_string(w), w, 400);
  FlipBit(SegmentPath("w2", 1), 50, 3);  // inside the writer id: header checksum fails
  EXPECT_THAT(OpenStatus(), StatusIsWith(StatusCode::kCorruption, "segments/w2-00000001.rss"));
  auto store = OpenStore(OnDamaged::kSkip);
  ASSERT_NE(store, nullptr);
  auto snap = store->GetSnapshot();
  ASSERT_EQ(snap->DamagedSegments().size(), 1u);
  EXPECT_EQ(snap->DamagedSegments()[0].file, "segments/w2-00000001.rss");
  EXPECT_THAT(snap->DamagedSegments()[0].status, StatusIsWith(StatusCode::kCorruption, "offset 0"));
  for (int w : {0, 1, 3}) ExpectRun(*snap, w, 400);
  EXPECT_THAT(snap->Get(2, "x", 0), StatusIs(StatusCode::kNotFound));
  ASSERT_OK_AND_ASSIGN(SeriesInfo info, snap->GetSeriesInfo("x"));
  EXPECT_EQ(info.count, 1200u);
  const VerifyReport r = snap->VerifyAll();
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_THAT(r.problems[0], StatusIsWith(StatusCode::kCorruption, "w2-00000001.rss"));
  EXPECT_EQ(r.segments, 3u);
}

TEST_F(DamagedStoreTest, UnreadableSegmentFileIsReportedAndSkippable) {
  WriteRun("a", 1, 300);
  WriteRun("b", 2, 300);
  // A FIFO where a segment should be: opening it must neither hang nor read.
  ASSERT_EQ(mkfifo(SegmentPath("c", 1).c_str(), 0644), 0);
  EXPECT_THAT(OpenStatus(), StatusIsWith(StatusCode::kIOError, "not a regular file (a FIFO)"));
  auto store = OpenStore(OnDamaged::kSkip);
  ASSERT_NE(store, nullptr);
  auto snap = store->GetSnapshot();
  ASSERT_EQ(snap->DamagedSegments().size(), 1u);
  EXPECT_EQ(snap->DamagedSegments()[0].file, "segments/c-00000001.rss");
  ExpectRun(*snap, 1, 300);
  ExpectRun(*snap, 2, 300);
}

}  // namespace
}  // namespace runstore
