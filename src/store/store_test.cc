#include "runstore/store.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <thread>

#include "format/block.h"
#include "format/format.h"
#include "format/segment_reader.h"
#include "store/read/snapshot.h"
#include "store/read/snapshot_helpers.h"
#include "testing/crafted_segment.h"
#include "testing/fault_injection_env.h"
#include "testing/test_util.h"
#include "util/coding.h"
#include "util/hash.h"
#include "util/utf8.h"

namespace runstore {

using read::MergeAscending;
using read::SnapshotImpl;
namespace {

namespace fs = std::filesystem;
using ::runstore::testing::HashedId;
using ::runstore::testing::StatusIs;
using ::runstore::testing::StatusIsWith;
using ::runstore::testing::TempDir;

class StoreTest : public ::testing::Test {
 protected:
  std::string StorePath() const { return dir_.path() + "/store"; }
  std::unique_ptr<Store> Open(StoreOptions o = {}) {
    auto s = Store::Open(StorePath(), o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  // Copies the store as a crash would leave it: whatever is in the files now.
  std::string CopyStore() {
    std::string to = dir_.path() + "/copy" + std::to_string(copies_++);
    fs::copy(StorePath(), to, fs::copy_options::recursive);
    return to;
  }
  TempDir dir_;
  int copies_ = 0;
};

TEST_F(StoreTest, ScalarRoundTripThroughSeal) {
  auto store = Open();
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
  for (int run = 0; run < 100; ++run) {
    ASSERT_OK(w->Append(run, "loss", 0, 0.5 * run));
    ASSERT_OK(w->Append(run, "count", 0, int32_t{run}));
  }
  ASSERT_OK(w->Close());
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  ASSERT_OK_AND_ASSIGN(Value v, snap->Get(42, "loss", 0));
  EXPECT_EQ(v.dtype(), DType::kFloat64);
  EXPECT_EQ(v.scalar<double>(), 21.0);
  EXPECT_TRUE(v.zero_copy());
  ASSERT_OK_AND_ASSIGN(auto series, snap->ListSeries());
  ASSERT_EQ(series.size(), 2u);
  EXPECT_EQ(series[0].name, "count");
  EXPECT_EQ(series[0].count, 100u);
  ASSERT_OK_AND_ASSIGN(auto runs, snap->ListRuns());
  EXPECT_EQ(runs.size(), 100u);
  ASSERT_OK_AND_ASSIGN(auto scanner, snap->Scan("loss"));
  ScanBatch b;
  size_t total = 0;
  while (true) {
    ASSERT_OK_AND_ASSIGN(bool more, scanner->Next(&b));
    if (!more) break;
    auto vals = b.values.as<double>();
    for (size_t i = 0; i < b.count; ++i) EXPECT_EQ(vals[i], 0.5 * b.int_runs[i]);
    total += b.count;
  }
  EXPECT_EQ(total, 100u);
  EXPECT_THAT(snap->Get(1000, "loss", 0), StatusIs(StatusCode::kNotFound));
  auto segs = snap->ListSegments();
  ASSERT_EQ(segs.size(), 1u);
  EXPECT_TRUE(segs[0].sealed);
}

// One value of every dtype and shape kind, through every codec and run kind,
// read back from a sealed segment and from an unsealed one (a crashed writer).
struct Case {
  Codec codec;
  bool string_runs;
  bool seal;
};

class RoundTripTest : public StoreTest, public ::testing::WithParamInterface<Case> {};

template <typename T>
std::vector<char> Bytes(const std::vector<T>& v) {
  std::vector<char> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

struct Expected {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<char> bytes;
};

std::vector<Expected> MakeValues(int run, int step) {
  std::vector<Expected> out;
  auto add = [&](std::string name, DType d, std::vector<int64_t> shape, std::vector<char> bytes) {
    out.push_back({std::move(name), d, std::move(shape), std::move(bytes)});
  };
  const int k = run * 31 + step;
  add("bool", DType::kBool, {}, {static_cast<char>(k % 2)});
  add("i8", DType::kInt8, {}, Bytes(std::vector<int8_t>{static_cast<int8_t>(-k)}));
  add("i16", DType::kInt16, {}, Bytes(std::vector<int16_t>{static_cast<int16_t>(-300 * k)}));
  add("i32", DType::kInt32, {}, Bytes(std::vector<int32_t>{-70000 * k}));
  add("i64", DType::kInt64, {}, Bytes(std::vector<int64_t>{-(int64_t{1} << 40) * k}));
  add("u8", DType::kUInt8, {}, Bytes(std::vector<uint8_t>{static_cast<uint8_t>(k)}));
  add("u16", DType::kUInt16, {}, Bytes(std::vector<uint16_t>{static_cast<uint16_t>(k * 300)}));
  add("u32", DType::kUInt32, {}, Bytes(std::vector<uint32_t>{static_cast<uint32_t>(k) * 70000u}));
  add("u64", DType::kUInt64, {}, Bytes(std::vector<uint64_t>{~uint64_t{0} - k}));
  add("f32", DType::kFloat32, {}, Bytes(std::vector<float>{k * 0.25f}));
  add("f64", DType::kFloat64, {}, Bytes(std::vector<double>{k * 1e-3}));
  std::vector<float> m(12);
  std::iota(m.begin(), m.end(), static_cast<float>(k));
  add("matrix", DType::kFloat32, {3, 4}, Bytes(m));
  std::vector<int16_t> var(static_cast<size_t>(k % 5 + 1) * 2);
  std::iota(var.begin(), var.end(), static_cast<int16_t>(k));
  add("ragged", DType::kInt16, {static_cast<int64_t>(var.size() / 2), 2}, Bytes(var));
  std::string s = "résumé " + std::to_string(k) + std::string(static_cast<size_t>(k % 7), 'x');
  add("text", DType::kString, {}, std::vector<char>(s.begin(), s.end()));
  std::string b = std::string("\0\xff", 2) + std::to_string(k);
  add("blob", DType::kBytes, {}, std::vector<char>(b.begin(), b.end()));
  std::vector<double> big(1 << 17);  // 1 MiB: the large-value path
  std::iota(big.begin(), big.end(), static_cast<double>(k));
  if (step == 0) add("big", DType::kFloat64, {1 << 17}, Bytes(big));
  return out;
}

RunId RunFor(int i, bool strings) {
  if (strings && i % 2 == 1) return RunId("run-" + std::to_string(i));
  return RunId(int64_t{i});
}

TEST_P(RoundTripTest, EveryDTypeShapeCodecAndRunKind) {
  const Case c = GetParam();
  auto store = Open();
  WriterOptions wo;
  wo.codec = c.codec;
  wo.writer_id = "rt";
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(wo));
  ASSERT_OK(w->DefineSeries("ragged", SeriesOptions{DType::kInt16, {}, true, c.codec}));
  constexpr int kRuns = 7, kSteps = 3;
  for (int run = 0; run < kRuns; ++run) {
    for (int step = 0; step < kSteps; ++step) {
      for (const Expected& e : MakeValues(run, step)) {
        ValueRef v{e.dtype, e.shape, e.bytes.data(), e.bytes.size()};
        ASSERT_OK(w->Append(RunFor(run, c.string_runs), e.name, step, v));
      }
    }
  }
  std::string path = StorePath();
  if (c.seal) {
    ASSERT_OK(w->Close());
  } else {
    ASSERT_OK(w->Commit());
    path = CopyStore();  // the files as a kill -9 right now would leave them
    ASSERT_OK(w->Close());
  }
  ASSERT_OK_AND_ASSIGN(auto reopened, Store::Open(path, {.read_only = true}));
  auto snap = reopened->GetSnapshot();
  ASSERT_EQ(snap->ListSegments().size(), 1u);
  EXPECT_EQ(snap->ListSegments()[0].sealed, c.seal);
  for (int run = 0; run < kRuns; ++run) {
    for (int step = 0; step < kSteps; ++step) {
      for (const Expected& e : MakeValues(run, step)) {
        SCOPED_TRACE(e.name + " run " + std::to_string(run) + " step " + std::to_string(step));
        ASSERT_OK_AND_ASSIGN(Value v, snap->Get(RunFor(run, c.string_runs), e.name, step));
        EXPECT_EQ(v.dtype(), e.dtype);
        EXPECT_EQ(v.shape(), e.shape);
        ASSERT_EQ(v.nbytes(), e.bytes.size());
        EXPECT_EQ(std::memcmp(v.data(), e.bytes.data(), e.bytes.size()), 0);
        if (!IsVarLength(e.dtype)) {
          EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % DTypeSize(e.dtype), 0u);
        }
        if (e.name == "big") {
          EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % 64, 0u)
              << "large payloads are 64-byte aligned";
          if (c.codec == Codec::kNone) {
            EXPECT_TRUE(v.zero_copy());
          }
        }
      }
    }
  }
  // Scans agree with Get.
  ASSERT_OK_AND_ASSIGN(auto series, snap->ListSeries());
  EXPECT_EQ(series.size(), MakeValues(0, 0).size());
  for (const SeriesInfo& info : series) {
    SCOPED_TRACE(info.name);
    ASSERT_OK_AND_ASSIGN(auto scanner, snap->Scan(info.name));
    ScanBatch b;
    uint64_t seen = 0;
    while (true) {
      ASSERT_OK_AND_ASSIGN(bool more, scanner->Next(&b));
      if (!more) break;
      for (size_t i = 0; i < b.count; ++i) {
        ASSERT_OK_AND_ASSIGN(Value g, snap->Get(b.run(i), info.name, b.steps[i]));
        EXPECT_EQ(testing::RecordValueAt(b, i).bytes, std::string_view(g.data(), g.nbytes()));
      }
      seen += b.count;
    }
    EXPECT_EQ(seen, info.count);
  }
  uint64_t checked = 0;
  EXPECT_OK(snap->Verify(&checked));
  EXPECT_GT(checked, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    AllKinds, RoundTripTest,
    ::testing::Values(Case{Codec::kNone, false, true}, Case{Codec::kNone, true, false},
                      Case{Codec::kLz4, false, false}, Case{Codec::kLz4, true, true},
                      Case{Codec::kZstd, false, true}, Case{Codec::kZstd, true, false},
                      Case{Codec::kNone, false, false}, Case{Codec::kZstd, true, true}),
    [](const auto& info) {
      return std::string(CodecName(info.param.codec)) +
             (info.param.string_runs ? "_MixedRuns" : "_IntRuns") +
             (info.param.seal ? "_Sealed" : "_Unsealed");
    });

// Series are ranked by the order they were first logged in (SeriesInfo::
// first_logged), not by name: within a writer's first commit, across its
// commits, across writers by commit order, and after a refresh.
// WriterOptions::record_time: one "~time" record per Append, AppendRecord and
// key of AppendTimes, within the call's wall-clock interval; nothing without it.
TEST_F(StoreTest, RecordTimeKeepsOneTimePerCallAndKey) {
  auto store = Open();
  const auto now = [] {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  const double before = now();
  WriterOptions o;
  o.record_time = true;
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(o));
  for (int step = 0; step < 10; ++step) {
    const double a = step, b = 2.0 * step;
    const NamedValue values[] = {{"a", ValueRef::Scalar(a)}, {"b", ValueRef::Scalar(b)}};
    ASSERT_OK(w->AppendRecord(RunRef("e3f1c2a9b4d5e6f7"), step, values));
  }
  ASSERT_OK(w->Append(RunRef(int64_t{7}), "a", 0, 1.0));
  const RunRef runs[] = {RunRef("q"), RunRef("q"), RunRef("q")};
  const int64_t steps[] = {0, 1, 2};
  const double col[] = {1, 2, 3};
  const int64_t shape[] = {3};
  ASSERT_OK(w->AppendBatch(runs, "a", steps, ValueRef::Array(col, shape)));
  ASSERT_OK(w->AppendTimes(runs, steps));
  EXPECT_THAT(w->AppendTimes(runs, std::span<const int64_t>(steps, 2)),
              StatusIs(StatusCode::kInvalidArgument));
  ASSERT_OK(w->Close());
  const double after = now();
  ASSERT_OK_AND_ASSIGN(auto plain, store->NewWriter({}));
  ASSERT_OK(plain->AppendTimes(runs, steps));  // without record_time: nothing
  ASSERT_OK(plain->Append(RunRef("z"), "a", 0, 1.0));
  ASSERT_OK(plain->Close());
  ASSERT_OK(store->Refresh());
  auto snap = store->GetSnapshot();
  ASSERT_OK_AND_ASSIGN(auto scanner, snap->Scan("~time"));
  ScanBatch batch;
  size_t total = 0;
  while (true) {
    ASSERT_OK_AND_ASSIGN(bool more, scanner->Next(&batch));
    if (!more) break;
    for (double t : batch.values.as<double>()) {
      EXPECT_GE(t, before);
      EXPECT_LE(t, after);
    }
    total += batch.count;
  }
  EXPECT_EQ(total, 10u + 1u + 3u);
  ASSERT_OK_AND_ASSIGN(Value t7, snap->Get(7, "~time", 0));
  EXPECT_EQ(t7.dtype(), DType::kFloat64);
  EXPECT_THAT(snap->Get(RunId("z"), "~time", 0), StatusIs(StatusCode::kNotFound));
}

TEST_F(StoreTest, SeriesAreRankedInTheOrderTheyWereFirstLogged) {
  auto store = Open();
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
  const std::vector<std::string> first = {"zeta", "alpha", "mid", "beta", "omega", "a"};
  for (int step = 0; step < 50; ++step) {
    for (const std::string& n : first) ASSERT_OK(w->Append("run", n, step, 1.0 * step));
  }
  ASSERT_OK(w->Commit());
  ASSERT_OK(w->Append("run", "later", 0, 1.0));
  ASSERT_OK(w->Append("run", "alpha", 99, 1.0));  // logged again: keeps its rank
  ASSERT_OK(w->Commit());
  ASSERT_OK_AND_ASSIGN(auto w2, store->NewWriter({}));
  ASSERT_OK(w2->Append("other", "aaa", 0, 1.0));
  ASSERT_OK(w2->Append("other", "zeta", 0, 1.0));
  ASSERT_OK(w2->Close());
  ASSERT_OK(w->Close());
  for (int pass = 0; pass < 2; ++pass) {
    ASSERT_OK(store->Refresh());
    auto reader = pass == 0 ? store->GetSnapshot() : Open()->GetSnapshot();
    ASSERT_OK_AND_ASSIGN(auto series, reader->ListSeries());
    std::sort(series.begin(), series.end(), [](const SeriesInfo& a, const SeriesInfo& b) {
      return a.first_logged < b.first_logged;
    });
    std::vector<std::string> order;
    for (const SeriesInfo& i : series) order.push_back(i.name);
    EXPECT_EQ(order, (std::vector<std::string>{"zeta", "alpha", "mid", "beta", "omega", "a",
                                               "later", "aaa"}));
    ASSERT_OK_AND_ASSIGN(SeriesInfo mid, reader->GetSeriesInfo("mid"));
    EXPECT_EQ(mid.first_logged, 2u);
  }
}

TEST_F(StoreTest, ReleasedPagesAreReadAgainWhenTouched) {
  auto store = Open();
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
  std::vector<double> big(1 << 18);
  std::iota(big.begin(), big.end(), 0.0);
  std::vector<int64_t> shape{1 << 18};
  ASSERT_OK(w->Append(1, "big", 0, ValueRef::Array<double>(big.data(), shape)));
  ASSERT_OK(w->Close());
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  ASSERT_OK_AND_ASSIGN(Value v, snap->Get(1, "big", 0));
  ASSERT_TRUE(v.zero_copy());
  snap->ReleasePages();
  EXPECT_EQ(std::memcmp(v.data(), big.data(), v.nbytes()), 0);
}

TEST_F(StoreTest, ValueReleasePagesKeepsItsBytesInEveryEnv) {
  // On a POSIX mapping the pages wholly inside the value are dropped (and read
  // back from the page cache when touched); an in-memory "mapping" is a heap
  // buffer, which must be left alone. Either way the bytes stay the same.
  auto mem_env = NewMemEnv();
  ASSERT_OK(mem_env->CreateDir("/m"));
  std::vector<double> big(1 << 18);
  std::iota(big.begin(), big.end(), 0.25);
  const std::vector<int64_t> shape{1 << 18};
  for (Env* env : {Env::Default(), mem_env.get()}) {
    const std::string path = env == Env::Default() ? StorePath() : "/m/store";
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {.env = env}));
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
    ASSERT_OK(w->Append(1, "big", 0, ValueRef::Array<double>(big.data(), shape)));
    ASSERT_OK(w->Append(1, "x", 0, 3.5));
    ASSERT_OK(w->Close());
    ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
    ASSERT_OK_AND_ASSIGN(Value v, snap->Get(1, "big", 0));
    ASSERT_OK_AND_ASSIGN(Value x, snap->Get(1, "x", 0));
    ASSERT_TRUE(v.zero_copy());
    v.ReleasePages();
    x.ReleasePages();  // smaller than a page: nothing to drop
    EXPECT_EQ(std::memcmp(v.data(), big.data(), v.nbytes()), 0);
    EXPECT_EQ(x.scalar<double>(), 3.5);
    Value moved = std::move(v);
    v.ReleasePages();  // NOLINT(bugprone-use-after-move): a moved-from value owns nothing
    EXPECT_EQ(std::memcmp(moved.data(), big.data(), moved.nbytes()), 0);
  }
}

TEST_F(StoreTest, UncommittedRecordsOfACrashedWriterAreInvisible) {
  auto store = Open();
  WriterOptions wo;
  wo.block_bytes = 4096;  // blocks reach the file before the commit
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(wo));
  for (int i = 0; i < 1000; ++i) ASSERT_OK(w->Append(i, "x", 0, double(i)));
  ASSERT_OK(w->Commit());
  for (int i = 1000; i < 5000; ++i) ASSERT_OK(w->Append(i, "x", 0, double(i)));
  // Let the background thread write some uncommitted blocks.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::string crashed = CopyStore();
  ASSERT_OK_AND_ASSIGN(auto reader, Store::Open(crashed, {.read_only = true}));
  ASSERT_OK_AND_ASSIGN(SeriesInfo info, reader->GetSnapshot()->GetSeriesInfo("x"));
  EXPECT_EQ(info.count, 1000u);
  EXPECT_THAT(reader->GetSnapshot()->Get(1500, "x", 0), StatusIs(StatusCode::kNotFound));
}

