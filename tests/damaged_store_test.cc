// Damage to whole stores (docs/design.md#invariant-3, #damaged-segments):
// a sealed segment that is damaged is Corruption naming the file and offset,
// never read as a shorter segment or a crashed writer's tail; one damaged
// segment does not make the rest of the store unreachable once the reader
// asks to skip it (OnDamaged::kSkip), and the snapshot then says exactly
// what was left out.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "format/format.h"
#include "format/segment_reader.h"
#include "runstore/store.h"
#include "testing/crafted_segment.h"
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

// A power cut while a seal was being synced can leave the trailer on disk
// and the footer torn: readers take the segment for a crashed writer's tail
// with every commit intact. A writer restarted on it must judge the seal by
// that same rule and not name the segment as its sealed predecessor, or the
// store it leaves is unopenable (found by the power-loss test, TornGarbage,
// RUNSTORE_SEED=24103695992264, crash after operation 42/63).
TEST_F(DamagedStoreTest, RestartAfterATornSealIsNotMistakenForDamage) {
  WriteRun("w", 1, 1000);
  const std::string first = SegmentPath("w", 1);
  const uint64_t size = fs::file_size(first);
  std::string trailer(format::kTrailerSize, '\0');
  {
    std::ifstream f(first, std::ios::binary);
    f.seekg(static_cast<std::streamoff>(size - format::kTrailerSize));
    f.read(trailer.data(), static_cast<std::streamsize>(trailer.size()));
  }
  format::Trailer t;
  ASSERT_TRUE(format::DecodeTrailer(trailer, &t));
  ASSERT_LT(t.footer_offset + 16, size - format::kTrailerSize);
  Zero(first, t.footer_offset, 16);  // the footer tore, the trailer did not
  {
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(StorePath(), {.read_only = true}));
    auto snap = store->GetSnapshot();
    EXPECT_TRUE(snap->DamagedSegments().empty());
    ExpectRun(*snap, 1, 1000);
  }
  WriteRun("w", 2, 500);  // the next life: segment 2
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(StorePath(), {.read_only = true}));
  auto snap = store->GetSnapshot();
  EXPECT_TRUE(snap->DamagedSegments().empty());
  ExpectRun(*snap, 1, 1000);
  ExpectRun(*snap, 2, 500);
  EXPECT_OK(snap->Verify());
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
  EXPECT_THAT(OpenStatus(), StatusIsWith(StatusCode::kIOError, "is a FIFO, not a regular file"));
  auto store = OpenStore(OnDamaged::kSkip);
  ASSERT_NE(store, nullptr);
  auto snap = store->GetSnapshot();
  ASSERT_EQ(snap->DamagedSegments().size(), 1u);
  EXPECT_EQ(snap->DamagedSegments()[0].file, "segments/c-00000001.rss");
  ExpectRun(*snap, 1, 300);
  ExpectRun(*snap, 2, 300);
}

// A segment only grows (docs/design.md#invariant-4). A reader that refreshes
// while a live writer's unsealed segment has been cut below what it had
// committed must report Corruption naming the file, not fail to map it (the
// store fuzzer found an InvalidArgument here) or recover past its end; with
// OnDamaged::kSkip the refresh leaves the segment out and says so.
TEST_F(DamagedStoreTest, AnUnsealedSegmentCutBelowItsCommitsIsCorruptionOnRefresh) {
  WriteRun("a", 1, 300);
  auto writable = Store::Open(StorePath(), {});
  ASSERT_OK(writable);
  WriterOptions wo;
  wo.writer_id = "w";
  auto w = (*writable)->NewWriter(wo);
  ASSERT_OK(w);
  for (int step = 0; step < 1000; ++step) {
    ASSERT_OK((*w)->Append(2, "x", step, double(2000 + step)));
    if (step % 100 == 99) ASSERT_OK((*w)->Commit());
  }
  auto strict = OpenStore();
  auto skipping = OpenStore(OnDamaged::kSkip);
  ASSERT_NE(strict, nullptr);
  ASSERT_NE(skipping, nullptr);
  ExpectRun(*strict->GetSnapshot(), 2, 1000);
  const std::string f = SegmentPath("w", 1);
  fs::resize_file(f, fs::file_size(f) / 2);
  EXPECT_THAT(strict->Refresh(),
              StatusIsWith(StatusCode::kCorruption, "segments/w-00000001.rss: the segment shrank"));
  ASSERT_OK_AND_ASSIGN(auto snap, skipping->Refresh());
  ASSERT_EQ(snap->DamagedSegments().size(), 1u);
  EXPECT_EQ(snap->DamagedSegments()[0].file, "segments/w-00000001.rss");
  ExpectRun(*snap, 1, 300);
  (void)(*w)->Close();  // its file is damaged; what Close says is not the point
}