TEST_F(StoreTest, RefreshSeesCommitsOfARunningWriter) {
  auto store = Open();
  ASSERT_OK_AND_ASSIGN(auto reader, Store::Open(StorePath(), {.read_only = true}));
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
  ASSERT_OK(w->Append("a", "x", 0, 1.0));
  ASSERT_OK(w->Commit());
  auto before = reader->GetSnapshot();
  ASSERT_OK_AND_ASSIGN(auto after, reader->Refresh());
  EXPECT_THAT(before->Get("a", "x", 0), StatusIs(StatusCode::kNotFound));
  ASSERT_OK_AND_ASSIGN(Value v, after->Get("a", "x", 0));
  EXPECT_EQ(v.scalar<double>(), 1.0);
  ASSERT_OK(w->Append("a", "x", 1, 2.0));
  ASSERT_OK(w->Commit());
  ASSERT_OK_AND_ASSIGN(auto third, reader->Refresh());
  EXPECT_OK(third->Get("a", "x", 1).status());
  EXPECT_OK(after->Get("a", "x", 0).status());  // snapshots stay repeatable
  EXPECT_THAT(after->Get("a", "x", 1), StatusIs(StatusCode::kNotFound));
  ASSERT_OK(w->Close());
  ASSERT_OK_AND_ASSIGN(auto sealed, reader->Refresh());
  EXPECT_TRUE(sealed->ListSegments()[0].sealed);
  EXPECT_OK(sealed->Get("a", "x", 1).status());
}

// Flush: visible at once and safe from a crash of the process, but durable
// only at the next commit; a power cut in between takes whole flushes away.
TEST(WriterFlushTest, FlushIsVisibleAtOnceAndDurableAtTheNextCommit) {
  for (const bool commit_after : {false, true}) {
    SCOPED_TRACE(commit_after ? "Commit after the flush" : "power cut after the flush");
    auto mem = NewMemEnv();
    FaultInjectionEnv env(mem.get());
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open("/s", {.env = &env}));
    ASSERT_OK_AND_ASSIGN(auto reader, Store::Open("/s", {.env = &env, .read_only = true}));
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.writer_id = "w"}));
    ASSERT_OK(w->Append("a", "x", 0, 1.0));
    ASSERT_OK(w->Commit());
    ASSERT_OK(w->Append("b", "x", 0, 2.0));
    ASSERT_OK(w->Append("b", "y", 0, 3.0));
    ASSERT_OK(w->Flush());
    ASSERT_OK_AND_ASSIGN(auto snap, reader->Refresh());
    ASSERT_OK_AND_ASSIGN(Value v, snap->Get("b", "y", 0));
    EXPECT_EQ(v.scalar<double>(), 3.0);
    EXPECT_EQ(w->stats().commits, 2u);
    EXPECT_EQ(w->stats().flushes, 1u);
    // A commit with nothing new since the flush still makes it durable.
    if (commit_after) {
      const uint64_t ops = env.operation_count();
      ASSERT_OK(w->Commit());
      EXPECT_EQ(env.operation_count() - ops, 1u) << "one sync, no new record";
      EXPECT_EQ(w->stats().commits, 2u);
    }
    ASSERT_OK(env.SimulatePowerLoss(DropMode::kDropUnsynced, 1));
    w.reset();  // its handle is gone with the power: it closes nothing
    ASSERT_OK_AND_ASSIGN(auto after, Store::Open("/s", {.env = &env, .read_only = true}));
    auto now = after->GetSnapshot();
    ASSERT_OK_AND_ASSIGN(Value a, now->Get("a", "x", 0));
    EXPECT_EQ(a.scalar<double>(), 1.0);
    if (commit_after) {
      EXPECT_OK(now->Get("b", "x", 0).status());
      EXPECT_OK(now->Get("b", "y", 0).status());
    } else {
      EXPECT_THAT(now->Get("b", "x", 0), StatusIs(StatusCode::kNotFound));
      EXPECT_THAT(now->Get("b", "y", 0), StatusIs(StatusCode::kNotFound));
    }
    EXPECT_OK(now->Verify(nullptr));
  }
}

// CommitAsync returns at once; the caller appends the next batch while the
// background thread syncs, and WaitForCommit returns when the commit is as
// durable as Commit() would have made it: a power cut right after keeps it,
// and keeps nothing of the batch appended since.
TEST(WriterCommitAsyncTest, WaitedCommitsSurviveAPowerCutAndLaterRecordsAreNotPartOfThem) {
  auto mem = NewMemEnv();
  FaultInjectionEnv env(mem.get());
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open("/s", {.env = &env}));
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.writer_id = "w"}));
  std::vector<uint64_t> tickets;
  for (int64_t batch = 0; batch < 5; ++batch) {
    for (int64_t run = batch * 100; run < (batch + 1) * 100; ++run) {
      ASSERT_OK(w->Append(run, "x", 0, 0.5 * static_cast<double>(run)));
    }
    if (!tickets.empty()) ASSERT_OK(w->WaitForCommit(tickets.back()));
    ASSERT_OK_AND_ASSIGN(uint64_t t, w->CommitAsync());
    if (!tickets.empty()) {
      EXPECT_GT(t, tickets.back());
    }
    tickets.push_back(t);
  }
  ASSERT_OK(w->WaitForCommit(tickets[3]));
  ASSERT_OK(w->WaitForCommit(tickets[1]));  // an earlier ticket: already durable
  for (int64_t run = 500; run < 600; ++run) ASSERT_OK(w->Append(run, "x", 0, 1.0));
  EXPECT_THAT(w->WaitForCommit(0), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(w->WaitForCommit(tickets.back() + 1), StatusIs(StatusCode::kInvalidArgument));
  ASSERT_OK(w->WaitForCommit(tickets.back()));
  ASSERT_OK(env.SimulatePowerLoss(DropMode::kDropUnsynced, 1));
  w.reset();  // its handle is gone with the power: it closes nothing
  ASSERT_OK_AND_ASSIGN(auto after, Store::Open("/s", {.env = &env, .read_only = true}));
  auto snap = after->GetSnapshot();
  ASSERT_OK_AND_ASSIGN(SeriesInfo info, snap->GetSeriesInfo("x"));
  EXPECT_EQ(info.count, 500u);  // the five waited batches, nothing of the sixth
  ASSERT_OK_AND_ASSIGN(Value v, snap->Get(499, "x", 0));
  EXPECT_EQ(v.scalar<double>(), 249.5);
  EXPECT_THAT(snap->Get(500, "x", 0), StatusIs(StatusCode::kNotFound));
}

// An Env whose files' Syncs (and, with `gate_appends`, Appends) wait for a
// permit while the gate is shut, so that a test can hold the writer's sync or
// background thread inside one and queue work behind it.
class GateEnv final : public EnvWrapper {
 public:
  explicit GateEnv(Env* base, bool gate_appends = false)
      : EnvWrapper(base), gate_appends_(gate_appends) {}
  void Shut() {
    std::lock_guard lk(mu_);
    permits_ = 0;
  }
  // Lets `n` more Syncs through (all of them, for -1).
  void Allow(int n) {
    std::lock_guard lk(mu_);
    permits_ = n < 0 ? std::numeric_limits<int>::max() : permits_ + n;
    cv_.notify_all();
  }
  // Waits until `n` calls have arrived at the gate since construction.
  void AwaitArrivals(int n) {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return arrived_ >= n; });
  }
  int arrived() {
    std::lock_guard lk(mu_);
    return arrived_;
  }

  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path,
                                                        bool exclusive) override {
    RUNSTORE_ASSIGN_OR_RETURN(auto f, target()->NewWritableFile(path, exclusive));
    return std::unique_ptr<WritableFile>(new File(this, std::move(f)));
  }

 private:
  class File final : public WritableFile {
   public:
    File(GateEnv* env, std::unique_ptr<WritableFile> f) : env_(env), f_(std::move(f)) {}
    Status Append(std::span<const std::string_view> p) override {
      if (env_->gate_appends_) env_->Pass();
      return f_->Append(p);
    }
    Status WriteAt(uint64_t o, std::string_view d) override { return f_->WriteAt(o, d); }
    Status Sync() override {
      env_->Pass();
      return f_->Sync();
    }
    Status SyncPrefix(uint64_t length) override {
      env_->Pass();
      return f_->SyncPrefix(length);
    }
    Status Close() override { return f_->Close(); }
    uint64_t Size() const override { return f_->Size(); }

   private:
    GateEnv* const env_;
    std::unique_ptr<WritableFile> f_;
  };

  // Counts a call's arrival and waits for its permit.
  void Pass() {
    std::unique_lock lk(mu_);
    ++arrived_;
    cv_.notify_all();
    cv_.wait(lk, [&] { return permits_ > 0; });
    if (permits_ != std::numeric_limits<int>::max()) --permits_;
  }

  const bool gate_appends_;
  std::mutex mu_;
  std::condition_variable cv_;
  int permits_ = std::numeric_limits<int>::max();
  int arrived_ = 0;
};

// Group commit, set up: batch 0 committed; batch 1's commit inside its
// sync while batches 2..6 are appended and committed with CommitAsync; then
// that sync let through, and the next one (made for all five) held.
struct GroupCommitScene {
  std::unique_ptr<Env> mem = NewMemEnv();
  FaultInjectionEnv faults{mem.get()};
  GateEnv env{&faults};
  std::unique_ptr<Store> store;
  std::unique_ptr<Writer> w;
  static constexpr auto kPatience = std::chrono::seconds(120);  // a hang, not a speed
  uint64_t first = 0;
  std::vector<uint64_t> queued;
  int before = 0;

  void AppendBatch(int64_t batch) {
    for (int64_t run = batch * 100; run < (batch + 1) * 100; ++run) {
      ASSERT_OK(w->Append(run, "x", 0, 0.5 * static_cast<double>(run)));
    }
  }
  // Batch 1's commit inside its sync; batches 2..6 committed behind it.
  void HoldASync() {
    ASSERT_OK_AND_ASSIGN(store, Store::Open("/s", {.env = &env}));
    ASSERT_OK_AND_ASSIGN(w, store->NewWriter({.writer_id = "w"}));
    AppendBatch(0);
    ASSERT_OK(w->Commit());  // the segment exists: from now on only commits sync
    before = env.arrived();
    env.Shut();
    AppendBatch(1);
    ASSERT_OK_AND_ASSIGN(first, w->CommitAsync());
    env.AwaitArrivals(before + 1);  // the sync thread is inside its sync
    for (int64_t batch = 2; batch <= 6; ++batch) {
      AppendBatch(batch);
      ASSERT_OK_AND_ASSIGN(uint64_t t, w->CommitAsync());
      queued.push_back(t);
    }
  }
  // Waits (up to kPatience) until the background thread has written every commit
  // record so far: it writes them while the sync thread is held.
  void AwaitRecordsWritten() {
    const uint64_t want = queued.size() + 2;
    for (auto start = std::chrono::steady_clock::now();
         w->stats().commits < want && std::chrono::steady_clock::now() - start < kPatience;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_EQ(w->stats().commits, want) << "the commits behind a held sync were not written";
  }
  void HoldTheGroupSync() {
    ASSERT_NO_FATAL_FAILURE(HoldASync());
    ASSERT_NO_FATAL_FAILURE(AwaitRecordsWritten());  // else the group might split in two
    env.Allow(1);
    ASSERT_OK(w->WaitForCommit(first));
    env.AwaitArrivals(before + 2);
  }
  // The number of records a reader finds after a power cut now.
  uint64_t CountAfterPowerLoss() {
    EXPECT_OK(faults.SimulatePowerLoss(DropMode::kDropUnsynced, 1));
    w.reset();  // its handle is gone with the power: it closes nothing
    auto after = Store::Open("/s", {.env = &faults, .read_only = true});
    EXPECT_OK(after.status());
    if (!after.ok()) return 0;
    auto snap = (*after)->GetSnapshot();
    EXPECT_OK(snap->Verify(nullptr));
    auto info = snap->GetSeriesInfo("x");
    return info.ok() ? info->count : 0;
  }
};

// Commits queued while the background thread is inside a sync share the next
// one, and each is reported durable only once that sync is done. A power cut
// after the last wait keeps them all.
TEST(WriterCommitAsyncTest, CommitsQueuedDuringASyncShareTheNextOne) {
  GroupCommitScene g;
  ASSERT_NO_FATAL_FAILURE(g.HoldTheGroupSync());
  auto second = std::async(std::launch::async, [&] { return g.w->WaitForCommit(g.queued[0]); });
  EXPECT_EQ(second.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout)
      << "a commit whose sync is still to come was reported durable";
  EXPECT_EQ(g.w->DurableTicket(), g.first);
  g.env.Allow(-1);
  EXPECT_OK(second.get());
  ASSERT_OK(g.w->WaitForCommit(g.queued.back()));
  EXPECT_EQ(g.w->DurableTicket(), g.queued.back());
  const WriterStats stats = g.w->stats();
  EXPECT_EQ(stats.commits, 7u);
  EXPECT_EQ(stats.flushes, 0u);
  EXPECT_EQ(stats.syncs, 3u) << "one for the five queued commits";
  EXPECT_EQ(g.env.arrived(), g.before + 2);
  EXPECT_EQ(g.CountAfterPowerLoss(), 700u);
}

// The sync of a commit runs beside the writing of the next ones: while the
// first sync is held, the five commits behind it are written and visible to
// readers (not yet durable).
TEST(WriterCommitAsyncTest, CommitsAreWrittenWhileTheSyncBeforeThemRuns) {
  GroupCommitScene g;
  ASSERT_NO_FATAL_FAILURE(g.HoldASync());
  ASSERT_NO_FATAL_FAILURE(g.AwaitRecordsWritten());
  ASSERT_OK_AND_ASSIGN(auto reader, Store::Open("/s", {.env = &g.faults, .read_only = true}));
  ASSERT_OK_AND_ASSIGN(SeriesInfo info, reader->GetSnapshot()->GetSeriesInfo("x"));
  EXPECT_EQ(info.count, 700u) << "written commits are visible before they are durable";
  EXPECT_LT(g.w->DurableTicket(), g.first);
  EXPECT_EQ(g.env.arrived(), g.before + 1) << "one sync at a time";
  g.env.Allow(-1);
  ASSERT_OK(g.w->WaitForCommit(g.queued.back()));
  EXPECT_EQ(g.w->stats().syncs, 3u);
  EXPECT_EQ(g.CountAfterPowerLoss(), 700u);
}

// The group's sync fails (the power goes while it runs): every commit of the
// group is reported failed and all of them are gone together, while the
// commits synced before them stay.
TEST(WriterCommitAsyncTest, AGroupWhoseSyncFailsIsLostWhole) {
  GroupCommitScene g;
  ASSERT_NO_FATAL_FAILURE(g.HoldTheGroupSync());
  g.faults.CrashAfter(0);
  g.env.Allow(-1);
  for (uint64_t t : g.queued) EXPECT_THAT(g.w->WaitForCommit(t), StatusIs(StatusCode::kIOError));
  EXPECT_OK(g.w->WaitForCommit(g.first));
  EXPECT_EQ(g.CountAfterPowerLoss(), 200u);
}

// While the disk is slow (the background thread held inside a write), an
// appender that never waits for its commits stops once a few blocks are
// queued, well inside buffer_bytes: a deeper queue keeps the disk no busier.
TEST(WriterBackpressureTest, QueuedBlocksStopAppendersBeforeTheBufferIsFull) {
  auto mem = NewMemEnv();
  GateEnv env(mem.get(), /*gate_appends=*/true);
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open("/s", {.env = &env}));
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.writer_id = "w"}));  // 64 MiB buffer
  ASSERT_OK(w->Append(0, "x", 0, 0.0));
  ASSERT_OK(w->Commit());
  const int before = env.arrived();
  env.Shut();
  ASSERT_OK(w->Append(1, "x", 0, 1.0));
  ASSERT_OK(w->CommitAsync().status());
  env.AwaitArrivals(before + 1);                  // the background thread is stuck in a write
  constexpr int64_t kRows = 1024, kBatches = 32;  // 32 MiB of rows of 1 KiB
  auto appender = std::async(std::launch::async, [&] {
    std::vector<double> rows(kRows * 128, 2.0);
    std::vector<RunRef> runs;
    for (int64_t r = 0; r < kRows; ++r) runs.push_back(r);
    const std::vector<int64_t> steps(kRows, 1);
    const int64_t shape[] = {kRows, 128};
    for (int64_t b = 0; b < kBatches; ++b) {
      RUNSTORE_RETURN_IF_ERROR(
          w->AppendBatch(runs, "rows", steps, ValueRef::Array(rows.data(), shape)));
      RUNSTORE_RETURN_IF_ERROR(w->CommitAsync().status());
    }
    return Status::OK();
  });
  EXPECT_EQ(appender.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout)
      << "32 MiB were queued behind a write that has not returned";
  env.Allow(-1);
  ASSERT_OK(appender.get());
  ASSERT_OK(w->Commit());
  const WriterStats stats = w->stats();
  EXPECT_GT(stats.backpressure_waits, 0u);
  EXPECT_LT(stats.peak_buffered_bytes, 12u << 20) << "8 MiB of queued blocks and the open ones";
  ASSERT_OK(w->Close());
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  ASSERT_OK_AND_ASSIGN(SeriesInfo info, snap->GetSeriesInfo("rows"));
  EXPECT_EQ(info.count, static_cast<uint64_t>(kRows));  // each batch rewrites the same keys
}

// A flush's ticket (tickets count flushes too) is durable once a later commit
// is, and not before; Commit() waits for a commit queued before it by
// CommitAsync to be synced with its own.
TEST(WriterCommitAsyncTest, AFlushTicketIsDurableOnlyAfterALaterCommit) {
  auto mem = NewMemEnv();
  FaultInjectionEnv env(mem.get());
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open("/s", {.env = &env}));
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.writer_id = "w"}));
  ASSERT_OK(w->Append(1, "x", 0, 1.0));
  ASSERT_OK_AND_ASSIGN(uint64_t c1, w->CommitAsync());
  ASSERT_OK(w->Append(2, "x", 0, 2.0));
  ASSERT_OK(w->Flush());
  const uint64_t flush = c1 + 1;
  ASSERT_OK(w->WaitForCommit(c1));
  EXPECT_THAT(w->WaitForCommit(flush), StatusIsWith(StatusCode::kFailedPrecondition, "flush"));
  ASSERT_OK(w->Append(3, "x", 0, 3.0));
  ASSERT_OK(w->Commit());
  EXPECT_OK(w->WaitForCommit(flush));
  EXPECT_EQ(w->stats().syncs, 2u);
}

// The error that stops a writer reaches whoever waits for a commit it
// prevented; a commit that was durable before the error stays waited for.
TEST(WriterCommitAsyncTest, AFailedSyncIsReportedToTheWaiter) {
  auto mem = NewMemEnv();
  FaultInjectionEnv env(mem.get());
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open("/s", {.env = &env}));
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.writer_id = "w"}));
  ASSERT_OK(w->Append(1, "x", 0, 1.0));
  ASSERT_OK_AND_ASSIGN(uint64_t first, w->CommitAsync());
  ASSERT_OK(w->WaitForCommit(first));
  ASSERT_OK(w->Append(2, "x", 0, 2.0));
  env.FailOperation(1, EIO);  // the next file operation: the commit's write
  ASSERT_OK_AND_ASSIGN(uint64_t second, w->CommitAsync());
  EXPECT_THAT(w->WaitForCommit(second), StatusIs(StatusCode::kIOError));
  EXPECT_OK(w->WaitForCommit(first));
  EXPECT_FALSE(w->CommitAsync().ok());
}

// commit_every_s bounds what a power cut can take even from a writer that
// flushes all the time: a flush does not restart its clock.
TEST(WriterFlushTest, AutoCommitByTimeMakesFlushedRecordsDurable) {
  auto mem = NewMemEnv();
  FaultInjectionEnv env(mem.get());
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open("/s", {.env = &env}));
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.writer_id = "w", .commit_every_s = 0.2}));
  // Flushes every 10 ms until an automatic commit has synced (counted, not
  // timed: on a loaded machine the 0.2 s may take longer to come round).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  WriterStats stats;
  for (int i = 0;; ++i) {
    ASSERT_OK(w->Append("r", "x", i, 1.0 * i));
    ASSERT_OK(w->Flush());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    stats = w->stats();
    if (stats.syncs > 0 && stats.flushes > 10) break;
    ASSERT_LT(std::chrono::steady_clock::now(), give_up) << "no automatic commit came";
  }
  ASSERT_OK(env.SimulatePowerLoss(DropMode::kDropUnsynced, 1));
  w.reset();
  ASSERT_OK_AND_ASSIGN(auto after, Store::Open("/s", {.env = &env, .read_only = true}));
  // At least the records of the first 0.2 s were synced by an automatic
  // commit while the flushes went on.
  ASSERT_OK_AND_ASSIGN(Value v, after->GetSnapshot()->Get("r", "x", 0));
  EXPECT_EQ(v.scalar<double>(), 0.0);
  EXPECT_GT(stats.flushes, 10u);
}

TEST_F(StoreTest, LaterCommitWinsForTheSameKey) {
  auto store = Open();
  ASSERT_OK_AND_ASSIGN(auto w1, store->NewWriter({.writer_id = "first"}));
  ASSERT_OK_AND_ASSIGN(auto w2, store->NewWriter({.writer_id = "second"}));
  ASSERT_OK(w2->Append(1, "x", 0, 10.0));
  ASSERT_OK(w2->Commit());
  ASSERT_OK(w1->Append(1, "x", 0, 20.0));  // later commit, from a writer that sorts first
  ASSERT_OK(w1->Commit());
  ASSERT_OK(w1->Append(2, "x", 0, 1.0));
  ASSERT_OK(w1->Append(2, "x", 0, 2.0));  // same commit: the later append wins
  ASSERT_OK(w1->Commit());
  ASSERT_OK(w1->Close());
  ASSERT_OK(w2->Close());
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  ASSERT_OK_AND_ASSIGN(Value v, snap->Get(1, "x", 0));
  EXPECT_EQ(v.scalar<double>(), 20.0);
  ASSERT_OK_AND_ASSIGN(Value v2, snap->Get(2, "x", 0));
  EXPECT_EQ(v2.scalar<double>(), 2.0);
  ASSERT_OK_AND_ASSIGN(SeriesInfo info, snap->GetSeriesInfo("x"));
  EXPECT_EQ(info.count, 2u);
  ASSERT_OK_AND_ASSIGN(auto scanner, snap->Scan("x"));
  ScanBatch b;
  std::map<int64_t, double> seen;
  while (*scanner->Next(&b)) {
    for (size_t i = 0; i < b.count; ++i) {
      EXPECT_FALSE(seen.count(b.int_runs[i])) << "duplicate run " << b.int_runs[i];
      seen[b.int_runs[i]] = b.values.as<double>()[i];
    }
  }
  EXPECT_EQ(seen, (std::map<int64_t, double>{{1, 20.0}, {2, 2.0}}));
}

TEST_F(StoreTest, ResumeHidesLaterSteps) {
  auto store = Open();
  {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.writer_id = "before"}));
    for (int step = 0; step < 100; ++step) ASSERT_OK(w->Append("rl", "reward", step, double(step)));
    ASSERT_OK(w->Append("other", "reward", 80, -1.0));
    ASSERT_OK(w->Commit());
    // Preempted here: a checkpoint exists at step 70.
  }
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.writer_id = "after"}));
  ASSERT_OK(w->Resume("rl", 70));
  for (int step = 70; step < 90; ++step) ASSERT_OK(w->Append("rl", "reward", step, 1000.0 + step));
  ASSERT_OK(w->Close());
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  ASSERT_OK_AND_ASSIGN(SeriesInfo info, snap->GetSeriesInfo("reward"));
  EXPECT_EQ(info.count, 90u + 1u);
  EXPECT_EQ(snap->Get("rl", "reward", 69)->scalar<double>(), 69.0);
  EXPECT_EQ(snap->Get("rl", "reward", 70)->scalar<double>(), 1070.0);
  EXPECT_EQ(snap->Get("rl", "reward", 89)->scalar<double>(), 1089.0);
  EXPECT_THAT(snap->Get("rl", "reward", 95), StatusIs(StatusCode::kNotFound));
  EXPECT_EQ(snap->Get("other", "reward", 80)->scalar<double>(), -1.0);
  std::map<int64_t, int> per_step;
  ASSERT_OK_AND_ASSIGN(auto scanner, snap->Scan("reward"));
  ScanBatch b;
  while (*scanner->Next(&b)) {
    for (size_t i = 0; i < b.count; ++i) {
      if (b.run(i) == RunId("rl")) per_step[b.steps[i]]++;
    }
  }
  EXPECT_EQ(per_step.size(), 90u);
  for (auto [step, n] : per_step) EXPECT_EQ(n, 1) << "step " << step;
  ASSERT_OK_AND_ASSIGN(auto names, snap->ListSeries());
  EXPECT_EQ(names.size(), 1u) << "the reserved ~resume series is not listed";
}

TEST_F(StoreTest, ResumeNeverHidesReservedSeries) {
  auto store = Open();
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.allow_reserved_names = true}));
  ASSERT_OK(w->Append("exp", "~design/lr", 0, 0.1));
  ASSERT_OK(w->Append("exp", "loss", 0, 1.0));
  ASSERT_OK(w->Resume("exp", 0));
  ASSERT_OK(w->Close());
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  EXPECT_EQ(snap->Get("exp", "~design/lr", 0)->scalar<double>(), 0.1);
  EXPECT_THAT(snap->Get("exp", "loss", 0), StatusIs(StatusCode::kNotFound));
  ASSERT_OK_AND_ASSIGN(SeriesInfo info, snap->GetSeriesInfo("~design/lr"));
  EXPECT_EQ(info.count, 1u);
}

// A run resumed thousands of times (a job preempted every few minutes for
// weeks) resolves in O((records + markers) log markers): each record is
// checked against its run's markers by one binary search, not one by one.
// Counted, not timed: the searches made are at most one per record and per
// block, where checking marker by marker would make 50,000 per record.
TEST_F(StoreTest, ManyResumesOfOneRunResolveWithoutQuadraticCost) {
  auto env = NewMemEnv();
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open("/m/store", {.env = env.get()}));
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
  constexpr int kAttempts = 50000, kStride = 10, kLogged = 20;
  for (int k = 0; k < kAttempts; ++k) {
    // Attempt k restarts from the checkpoint at step k * kStride and logs
    // further than the next attempt's checkpoint before it is "preempted".
    if (k > 0) ASSERT_OK(w->Resume("run", int64_t{k} * kStride));
    for (int i = 0; i < kLogged; ++i) {
      ASSERT_OK(w->Append("run", "loss", int64_t{k} * kStride + i, double(k)));
    }
    ASSERT_OK(w->Commit());
  }
  ASSERT_OK(w->Close());
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  ASSERT_OK_AND_ASSIGN(SeriesInfo info, snap->GetSeriesInfo("loss"));
  EXPECT_EQ(info.count, uint64_t{kAttempts - 1} * kStride + kLogged);
  ASSERT_OK_AND_ASSIGN(auto scanner, snap->Scan("loss"));
  ScanBatch b;
  std::vector<int> seen(uint64_t{kAttempts} * kStride + kLogged, -1);
  while (*scanner->Next(&b)) {
    for (size_t i = 0; i < b.count; ++i) {
      ASSERT_EQ(seen[b.steps[i]], -1) << "step " << b.steps[i] << " twice";
      seen[b.steps[i]] = static_cast<int>(b.values.as<double>()[i]);
    }
  }
  for (int64_t step = 0; step < int64_t{kAttempts - 1} * kStride + kLogged; ++step) {
    ASSERT_EQ(seen[step], std::min<int64_t>(step / kStride, kAttempts - 1)) << "step " << step;
  }
  EXPECT_EQ(snap->Get("run", "loss", 5 * kStride + 15).status().code(), StatusCode::kOk);
  EXPECT_EQ(snap->Get("run", "loss", 5 * kStride + 15)->scalar<double>(), 6.0);
  const uint64_t searches = std::static_pointer_cast<const SnapshotImpl>(snap)->marker_searches();
  uint64_t blocks = 0;
  for (const SegmentInfo& si : snap->ListSegments()) blocks += si.blocks;
  std::printf(
      "[ figures  ] %d resumes of one run, %llu records in %llu blocks: %llu searches of the "
      "run's markers to resolve, scan and look up\n",
      kAttempts, static_cast<unsigned long long>(info.count),
      static_cast<unsigned long long>(blocks), static_cast<unsigned long long>(searches));
  EXPECT_LE(searches, uint64_t{kAttempts} * kLogged + 2 * blocks + 4)
      << "more than one search per record and block: resolution may be quadratic in markers";
}

TEST_F(StoreTest, SegmentsRollAtTheirSizeTarget) {
  auto store = Open();
  WriterOptions wo;
  wo.segment_bytes = 1 << 16;
  wo.block_bytes = 8192;
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(wo));
  for (int i = 0; i < 50000; ++i) {
    ASSERT_OK(w->Append(i % 13, "x", i, double(i)));
    if (i % 1000 == 999) ASSERT_OK(i % 2000 == 999 ? w->Flush() : w->Commit());
  }
  ASSERT_OK(w->Close());
  EXPECT_GE(w->stats().segments_sealed, 5u);
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  EXPECT_GE(snap->ListSegments().size(), 5u);
  for (const auto& s : snap->ListSegments()) EXPECT_TRUE(s.sealed);
  ASSERT_OK_AND_ASSIGN(SeriesInfo info, snap->GetSeriesInfo("x"));
  EXPECT_EQ(info.count, 50000u);
  EXPECT_EQ(snap->Get(49998 % 13, "x", 49998)->scalar<double>(), 49998.0);
}

// A segment that reaches its size target while a batch is uncommitted is
// sealed only after the batch's commit: sealing never publishes records the
// caller has not committed, and a commit lies in one segment.
TEST_F(StoreTest, SegmentRollNeverPublishesAnUncommittedBatch) {
  auto store = Open();
  WriterOptions wo;
  wo.segment_bytes = 64 << 10;
  wo.buffer_bytes = 64 << 10;  // blocks reach the file long before the commit
  wo.large_value_bytes = 4096;
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(wo));
  ASSERT_OK(w->Append(0, "loss", 0, 0.5));
  ASSERT_OK(w->Commit());
  ASSERT_OK_AND_ASSIGN(auto reader, Store::Open(StorePath(), {.read_only = true}));
  // 40 records of two series, 200 KiB in all: three segments' worth.
  std::vector<double> trace(640);
  const int64_t shape[] = {640};
  for (int i = 0; i < 40; ++i) {
    for (size_t k = 0; k < trace.size(); ++k) trace[k] = i + 0.001 * static_cast<double>(k);
    const double loss = i;
    const NamedValue values[] = {{"trace", ValueRef::Array(trace.data(), shape)},
                                 {"loss", ValueRef::Scalar(loss)}};
    ASSERT_OK(w->AppendRecord(1, i, values));
    // Nothing of the batch is visible (and so nothing would survive a
    // kill -9) until it is committed.
    ASSERT_OK_AND_ASSIGN(auto snap, reader->Refresh());
    EXPECT_THAT(snap->Get(1, "loss", 0), StatusIs(StatusCode::kNotFound)) << "after record " << i;
    EXPECT_THAT(snap->Get(1, "trace", 0), StatusIs(StatusCode::kNotFound)) << "after record " << i;
  }
  EXPECT_EQ(w->stats().segments_sealed, 0u) << "a roll before the commit published the batch";
  ASSERT_OK(w->Commit());
  EXPECT_EQ(w->stats().segments_sealed, 1u) << "the commit should roll the full segment";
  ASSERT_OK_AND_ASSIGN(auto snap, reader->Refresh());
  ASSERT_OK_AND_ASSIGN(SeriesInfo loss, snap->GetSeriesInfo("loss"));
  EXPECT_EQ(loss.count, 41u);
  ASSERT_OK_AND_ASSIGN(SeriesInfo tr, snap->GetSeriesInfo("trace"));
  EXPECT_EQ(tr.count, 40u);
  ASSERT_OK(w->Close());
}

// An automatic commit comes between calls, never inside one: the outcomes
// of one AppendRecord (one log(...) of an experiment) and the records of one
// AppendBatch become visible together.
TEST_F(StoreTest, AutoCommitNeverSplitsOneCall) {
  auto store = Open();
  WriterOptions wo;
  wo.commit_every_bytes = 1000;  // every call crosses it
  wo.buffer_bytes = 64 << 10;
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(wo));
  ASSERT_OK_AND_ASSIGN(auto reader, Store::Open(StorePath(), {.read_only = true}));
  std::vector<double> a(100), b(100);
  const int64_t shape[] = {100};
  std::vector<RunRef> runs;
  std::vector<int64_t> steps;
  std::vector<double> batch;
  for (int i = 0; i < 100; ++i) {
    runs.push_back(RunRef(int64_t{i}));
    steps.push_back(0);
    batch.push_back(i);
  }
  const int64_t batch_shape[] = {100};
  for (int i = 0; i < 200; ++i) {
    const NamedValue values[] = {{"a", ValueRef::Array(a.data(), shape)},
                                 {"b", ValueRef::Array(b.data(), shape)}};
    ASSERT_OK(w->AppendRecord(i, 0, values));
    std::fill(steps.begin(), steps.end(), i);  // new keys: a split batch would show
    ASSERT_OK(w->AppendBatch(runs, "c" + std::to_string(i % 3), steps,
                             ValueRef::Array(batch.data(), batch_shape)));
    if (i % 10 != 9) continue;
    ASSERT_OK_AND_ASSIGN(auto snap, reader->Refresh());
    for (int j = 0; j <= i; ++j) {
      EXPECT_EQ(snap->Get(j, "a", 0).ok(), snap->Get(j, "b", 0).ok()) << "record " << j;
    }
    for (int c = 0; c < 3; ++c) {
      auto info = snap->GetSeriesInfo("c" + std::to_string(c));
      if (info.ok()) {
        EXPECT_EQ(info->count % 100, 0u) << "a batch of series c" << c << " was split";
      }
    }
  }
  EXPECT_GE(w->stats().commits, 10u);
  ASSERT_OK(w->Close());
}

// AppendColumns: a table's columns under the same keys in one call (Python's
// log_many and record_many). With hashed run ids and record_time, as the
// experiments layer writes them: every column is checked before any record is
// appended, a failed call leaves no record and no series behind, and an
// automatic commit never splits a call.
TEST_F(StoreTest, AppendColumnsAppendsEveryColumnOrNone) {
  auto store = Open();
  WriterOptions wo;
  wo.record_time = true;
  wo.commit_every_bytes = 1;  // every call is due a commit: a split would show
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(wo));
  ASSERT_OK_AND_ASSIGN(auto reader, Store::Open(StorePath(), {.read_only = true}));
  constexpr size_t kN = 50;
  std::vector<std::string> ids;
  std::vector<RunRef> runs;
  std::vector<int64_t> steps(kN, 0), steps2(kN, 1);
  std::vector<double> x(kN), curve(kN * 4);
  std::vector<int64_t> ints(kN);
  for (size_t i = 0; i < kN; ++i) ids.push_back(HashedId(i));
  for (size_t i = 0; i < kN; ++i) {
    runs.push_back(RunRef(ids[i]));
    x[i] = 0.5 * static_cast<double>(i);
    ints[i] = static_cast<int64_t>(i);
    for (size_t j = 0; j < 4; ++j) curve[i * 4 + j] = static_cast<double>(i * 10 + j);
  }
  const std::string_view model = "toy";
  const std::vector<ValueRef> models(kN, ValueRef::String(model));
  const int64_t x_shape[] = {kN}, curve_shape[] = {kN, 4};
  const ColumnRef table[] = {{"x", ValueRef::Array(x.data(), x_shape), {}},
                             {"model", ValueRef{}, models},
                             {"curve", ValueRef::Array(curve.data(), curve_shape), {}}};
  ASSERT_OK(w->AppendColumns(runs, steps, table));
  auto snap_of = [&]() {
    auto snap = reader->Refresh();
    EXPECT_TRUE(snap.ok());
    return snap.ok() ? *snap : nullptr;
  };
  auto count = [](const auto& snap, const std::string& name) -> uint64_t {
    auto info = snap->GetSeriesInfo(name);
    return info.ok() ? info->count : 0;
  };
  for (int tries = 0; tries < 500 && count(snap_of(), "x") == 0; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  {
    auto snap = snap_of();
    EXPECT_EQ(count(snap, "x"), kN);
    EXPECT_EQ(count(snap, "model"), kN) << "an automatic commit split the call";
    EXPECT_EQ(count(snap, "curve"), kN) << "an automatic commit split the call";
    EXPECT_EQ(count(snap, "~time"), kN) << "one time per key";
  }

  // Calls that fail: each appends nothing and defines nothing.
  const ColumnRef conflicting[] = {{"fresh", ValueRef::Array(x.data(), x_shape), {}},
                                   {"x", ValueRef::Array(ints.data(), x_shape), {}}};
  EXPECT_THAT(w->AppendColumns(runs, steps2, conflicting),
              StatusIsWith(StatusCode::kInvalidArgument, "'x'"));
  const std::vector<ValueRef> short_models(kN - 1, ValueRef::String(model));
  const ColumnRef short_column[] = {{"fresh", ValueRef::Array(x.data(), x_shape), {}},
                                    {"model", ValueRef{}, short_models}};
  EXPECT_THAT(w->AppendColumns(runs, steps2, short_column),
              StatusIsWith(StatusCode::kInvalidArgument, "49 values for 50 runs"));
  std::vector<ValueRef> mixed = models;
  mixed[kN - 1] = ValueRef::Scalar(x[0]);  // a number in a column of strings
  const ColumnRef mixed_column[] = {{"fresh", ValueRef::Array(x.data(), x_shape), {}},
                                    {"model", ValueRef{}, mixed}};
  EXPECT_THAT(w->AppendColumns(runs, steps2, mixed_column), StatusIs(StatusCode::kInvalidArgument));
  const int64_t wrong_shape[] = {kN - 1};
  const ColumnRef wrong_first_dimension[] = {
      {"fresh", ValueRef::Array(x.data(), x_shape), {}},
      {"curve", ValueRef::Array(curve.data(), wrong_shape), {}}};
  EXPECT_THAT(w->AppendColumns(runs, steps2, wrong_first_dimension),
              StatusIsWith(StatusCode::kInvalidArgument, "first dimension of 50"));
  const ColumnRef reserved[] = {{"fresh", ValueRef::Array(x.data(), x_shape), {}},
                                {"~resume", ValueRef::Array(ints.data(), x_shape), {}}};
  EXPECT_THAT(w->AppendColumns(runs, steps2, reserved), StatusIs(StatusCode::kInvalidArgument));
  std::vector<RunRef> bad_runs = runs;
  const std::string not_utf8 = "\xff\xfe";
  bad_runs[kN / 2] = RunRef(not_utf8);
  const ColumnRef fresh_only[] = {{"fresh", ValueRef::Array(x.data(), x_shape), {}}};
  EXPECT_THAT(w->AppendColumns(bad_runs, steps2, fresh_only),
              StatusIsWith(StatusCode::kInvalidArgument, "UTF-8"));
  EXPECT_THAT(w->AppendColumns(runs, std::span<const int64_t>(steps2.data(), kN - 1), fresh_only),
              StatusIs(StatusCode::kInvalidArgument));

  // "fresh" was defined by none of them: it takes int64 now, as its first
  // successful call says.
  const ColumnRef fresh_ints[] = {{"fresh", ValueRef::Array(ints.data(), x_shape), {}},
                                  {"x", ValueRef::Array(x.data(), x_shape), {}}};
  ASSERT_OK(w->AppendColumns(runs, steps2, fresh_ints));
  ASSERT_OK(w->AppendColumns(runs, steps2, {}));  // no column: nothing, not even a time
  ASSERT_OK(w->Close());
  auto snap = snap_of();
  EXPECT_EQ(count(snap, "x"), 2 * kN);
  EXPECT_EQ(count(snap, "model"), kN);
  EXPECT_EQ(count(snap, "curve"), kN);
  EXPECT_EQ(count(snap, "fresh"), kN);
  EXPECT_EQ(count(snap, "~time"), 2 * kN);
  ASSERT_OK_AND_ASSIGN(SeriesInfo fresh, snap->GetSeriesInfo("fresh"));
  EXPECT_EQ(fresh.dtype, DType::kInt64);
  for (size_t i = 0; i < kN; i += 7) {
    ASSERT_OK_AND_ASSIGN(Value c, snap->Get(RunId(ids[i]), "curve", 0));
    ASSERT_EQ(c.as<double>().size(), 4u);
    EXPECT_EQ(c.as<double>()[3], static_cast<double>(i * 10 + 3));
    ASSERT_OK_AND_ASSIGN(Value m, snap->Get(RunId(ids[i]), "model", 0));
    EXPECT_EQ(m.str(), "toy");
    ASSERT_OK_AND_ASSIGN(Value f, snap->Get(RunId(ids[i]), "fresh", 1));
    EXPECT_EQ(f.scalar<int64_t>(), static_cast<int64_t>(i));
    ASSERT_OK_AND_ASSIGN(Value x1, snap->Get(RunId(ids[i]), "x", 1));
    EXPECT_EQ(x1.scalar<double>(), 0.5 * static_cast<double>(i));
  }
}