// ---------------------------------------------------------------------------
// The damage sweep of a whole store: flip, zero and cut every segment of a
// multi-writer store with resume markers, overwrites across writers, rolled
// segments and a crashed writer's unsealed one. For each case the store must
// read exactly as before, or report Corruption naming the damaged file; or,
// only for a writer's last segment (which nothing proves sealed), read as
// that segment cut to a prefix of its commits. Opened with OnDamaged::kSkip,
// it must read as before, or leave out exactly the damaged file and read as
// the store without it, or fail loudly on that file; and every record no
// other read needs that file for reads back exactly.

using ::runstore::testing::Contents;
using ::runstore::testing::RecordKey;
using ::runstore::testing::RecordValueAt;

using Files = std::map<std::string, std::string>;  // segment file name -> bytes

// Reads a store in `env` at `dir` whole: Scan of every series (reserved ones
// too). The first error stops it.
Status ReadAll(Env* env, const std::string& dir, OnDamaged on_damaged, Contents* out,
               std::vector<std::string>* damaged) {
  out->clear();
  damaged->clear();
  RUNSTORE_ASSIGN_OR_RETURN(
      auto store, Store::Open(dir, {.env = env, .read_only = true, .on_damaged = on_damaged}));
  auto snap = store->GetSnapshot();
  for (const DamagedSegment& d : snap->DamagedSegments()) damaged->push_back(d.file);
  RUNSTORE_ASSIGN_OR_RETURN(auto series, snap->ListSeries(true));
  for (const SeriesInfo& info : series) {
    RUNSTORE_ASSIGN_OR_RETURN(auto scanner, snap->Scan(info.name));
    ScanBatch b;
    while (true) {
      RUNSTORE_ASSIGN_OR_RETURN(bool more, scanner->Next(&b));
      if (!more) break;
      for (size_t i = 0; i < b.count; ++i) {
        out->emplace(RecordKey{info.name, b.run(i), b.steps[i]}, RecordValueAt(b, i));
      }
    }
  }
  // Past the segments it left out (listed first, and in *damaged), verify
  // must find nothing the reads did not.
  const VerifyReport r = snap->VerifyAll();
  if (r.problems.size() > damaged->size()) return r.problems[damaged->size()];
  return Status::OK();
}

Status ReadFiles(const Files& files, OnDamaged on_damaged, Contents* out,
                 std::vector<std::string>* damaged) {
  auto env = NewMemEnv();
  std::vector<std::pair<std::string, std::string>> list(files.begin(), files.end());
  RUNSTORE_RETURN_IF_ERROR(testing::WriteCraftedStore(env.get(), "/s", list));
  return ReadAll(env.get(), "/s", on_damaged, out, damaged);
}