TEST_F(StoreTest, AHoldMakesTheRecordsOfSeveralCallsVisibleTogether) {
  // The columns of one batch are an AppendBatch each (Python's log_many): an
  // automatic commit between two would show one column without the others.
  auto store = Open();
  WriterOptions wo;
  wo.commit_every_bytes = 1;  // every call is due a commit
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(wo));
  ASSERT_OK_AND_ASSIGN(auto reader, Store::Open(StorePath(), {.read_only = true}));
  std::vector<RunRef> runs(100, RunRef(int64_t{7}));
  std::vector<int64_t> steps(100);
  std::vector<double> values(100);
  for (int i = 0; i < 100; ++i) steps[i] = i;
  const int64_t shape[] = {100};
  auto count = [&](const std::string& name) -> uint64_t {
    auto snap = reader->Refresh();
    EXPECT_TRUE(snap.ok());
    auto info = (*snap)->GetSeriesInfo(name);
    return info.ok() ? info->count : 0;
  };
  w->HoldAutoCommits();
  w->HoldAutoCommits();  // holds nest
  for (const char* name : {"reward", "loss", "lr"}) {
    ASSERT_OK(w->AppendBatch(runs, name, steps, ValueRef::Array(values.data(), shape)));
  }
  w->ReleaseAutoCommits();
  // Still held: the commits that came due wait. (A writer without the hold
  // queues one at the first AppendBatch; its thread makes it visible at once.)
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(count("reward"), 0u);
  w->ReleaseAutoCommits();  // the commit that came due is queued now
  for (int tries = 0; tries < 500 && count("lr") == 0; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(count("reward"), 100u);
  EXPECT_EQ(count("loss"), 100u);
  EXPECT_EQ(count("lr"), 100u);
  w->ReleaseAutoCommits();  // without a hold: nothing
  ASSERT_OK(w->AppendBatch(runs, "late", steps, ValueRef::Array(values.data(), shape)));
  for (int tries = 0; tries < 500 && count("late") == 0; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(count("late"), 100u) << "unheld again: the append is committed by itself";
  ASSERT_OK(w->Close());
}

TEST_F(StoreTest, AutoCommitBySecondsAndBytes) {
  auto store = Open();
  ASSERT_OK_AND_ASSIGN(auto reader, Store::Open(StorePath(), {.read_only = true}));
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.commit_every_s = 0.05}));
  ASSERT_OK(w->Append(1, "x", 0, 1.0));
  bool seen = false;
  for (int i = 0; i < 200 && !seen; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    seen = (*reader->Refresh())->Get(1, "x", 0).ok();
  }
  EXPECT_TRUE(seen) << "record not committed by time";
  ASSERT_OK_AND_ASSIGN(auto w2, store->NewWriter({.commit_every_bytes = 1 << 12}));
  for (int i = 0; i < 2000; ++i) ASSERT_OK(w2->Append(i, "y", 0, double(i)));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_GE(w2->stats().commits, 2u);
}

TEST_F(StoreTest, AppendIsSafeFromSeveralThreads) {
  auto store = Open();
  WriterOptions wo;
  wo.buffer_bytes = 1 << 20;  // small: threads hit back-pressure
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(wo));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20000; ++i) {
        ASSERT_OK(w->Append(t, "x", i, double(t * 1000000 + i)));
        if (i % 5000 == 0) ASSERT_OK(w->Commit());
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_OK(w->Close());
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  ASSERT_OK_AND_ASSIGN(SeriesInfo info, snap->GetSeriesInfo("x"));
  EXPECT_EQ(info.count, 80000u);
  for (int t = 0; t < 4; ++t)
    EXPECT_EQ(snap->Get(t, "x", 19999)->scalar<double>(), t * 1000000 + 19999);
}

TEST_F(StoreTest, MemoryIsBoundedByTheBuffer) {
  auto store = Open();
  WriterOptions wo;
  wo.buffer_bytes = 1 << 20;
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(wo));
  std::vector<double> arr(1024);
  for (int i = 0; i < 20000; ++i) {
    ASSERT_OK(
        w->Append(i, "v", 0, ValueRef::Array<double>(arr.data(), std::vector<int64_t>{1024})));
    ASSERT_OK(w->Append(i, "s", 0, double(i)));
  }
  ASSERT_OK(w->Close());
  const WriterStats st = w->stats();
  std::printf(
      "[ figures  ] appended %.1f MiB through a 1 MiB buffer: peak buffered %.2f MiB, %llu waits\n",
      st.bytes_appended / 1048576.0, st.peak_buffered_bytes / 1048576.0,
      static_cast<unsigned long long>(st.backpressure_waits));
  EXPECT_LE(st.peak_buffered_bytes, wo.buffer_bytes + (64u << 10));
  EXPECT_GT(st.backpressure_waits, 0u);
}

// ---- Bad input: specific errors, nothing committed lost ----

TEST_F(StoreTest, ConflictingDTypeOrShapeIsRefusedAndCommittedDataSurvives) {
  auto store = Open();
  {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
    ASSERT_OK(w->Append(1, "loss", 0, 1.5));
    std::vector<float> a(6);
    ASSERT_OK(w->Append(1, "img", 0, ValueRef::Array<float>(a.data(), std::vector<int64_t>{2, 3})));
    EXPECT_THAT(w->Append(2, "loss", 0, int32_t{3}),
                StatusIsWith(StatusCode::kInvalidArgument, "dtype float64"));
    EXPECT_THAT(
        w->Append(2, "img", 0, ValueRef::Array<float>(a.data(), std::vector<int64_t>{3, 2})),
        StatusIsWith(StatusCode::kInvalidArgument, "fixed-shape [2, 3]"));
    EXPECT_THAT(
        w->Append(2, "img", 0, ValueRef{DType::kFloat32, std::vector<int64_t>{2, 3}, a.data(), 8}),
        StatusIsWith(StatusCode::kInvalidArgument, "needs 24 bytes"));
    ASSERT_OK(w->Close());
  }
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
  EXPECT_THAT(w->Append(3, "loss", 0, int64_t{3}),
              StatusIsWith(StatusCode::kInvalidArgument, "float64"));
  EXPECT_THAT(w->DefineSeries("loss", SeriesOptions{DType::kFloat32}),
              StatusIsWith(StatusCode::kInvalidArgument, "exists in the store"));
  ASSERT_OK(w->Append(3, "loss", 0, 2.5));
  ASSERT_OK(w->Close());
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  EXPECT_EQ(snap->Get(1, "loss", 0)->scalar<double>(), 1.5);
  EXPECT_EQ(snap->Get(3, "loss", 0)->scalar<double>(), 2.5);
  EXPECT_EQ(snap->GetSeriesInfo("loss")->count, 2u);
}

// A writer checks its series against its store's snapshot, which it does
// not refresh when it opens (docs/design.md#writer-ids): a series another
// process defined since is found by the one refresh the writer makes at its
// first series the snapshot did not know.
TEST_F(StoreTest, ASeriesDefinedSinceTheStoresSnapshotIsStillCheckedAndAWriterMayOutliveItsStore) {
  auto store = Open();
  auto other = Open();
  {
    ASSERT_OK_AND_ASSIGN(auto w, other->NewWriter({}));
    ASSERT_OK(w->Append(1, "loss", 0, 1.5));
    ASSERT_OK(w->Close());
  }
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
  EXPECT_THAT(w->Append(2, "loss", 0, int32_t{3}),
              StatusIsWith(StatusCode::kInvalidArgument, "exists in the store as float64"));
  ASSERT_OK(w->Append(2, "loss", 0, 2.5));
  ASSERT_OK(w->Close());
  // A writer whose store is closed keeps what it has: it neither refreshes
  // nor fails for want of a store.
  ASSERT_OK_AND_ASSIGN(auto orphan, store->NewWriter({}));
  store.reset();
  EXPECT_THAT(orphan->Append(3, "loss", 0, int64_t{3}),
              StatusIsWith(StatusCode::kInvalidArgument, "float64"));
  ASSERT_OK(orphan->Append(3, "fresh", 0, 1.0));
  ASSERT_OK(orphan->Close());
  ASSERT_OK_AND_ASSIGN(auto snap, other->Refresh());
  EXPECT_EQ(snap->Get(2, "loss", 0)->scalar<double>(), 2.5);
  EXPECT_EQ(snap->Get(3, "fresh", 0)->scalar<double>(), 1.0);
  EXPECT_EQ(snap->GetSeriesInfo("loss")->count, 2u);
}

// The refresh a writer asks for at its first unknown series may fail (the
// listing of segments/ here): that Append fails with the refresh's error and
// appends nothing, and the next series not known tries the refresh again.
TEST_F(StoreTest, AWritersFailedSchemaRefreshFailsTheAppendAndIsTriedAgain) {
  class FailingListing final : public EnvWrapper {
   public:
    using EnvWrapper::EnvWrapper;
    Result<std::vector<std::string>> GetChildren(const std::string& d) override {
      if (fail && d.ends_with("/segments")) return Status::IOError(d + ": listing failed");
      return EnvWrapper::GetChildren(d);
    }
    std::atomic<bool> fail{false};
  };
  FailingListing env(Env::Default());
  StoreOptions o;
  o.env = &env;
  auto store = Open(o);
  auto other = Open();
  {
    ASSERT_OK_AND_ASSIGN(auto w, other->NewWriter({}));
    ASSERT_OK(w->Append(1, "loss", 0, 1.5));
    ASSERT_OK(w->Close());
  }
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
  env.fail = true;
  EXPECT_THAT(w->Append(2, "loss", 0, int32_t{3}),
              StatusIsWith(StatusCode::kIOError, "listing failed"));
  env.fail = false;
  EXPECT_THAT(w->Append(2, "loss", 0, int32_t{3}),
              StatusIsWith(StatusCode::kInvalidArgument, "exists in the store as float64"));
  ASSERT_OK(w->Append(2, "loss", 0, 2.5));
  ASSERT_OK(w->Close());
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  EXPECT_EQ(snap->GetSeriesInfo("loss")->count, 2u);
}

TEST_F(StoreTest, BadNamesAndRunIdsAreRefused) {
  auto store = Open();
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
  EXPECT_THAT(w->Append(1, "", 0, 1.0), StatusIsWith(StatusCode::kInvalidArgument, "empty"));
  EXPECT_THAT(w->Append(1, std::string(256, 'n'), 0, 1.0),
              StatusIsWith(StatusCode::kInvalidArgument, "longer than the limit of 255"));
  EXPECT_THAT(w->Append(1, "~secret", 0, 1.0),
              StatusIsWith(StatusCode::kInvalidArgument, "reserved"));
  EXPECT_THAT(w->Append(1, std::string("a\xff", 2), 0, 1.0),
              StatusIsWith(StatusCode::kInvalidArgument, "UTF-8"));
  EXPECT_THAT(w->Append(std::string(300, 'r'), "x", 0, 1.0),
              StatusIsWith(StatusCode::kInvalidArgument, "run id of 300 bytes"));
  EXPECT_OK(w->Append(std::string(255, 'r'), "x", 0, 1.0));
  EXPECT_OK(w->Append(1, std::string(255, 'n'), 0, 1.0));
  // An over-long name of multi-byte characters is quoted in whole characters
  // (the Python package decodes messages as UTF-8).
  std::string euros;
  for (int i = 0; i < 100; ++i) euros += "\xe2\x82\xac";  // U+20AC, 3 bytes
  const Status too_long = w->Append(1, euros, 0, 1.0);
  EXPECT_THAT(too_long, StatusIsWith(StatusCode::kInvalidArgument, "longer than the limit"));
  EXPECT_TRUE(IsValidUtf8(too_long.message())) << too_long.message();
  EXPECT_NE(too_long.message().find("\xe2\x82\xac..."), std::string::npos) << too_long.message();
  // A string value must be UTF-8; bytes may be anything.
  EXPECT_THAT(w->Append(1, "s", 0, ValueRef::String(std::string("a\xff", 2))),
              StatusIsWith(StatusCode::kInvalidArgument, "valid UTF-8"));
  EXPECT_OK(w->Append(1, "b", 0, ValueRef::Bytes(std::string("a\xff", 2))));
  ASSERT_OK(w->Close());
  EXPECT_THAT(w->Append(1, "x", 0, 1.0), StatusIs(StatusCode::kFailedPrecondition));
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  EXPECT_OK(snap->Get(std::string(255, 'r'), "x", 0).status());
}

// Arrays with a zero dimension hold no bytes and round-trip with their
// shapes, in fixed-shape and variable-shape series alike; they used to be
// written, then reported as corruption by every read and by verify.
TEST_F(StoreTest, ZeroSizeArraysRoundTrip) {
  auto store = Open();
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
  ASSERT_OK(w->DefineSeries("var", SeriesOptions{DType::kInt32, {}, true, Codec::kNone}));
  ASSERT_OK(w->DefineSeries("zvar", SeriesOptions{DType::kInt32, {}, true, Codec::kZstd}));
  const int64_t cols[] = {100, 0};
  const int64_t wide[] = {0, int64_t{1} << 40};  // no bytes, whatever the other dimension
  const int64_t rows[] = {3};
  const int32_t three[] = {1, 2, 3};
  for (int run = 0; run < 2000; ++run) {
    ASSERT_OK(w->Append(run, "cols", 0, ValueRef{DType::kFloat64, cols, nullptr, 0}));
    ASSERT_OK(w->Append(run, "wide", 0, ValueRef{DType::kUInt8, wide, nullptr, 0}));
    const bool empty = run % 2 == 0;
    for (const char* name : {"var", "zvar"}) {
      ASSERT_OK(w->Append(run, name, 0,
                          empty ? ValueRef{DType::kInt32, cols, nullptr, 0}
                                : ValueRef{DType::kInt32, rows, three, sizeof(three)}));
    }
  }
  const int64_t too_wide[] = {0, int64_t{1} << 62};
  EXPECT_THAT(w->Append(1, "huge", 0, ValueRef{DType::kFloat64, too_wide, nullptr, 0}),
              StatusIsWith(StatusCode::kInvalidArgument, "too large"));
  ASSERT_OK(w->Close());
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  EXPECT_OK(snap->Verify());
  ASSERT_OK_AND_ASSIGN(Value v, snap->Get(7, "cols", 0));
  EXPECT_EQ(v.shape(), (std::vector<int64_t>{100, 0}));
  EXPECT_EQ(v.nbytes(), 0u);
  ASSERT_OK_AND_ASSIGN(Value wv, snap->Get(7, "wide", 0));
  EXPECT_EQ(wv.shape(), (std::vector<int64_t>{0, int64_t{1} << 40}));
  for (const char* name : {"var", "zvar"}) {
    ASSERT_OK_AND_ASSIGN(Value e, snap->Get(8, name, 0));
    EXPECT_EQ(e.shape(), (std::vector<int64_t>{100, 0}));
    ASSERT_OK_AND_ASSIGN(Value f, snap->Get(9, name, 0));
    EXPECT_EQ(f.shape(), (std::vector<int64_t>{3}));
    EXPECT_EQ(f.as<int32_t>()[2], 3);
  }
  ASSERT_OK_AND_ASSIGN(auto scanner, snap->Scan("cols"));
  ScanBatch b;
  uint64_t n = 0;
  while (*scanner->Next(&b)) {
    ASSERT_EQ(b.values.shape().size(), 3u);
    EXPECT_EQ(b.values.shape()[1], 100);
    EXPECT_EQ(b.values.shape()[2], 0);
    n += b.count;
  }
  EXPECT_EQ(n, 2000u);
}

TEST_F(StoreTest, PathWithANulIsRefusedBeforeAnythingIsCreated) {
  const std::string path = StorePath() + std::string("\0/elsewhere", 11);
  EXPECT_THAT(Store::Open(path, {}), StatusIsWith(StatusCode::kInvalidArgument, "NUL"));
  EXPECT_FALSE(fs::exists(StorePath()));
}

TEST_F(StoreTest, FirstValueOfASeriesIsChecked) {
  auto store = Open();
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
  std::vector<int64_t> rank33(33, 1);
  double x = 1;
  EXPECT_THAT(w->Append(1, "deep", 0, ValueRef{DType::kFloat64, rank33, &x, 8}),
              StatusIsWith(StatusCode::kInvalidArgument, "rank 33 exceeds the limit of 32"));
  std::vector<int64_t> neg{-1};
  EXPECT_THAT(w->Append(1, "neg", 0, ValueRef{DType::kFloat64, neg, &x, 8}),
              StatusIsWith(StatusCode::kInvalidArgument, "negative dimension"));
  EXPECT_THAT(w->Append(1, "bad", 0, ValueRef{static_cast<DType>(99), {}, &x, 8}),
              StatusIsWith(StatusCode::kInvalidArgument, "invalid dtype"));
  ASSERT_OK(w->Append(1, "deep", 0, 2.0));  // the failed appends defined nothing
  ASSERT_OK(w->Close());
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  EXPECT_OK(snap->Verify());
  EXPECT_EQ(snap->Get(1, "deep", 0)->scalar<double>(), 2.0);
}

TEST_F(StoreTest, ReservedResumeSeriesIsNotWritableByUsers) {
  auto store = Open();
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
  EXPECT_THAT(w->Append(1, "~resume", 0, int64_t{0}),
              StatusIsWith(StatusCode::kInvalidArgument, "reserved"));
  ASSERT_OK(w->Resume(1, 5));  // now the writer has the series itself
  EXPECT_THAT(w->Append(1, "~resume", 0, int64_t{0}),
              StatusIsWith(StatusCode::kInvalidArgument, "reserved"));
  ASSERT_OK(w->Close());
}

TEST_F(StoreTest, AppendRecordChecksEveryValueBeforeAppendingAny) {
  auto store = Open();
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
  const double loss = 0.5;
  const int32_t epochs = 3;
  std::vector<float> curve(100, 1.0f);
  std::vector<int64_t> shape{100};
  std::vector<NamedValue> rec = {{"loss", ValueRef::Scalar(loss)},
                                 {"epochs", ValueRef::Scalar(epochs)},
                                 {"curve", ValueRef::Array<float>(curve.data(), shape)},
                                 {"label", ValueRef::String("ok")}};
  ASSERT_OK(w->AppendRecord(7, 0, rec));
  const double wrong_epochs = 2.0;
  rec[1].value = ValueRef::Scalar(wrong_epochs);  // epochs is int32
  EXPECT_THAT(w->AppendRecord(8, 0, rec), StatusIsWith(StatusCode::kInvalidArgument, "int32"));
  ASSERT_OK(w->Close());
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  EXPECT_EQ(snap->Get(7, "curve", 0)->shape(), shape);
  EXPECT_EQ(snap->Get(7, "label", 0)->str(), "ok");
  EXPECT_THAT(snap->Get(8, "loss", 0), StatusIs(StatusCode::kNotFound))
      << "nothing of run 8 appended";
}

// AppendValues is n Appends of one series in one call: the same records,
// strings and arrays of differing shapes among them; a value that does not
// fit the series appends nothing of the call.
TEST_F(StoreTest, AppendValuesAppendsWhatAppendsWouldAndChecksEveryValueFirst) {
  auto store = Open();
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
  const std::vector<RunRef> runs = {RunRef("e3f1c2a9b4d5e6f70"), RunRef("e3f1c2a9b4d5e6f70"),
                                    RunRef(int64_t{7})};
  const std::vector<int64_t> steps = {0, 1, 0};
  const std::vector<ValueRef> states = {ValueRef::String("done"), ValueRef::String(""),
                                        ValueRef::String("failed: ValueError")};
  ASSERT_OK(w->AppendValues(runs, "state", steps, states));
  const double one = 1.0;
  const std::vector<ValueRef> wrong = {ValueRef::String("done"), ValueRef::Scalar(one),
                                       ValueRef::String("x")};
  EXPECT_THAT(w->AppendValues(runs, "state", steps, wrong), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(w->AppendValues(runs, "state", std::span<const int64_t>(steps.data(), 2), states),
              StatusIsWith(StatusCode::kInvalidArgument, "3 runs, 2 steps and 3 values"));
  ASSERT_OK(w->Close());
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  EXPECT_EQ(snap->Get(RunRef("e3f1c2a9b4d5e6f70"), "state", 0)->str(), "done");
  EXPECT_EQ(snap->Get(RunRef("e3f1c2a9b4d5e6f70"), "state", 1)->str(), "");
  EXPECT_EQ(snap->Get(7, "state", 0)->str(), "failed: ValueError");
  ASSERT_OK_AND_ASSIGN(SeriesInfo info, snap->GetSeriesInfo("state"));
  EXPECT_EQ(info.count, 3u) << "the refused call appended nothing";
}

// FlushAsync returns at once; what was appended before it becomes visible
// without another call, all of it together.
TEST_F(StoreTest, FlushAsyncMakesTheRecordsVisibleWithoutAnotherCall) {
  auto store = Open();
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
  for (int64_t s = 0; s < 1000; ++s) ASSERT_OK(w->Append(1, "x", s, double(s)));
  ASSERT_OK(w->FlushAsync());
  uint64_t count = 0;
  for (int i = 0; i < 2000 && count == 0; ++i) {
    ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
    if (auto info = snap->GetSeriesInfo("x"); info.ok()) count = info->count;
    if (count == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(count, 1000u);
  ASSERT_OK(w->Close());
  EXPECT_THAT(w->FlushAsync(), StatusIs(StatusCode::kFailedPrecondition));
}

TEST_F(StoreTest, StorePathThatIsARegularFileIsRefused) {
  std::ofstream(dir_.path() + "/file") << "hello";
  EXPECT_THAT(Store::Open(dir_.path() + "/file", {}),
              StatusIsWith(StatusCode::kInvalidArgument, "is not a directory"));
  fs::create_directory(dir_.path() + "/other");
  std::ofstream(dir_.path() + "/other/data.csv") << "a,b";
  EXPECT_THAT(Store::Open(dir_.path() + "/other", {}),
              StatusIsWith(StatusCode::kInvalidArgument, "not a runstore store"));
  EXPECT_THAT(Store::Open(dir_.path() + "/missing", {.read_only = true}),
              StatusIs(StatusCode::kNotFound));
}

TEST_F(StoreTest, NewerFormatVersionIsRefused) {
  Open();
  std::ofstream(StorePath() + "/RUNSTORE", std::ios::trunc) << "runstore store\nformat_version 7\n";
  EXPECT_THAT(Store::Open(StorePath(), {}),
              StatusIsWith(StatusCode::kNotSupported, "reads versions 1 to 4"));
}

// A version 1 segment (no flushes, key columns stored plainly) reads as it
// did: version 2 only added flag bits version 1 never set.
TEST_F(StoreTest, SegmentOfVersionOneIsRead) {
  auto store = Open();
  {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.writer_id = "w"}));
    for (int64_t run : {5, 1, 9, 2}) ASSERT_OK(w->Append(run, "x", run % 3, 0.5 * run));
    ASSERT_OK(w->Close());
  }
  const std::string seg = StorePath() + "/segments/w-00000001.rss";
  std::string bytes;
  {
    std::ifstream in(seg, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  // Version 1 in the header and the trailer, with valid checksums, and the
  // footer without the sections of version 4.
  bytes = testing::WithFooterSections(bytes, "");
  bytes[8] = 1;
  uint64_t sum = Checksum(bytes.data(), 120);
  std::memcpy(bytes.data() + 120, &sum, 8);
  char* trailer = bytes.data() + bytes.size() - 32;
  trailer[8] = 1;
  sum = Checksum(trailer, 24);
  std::memcpy(trailer + 24, &sum, 8);
  std::ofstream(seg, std::ios::binary | std::ios::trunc) << bytes;
  ASSERT_OK_AND_ASSIGN(auto ro, Store::Open(StorePath(), {.read_only = true}));
  auto snap = ro->GetSnapshot();
  ASSERT_OK_AND_ASSIGN(Value v, snap->Get(9, "x", 0));
  EXPECT_EQ(v.scalar<double>(), 4.5);
  EXPECT_OK(snap->Verify(nullptr));
}

// The footer's run index is trusted by lookups to leave blocks out, so
// verify checks it against every block: a well-formed index that lists the
// wrong runs is reported, naming the block.
TEST_F(StoreTest, VerifyChecksTheFootersRunIndexAgainstTheBlocks) {
  auto store = Open();
  {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.writer_id = "w"}));
    for (int64_t run : {5, 1, 9}) ASSERT_OK(w->Append(run, "x", 0, 0.5 * run));
    ASSERT_OK(w->Close());
  }
  const std::string seg = StorePath() + "/segments/w-00000001.rss";
  std::string bytes;
  {
    std::ifstream in(seg, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::string ri;  // one block, listing runs 5 and 9 but not 1
  PutFixed<uint64_t>(&ri, 1);
  PutFixed<uint64_t>(&ri, 2);
  uint64_t h[] = {format::RunHash(RunRef(int64_t{5})), format::RunHash(RunRef(int64_t{9}))};
  std::sort(std::begin(h), std::end(h));
  for (uint64_t x : h) PutFixed<uint64_t>(&ri, x);
  std::ofstream(seg, std::ios::binary | std::ios::trunc) << testing::WithFooterSections(
      bytes, format::EncodeFooterSection(format::kFooterSectionRunIndex, 0, ri));
  ASSERT_OK_AND_ASSIGN(auto ro, Store::Open(StorePath(), {.read_only = true}));
  VerifyReport r = ro->GetSnapshot()->VerifyAll();
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_THAT(r.problems[0], StatusIsWith(StatusCode::kCorruption,
                                          "segments/w-00000001.rss: offset 128: the footer's run "
                                          "index does not list the block's runs (2 listed, the "
                                          "block holds 3; 1 of its runs unlisted, which lookups "
                                          "by run miss, and 0 listed that it does not hold)"));
}

TEST_F(StoreTest, SegmentOfNewerVersionIsRefused) {
  auto store = Open();
  {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.writer_id = "w"}));
    ASSERT_OK(w->Append(1, "x", 0, 1.0));
    ASSERT_OK(w->Close());
  }
  // Rewrite the header with the next version and a valid checksum: a newer
  // writer's segment.
  std::string seg = StorePath() + "/segments/w-00000001.rss";
  std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
  std::string header(128, '\0');
  f.read(header.data(), 128);
  header[8] = static_cast<char>(kFormatVersion + 1);
  const uint64_t sum = Checksum(header.data(), 120);
  std::memcpy(header.data() + 120, &sum, 8);
  f.seekp(0);
  f.write(header.data(), 128);
  f.close();
  auto r = Store::Open(StorePath(), {.read_only = true});
  EXPECT_THAT(r.status(),
              StatusIsWith(StatusCode::kNotSupported, "this build reads versions 1 to"));
  EXPECT_NE(r.status().message().find("w-00000001.rss"), std::string::npos);
}

TEST_F(StoreTest, ForeignFileInSegmentsIsCorruption) {
  auto store = Open();
  std::ofstream(StorePath() + "/segments/x-00000001.rss") << std::string(4096, 'A');
  auto r = Store::Open(StorePath(), {.read_only = true});
  EXPECT_THAT(r, StatusIsWith(StatusCode::kCorruption, "not a runstore segment"));
  // Unrelated names are ignored.
  fs::remove(StorePath() + "/segments/x-00000001.rss");
  std::ofstream(StorePath() + "/segments/notes.txt") << "hi";
  EXPECT_OK(Store::Open(StorePath(), {.read_only = true}).status());
}

namespace {
void FlipByte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  char c;
  f.seekg(static_cast<std::streamoff>(offset));
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}
}  // namespace

TEST_F(StoreTest, TornFooterReadsAsAnUnsealedSegmentWithEveryCommit) {
  auto store = Open();
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.writer_id = "w"}));
  for (int r = 0; r < 5; ++r) ASSERT_OK(w->Append(r, "loss", 0, 1.0 * r));
  ASSERT_OK(w->Close());
  const SegmentInfo seg = (*store->Refresh())->ListSegments().at(0);
  const std::string file = StorePath() + "/" + seg.file;
  FlipByte(file, seg.committed_bytes + 10);  // the footer frame header
  ASSERT_OK_AND_ASSIGN(auto ro, Store::Open(StorePath(), {.read_only = true}));
  auto snap = ro->GetSnapshot();
  EXPECT_EQ(snap->Get(3, "loss", 0)->scalar<double>(), 3.0);
  // A crash during the seal's fdatasync can leave exactly this (trailer on
  // disk, footer not): an unsynced tail, read like a crashed writer's segment.
  EXPECT_FALSE(snap->ListSegments().at(0).sealed);
  EXPECT_EQ(snap->GetSeriesInfo("loss")->count, 5u);
  EXPECT_OK(snap->Verify());
  // Damage before the footer as well: committed data is gone, and that is
  // reported, not read as an empty segment.
  FlipByte(file, 128 + 2);
  EXPECT_THAT(Store::Open(StorePath(), {.read_only = true}),
              StatusIsWith(StatusCode::kCorruption, "before its footer"));
}

// A float64 array of n values first, first + 1, ...: a large value, a block
// of its own whose data is checked in chunks of kChunk bytes.
constexpr uint64_t kChunk = uint64_t{1} << format::kValueChunkShift;
struct LargeArray {
  LargeArray(int64_t n, double first) : values(static_cast<size_t>(n)), shape{n} {
    std::iota(values.begin(), values.end(), first);
  }
  ValueRef ref() const { return ValueRef::Array<double>(values.data(), shape); }
  std::string_view bytes() const {
    return {reinterpret_cast<const char*>(values.data()), values.size() * 8};
  }
  std::vector<double> values;
  std::vector<int64_t> shape;
};

// Writes `a` as series "x", step 0, of runs 0 .. runs-1 (writer "w").
void WriteLargeArray(Store* store, const LargeArray& a, int runs) {
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.writer_id = "w"}));
  for (int run = 0; run < runs; ++run) ASSERT_OK(w->Append(run, "x", 0, a.ref()));
  ASSERT_OK(w->Close());
}

// The one segment of `store`, at `path`, and the offset in it where `bytes`
// first occur.
void FindInSegment(Store* store, const std::string& path, std::string_view bytes, std::string* file,
                   size_t* at) {
  *file = path + "/" + (*store->Refresh())->ListSegments().at(0).file;
  ASSERT_OK_AND_ASSIGN(std::string contents, ReadFileToString(Env::Default(), *file, UINT64_MAX));
  *at = contents.find(bytes);
  ASSERT_NE(*at, std::string::npos);
}

TEST_F(StoreTest, DamageAnywhereInALargeArrayIsFoundOnFirstGet) {
  // Arrays of 1 MiB and more are verified by reading the file in pieces
  // (format::CheckPayloadByReading) rather than through the mapping; an array
  // of 2 MiB + 8 bytes ends in a short piece. Damage to the first byte, one
  // in the middle and the last byte must each be found.
  const LargeArray a((int64_t{1} << 18) + 1, 0.5);
  const std::string_view bytes = a.bytes();
  for (const char* where : {"first", "middle", "last"}) {
    SCOPED_TRACE(where);
    fs::remove_all(StorePath());
    auto store = Open();
    ASSERT_NO_FATAL_FAILURE(WriteLargeArray(store.get(), a, 2));
    std::string file;
    size_t value;  // run 0's
    ASSERT_NO_FATAL_FAILURE(FindInSegment(store.get(), StorePath(), bytes, &file, &value));
    const uint64_t off = value + (where[0] == 'f'   ? 0
                                  : where[0] == 'm' ? bytes.size() / 2
                                                    : bytes.size() - 1);
    FlipByte(file, off);
    ASSERT_OK_AND_ASSIGN(auto ro, Store::Open(StorePath(), {.read_only = true}));
    auto snap = ro->GetSnapshot();
    // The value data is checked in chunks: the error names the damaged
    // chunk and where it starts.
    const uint64_t chunk = (off - value) / kChunk;
    EXPECT_THAT(snap->Get(0, "x", 0),
                StatusIsWith(StatusCode::kCorruption,
                             "w-00000001.rss: offset " + std::to_string(value + chunk * kChunk) +
                                 ": value chunk " + std::to_string(chunk) + " of " +
                                 std::to_string((bytes.size() + kChunk - 1) / kChunk) +
                                 " checksum mismatch (series 'x')"));
    ASSERT_OK_AND_ASSIGN(Value v, snap->Get(1, "x", 0));  // the other array is intact
    EXPECT_TRUE(v.zero_copy());
    EXPECT_EQ(std::memcmp(v.data(), bytes.data(), bytes.size()), 0);
  }
}

// GetLazy hands out a large array unchecked and checks each chunk the reader
// asks for: damage in one chunk fails the reads that reach it and no other,
// and Get, Verify and a full check still find it.
TEST_F(StoreTest, LazyGetChecksOnlyTheChunksItReads) {
  const LargeArray a((int64_t{1} << 18) + 1, 0.5);  // 2 MiB + 8 bytes: the last chunk of 8
  const std::string_view bytes = a.bytes();
  auto store = Open();
  ASSERT_NO_FATAL_FAILURE(WriteLargeArray(store.get(), a, 1));
  std::string file;
  size_t value;
  ASSERT_NO_FATAL_FAILURE(FindInSegment(store.get(), StorePath(), bytes, &file, &value));
  FlipByte(file, value + 5 * kChunk + 100);  // in chunk 5
  ASSERT_OK_AND_ASSIGN(auto ro, Store::Open(StorePath(), {.read_only = true}));
  auto snap = ro->GetSnapshot();
  ASSERT_OK_AND_ASSIGN(LazyValue lazy, snap->GetLazy(0, "x", 0));
  EXPECT_FALSE(lazy.all_checked());
  EXPECT_TRUE(lazy.value().zero_copy());
  ASSERT_EQ(lazy.value().nbytes(), bytes.size());
  const std::string chunk5 =
      "w-00000001.rss: offset " + std::to_string(value + 5 * kChunk) + ": value chunk 5 of " +
      std::to_string((bytes.size() + kChunk - 1) / kChunk) + " checksum mismatch (series 'x')";
  EXPECT_OK(lazy.Check(0, 5 * kChunk));                          // chunks 0..4
  EXPECT_OK(lazy.Check(6 * kChunk, bytes.size() - 6 * kChunk));  // 6.., the short last one
  EXPECT_OK(lazy.Check(bytes.size() - 1, 1));
  EXPECT_OK(lazy.Check(5 * kChunk, 0));  // nothing read
  EXPECT_THAT(lazy.Check(5 * kChunk + 100, 8), StatusIsWith(StatusCode::kCorruption, chunk5));
  EXPECT_THAT(lazy.Check(4 * kChunk, 2 * kChunk), StatusIsWith(StatusCode::kCorruption, chunk5));
  EXPECT_THAT(lazy.CheckAll(), StatusIsWith(StatusCode::kCorruption, chunk5));
  EXPECT_FALSE(lazy.all_checked());
  // What was checked is what was written.
  EXPECT_EQ(lazy.value().str().substr(0, 5 * kChunk), bytes.substr(0, 5 * kChunk));
  EXPECT_EQ(lazy.value().str().substr(6 * kChunk), bytes.substr(6 * kChunk));
  EXPECT_THAT(snap->Get(0, "x", 0), StatusIsWith(StatusCode::kCorruption, chunk5));
  EXPECT_THAT(snap->Verify(), StatusIsWith(StatusCode::kCorruption, chunk5));
  // A fresh snapshot checks from scratch: a reader that skips chunk 5 never
  // fails.
  ASSERT_OK_AND_ASSIGN(auto ro2, Store::Open(StorePath(), {.read_only = true}));
  ASSERT_OK_AND_ASSIGN(LazyValue again, ro2->GetSnapshot()->GetLazy(0, "x", 0));
  EXPECT_OK(again.Check(0, 5 * kChunk - 1));
  EXPECT_OK(again.Check(6 * kChunk, kChunk));
}