// The store of the sweep: writers a, b, c (a and b roll segments), with
// overwrites of one another's keys, resume markers, flushes, a large value
// and a crashed writer d whose segment stays unsealed.
void WriteSweepStore(const std::string& path) {
  auto store = Store::Open(path, {});
  ASSERT_OK(store);
  WriterOptions wo;
  wo.segment_bytes = 64 << 10;
  wo.large_value_bytes = 4096;
  std::vector<double> big(600);
  const int64_t big_shape[] = {600};
  for (const char* id : {"a", "b", "c"}) {
    wo.writer_id = id;
    ASSERT_OK_AND_ASSIGN(auto w, (*store)->NewWriter(wo));
    const int base = id[0] - 'a';
    for (int round = 0; round < (base == 2 ? 1 : 6); ++round) {
      for (int run = 0; run < 6; ++run) {
        for (int step = 0; step < 150; ++step) {
          // Runs 0..2 are shared by every writer: later commits overwrite.
          const RunId r =
              run < 3 ? RunId(int64_t{run}) : RunId(std::string(id) + std::to_string(run));
          ASSERT_OK(w->Append(r, "x", step, double(base * 1000 + round * 100 + step)));
        }
      }
      for (size_t i = 0; i < big.size(); ++i) big[i] = base + round + 0.001 * double(i);
      ASSERT_OK(w->Append(int64_t{base}, "big", round, ValueRef::Array(big.data(), big_shape)));
      ASSERT_OK(round % 2 ? w->Flush() : w->Commit());
      if (round == 1) ASSERT_OK(w->Resume(int64_t{1}, 20));  // hides steps >= 20 of run 1 so far
    }
    ASSERT_OK(w->Close());
  }
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto s = Store::Open(path, {});
    if (!s.ok()) _exit(1);
    auto w = (*s)->NewWriter({.writer_id = "d"});
    if (!w.ok()) _exit(2);
    for (int step = 0; step < 30; ++step) {
      if (!(*w)->Append(int64_t{2}, "x", step, -1.0 * step).ok()) _exit(3);
      if (step % 10 == 9 && !(step == 19 ? (*w)->Flush() : (*w)->Commit()).ok()) _exit(4);
    }
    _exit(0);  // crashed: unsealed
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

struct SweepFigures {
  uint64_t cases = 0, identical = 0, corruption = 0, prefix = 0, skipped_exactly = 0, skip_loud = 0;
};

TEST(DamagedStoreSweepTest, EveryDamageOfEverySegmentIsExactOrLoud) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  ASSERT_NO_FATAL_FAILURE(WriteSweepStore(path));
  Files original;
  for (const auto& e : fs::directory_iterator(path + "/segments")) {
    std::ifstream f(e.path(), std::ios::binary);
    original[e.path().filename()] = std::string(std::istreambuf_iterator<char>(f), {});
  }
  ASSERT_GE(original.size(), 6u) << "the writers should have rolled";
  Contents whole;
  std::vector<std::string> damaged;
  ASSERT_OK(ReadFiles(original, OnDamaged::kFail, &whole, &damaged));

  // Oracles, per segment: the store without it, its records' keys, and (for
  // a writer's last segment) the store with it cut to each prefix of its
  // commits.
  std::map<std::string, Contents> without, alone;
  std::map<std::string, std::vector<Contents>> prefixes;
  for (const auto& [name, bytes] : original) {
    Files rest = original;
    rest.erase(name);
    ASSERT_OK(ReadFiles(rest, OnDamaged::kFail, &without[name], &damaged));
    ASSERT_OK(ReadFiles({{name, bytes}}, OnDamaged::kFail, &alone[name], &damaged));
    auto env = NewMemEnv();
    ASSERT_OK(testing::WriteCraftedStore(env.get(), "/s", {{name, bytes}}));
    ASSERT_OK_AND_ASSIGN(auto file, env->NewRandomAccessFile("/s/segments/" + name));
    format::SegmentIndex index;
    ASSERT_OK(format::LoadSegmentIndex(*file, name, &index));
    std::vector<uint64_t> cuts{format::kSegmentHeaderSize};
    for (const auto& c : index.commits) cuts.push_back(c.end_offset);
    cuts.pop_back();  // all commits: the store as it is
    for (uint64_t cut : cuts) {
      Files cut_files = original;
      cut_files[name] = bytes.substr(0, cut);
      Contents c;
      // A segment that a later one names as sealed cannot be read short.
      if (ReadFiles(cut_files, OnDamaged::kFail, &c, &damaged).ok()) prefixes[name].push_back(c);
    }
  }
  auto is_prefix = [&](const std::string& name, const Contents& c) {
    for (const Contents& p : prefixes[name]) {
      if (p == c) return true;
    }
    return false;
  };

  testing::FailureSummary failures(5);
  SweepFigures fig;
  const auto start = std::chrono::steady_clock::now();
  auto run_case = [&](const std::string& name, const std::string& what, std::string damaged_bytes) {
    ++fig.cases;
    Files files = original;
    files[name] = std::move(damaged_bytes);
    const std::string file = "segments/" + name;
    testing::Problems p;
    Contents got;
    std::vector<std::string> left_out;
    const Status strict = ReadFiles(files, OnDamaged::kFail, &got, &left_out);
    if (strict.ok()) {
      if (got == whole) {
        ++fig.identical;
      } else if (is_prefix(name, got)) {
        ++fig.prefix;
      } else {
        p.Check(false, "reads differently, and not as a prefix of its commits");
      }
    } else {
      ++fig.corruption;
      p.Check(strict.code() == StatusCode::kCorruption ||
                  (strict.code() == StatusCode::kIOError && strict.sys_errno() != ENOMEM),
              "error other than Corruption: " + strict.ToString());
      p.Check(strict.message().find(file) != std::string::npos,
              "error does not name " + file + ": " + strict.ToString());
    }
    const Status skip = ReadFiles(files, OnDamaged::kSkip, &got, &left_out);
    if (skip.ok() && left_out.empty()) {
      p.Check(got == whole || is_prefix(name, got), "skipping: reads differently");
    } else if (skip.ok()) {
      ++fig.skipped_exactly;
      p.Check(left_out == std::vector<std::string>{file},
              "skipping: left out other segments than " + file);
      p.Check(got == without[name],
              "skipping: the rest does not read as the store without " + file);
    } else {
      ++fig.skip_loud;
      p.Check(skip.message().find(file) != std::string::npos,
              "skipping: error does not name " + file + ": " + skip.ToString());
      // Every record of the other segments that reading needs no block of
      // the damaged one for still reads back exactly (or fails naming it).
      auto env = NewMemEnv();
      std::vector<std::pair<std::string, std::string>> list(files.begin(), files.end());
      if (testing::WriteCraftedStore(env.get(), "/s", list).ok()) {
        auto store = Store::Open(
            "/s", {.env = env.get(), .read_only = true, .on_damaged = OnDamaged::kSkip});
        p.Check(store.ok(), "skipping: could not open: " + store.status().ToString());
        if (store.ok()) {
          auto snap = (*store)->GetSnapshot();
          for (const auto& [key, value] : without[name]) {
            if (alone[name].count(key)) continue;
            auto v = snap->Get(key.run, key.series, key.step);
            if (v.ok()) {
              p.Check(std::string_view(v->data(), v->nbytes()) == value.bytes,
                      "skipping: wrong value for " + testing::KeyString(key));
            } else {
              p.Check(v.status().message().find(file) != std::string::npos,
                      "skipping: " + testing::KeyString(key) + ": " + v.status().ToString());
            }
          }
        }
      }
    }
    failures.Add(file + ": " + what, p);
  };

  for (const auto& [name, bytes] : original) {
    const uint64_t n = bytes.size();
    for (uint64_t o = 0; o < n; o += (o < 128 || o + 128 > n) ? 7 : 211) {
      std::string b = bytes;
      b[o] ^= static_cast<char>(0xFF);
      run_case(name, "byte " + std::to_string(o) + " flipped", std::move(b));
    }
    for (uint64_t o = 0; o < n; o += 64 * 13) {
      std::string b = bytes;
      std::memset(b.data() + o, 0, std::min<uint64_t>(64, n - o));
      run_case(name, "64 bytes zeroed at " + std::to_string(o), std::move(b));
    }
    for (uint64_t len = 0; len < n; len += (len + 256 > n) ? 8 : 307) {
      run_case(name, "cut at " + std::to_string(len), bytes.substr(0, len));
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  failures.Print("whole-store damage sweep");
  std::printf(
      "[ figures  ] whole-store damage sweep: %zu segments, %zu records, %llu cases: "
      "identical=%llu "
      "corruption reported=%llu read as a prefix of the damaged segment's commits=%llu; with "
      "skipping: damaged segment left out and the rest exact=%llu, loud on the damaged file=%llu; "
      "%.1f s\n",
      original.size(), whole.size(), static_cast<unsigned long long>(fig.cases),
      static_cast<unsigned long long>(fig.identical),
      static_cast<unsigned long long>(fig.corruption), static_cast<unsigned long long>(fig.prefix),
      static_cast<unsigned long long>(fig.skipped_exactly),
      static_cast<unsigned long long>(fig.skip_loud), seconds);
  EXPECT_EQ(failures.failing(), 0u);
}

// A store of more segments than opening loads on one thread: damage is
// still reported segment by segment, in name order, the rest served, and
// every segment counted once, with the catalog and without it.
TEST_F(DamagedStoreTest, SegmentsLoadedOnManyThreadsReportTheirDamageOneByOne) {
  constexpr int kSegments = 700;  // past the 512 from which loading uses threads
  {
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(StorePath(), {.catalog_rewrite_segments = 0}));
    for (int i = 0; i < kSegments; ++i) {
      WriterOptions wo;
      char id[16];
      std::snprintf(id, sizeof id, "t%04d", i);
      wo.writer_id = id;
      ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(wo));
      ASSERT_OK(w->Append(i, "x", 0, double(i * 1000)));
      ASSERT_OK(w->Close());
    }
  }
  {
    ASSERT_OK_AND_ASSIGN(auto s, Store::Open(StorePath(), {.catalog_rewrite_segments = 0}));
    ASSERT_OK(s->WriteCatalog().status());
  }
  // Damaged after the catalog was written: their entries are stale.
  const std::vector<int> damaged = {3, 350, 699};
  for (int i : damaged) {
    char id[16];
    std::snprintf(id, sizeof id, "t%04d", i);
    Zero(SegmentPath(id, 1), 0, 128);
  }
  for (bool catalog : {false, true}) {
    SCOPED_TRACE(catalog ? "with the catalog" : "without it");
    EXPECT_THAT(Store::Open(StorePath(), {.read_only = true, .use_catalog = catalog}).status(),
                StatusIsWith(StatusCode::kCorruption, "segments/t0003-00000001.rss: offset 0"));
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(StorePath(), {.read_only = true,
                                                               .on_damaged = OnDamaged::kSkip,
                                                               .use_catalog = catalog}));
    const RefreshStats st = store->last_refresh();
    EXPECT_EQ(st.segments, kSegments - damaged.size());
    EXPECT_EQ(st.from_catalog + st.from_footer, kSegments - damaged.size());
    EXPECT_EQ(st.from_catalog, catalog ? kSegments - damaged.size() : 0u);
    auto snap = store->GetSnapshot();
    ASSERT_EQ(snap->DamagedSegments().size(), damaged.size());
    for (size_t k = 0; k < damaged.size(); ++k) {
      char file[48];
      std::snprintf(file, sizeof file, "segments/t%04d-00000001.rss", damaged[k]);
      EXPECT_EQ(snap->DamagedSegments()[k].file, file);
    }
    for (int i = 0; i < kSegments; ++i) {
      auto v = snap->Get(i, "x", 0);
      if (std::find(damaged.begin(), damaged.end(), i) != damaged.end()) {
        EXPECT_THAT(v, StatusIs(StatusCode::kNotFound)) << i;
      } else {
        ASSERT_TRUE(v.ok()) << i << ": " << v.status().ToString();
        EXPECT_EQ(v->scalar<double>(), double(i * 1000));
      }
    }
  }
}

}  // namespace
}  // namespace runstore