// The parts of a lazily read block other than the value data (its keys, the
// chunk checksums) are checked before GetLazy returns; once every chunk has
// been checked the block counts as verified, for every later read.
TEST_F(StoreTest, LazyGetChecksKeysAndChunkTableAtOnceAndRemembersAFullCheck) {
  const LargeArray a(300000, 1.5);  // 2.3 MiB
  const std::string_view bytes = a.bytes();
  auto store = Open();
  {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.writer_id = "w"}));
    ASSERT_OK(w->Append(0, "x", 0, a.ref()));
    ASSERT_OK(w->Append(1, "x", 0, a.ref()));
    ASSERT_OK(w->Append(2, "small", 0, 2.5));
    ASSERT_OK(w->Close());
  }
  {
    ASSERT_OK_AND_ASSIGN(auto ro, Store::Open(StorePath(), {.read_only = true}));
    auto snap = ro->GetSnapshot();
    ASSERT_OK_AND_ASSIGN(LazyValue small, snap->GetLazy(2, "small", 0));
    EXPECT_TRUE(small.all_checked());  // not chunked: checked whole
    EXPECT_EQ(small.value().scalar<double>(), 2.5);
    ASSERT_OK_AND_ASSIGN(LazyValue lazy, snap->GetLazy(1, "x", 0));
    for (uint64_t at = 0; at < bytes.size(); at += 40000) {
      // Reads of 40,000 bytes: done once the reads so far reach the last chunk.
      EXPECT_EQ(lazy.all_checked(), at > (bytes.size() - 1) / kChunk * kChunk) << at;
      ASSERT_OK(lazy.Check(at, std::min<uint64_t>(40000, bytes.size() - at)));
    }
    EXPECT_TRUE(lazy.all_checked());
    ASSERT_OK_AND_ASSIGN(LazyValue later, snap->GetLazy(1, "x", 0));
    EXPECT_TRUE(later.all_checked());
    EXPECT_EQ(later.value().str(), bytes);
    EXPECT_THAT(snap->GetLazy(1, "x", 1), StatusIs(StatusCode::kNotFound));
  }
  std::string file;
  size_t value;  // run 0's
  ASSERT_NO_FATAL_FAILURE(FindInSegment(store.get(), StorePath(), bytes, &file, &value));
  // The chunk table follows the value data (padded to 64 bytes); the keys
  // precede it. Damage to either fails GetLazy itself.
  for (const uint64_t at : {value - 64, AlignUp(value + bytes.size(), 64) + 8 * 20}) {
    SCOPED_TRACE(at);
    FlipByte(file, at);
    ASSERT_OK_AND_ASSIGN(auto ro, Store::Open(StorePath(), {.read_only = true}));
    EXPECT_THAT(ro->GetSnapshot()->GetLazy(0, "x", 0),
                StatusIsWith(StatusCode::kCorruption, "block payload checksum mismatch"));
    ASSERT_OK_AND_ASSIGN(LazyValue other, ro->GetSnapshot()->GetLazy(1, "x", 0));
    EXPECT_OK(other.CheckAll());
    FlipByte(file, at);  // undone
  }
}

// A check of more than a page cache's worth at once (here 80 MiB, above the
// 64 MiB that a check asks for ahead of its hashing) goes through in pieces
// and still finds damage near the end.
TEST_F(StoreTest, LazyCheckOfARangeLargerThanItsLookaheadFindsLateDamage) {
  const LargeArray a(int64_t{10} << 20, 0.25);  // 80 MiB
  const std::string_view bytes = a.bytes();
  auto store = Open();
  ASSERT_NO_FATAL_FAILURE(WriteLargeArray(store.get(), a, 2));
  std::string file;
  size_t value;  // run 0's
  ASSERT_NO_FATAL_FAILURE(
      FindInSegment(store.get(), StorePath(), bytes.substr(0, 4096), &file, &value));
  const uint64_t damaged = bytes.size() - 3 * kChunk + 5;
  FlipByte(file, value + damaged);
  ASSERT_OK_AND_ASSIGN(auto ro, Store::Open(StorePath(), {.read_only = true}));
  auto snap = ro->GetSnapshot();
  ASSERT_OK_AND_ASSIGN(LazyValue bad, snap->GetLazy(0, "x", 0));
  EXPECT_OK(bad.Check(0, damaged / kChunk * kChunk));
  EXPECT_THAT(bad.CheckAll(), StatusIsWith(StatusCode::kCorruption,
                                           "value chunk " + std::to_string(damaged / kChunk) +
                                               " of " + std::to_string(bytes.size() / kChunk)));
  ASSERT_OK_AND_ASSIGN(LazyValue good, snap->GetLazy(1, "x", 0));
  EXPECT_OK(good.CheckAll());
  EXPECT_TRUE(good.all_checked());
  EXPECT_EQ(good.value().str(), bytes);
}

// Several threads checking overlapping parts of one array, through copies
// of one LazyValue and through LazyValues of their own: every check passes,
// and the block ends verified once every chunk has been checked by someone.
TEST_F(StoreTest, LazyChecksFromManyThreadsShareWhatIsChecked) {
  const LargeArray a(int64_t{1} << 18, 0.0);  // 2 MiB
  auto store = Open();
  ASSERT_NO_FATAL_FAILURE(WriteLargeArray(store.get(), a, 1));
  ASSERT_OK_AND_ASSIGN(auto ro, Store::Open(StorePath(), {.read_only = true}));
  auto snap = ro->GetSnapshot();
  ASSERT_OK_AND_ASSIGN(LazyValue shared, snap->GetLazy(0, "x", 0));
  const uint64_t bytes = a.bytes().size();
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto own = snap->GetLazy(0, "x", 0);
      if (!own.ok()) {
        ++failures;
        return;
      }
      const LazyValue& lazy = t % 2 == 0 ? shared : *own;
      // Thread t reads every 4th stretch of 3 chunks, starting at chunk t:
      // stretches overlap their neighbours' by one chunk.
      std::vector<LazyValue::Range> ranges;
      for (uint64_t at = t * kChunk; at < bytes; at += 4 * kChunk) {
        ranges.push_back({at, std::min(3 * kChunk, bytes - at)});
      }
      for (const LazyValue::Range& r : ranges) {
        if (!lazy.Check(r.offset, r.len).ok()) ++failures;
      }
      if (!lazy.Check(ranges).ok()) ++failures;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_TRUE(shared.all_checked());
  ASSERT_OK_AND_ASSIGN(LazyValue later, snap->GetLazy(0, "x", 0));
  EXPECT_TRUE(later.all_checked());
  EXPECT_EQ(later.value().str(), a.bytes());
}

TEST_F(StoreTest, VerifyChecksBlockHeadersOfSealedSegments) {
  auto store = Open();
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.writer_id = "w"}));
  ASSERT_OK(w->Append(1, "loss", 0, 1.0));
  ASSERT_OK(w->Close());
  const SegmentInfo seg = (*store->Refresh())->ListSegments().at(0);
  FlipByte(StorePath() + "/" + seg.file, 128 + 40);
  ASSERT_OK_AND_ASSIGN(auto ro, Store::Open(StorePath(), {.read_only = true}));
  EXPECT_EQ(ro->GetSnapshot()->Get(1, "loss", 0)->scalar<double>(), 1.0);  // via the footer's copy
  VerifyReport r = ro->GetSnapshot()->VerifyAll();
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_THAT(r.problems[0],
              StatusIsWith(StatusCode::kCorruption, "offset 128: block frame header"));
  EXPECT_EQ(r.blocks_checked, 1u);
  EXPECT_EQ(ro->format_version(), kFormatVersion);
}

TEST_F(StoreTest, ReadOnlyStoreRefusesWriters) {
  Open();
  ASSERT_OK_AND_ASSIGN(auto ro, Store::Open(StorePath(), {.read_only = true}));
  EXPECT_THAT(ro->NewWriter({}), StatusIs(StatusCode::kFailedPrecondition));
}

TEST_F(StoreTest, ReadOnlyDirectoryGivesIOError) {
  auto store = Open();
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
  ASSERT_OK(w->Append(1, "x", 0, 1.0));
  ASSERT_OK(w->Close());
  store.reset();
  // Root ignores permission bits, so the check runs in a child that drops to
  // an unprivileged user; the store is readable but not writable for it.
  fs::permissions(dir_.path(),
                  fs::perms::owner_all | fs::perms::others_read | fs::perms::others_exec);
  fs::permissions(StorePath() + "/segments",
                  fs::perms::owner_all | fs::perms::others_read | fs::perms::others_exec);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(10);
    auto s = Store::Open(StorePath(), {});
    if (!s.ok()) _exit(11);
    auto w2 = (*s)->NewWriter({});
    if (w2.ok() || w2.status().code() != StatusCode::kIOError ||
        w2.status().message().find("not writable") == std::string::npos) {
      _exit(12);
    }
    auto v = (*s)->GetSnapshot()->Get(1, "x", 0);  // reading still works
    _exit(v.ok() && v->scalar<double>() == 1.0 ? 0 : 13);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: setuid failed, 11: open failed, 12: writer not "
                                       "refused with IOError, 13: committed data unreadable";
}

// Two live writers given one id (a job started twice, a task run again while
// its first attempt still lives) claim segment numbers by exclusive
// creation, each taking the next free one: neither fails, neither touches
// the other's files, and every record of both is kept. The writer that
// arrives second used to kill the first at its next segment roll.
// An Env that counts the listings of `segments/` and the opens of segment
// files for reading.
class CountingEnv final : public EnvWrapper {
 public:
  using EnvWrapper::EnvWrapper;
  Result<std::vector<std::string>> GetChildren(const std::string& d) override {
    if (d.ends_with("/segments")) listings.fetch_add(1);
    return EnvWrapper::GetChildren(d);
  }
  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& p) override {
    if (p.find("/segments/") != std::string::npos) segment_opens.fetch_add(1);
    return EnvWrapper::NewRandomAccessFile(p);
  }
  std::atomic<int> listings{0};
  std::atomic<int> segment_opens{0};
};

// Opening a writer of a default id lists nothing and reads no segment: a new
// id has nothing to number past, not even the compacted segments' lists of
// what they replaced, and the writer checks its series against the store's
// snapshot (refreshed once, at the first series it does not know). A writer
// that reuses an id lists and reads them, to number past its id's segments;
// both commit. Counted, not timed (docs/design.md#writer-ids).
TEST_F(StoreTest, AWriterOfADefaultIdOpensWithoutListingOrReadingSegments) {
  CountingEnv env(Env::Default());
  StoreOptions o;
  o.env = &env;
  auto store = Open(o);
  for (int i = 0; i < 20; ++i) {
    WriterOptions wo;
    wo.writer_id = "task" + std::to_string(i % 4);
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(wo));
    ASSERT_OK(w->Append(i, "x", 0, i * 1.0));
    ASSERT_OK(w->Close());
  }
  CompactOptions co;
  co.retain_inputs_s = 0;
  CompactReport report;
  ASSERT_OK(store->Compact(co, &report));
  ASSERT_EQ(report.inputs.size(), 20u);
  ASSERT_OK(store->Refresh().status());
  for (int i = 20; i < 30; ++i) {
    // The previous writer's segment is loaded by this refresh (a refresh
    // reads what changed); opening the writer then reads nothing.
    ASSERT_OK(store->Refresh().status());
    env.listings = 0;
    env.segment_opens = 0;
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
    EXPECT_EQ(env.listings.load(), 0);
    EXPECT_EQ(env.segment_opens.load(), 0);
    // A series the store's snapshot knows is checked against it.
    ASSERT_OK(w->Append(i, "x", 0, i * 1.0));
    EXPECT_EQ(env.listings.load(), 0);
    // One it does not know brings the schema up to date, once per writer.
    ASSERT_OK(w->Append(i, "new" + std::to_string(i), 0, 1.0));
    EXPECT_EQ(env.listings.load(), 1);
    ASSERT_OK(w->Append(i, "other" + std::to_string(i), 0, 1.0));
    EXPECT_EQ(env.listings.load(), 1);
    ASSERT_OK(w->Close());
  }
  // An id used before: numbered past its compacted segments.
  ASSERT_OK(store->Refresh().status());
  env.listings = 0;
  env.segment_opens = 0;
  WriterOptions wo;
  wo.writer_id = "task0";
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(wo));
  EXPECT_EQ(env.listings.load(), 1) << "to number past the id's segments";
  EXPECT_GE(env.segment_opens.load(), 1) << "the compacted segment's list of what it replaced";
  ASSERT_OK(w->Append(30, "x", 0, 30.0));
  ASSERT_OK(w->Close());
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  for (int i = 0; i <= 30; ++i) {
    ASSERT_OK_AND_ASSIGN(Value v, snap->Get(i, "x", 0));
    EXPECT_EQ(v.scalar<double>(), i * 1.0);
  }
  // Its first new segment is numbered past the 5 its id had before.
  for (const SegmentInfo& seg : snap->ListSegments()) {
    if (seg.writer_id == "task0") {
      EXPECT_EQ(seg.sequence, 6u) << seg.file;
    }
  }
  std::printf(
      "[ figures  ] 10 writers of default ids opened with 0 listings and 0 segment reads "
      "(1 listing at the first series the store did not know); one of a reused id with 1\n");
}

// A refresh costs what changed: with nothing new it lists `segments/`, reads
// no segment and keeps the snapshot it had; with one new segment it reads
// that one only. Counted, not timed.
TEST_F(StoreTest, ARefreshReadsOnlyWhatChangedAndKeepsTheSnapshotWhenNothingDid) {
  CountingEnv env(Env::Default());
  StoreOptions o;
  o.env = &env;
  auto store = Open(o);
  for (int i = 0; i < 50; ++i) {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
    ASSERT_OK(w->Append(i, "x", 0, i * 1.0));
    ASSERT_OK(w->Close());
  }
  ASSERT_OK_AND_ASSIGN(auto before, store->Refresh());
  EXPECT_EQ(before->ListSegments().size(), 50u);
  env.listings = 0;
  env.segment_opens = 0;
  ASSERT_OK_AND_ASSIGN(auto same, store->Refresh());
  EXPECT_EQ(env.listings.load(), 1);
  EXPECT_EQ(env.segment_opens.load(), 0);
  EXPECT_EQ(same.get(), before.get()) << "nothing changed: the snapshot stands";
  EXPECT_EQ(store->last_refresh().segments, 50u);
  EXPECT_EQ(store->last_refresh().unchanged, 50u);
  {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
    ASSERT_OK(w->Append(50, "x", 0, 50.0));
    ASSERT_OK(w->Close());
  }
  env.segment_opens = 0;
  ASSERT_OK_AND_ASSIGN(auto after, store->Refresh());
  EXPECT_EQ(env.segment_opens.load(), 1) << "the new segment only";
  EXPECT_NE(after.get(), before.get());
  EXPECT_EQ(after->Get(50, "x", 0)->scalar<double>(), 50.0);
  EXPECT_EQ(before->ListSegments().size(), 50u) << "a snapshot held keeps what it had";
  // A live writer's open segment is read again at each refresh, from where
  // the last one stopped, and what it committed since is seen.
  ASSERT_OK_AND_ASSIGN(auto live, store->NewWriter({}));
  ASSERT_OK(live->Append(51, "x", 0, 51.0));
  ASSERT_OK(live->Commit());
  ASSERT_OK_AND_ASSIGN(auto seen, store->Refresh());
  EXPECT_EQ(seen->Get(51, "x", 0)->scalar<double>(), 51.0);
  ASSERT_OK(live->Append(52, "x", 0, 52.0));
  ASSERT_OK(live->Commit());
  ASSERT_OK_AND_ASSIGN(auto seen2, store->Refresh());
  EXPECT_EQ(seen2->Get(52, "x", 0)->scalar<double>(), 52.0);
  ASSERT_OK(live->Close());
  // A segment removed (compaction's retained inputs going) is a change too.
  CompactOptions co;
  co.retain_inputs_s = 0;
  ASSERT_OK(store->Compact(co, nullptr));
  ASSERT_OK_AND_ASSIGN(auto compacted, store->Refresh());
  EXPECT_LT(compacted->ListSegments().size(), 10u);
  for (int i = 0; i <= 52; ++i) {
    ASSERT_OK_AND_ASSIGN(Value v, compacted->Get(i, "x", 0));
    EXPECT_EQ(v.scalar<double>(), i * 1.0);
  }
}

// CountRuns is ListRuns().size() without listing: hashed ids in sealed
// segments are counted from the footers' run indexes, reading no block;
// integer runs, a live writer's open segment, overwritten keys and runs that
// resume markers hide are counted as ListRuns lists them.
// The series of one log_many hold the same runs: their blocks share one list
// in the footer's run index (docs/format.md "Shared run index"), so the
// footer and every reader's memory hold each run list once, not once per
// series; lookups, counts and verify read them as before.
TEST_F(StoreTest, BlocksOfTheSameRunsShareOneRunListInTheFooter) {
  auto store = Open();
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
  // 4 commits of 500 hashed ids, each in "a", "b" and "c", the even ones in
  // "d" too: 2 distinct lists a commit.
  for (uint64_t c = 0; c < 4; ++c) {
    for (uint64_t i = c * 500; i < (c + 1) * 500; ++i) {
      for (const char* series : {"a", "b", "c"}) {
        ASSERT_OK(w->Append(RunRef(HashedId(i)), series, 0, double(i)));
      }
      if (i % 2 == 0) ASSERT_OK(w->Append(RunRef(HashedId(i)), "d", 0, double(i)));
    }
    ASSERT_OK(w->Commit());
  }
  ASSERT_OK(w->Close());
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  const auto segments = snap->ListSegments();
  ASSERT_EQ(segments.size(), 1u);
  ASSERT_OK_AND_ASSIGN(auto file,
                       Env::Default()->NewRandomAccessFile(StorePath() + "/" + segments[0].file));
  format::SegmentIndex index;
  ASSERT_OK(format::LoadSegmentIndex(*file, segments[0].file, &index));
  ASSERT_NE(index.run_index, nullptr);
  const format::RunIndex& ri = *index.run_index;
  EXPECT_EQ(ri.block_count(), 16u);
  EXPECT_EQ(ri.list_count(), 8u);
  EXPECT_EQ(ri.hashes.size(), 3000u) << "a list per block would hold 7000";
  // Each commit's "a", "b" and "c" blocks name one list, held once.
  std::map<const uint64_t*, int> blocks_of;
  for (uint32_t b = 0; b < ri.block_count(); ++b) ++blocks_of[ri.Of(b).data()];
  std::multiset<int> sharing;
  for (const auto& [list, blocks] : blocks_of) sharing.insert(blocks);
  EXPECT_EQ(sharing, (std::multiset<int>{1, 1, 1, 1, 3, 3, 3, 3}));
  ASSERT_OK_AND_ASSIGN(uint64_t counted, snap->CountRuns());
  EXPECT_EQ(counted, 2000u);
  for (uint64_t i : {0u, 777u, 1998u}) {
    ASSERT_OK_AND_ASSIGN(Value v, snap->Get(RunRef(HashedId(i)), "c", 0));
    EXPECT_EQ(v.scalar<double>(), double(i));
    EXPECT_EQ(snap->Get(RunRef(HashedId(i)), "d", 0).ok(), i % 2 == 0) << i;
  }
  EXPECT_OK(snap->Verify());
}

// Where what loading a sealed segment read lies, and its hash, are kept for
// the catalog by a store that may write one (which reads the bytes again); a
// read-only store keeps none, and one that read a catalog keeps what verify
// compares with the files.
TEST_F(StoreTest, OnlyAStoreThatMayWriteACatalogKeepsTheFootersItRead) {
  {
    auto store = Open();
    for (int w = 0; w < 3; ++w) {
      ASSERT_OK_AND_ASSIGN(auto wr, store->NewWriter({}));
      ASSERT_OK(wr->Append(RunRef(HashedId(w)), "y", 0, 1.0));
      ASSERT_OK(wr->Close());
    }
  }
  auto kept = [](Store& s) {
    size_t n = 0;
    for (const auto& seg : static_cast<const SnapshotImpl&>(*s.GetSnapshot()).segments()) {
      n += seg->reads != nullptr;
    }
    return n;
  };
  auto writable = Open();
  EXPECT_EQ(kept(*writable), 3u);
  auto reader = Open({.read_only = true});
  EXPECT_EQ(kept(*reader), 0u);
  EXPECT_OK(reader->GetSnapshot()->Verify());
  ASSERT_OK_AND_ASSIGN(uint64_t entries, writable->WriteCatalog());
  EXPECT_EQ(entries, 3u);
  auto from_catalog = Open({.read_only = true});
  EXPECT_EQ(kept(*from_catalog), 3u) << "verify compares a catalog's entries with the files";
  EXPECT_OK(from_catalog->GetSnapshot()->Verify());
}

TEST_F(StoreTest, CountRunsIsTheNumberOfListedRunsAndReadsNoBlockForHashedIds) {
  auto store = Open();
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  auto hashed = [](uint64_t i) { return testing::HashedId(i); };
  // Three writers, 3,000 hashed ids, each in two series (one of them only
  // for some ids).
  auto write = [&](uint64_t first, uint64_t n) {
    ASSERT_OK_AND_ASSIGN(auto wr, store->NewWriter({}));
    for (uint64_t id = first; id < first + n; ++id) {
      ASSERT_OK(wr->Append(RunRef(hashed(id)), "y", 0, double(id)));
      if (rng() % 2) ASSERT_OK(wr->Append(RunRef(hashed(id)), "trace", 0, double(rng() % 7)));
    }
    ASSERT_OK(wr->Close());
  };
  for (int w = 0; w < 3; ++w) write(w * 1000, 1000);
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  const auto* impl = &static_cast<const SnapshotImpl&>(*snap);
  ASSERT_OK(snap->ListSeries().status());  // key resolution: from the run indexes too
  uint64_t before = impl->payload_reads();
  ASSERT_OK_AND_ASSIGN(uint64_t counted, snap->CountRuns());
  EXPECT_EQ(impl->payload_reads(), before) << "counted from the footers";
  ASSERT_OK_AND_ASSIGN(auto listed, snap->ListRuns());
  EXPECT_GT(impl->payload_reads(), before) << "listed from the blocks";
  EXPECT_EQ(counted, listed.size());
  EXPECT_EQ(counted, 3000u);
  // 200 of them written again (keys overwritten: the blocks that lost
  // records to later ones are read for the rows that stand).
  write(900, 200);
  ASSERT_OK_AND_ASSIGN(snap, store->Refresh());
  ASSERT_OK_AND_ASSIGN(counted, snap->CountRuns());
  ASSERT_OK_AND_ASSIGN(listed, snap->ListRuns());
  EXPECT_EQ(counted, listed.size());
  EXPECT_EQ(counted, 3000u);
  // Integer runs (not in the run index), a live writer's open segment, and
  // a run whose only records a resume marker hides.
  ASSERT_OK_AND_ASSIGN(auto ints, store->NewWriter({}));
  for (int64_t r = 0; r < 500; ++r) ASSERT_OK(ints->Append(r, "y", r % 3, 1.0));
  ASSERT_OK(ints->Close());
  ASSERT_OK_AND_ASSIGN(auto live, store->NewWriter({}));
  ASSERT_OK(live->Append(RunRef(hashed(5000)), "y", 0, 1.0));
  ASSERT_OK(live->Append(RunRef("hidden"), "y", 3, 1.0));
  ASSERT_OK(live->Commit());
  ASSERT_OK(live->Resume(RunRef("hidden"), 0));
  ASSERT_OK_AND_ASSIGN(snap, store->Refresh());
  ASSERT_OK_AND_ASSIGN(counted, snap->CountRuns());
  ASSERT_OK_AND_ASSIGN(listed, snap->ListRuns());
  EXPECT_EQ(counted, listed.size());
  EXPECT_EQ(counted, 3000u + 500u + 1u) << "'hidden' has no visible record";
  ASSERT_OK(live->Close());
  std::printf("[ figures  ] %llu runs counted, as listed (seed %llu)\n",
              static_cast<unsigned long long>(counted), static_cast<unsigned long long>(seed));
}

// MergeAscending is a sort of ascending lists, for any number of them (an
// odd one out at every level; enough for the radix sort), empty ones and
// repeats included, over the whole range of 64 bits.
TEST(MergeAscendingTest, IsTheSortOfTheListsForAnyNumberOfThem) {
  const uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  for (int lists : {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 63, 64, 65, 300}) {
    std::vector<std::vector<uint64_t>> values(lists);
    std::vector<uint64_t> expected;
    for (auto& l : values) {
      l.resize(rng() % 20);
      for (auto& v : l) v = rng() % 3 == 0 ? rng() % 50 : rng();
      std::sort(l.begin(), l.end());
      expected.insert(expected.end(), l.begin(), l.end());
    }
    std::sort(expected.begin(), expected.end());
    std::vector<std::span<const uint64_t>> spans(values.begin(), values.end());
    EXPECT_EQ(MergeAscending(spans), expected) << lists << " lists, seed " << seed;
  }
}

// ListSeriesTypes names every series with its type without resolving keys:
// no block is read, even of a series whose keys repeat; a series whose only
// records a resume marker hides is listed (ListSeries leaves it out).
TEST_F(StoreTest, ListSeriesTypesReadsNoBlock) {
  auto store = Open();
  for (int w = 0; w < 2; ++w) {
    ASSERT_OK_AND_ASSIGN(auto wr, store->NewWriter({}));
    for (int r = 0; r < 100; ++r)
      ASSERT_OK(wr->Append(RunRef("r" + std::to_string(r)), "y", 0, 1.0));
    std::vector<float> v(4);
    ASSERT_OK(wr->Append(RunRef("a"), "arr", 0,
                         ValueRef::Array<float>(v.data(), std::vector<int64_t>{2, 2})));
    ASSERT_OK(wr->Close());
  }
  ASSERT_OK_AND_ASSIGN(auto hider, store->NewWriter({}));
  ASSERT_OK(hider->Append(RunRef("gone"), "hidden", 5, 1.0));
  ASSERT_OK(hider->Commit());
  ASSERT_OK(hider->Resume(RunRef("gone"), 0));
  ASSERT_OK(hider->Close());
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  const auto& impl = static_cast<const SnapshotImpl&>(*snap);
  const uint64_t before = impl.payload_reads();  // the markers, read by the refresh
  const std::vector<SeriesInfo> types = snap->ListSeriesTypes();
  EXPECT_EQ(impl.payload_reads(), before);
  ASSERT_EQ(types.size(), 3u);
  EXPECT_EQ(types[0].name, "arr");
  EXPECT_EQ(types[0].dtype, DType::kFloat32);
  EXPECT_EQ(types[0].shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(types[1].name, "hidden");
  EXPECT_EQ(types[2].name, "y");
  for (const SeriesInfo& t : types) {
    EXPECT_EQ(t.count, 0u) << "left 0: counting resolves keys";
    EXPECT_GT(t.stored_bytes, 0u);
  }
  EXPECT_EQ(snap->ListSeriesTypes(/*include_reserved=*/true).size(), 4u) << "~resume";
  ASSERT_OK_AND_ASSIGN(auto listed, snap->ListSeries());
  EXPECT_EQ(listed.size(), 2u) << "ListSeries counts, and 'hidden' has no visible record";
}

// Verify releases the pages it checked from its mapping as it goes: a
// segment of 64 MiB leaves about a MiB mapped, not 64 (they come back from
// the page cache if touched again; a view held meanwhile still reads right).
TEST_F(StoreTest, VerifyHoldsABoundedNumberOfTheSegmentsPages) {
  auto store = Open();
  std::vector<double> value(8192);  // 64 KiB each
  const int64_t shape[1] = {8192};
  {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
    for (int i = 0; i < 1024; ++i) {
      std::fill(value.begin(), value.end(), double(i));
      ASSERT_OK(w->Append(i, "v", 0, ValueRef::Array<double>(value.data(), shape)));
      if (i % 64 == 63) ASSERT_OK(w->Commit());
    }
    ASSERT_OK(w->Close());
  }
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  ASSERT_OK_AND_ASSIGN(Value held, snap->Get(7, "v", 0));  // a zero-copy view, held
  long mapped_at_end = -1;
  const VerifyReport report = snap->VerifyAll([&](uint64_t done, uint64_t total) {
    if (done == total) mapped_at_end = testing::MappedSegmentKib(StorePath());
  });
  EXPECT_TRUE(report.problems.empty());
  EXPECT_GE(report.blocks_checked, 16u) << "several blocks, each released as checked";
  std::printf("[ figures  ] pages of a 64 MiB segment mapped at the end of verify: %ld KiB\n",
              mapped_at_end);
  ASSERT_GE(mapped_at_end, 0);
  EXPECT_LE(mapped_at_end, 2 << 10) << "a MiB and the last block, not the segment";
  EXPECT_EQ(held.data() == nullptr, false);
  EXPECT_EQ(reinterpret_cast<const double*>(held.data())[8191], 7.0);
  ASSERT_OK_AND_ASSIGN(Value again, snap->Get(1000, "v", 0));
  EXPECT_EQ(reinterpret_cast<const double*>(again.data())[0], 1000.0);
}

TEST_F(StoreTest, TwoLiveWritersWithOneIdNeverCollide) {
  auto store = Open();
  WriterOptions wo;
  wo.writer_id = "same";
  wo.segment_bytes = 64 << 10;
  ASSERT_OK_AND_ASSIGN(auto a, store->NewWriter(wo));
  ASSERT_OK(a->Append(0, "x", 0, 0.0));
  ASSERT_OK(a->Commit());  // a holds segment 1, open
  ASSERT_OK_AND_ASSIGN(auto b, store->NewWriter(wo));
  std::vector<double> v(1024);
  const int64_t shape[] = {1024};
  for (int i = 1; i <= 40; ++i) {
    Writer* w = i % 2 ? a.get() : b.get();
    ASSERT_OK(w->Append(i, "x", 0, double(i)));
    ASSERT_OK(w->Append(i, "v", 0, ValueRef::Array(v.data(), shape)));
    ASSERT_OK(w->Commit());  // both roll every few commits
  }
  EXPECT_GE(a->stats().segments_sealed, 2u);
  EXPECT_GE(b->stats().segments_sealed, 2u);
  ASSERT_OK(a->Close());
  ASSERT_OK(b->Close());
  // A restarted writer with the same id continues after both.
  ASSERT_OK_AND_ASSIGN(auto c, store->NewWriter(wo));
  ASSERT_OK(c->Append(41, "x", 0, 41.0));
  ASSERT_OK(c->Close());
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  EXPECT_EQ(snap->GetSeriesInfo("x")->count, 42u);
  for (int i = 0; i <= 41; ++i) EXPECT_EQ(snap->Get(i, "x", 0)->scalar<double>(), double(i));
  std::set<uint64_t> seqs;
  for (const auto& seg : snap->ListSegments()) {
    EXPECT_EQ(seg.writer_id, "same");
    EXPECT_TRUE(seg.sealed) << seg.file;
    EXPECT_TRUE(seqs.insert(seg.sequence).second);
  }
  EXPECT_OK(snap->Verify());
}

// A scan without keys returns the same values, batch for batch, and no keys.
TEST_F(StoreTest, ScanWithoutKeysReturnsTheSameValues) {
  auto store = Open();
  {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.block_bytes = 4096}));
    for (int64_t i = 0; i < 3000; ++i) {  // runs of 100 steps: keys stored as sequences
      ASSERT_OK(w->Append(i / 100, "x", i % 100, 0.5 * i));
    }
    for (int64_t i = 0; i < 300; ++i) {  // no pattern: keys stored plainly
      ASSERT_OK(w->Append((i * 7919) % 1013, "x", (i * i) % 97 + 1000, 1.0 * i));
    }
    ASSERT_OK(w->Append("text-run", "x", 5, 9.0));
    ASSERT_OK(w->Close());
  }
  auto snap = *store->Refresh();
  ASSERT_OK_AND_ASSIGN(auto with, snap->Scan("x"));
  ASSERT_OK_AND_ASSIGN(auto without, snap->Scan("x", ScanOptions{.keys = false}));
  ScanBatch a, b;
  size_t batches = 0, records = 0;
  while (true) {
    ASSERT_OK_AND_ASSIGN(bool more_a, with->Next(&a));
    ASSERT_OK_AND_ASSIGN(bool more_b, without->Next(&b));
    ASSERT_EQ(more_a, more_b);
    if (!more_a) break;
    ++batches;
    records += a.count;
    ASSERT_EQ(a.count, b.count);
    EXPECT_EQ(a.int_runs.size(), a.count);
    EXPECT_TRUE(b.int_runs.empty() && b.steps.empty() && b.run_is_string.empty());
    ASSERT_EQ(a.values.nbytes(), b.values.nbytes());
    EXPECT_EQ(std::memcmp(a.values.data(), b.values.data(), a.values.nbytes()), 0);
  }
  EXPECT_EQ(records, 3301u);
  EXPECT_GT(batches, 3u);
}

// (run, step, value) of every record a scan returns, as text, sorted.
std::vector<std::string> ScanRecords(const Snapshot& snap, std::string_view name,
                                     const ScanOptions& options) {
  std::vector<std::string> out;
  auto scanner = snap.Scan(name, options);
  EXPECT_TRUE(scanner.ok()) << scanner.status().ToString();
  if (!scanner.ok()) return out;
  ScanBatch b;
  while (true) {
    auto more = (*scanner)->Next(&b);
    EXPECT_TRUE(more.ok()) << more.status().ToString();
    if (!more.ok() || !*more) break;
    for (size_t i = 0; i < b.count; ++i) {
      out.push_back(b.run(i).ToString() + "/" + std::to_string(b.steps[i]) + "=" +
                    std::to_string(b.values.as<double>()[i]));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST_F(StoreTest, ScanOfSomeRunsReturnsWhatTheFullScanHasOfThem) {
  auto store = Open();
  {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.writer_id = "sweep", .block_bytes = 4096}));
    for (int64_t step = 0; step < 40; ++step) {  // a sweep: every block holds many runs
      for (int64_t run = 0; run < 30; ++run)
        ASSERT_OK(w->Append(run, "x", step, run + 0.01 * step));
      ASSERT_OK(w->Append("a", "x", step, -1.0 * step));
      if (step % 10 == 9) ASSERT_OK(w->Commit());
    }
    for (int64_t step = 0; step < 300; ++step) ASSERT_OK(w->Append("b", "x", step, 2.0 * step));
    ASSERT_OK(w->Close());
  }
  {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.writer_id = "later"}));
    ASSERT_OK(w->Append(3, "x", 5, 333.0));  // a later commit wins
    ASSERT_OK(w->Resume(7, 10));             // hides run 7's earlier steps >= 10
    for (int64_t step = 10; step < 15; ++step) ASSERT_OK(w->Append(7, "x", step, 700.0 + step));
    ASSERT_OK(w->Close());
  }
  auto snap = *store->Refresh();
  const std::vector<std::string> all = ScanRecords(*snap, "x", {});
  ASSERT_EQ(all.size(), 30u * 40u - 25u + 40u + 300u);
  const std::vector<std::vector<RunId>> sets = {
      {}, {3}, {7}, {"a"}, {"b"}, {29, 0}, {3, 7, "b", 999, "zz"}, {999}, {-1, "a", 12, 12}};
  for (const auto& runs : sets) {
    std::string label;
    for (const RunId& r : runs) label += r.ToString() + " ";
    SCOPED_TRACE("runs: " + label);
    std::vector<std::string> want;
    for (const std::string& rec : all) {
      const std::string run = rec.substr(0, rec.find('/'));
      for (const RunId& r : runs) {
        if (r.ToString() == run) {
          want.push_back(rec);
          break;
        }
      }
    }
    EXPECT_EQ(ScanRecords(*snap, "x", ScanOptions{.runs = runs}), want);
  }
  using Steps = ScanOptions::StepRange;
  const int64_t kMin = std::numeric_limits<int64_t>::min(),
                kMax = std::numeric_limits<int64_t>::max();
  for (const Steps steps : {Steps{0, 0}, Steps{5, 9}, Steps{-5, 3}, Steps{35, 1000}, Steps{10, 5},
                            Steps{kMin, kMax}, Steps{12, 12}}) {
    for (const bool with_runs : {false, true}) {
      const std::vector<RunId> runs = {3, 7, "b"};
      SCOPED_TRACE("steps " + std::to_string(steps.first) + ".." + std::to_string(steps.last) +
                   (with_runs ? " of runs 3, 7, b" : ""));
      std::vector<std::string> want;
      for (const std::string& rec : all) {
        const size_t slash = rec.find('/');
        const std::string run = rec.substr(0, slash);
        const int64_t step = std::stoll(rec.substr(slash + 1));
        const bool run_ok = !with_runs || run == "3" || run == "7" || run == "b";
        if (run_ok && step >= steps.first && step <= steps.last) want.push_back(rec);
      }
      ScanOptions options{.steps = steps};
      if (with_runs) options.runs = runs;
      EXPECT_EQ(ScanRecords(*snap, "x", options), want);
    }
  }
  // The hidden and overwritten records stay hidden in a scan of their run.
  const auto run3 = ScanRecords(*snap, "x", ScanOptions{.runs = std::vector<RunId>{3}});
  EXPECT_NE(std::find(run3.begin(), run3.end(), "3/5=333.000000"), run3.end());
  EXPECT_EQ(ScanRecords(*snap, "x", ScanOptions{.runs = std::vector<RunId>{7}}).size(), 15u);
}

// One RunSet, prepared once, filters the scans of several series; over
// blocks of hashed ids (sealed: each block's runs come from the footer's run
// index, searched from the set's table or the set's sorted hashes, whichever
// list is smaller) every scan returns exactly the records of its runs.
TEST_F(StoreTest, OneRunSetFiltersTheScansOfSeveralSeries) {
  auto store = Open();
  auto id = [](int i) { return "e" + std::to_string(i * 7919 % 1000) + "-" + std::to_string(i); };
  {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.writer_id = "w"}));
    for (int i = 0; i < 600; ++i) {
      ASSERT_OK(w->Append(id(i), "a", 0, double(i)));
      if (i % 3 != 0) ASSERT_OK(w->Append(id(i), "b", 0, int64_t{i}));
      if (i % 50 == 49) ASSERT_OK(w->Commit());  // a block per 50 experiments
    }
    ASSERT_OK(w->Close());
  }
  auto snap = *store->Refresh();
  std::mt19937 rng(11);
  for (const size_t k : {0, 1, 5, 40, 300, 600}) {
    std::vector<RunId> runs;
    std::set<std::string> wanted;
    for (size_t j = 0; j < k; ++j) {
      const std::string r = id(static_cast<int>(rng() % 600));
      runs.push_back(RunId(r));
      wanted.insert(r);
    }
    runs.push_back(RunId("not-a-run"));
    SCOPED_TRACE(std::to_string(k) + " runs");
    const RunSet set(runs);
    EXPECT_EQ(set.size(), wanted.size() + 1);
    for (const std::string name : {"a", "b"}) {
      std::vector<std::string> want;
      for (const std::string& rec : ScanRecords(*snap, name, {})) {
        if (wanted.count(rec.substr(0, rec.find('/')))) want.push_back(rec);
      }
      EXPECT_EQ(ScanRecords(*snap, name, ScanOptions{.runs = set}), want) << name;
    }
    for (int i = 0; i < 600; ++i) EXPECT_EQ(set.Holds(RunRef(id(i))), wanted.count(id(i)) > 0);
  }
}

// The series of one AppendColumns share their footer run lists, and one
// RunSet filtering the scans of all of them (read_aligned's windows) searches
// each list once; kept across a compaction that frees the segments it saw,
// and a later commit, it answers for each snapshot, never from another's.
TEST_F(StoreTest, OneRunSetSearchesEachSharedRunListOnceAndAnswersForEachSnapshot) {
  auto store = Open();
  constexpr size_t kCommits = 8, kPerCommit = 40;
  {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.writer_id = "w"}));
    for (size_t c = 0; c < kCommits; ++c) {
      std::vector<std::string> ids;
      for (size_t i = 0; i < kPerCommit; ++i) ids.push_back(HashedId(c * kPerCommit + i));
      const std::vector<RunRef> runs(ids.begin(), ids.end());
      const std::vector<int64_t> steps(kPerCommit, 0);
      std::vector<double> x(kPerCommit);
      for (size_t i = 0; i < kPerCommit; ++i) x[i] = static_cast<double>(c * kPerCommit + i);
      const int64_t shape[] = {kPerCommit};
      const ColumnRef table[] = {{"a", ValueRef::Array(x.data(), shape), {}},
                                 {"b", ValueRef::Array(x.data(), shape), {}},
                                 {"c", ValueRef::Array(x.data(), shape), {}}};
      ASSERT_OK(w->AppendColumns(runs, steps, table));
      ASSERT_OK(w->Commit());
    }
    ASSERT_OK(w->Close());
  }
  // Runs of 3 of the 8 commits, and one that is none.
  std::vector<RunId> wanted_runs = {RunId("not-a-run")};
  std::set<std::string> wanted;
  for (size_t id : {3u, 4u, 170u, 300u, 301u}) {
    wanted_runs.push_back(RunId(HashedId(id)));
    wanted.insert(HashedId(id));
  }
  const RunSet set(wanted_runs);
  auto check = [&](const Snapshot& snap) {
    for (const std::string name : {"a", "b", "c"}) {
      std::vector<std::string> want;
      for (const std::string& rec : ScanRecords(snap, name, {})) {
        if (wanted.count(rec.substr(0, rec.find('/')))) want.push_back(rec);
      }
      EXPECT_EQ(ScanRecords(snap, name, ScanOptions{.runs = set}), want) << name;
    }
  };
  {
    ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
    const auto& impl = static_cast<const SnapshotImpl&>(*snap);
    check(*snap);
    EXPECT_EQ(impl.run_lists_searched(), kCommits) << "a list per commit, shared by a, b and c";
    check(*snap);
    EXPECT_EQ(impl.run_lists_searched(), kCommits) << "the set's answers, for the same snapshot";
  }
  // The segments the set saw are merged and removed, then one more is added.
  CompactOptions co;
  co.retain_inputs_s = 0;
  co.min_inputs = 1;
  ASSERT_OK(store->Compact(co, nullptr));
  {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.writer_id = "w2"}));
    ASSERT_OK(w->Append(RunRef(HashedId(4)), "a", 1, 4.5));
    ASSERT_OK(w->Append(RunRef(HashedId(999)), "a", 0, 999.0));
    ASSERT_OK(w->Close());
  }
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  ASSERT_EQ(snap->ListSegments().size(), 2u);
  const auto& impl = static_cast<const SnapshotImpl&>(*snap);
  check(*snap);
  EXPECT_GT(impl.run_lists_searched(), 0u) << "searched again for a snapshot of its own";
  EXPECT_EQ(ScanRecords(*snap, "a", ScanOptions{.runs = set}).size(), wanted.size() + 1)
      << "the later record of run 4 is found";
}

TEST_F(StoreTest, ScanOfSomeRunsOrStepsReadsNoOtherBlock) {
  auto store = Open();
  {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.writer_id = "w"}));
    for (int64_t run = 0; run < 10; ++run) {  // run by run: a block per 100 steps (a commit)
      for (int64_t step = 0; step < 200; ++step) {
        ASSERT_OK(w->Append(run, "x", step, run * 1000.5 + step));
        if (step % 100 == 99) ASSERT_OK(w->Commit());
      }
    }
    ASSERT_OK(w->Close());
  }
  const double marker = 7 * 1000.5 + 150;  // a value of run 7, in its second block
  std::string file;
  size_t at;
  ASSERT_NO_FATAL_FAILURE(FindInSegment(store.get(), StorePath(),
                                        std::string_view(reinterpret_cast<const char*>(&marker), 8),
                                        &file, &at));
  FlipByte(file, at);
  ASSERT_OK_AND_ASSIGN(auto ro, Store::Open(StorePath(), {.read_only = true}));
  auto snap = ro->GetSnapshot();
  const auto run3 = ScanRecords(*snap, "x", ScanOptions{.runs = std::vector<RunId>{3}});
  ASSERT_EQ(run3.size(), 200u) << "run 7's damaged block was read for a scan of run 3";
  ASSERT_OK_AND_ASSIGN(auto scanner, snap->Scan("x", ScanOptions{.runs = std::vector<RunId>{3}}));
  ScanBatch b;
  ASSERT_OK_AND_ASSIGN(bool more, scanner->Next(&b));
  ASSERT_TRUE(more);
  EXPECT_EQ(b.count, 100u);
  EXPECT_TRUE(b.values.zero_copy()) << "a block of wanted runs only comes back whole, as a view";
  using Steps = ScanOptions::StepRange;
  EXPECT_EQ(
      ScanRecords(*snap, "x", ScanOptions{.runs = std::vector<RunId>{7}, .steps = Steps{0, 99}})
          .size(),
      100u)
      << "the damaged block of run 7's steps 100-199 was read for its steps 0-99";
  EXPECT_EQ(ScanRecords(*snap, "x", ScanOptions{.steps = Steps{20, 40}}).size(), 10u * 21u);
  auto damaged = [&](ScanOptions options) -> Status {
    auto scan = snap->Scan("x", options);
    if (!scan.ok()) return scan.status();
    auto& sc = *scan;
    while (true) {
      Result<bool> next = sc->Next(&b);
      if (!next.ok()) return next.status();
      if (!*next) return Status::OK();
    }
  };
  EXPECT_THAT(damaged(ScanOptions{.runs = std::vector<RunId>{7}}),
              StatusIsWith(StatusCode::kCorruption, "block payload checksum mismatch"));
  EXPECT_THAT(damaged(ScanOptions{.steps = Steps{99, 100}}),
              StatusIsWith(StatusCode::kCorruption, "block payload checksum mismatch"));
  EXPECT_THAT(damaged(ScanOptions{}), StatusIsWith(StatusCode::kCorruption, "checksum mismatch"));
}

// Checks a scan of `name` against model {(run as text, step) -> value}; with
// `whole`, that every batch is a view of a block taken whole.
void ExpectScanMatches(const Snapshot& snap, std::string_view name,
                       const std::map<std::pair<std::string, int64_t>, double>& model, bool whole) {
  ASSERT_OK_AND_ASSIGN(SeriesInfo info, snap.GetSeriesInfo(name));
  EXPECT_EQ(info.count, model.size());
  std::vector<std::string> want;
  for (const auto& [key, v] : model) {
    want.push_back(key.first + "/" + std::to_string(key.second) + "=" + std::to_string(v));
  }
  std::sort(want.begin(), want.end());
  EXPECT_EQ(ScanRecords(snap, name, {}), want);
  ASSERT_OK_AND_ASSIGN(auto scanner, snap.Scan(name));
  ScanBatch b;
  size_t batches = 0, views = 0;
  while (*scanner->Next(&b)) {
    ++batches;
    views += b.values.zero_copy();
  }
  EXPECT_GE(batches, 4u);
  if (whole) {
    EXPECT_EQ(views, batches) << "every block is taken whole";
  }
}

// Several runs logged step by step (vectorised environments): blocks whose
// keys ascend by (step, run) over spans that do not overlap are taken whole
// without sorting their records; a key written twice, in one block or across
// two, or a resume marker, still resolves record by record.
TEST_F(StoreTest, RunsLoggedStepByStepResolveLikeAnyOtherLayout) {
  std::mt19937_64 rng(testing::TestSeed());  // TestSeed prints it
  // 0 and 4: no key twice (mixed, then int runs); 1 and 5: a key logged
  // twice in a row (int, then mixed runs); 2: a step logged again at the
  // start of a new block; 3: a resume.
  for (int variant = 0; variant < 6; ++variant) {
    SCOPED_TRACE("variant " + std::to_string(variant));
    fs::remove_all(StorePath());
    auto store = Open();
    std::map<std::pair<std::string, int64_t>, double> model;  // (run, step) -> value
    std::vector<RunId> runs = {0, 1, 2, 5, 9, "env-a", "env-b"};
    if (variant == 1 || variant == 4) runs = {0, 1, 2, 5, 9, 12, 40};
    {
      ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.writer_id = "vec", .block_bytes = 2048}));
      double value = 0;
      auto log = [&](const RunId& run, int64_t step) {
        ASSERT_OK(w->Append(run, "r", step, ++value));
        model[{run.ToString(), step}] = value;
      };
      for (int64_t step = 0; step < 120; ++step) {
        if (variant == 2 && step == 100) {
          ASSERT_OK(w->Commit());
          for (const RunId& run : runs) log(run, 99);
        }
        for (const RunId& run : runs) {
          log(run, step);
          if ((variant == 1 || variant == 5) && step == 40 && run == runs[5]) log(run, step);
        }
        if (rng() % 4 == 0) ASSERT_OK(w->Commit());
      }
      ASSERT_OK(w->Close());
    }
    if (variant == 3) {
      ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.writer_id = "resumed"}));
      ASSERT_OK(w->Resume(5, 60));
      ASSERT_OK(w->Close());
      for (auto it = model.begin(); it != model.end();) {
        it = it->first.first == "5" && it->first.second >= 60 ? model.erase(it) : std::next(it);
      }
    }
    ExpectScanMatches(**store->Refresh(), "r", model, variant == 0 || variant == 4);
  }
}

// Runs split among writers (ranks of a sweep, workers of a pool): every
// block's keys ascend but the key ranges of the writers' blocks interleave.
// With no key written twice they are taken whole; a key written by two
// writers, or a resume marker, still resolves record by record.
TEST_F(StoreTest, RunsSplitAmongWritersResolveLikeAnyOtherLayout) {
  std::mt19937_64 rng(testing::TestSeed());  // TestSeed prints it
  // 0 and 3: no key twice (int, then mixed runs); 1: a key written again by
  // another writer, in a later commit; 2: a resume marker.
  for (int variant = 0; variant < 4; ++variant) {
    SCOPED_TRACE("variant " + std::to_string(variant));
    fs::remove_all(StorePath());
    auto store = Open();
    std::map<std::pair<std::string, int64_t>, double> model;
    // Variant 3: runs from 150 on are strings, which sort after every int, so
    // each writer's keys still ascend.
    auto run_id = [&](int i) {
      return variant == 3 && i >= 150 ? RunId("s" + std::to_string(i)) : RunId(i);
    };
    {
      std::vector<std::unique_ptr<Writer>> writers;
      for (int w = 0; w < 4; ++w) {
        ASSERT_OK_AND_ASSIGN(auto wr, store->NewWriter({.writer_id = "rank" + std::to_string(w),
                                                        .block_bytes = 4096}));
        writers.push_back(std::move(wr));
      }
      double value = 0;
      for (int i = 0; i < 200; ++i) {  // run i goes to writer i % 4, with 3 steps
        Writer& w = *writers[static_cast<size_t>(i % 4)];
        for (int64_t step = 0; step < 3; ++step) {
          ASSERT_OK(w.Append(run_id(i), "y", step, ++value));
          model[{run_id(i).ToString(), step}] = value;
        }
        if (rng() % 8 == 0) ASSERT_OK(w.Commit());
      }
      for (auto& w : writers) ASSERT_OK(w->Commit());
      if (variant == 1) {  // run 6 belongs to rank 2; rank 1 writes it again, later
        ASSERT_OK(writers[1]->Append(6, "y", 2, ++value));  // its last step: pieces touch
        model[{"6", 2}] = value;
      }
      for (auto& w : writers) ASSERT_OK(w->Close());
    }
    if (variant == 2) {
      ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.writer_id = "resumed"}));
      ASSERT_OK(w->Resume(9, 1));
      ASSERT_OK(w->Close());
      model.erase({"9", 1});
      model.erase({"9", 2});
    }
    ExpectScanMatches(**store->Refresh(), "y", model, variant == 0 || variant == 3);
  }
}

// A sweep's status as run_experiments writes it: each commit holds a chunk
// of hashed experiment ids, each logged "running" then "done" (a key twice in
// one block); later commits run some experiments again (their runs in two
// blocks), and a resume marker hides some records. The blocks are resolved
// one at a time: only the records of the runs that several blocks hold are
// sorted together, and every record resolves as the model says.
TEST_F(StoreTest, ASweepsStatusResolvesBlockByBlock) {
  std::mt19937_64 rng(testing::TestSeed());  // TestSeed prints it
  // 1: a resume marker; 2: two experiments at a time, their records
  // interleaved (a run's rows are no longer one piece of its block).
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE("variant " + std::to_string(variant));
    fs::remove_all(StorePath());
    auto store = Open();
    std::map<std::pair<std::string, int64_t>, double> model;
    const int n = 3000;
    size_t retried = 0;
    {
      std::vector<std::unique_ptr<Writer>> writers;
      for (int k = 0; k < 2; ++k) {
        ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.writer_id = "worker" + std::to_string(k)}));
        writers.push_back(std::move(w));
      }
      double value = 0;
      auto log = [&](Writer& w, const std::string& run, int64_t step) {
        ASSERT_OK(w.Append(run, "state", step, ++value));
        model[{run, step}] = value;
      };
      for (int i = 0; i < n; i += 2) {
        Writer& w = *writers[static_cast<size_t>(i / 2 % 2)];
        // "running", "done" (the same key, a later row), then step 1: an
        // experiment at a time, or (variant 2) two at once, interleaved.
        const int64_t steps[] = {0, 0, 1};
        if (variant == 2) {
          for (int64_t step : steps) {
            log(w, HashedId(i), step);
            log(w, HashedId(i + 1), step);
          }
        } else {
          for (int r : {i, i + 1}) {
            for (int64_t step : steps) log(w, HashedId(r), step);
          }
        }
        if (rng() % 20 == 0) ASSERT_OK(w.Commit());
      }
      for (auto& w : writers) ASSERT_OK(w->Commit());
      for (int i = 0; i < n; i += 97, ++retried) {  // run again, by the other worker
        log(*writers[static_cast<size_t>((i / 2 + 1) % 2)], HashedId(i), 0);
      }
      for (auto& w : writers) ASSERT_OK(w->Close());
    }
    if (variant == 1) {
      ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.writer_id = "resumed"}));
      ASSERT_OK(w->Resume(HashedId(5), 1));
      ASSERT_OK(w->Close());
      model.erase({HashedId(5), 1});
    }
    ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
    ExpectScanMatches(*snap, "state", model, /*whole=*/false);
    const auto& impl = static_cast<const SnapshotImpl&>(*snap);
    // The retried runs' records only: three in the first block, one in the
    // second.
    EXPECT_EQ(impl.records_sorted_across_blocks(), 4 * retried);
    for (int i = 0; i < n; i += 211) {
      ASSERT_OK_AND_ASSIGN(Value v, snap->Get(HashedId(i), "state", 0));
      EXPECT_EQ(v.scalar<double>(), (model[{HashedId(i), 0}]));
    }
  }
}

TEST_F(StoreTest, AppendBatchMatchesSingleAppends) {
  auto store = Open();
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
  std::vector<RunRef> runs;
  std::vector<int64_t> steps;
  std::vector<double> vals(1000 * 3);
  for (int i = 0; i < 1000; ++i) {
    runs.push_back(RunRef(int64_t{i}));
    steps.push_back(i % 10);
    for (int j = 0; j < 3; ++j) vals[i * 3 + j] = i + j * 0.1;
  }
  std::vector<int64_t> shape{1000, 3};
  ASSERT_OK(w->AppendBatch(runs, "v", steps, ValueRef::Array<double>(vals.data(), shape)));
  std::vector<int64_t> bad_shape{999, 3};
  EXPECT_THAT(w->AppendBatch(runs, "v", steps, ValueRef::Array<double>(vals.data(), bad_shape)),
              StatusIsWith(StatusCode::kInvalidArgument, "first dimension of 1000"));
  ASSERT_OK(w->Close());
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  ASSERT_OK_AND_ASSIGN(Value v, snap->Get(500, "v", 0));
  EXPECT_EQ(v.shape(), (std::vector<int64_t>{3}));
  EXPECT_EQ(v.as<double>()[2], 500.2);
}

}  // namespace
}  // namespace runstore
