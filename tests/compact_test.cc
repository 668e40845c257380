// Compaction (docs/design.md#compaction): what readers see does not change by
// one record, whatever the workload, whoever writes or reads meanwhile, and
// wherever a crash stops it.
//
// Every test compares dumps of the whole store -- every record of every
// series (reserved ones included) through Scan, each key read again through
// Get (and GetLazy), the series with their counts, the runs -- taken before
// and after. A dump fails on a key a scan returns twice.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "format/format.h"
#include "format/replaces.h"
#include "format/segment_writer.h"
#include "runstore/env.h"
#include "runstore/store.h"
#include "testing/fault_injection_env.h"
#include "testing/test_util.h"

namespace runstore {
namespace {

using ::runstore::testing::Contents;
using ::runstore::testing::KeyString;
using ::runstore::testing::MappedSegmentKib;
using ::runstore::testing::RecordKey;
using ::runstore::testing::RecordValue;
using ::runstore::testing::RecordValueAt;
using ::runstore::testing::StatusIs;
using ::runstore::testing::StatusIsWith;
using ::runstore::testing::TempDir;
using ::runstore::testing::TestSeed;

// ---------------------------------------------------------------------------
// Dumps.

struct Dump {
  Contents records;
  std::vector<std::string> series;  // "name dtype count"
  std::vector<RunId> runs;
  friend bool operator==(const Dump&, const Dump&) = default;
};

RecordValue FromValue(const Value& v) {
  return RecordValue{v.dtype(), v.shape(), std::string(v.data(), v.nbytes())};
}

// Fails the test (and says where) on anything a snapshot cannot read or
// returns twice.
Dump DumpSnapshot(const Snapshot& snap, bool with_gets = true) {
  Dump d;
  auto series = snap.ListSeries(/*include_reserved=*/true);
  EXPECT_TRUE(series.ok()) << series.status().ToString();
  if (!series.ok()) return d;
  for (const SeriesInfo& info : *series) {
    d.series.push_back(info.name + " " + std::to_string(static_cast<int>(info.dtype)) + " " +
                       std::to_string(info.count));
    auto scanner = snap.Scan(info.name);
    EXPECT_TRUE(scanner.ok()) << scanner.status().ToString();
    if (!scanner.ok()) return d;
    ScanBatch b;
    uint64_t n = 0;
    while (true) {
      auto more = (*scanner)->Next(&b);
      EXPECT_TRUE(more.ok()) << more.status().ToString();
      if (!more.ok() || !*more) break;
      for (size_t i = 0; i < b.count; ++i, ++n) {
        RecordKey k{info.name, b.run(i), b.steps[i]};
        const bool fresh = d.records.emplace(k, RecordValueAt(b, i)).second;
        EXPECT_TRUE(fresh) << "scan returned " << KeyString(k) << " twice";
      }
    }
    EXPECT_EQ(n, info.count) << info.name;
  }
  if (with_gets) {
    // Every key through Get, or a sample of a large store's (Get of a key
    // whose blocks overlap costs a search of them).
    const size_t stride = d.records.size() > 20000 ? 101 : 1;
    size_t i = 0, j = 0;
    for (const auto& [k, v] : d.records) {
      if (j++ % stride != 0) continue;
      auto got = snap.Get(k.run, k.series, k.step);
      EXPECT_TRUE(got.ok()) << KeyString(k) << ": " << got.status().ToString();
      if (got.ok()) {
        EXPECT_TRUE(FromValue(*got) == v) << KeyString(k);
      }
      if (i++ % 7 == 0) {
        auto lazy = snap.GetLazy(k.run, k.series, k.step);
        EXPECT_TRUE(lazy.ok()) << KeyString(k);
        if (lazy.ok()) {
          EXPECT_OK(lazy->CheckAll());
          EXPECT_TRUE(FromValue(lazy->value()) == v) << KeyString(k);
        }
      }
    }
  }
  auto runs = snap.ListRuns();
  EXPECT_TRUE(runs.ok());
  if (runs.ok()) d.runs = *runs;
  return d;
}

Dump DumpStore(const std::string& path, Env* env = nullptr) {
  StoreOptions o;
  o.env = env;
  o.read_only = true;
  auto store = Store::Open(path, o);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!store.ok()) return {};
  return DumpSnapshot(*(*store)->GetSnapshot());
}

// Says which keys differ, at most a few.
std::string Diff(const Dump& a, const Dump& b) {
  std::string out;
  int shown = 0;
  for (const auto& [k, v] : a.records) {
    auto it = b.records.find(k);
    if (it == b.records.end()) {
      if (shown++ < 5) out += " missing " + KeyString(k);
    } else if (!(it->second == v)) {
      if (shown++ < 5) out += " changed " + KeyString(k);
    }
  }
  for (const auto& [k, v] : b.records) {
    if (!a.records.contains(k) && shown++ < 5) out += " added " + KeyString(k);
  }
  if (a.series != b.series) out += " (series differ)";
  if (a.runs != b.runs) out += " (runs differ)";
  return out;
}

#define EXPECT_SAME_DUMP(a, b) EXPECT_TRUE((a) == (b)) << Diff((a), (b))

size_t CountFiles(Env* env, const std::string& path, const std::string& suffix) {
  auto c = env->GetChildren(path + "/segments");
  if (!c.ok()) return 0;
  return std::count_if(c->begin(), c->end(),
                       [&](const std::string& n) { return n.ends_with(suffix); });
}

CompactOptions TestOptions() {
  CompactOptions o;
  o.memory_bytes = 16 << 20;
  o.lease_refresh_s = 0.02;
  o.lease_expiry_s = 0.1;
  return o;
}

// ---------------------------------------------------------------------------
// The workload: several writers overwrite each other's keys over many
// commits and small segments, with resume markers, fixed- and variable-shape
// series, strings, hashed string run ids or integer ids.

struct WorkloadOptions {
  uint64_t seed = 1;
  bool string_runs = true;
  int writers = 3;
  int commits = 12;  // per writer
  int records_per_commit = 30;
  int runs = 12;
  int steps = 10;
  bool large_values = false;
};

std::string HashedRun(int i) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx",
                static_cast<unsigned long long>((i + 1) * 0x9e3779b97f4a7c15ULL));
  return buf;
}

Status WriteWorkload(Store* store, const WorkloadOptions& w, const std::string& prefix = "w") {
  std::mt19937_64 rng(w.seed);
  std::vector<std::unique_ptr<Writer>> writers(w.writers);
  auto open = [&](int i) -> Status {
    WriterOptions o;
    o.writer_id = prefix + std::to_string(i);
    o.buffer_bytes = 1 << 20;
    o.segment_bytes = 1 << 16;
    o.block_bytes = 4096;
    RUNSTORE_ASSIGN_OR_RETURN(writers[i], store->NewWriter(o));
    SeriesOptions var;
    var.dtype = DType::kInt32;
    var.variable_shape = true;
    return writers[i]->DefineSeries("var", var);
  };
  for (int i = 0; i < w.writers; ++i) RUNSTORE_RETURN_IF_ERROR(open(i));
  for (int c = 0; c < w.commits; ++c) {
    for (int i = 0; i < w.writers; ++i) {
      Writer& wr = *writers[i];
      for (int r = 0; r < w.records_per_commit; ++r) {
        const int ri = static_cast<int>(rng() % w.runs);
        const std::string srun = HashedRun(ri);
        const RunRef run = w.string_runs ? RunRef(srun) : RunRef(int64_t{ri * 1000003 % 7919});
        const int64_t step = static_cast<int64_t>(rng() % w.steps);
        switch (rng() % 5) {
          case 0: {
            const double v = static_cast<double>(rng() % 1000) / 7;
            RUNSTORE_RETURN_IF_ERROR(wr.Append(run, "loss", step, v));
            break;
          }
          case 1: {
            const float v[3] = {float(rng() % 100), float(c), float(i)};
            const int64_t shape[1] = {3};
            RUNSTORE_RETURN_IF_ERROR(wr.Append(run, "vec", step, ValueRef::Array(v, shape)));
            break;
          }
          case 2: {
            std::vector<int32_t> v(1 + rng() % 6, static_cast<int32_t>(rng()));
            const int64_t shape[2] = {1, static_cast<int64_t>(v.size())};
            RUNSTORE_RETURN_IF_ERROR(wr.Append(run, "var", step, ValueRef::Array(v.data(), shape)));
            break;
          }
          case 3: {
            const std::string s =
                "note " + std::to_string(rng() % 100000) + " by " + std::to_string(i);
            RUNSTORE_RETURN_IF_ERROR(wr.Append(run, "note", step, ValueRef::String(s)));
            break;
          }
          default:
            if (rng() % 6 == 0) {
              RUNSTORE_RETURN_IF_ERROR(wr.Resume(run, static_cast<int64_t>(rng() % w.steps)));
            } else {
              const int64_t v = static_cast<int64_t>(rng());
              RUNSTORE_RETURN_IF_ERROR(wr.Append(run, "count", step, v));
            }
        }
      }
      if (w.large_values && rng() % 4 == 0) {
        std::vector<double> big((1 << 20) / 8 + 5, double(c * 10 + i));
        const int64_t shape[1] = {static_cast<int64_t>(big.size())};
        RUNSTORE_RETURN_IF_ERROR(
            wr.Append(w.string_runs ? RunRef(HashedRun(0)) : RunRef(int64_t{0}), "big",
                      static_cast<int64_t>(rng() % 3), ValueRef::Array(big.data(), shape)));
      }
      RUNSTORE_RETURN_IF_ERROR(wr.Commit());
      // Many small sealed segments: a writer life every few commits.
      if (c % 3 == 2) {
        RUNSTORE_RETURN_IF_ERROR(wr.Close());
        RUNSTORE_RETURN_IF_ERROR(open(i));
      }
    }
  }
  for (auto& wr : writers) RUNSTORE_RETURN_IF_ERROR(wr->Close());
  return Status::OK();
}

Result<std::unique_ptr<Store>> OpenStore(const std::string& path, Env* env = nullptr) {
  StoreOptions o;
  o.env = env;
  return Store::Open(path, o);
}

// ---------------------------------------------------------------------------

class CompactContentTest : public ::testing::TestWithParam<bool> {};

TEST_P(CompactContentTest, RandomizedWorkloadReadsTheSameAfterCompaction) {
  const uint64_t seed = TestSeed();
  for (int round = 0; round < 3; ++round) {
    TempDir dir;
    WorkloadOptions w;
    w.seed = seed + round;
    w.string_runs = GetParam();
    w.large_values = round == 1;
    std::printf("[ seed     ] RUNSTORE_SEED=%llu round %d string_runs=%d\n",
                static_cast<unsigned long long>(seed), round, int(w.string_runs));
    ASSERT_OK_AND_ASSIGN(auto store, OpenStore(dir.path()));
    ASSERT_OK(WriteWorkload(store.get(), w));
    const Dump before = DumpStore(dir.path());
    ASSERT_GT(before.records.size(), 100u);
    const size_t segments_before = store->Refresh().value()->ListSegments().size();

    CompactReport report;
    ASSERT_OK(store->Compact(TestOptions(), &report));
    EXPECT_EQ(report.inputs.size(), segments_before);
    EXPECT_EQ(report.outputs.size(), 1u);
    EXPECT_EQ(report.output_records, before.records.size() + 0u * report.input_records)
        << "every visible record once, and nothing else";
    EXPECT_SAME_DUMP(before, DumpStore(dir.path()));
    ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
    EXPECT_EQ(snap->ListSegments().size(), 1u);
    EXPECT_SAME_DUMP(before, DumpSnapshot(*snap));

    // More writes overwriting the same keys, then a compaction of the
    // compacted segment with them (a chain).
    WorkloadOptions more = w;
    more.seed = seed + 100 + round;
    more.commits = 4;
    ASSERT_OK(WriteWorkload(store.get(), more));
    const Dump before2 = DumpStore(dir.path());
    EXPECT_FALSE(before2 == before);
    ASSERT_OK(store->Compact(TestOptions(), &report));
    EXPECT_GE(report.inputs.size(), 2u);
    EXPECT_SAME_DUMP(before2, DumpStore(dir.path()));
    EXPECT_EQ(CountFiles(Env::Default(), dir.path(), ".tmp"), 0u);
    EXPECT_EQ(CountFiles(Env::Default(), dir.path(), ".claim"), 0u);
    EXPECT_EQ(CountFiles(Env::Default(), dir.path(), ".lease"), 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(RunIds, CompactContentTest, ::testing::Values(true, false),
                         [](const auto& info) {
                           return info.param ? "HashedStrings" : "Integers";
                         });

TEST(CompactTest, OutputIsSortedBySeriesRunAndStep) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore(dir.path()));
  WorkloadOptions w;
  ASSERT_OK(WriteWorkload(store.get(), w));
  ASSERT_OK(store->Compact(TestOptions(), nullptr));
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  // A single segment whose blocks are each sorted (the scan of a series
  // returns its keys in order).
  ASSERT_EQ(snap->ListSegments().size(), 1u);
  for (const std::string name : {"loss", "note", "var", "~resume"}) {
    ASSERT_OK_AND_ASSIGN(auto scanner, snap->Scan(name));
    ScanBatch b;
    std::vector<std::pair<RunId, int64_t>> keys;
    while (true) {
      ASSERT_OK_AND_ASSIGN(bool more, scanner->Next(&b));
      if (!more) break;
      for (size_t i = 0; i < b.count; ++i) keys.emplace_back(b.run(i), b.steps[i]);
    }
    EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end())) << name;
  }
}

TEST(CompactTest, ManyRecordsAreSortedInSeveralPassesWithinTheMemoryBound) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore(dir.path()));
  // 300,000 scalar records with hashed run ids: their keys take more than a
  // quarter of 16 MiB, so the merge cuts the series into key ranges.
  for (int part = 0; part < 6; ++part) {
    WriterOptions o;
    o.writer_id = "bulk";
    ASSERT_OK_AND_ASSIGN(auto wr, store->NewWriter(o));
    std::vector<std::string> run_strings;
    std::vector<RunRef> runs;
    std::vector<int64_t> steps;
    std::vector<double> values;
    for (int i = 0; i < 50000; ++i) run_strings.push_back(HashedRun(i % 5000 + part * 2500));
    for (int i = 0; i < 50000; ++i) {
      runs.emplace_back(run_strings[i]);
      steps.push_back(i / 5000);
      values.push_back(part * 1e6 + i);
    }
    const int64_t shape[1] = {50000};
    ASSERT_OK(wr->AppendBatch(runs, "x", steps, ValueRef::Array(values.data(), shape)));
    ASSERT_OK(wr->Close());
  }
  const Dump before = DumpStore(dir.path());
  CompactReport report;
  // Progress counts every stored record once, over all the passes.
  CompactOptions options = TestOptions();
  std::vector<std::pair<uint64_t, uint64_t>> progress;
  options.progress = [&](uint64_t done, uint64_t total) { progress.emplace_back(done, total); };
  ASSERT_OK(store->Compact(options, &report));
  EXPECT_EQ(report.inputs.size(), 6u);
  ASSERT_GE(progress.size(), 300000u / (64 << 10));
  for (size_t i = 0; i < progress.size(); ++i) {
    EXPECT_EQ(progress[i].second, 300000u);
    if (i > 0) {
      EXPECT_GE(progress[i].first, progress[i - 1].first);
    }
  }
  EXPECT_EQ(progress.back().first, 300000u);
  EXPECT_EQ(report.output_records, before.records.size());
  EXPECT_LT(report.output_records, 300000u) << "the parts overwrite each other's keys";
  EXPECT_SAME_DUMP(before, DumpStore(dir.path()));
}

TEST(CompactTest, TheMergeKeepsTheInputsMappedPagesWithinAQuarterOfItsMemory) {
  // 64 inputs of 16 values of 64 KiB, 64 MiB: the merge releases the pages
  // it mapped every 4 MiB read (16 MiB of memory). It once forgot the block
  // being read when a release came, and that block, cached and read again,
  // stayed mapped: a block per release, 16 MiB by the end.
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore(dir.path()));
  std::vector<double> value(8192);
  const int64_t shape[1] = {8192};
  for (int seg = 0; seg < 64; ++seg) {
    WriterOptions o;
    o.writer_id = "w" + std::to_string(seg);
    ASSERT_OK_AND_ASSIGN(auto wr, store->NewWriter(o));
    for (int i = 0; i < 16; ++i) {
      std::fill(value.begin(), value.end(), seg * 100.0 + i);
      ASSERT_OK(wr->Append(RunRef(int64_t{seg}), "v", i, ValueRef::Array(value.data(), shape)));
    }
    ASSERT_OK(wr->Close());
  }
  const Dump before = DumpStore(dir.path());
  CompactOptions options = TestOptions();
  long mapped_at_end = -1;
  options.progress = [&](uint64_t done, uint64_t total) {
    if (done == total) mapped_at_end = MappedSegmentKib(dir.path());
  };
  CompactReport report;
  ASSERT_OK(store->Compact(options, &report));
  EXPECT_EQ(report.inputs.size(), 64u);
  std::printf("input pages mapped at the end of the merge: %ld KiB (memory 16 MiB)\n",
              mapped_at_end);
  ASSERT_GE(mapped_at_end, 0);
  EXPECT_LE(mapped_at_end, 6 << 10) << "a quarter of 16 MiB, and the windows of one block";
  EXPECT_SAME_DUMP(before, DumpStore(dir.path()));
}

TEST(CompactTest, FiltersAndDryRun) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore(dir.path()));
  ASSERT_OK(WriteWorkload(store.get(), WorkloadOptions{}));
  const auto segs = store->Refresh().value()->ListSegments();
  CompactOptions o = TestOptions();
  o.dry_run = true;
  CompactReport report;
  ASSERT_OK(store->Compact(o, &report));
  EXPECT_TRUE(report.dry_run);
  EXPECT_EQ(report.inputs.size(), segs.size());
  EXPECT_TRUE(report.outputs.empty());
  EXPECT_EQ(store->Refresh().value()->ListSegments().size(), segs.size())
      << "a dry run writes nothing";
  o.older_than_s = 3600;
  ASSERT_OK(store->Compact(o, &report));
  EXPECT_TRUE(report.inputs.empty()) << "every segment is younger than an hour";
  o.older_than_s = 0;
  uint64_t median = 0;
  {
    std::vector<uint64_t> sizes;
    for (const auto& s : segs) sizes.push_back(s.file_bytes);
    std::sort(sizes.begin(), sizes.end());
    median = sizes[sizes.size() / 2];
  }
  o.smaller_than_bytes = median;
  ASSERT_OK(store->Compact(o, &report));
  for (const std::string& in : report.inputs) {
    auto it =
        std::find_if(segs.begin(), segs.end(), [&](const SegmentInfo& s) { return s.file == in; });
    ASSERT_NE(it, segs.end());
    EXPECT_LT(it->file_bytes, median);
  }
  const Dump before = DumpStore(dir.path());
  o.dry_run = false;
  ASSERT_OK(store->Compact(o, &report));
  EXPECT_SAME_DUMP(before, DumpStore(dir.path()));
}

// An open segment of a live writer that shares runs with the candidates and
// has commits between theirs: the members it would be reordered against are
// left out, and what readers see stays the same as the writer goes on.
TEST(CompactTest, OpenSegmentSharingRunsKeepsItsPlaceInCommitOrder) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore(dir.path()));
  WriterOptions oa, ob;
  oa.writer_id = "a";
  ob.writer_id = "b";
  ASSERT_OK_AND_ASSIGN(auto a, store->NewWriter(oa));
  ASSERT_OK(a->Append(int64_t{1}, "x", 0, 1.0));
  ASSERT_OK(a->Append(int64_t{2}, "x", 0, 1.0));
  ASSERT_OK(a->Close());  // a-1: runs 1, 2
  ASSERT_OK_AND_ASSIGN(auto b, store->NewWriter(ob));
  ASSERT_OK(b->Append(int64_t{1}, "x", 0, 2.0));  // overwrites a-1's (1, x, 0)
  ASSERT_OK(b->Commit());                         // b-1 stays open
  ASSERT_OK_AND_ASSIGN(a, store->NewWriter(oa));
  ASSERT_OK(a->Append(int64_t{1}, "x", 1, 3.0));
  ASSERT_OK(a->Resume(int64_t{2}, 0));  // hides (2, x, 0) of a-1
  ASSERT_OK(a->Close());                // a-2: after b's commit
  ASSERT_OK_AND_ASSIGN(a, store->NewWriter(oa));
  ASSERT_OK(a->Append(int64_t{3}, "x", 0, 4.0));
  ASSERT_OK(a->Close());  // a-3: run 3 only
  const Dump before = DumpStore(dir.path());
  ASSERT_EQ(before.records.at(RecordKey{"x", RunId(int64_t{1}), 0}).bytes,
            std::string(reinterpret_cast<const char*>(&(const double&)2.0), 8));

  // Inputs removed at once: the second compaction below may merge the first
  // one's part again (a part whose inputs are retained is not merged).
  CompactOptions o = TestOptions();
  o.retain_inputs_s = 0;
  CompactReport report;
  ASSERT_OK(store->Compact(o, &report));
  // Merged at a-2's time, a-1's records would come after b's commit: b's
  // value of (1, x, 0) would lose. So a-1 stays out.
  EXPECT_THAT(report.excluded, ::testing::Contains("segments/a-00000001.rss"));
  EXPECT_THAT(report.inputs, ::testing::Not(::testing::Contains("segments/a-00000001.rss")));
  EXPECT_SAME_DUMP(before, DumpStore(dir.path()));

  // The live writer goes on: still the same as without compaction.
  ASSERT_OK(b->Append(int64_t{2}, "x", 0, 5.0));
  ASSERT_OK(b->Close());
  const Dump after_b = DumpStore(dir.path());
  EXPECT_EQ(after_b.records.at(RecordKey{"x", RunId(int64_t{2}), 0}).bytes,
            std::string(reinterpret_cast<const char*>(&(const double&)5.0), 8));
  ASSERT_OK(store->Compact(o, &report));
  EXPECT_GE(report.inputs.size(), 2u);
  EXPECT_SAME_DUMP(after_b, DumpStore(dir.path()));
}

// Live writers append (new steps of the same runs and runs of their own,
// with resume markers) while compactions run and readers refresh: every
// snapshot holds the records written before, exactly, and at the end the
// store holds those and the live writers' own, as they model them.
TEST(CompactTest, LiveWritersAndReadersDuringCompaction) {
  const uint64_t seed = TestSeed();
  std::printf("[ seed     ] RUNSTORE_SEED=%llu\n", static_cast<unsigned long long>(seed));
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore(dir.path()));
  WorkloadOptions w;
  w.seed = seed;
  ASSERT_OK(WriteWorkload(store.get(), w));
  const Dump initial = DumpStore(dir.path());
  std::atomic<bool> stop{false};
  std::vector<Contents> models(2);
  std::vector<Status> writer_status(2);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed * 31 + t);
      WriterOptions o;
      o.writer_id = "live" + std::to_string(t);
      o.segment_bytes = 1 << 16;
      auto wr = store->NewWriter(o);
      if (!wr.ok()) {
        writer_status[t] = wr.status();
        return;
      }
      Contents& model = models[t];
      for (int c = 0; !stop.load() || c < 10; ++c) {
        for (int r = 0; r < 20; ++r) {
          // Shared runs at steps no one else writes (each thread its own
          // range), so that the model of each thread is exact; resume
          // markers only on runs of its own.
          const bool shared = rng() % 2;
          const std::string run = shared
                                      ? HashedRun(static_cast<int>(rng() % w.runs))
                                      : "own" + std::to_string(t) + "-" + std::to_string(rng() % 5);
          const int64_t step = 1000 + 100 * t + static_cast<int64_t>(rng() % 50);
          const double v = static_cast<double>(rng() % 100000);
          Status s = (*wr)->Append(run, "loss", step, v);
          if (!s.ok()) {
            writer_status[t] = s;
            return;
          }
          model[RecordKey{"loss", RunId(run), step}] =
              RecordValue{DType::kFloat64, {}, std::string(reinterpret_cast<const char*>(&v), 8)};
          if (!shared && rng() % 20 == 0) {
            const int64_t from = 1000 + 100 * t + static_cast<int64_t>(rng() % 50);
            s = (*wr)->Resume(run, from);
            if (!s.ok()) {
              writer_status[t] = s;
              return;
            }
            std::erase_if(model, [&](const auto& kv) {
              return kv.first.run == RunId(run) && kv.first.step >= from &&
                     kv.first.series == "loss";
            });
            model[RecordKey{"~resume", RunId(run), from}] = RecordValue{
                DType::kInt64, {}, std::string(reinterpret_cast<const char*>(&from), 8)};
          }
        }
        Status s = (*wr)->Commit();
        if (!s.ok()) {
          writer_status[t] = s;
          return;
        }
      }
      writer_status[t] = (*wr)->Close();
    });
  }
  std::atomic<uint64_t> snapshots_checked{0};
  std::thread reader([&] {
    auto rs = Store::Open(dir.path(), {.read_only = true});
    ASSERT_OK(rs);
    while (!stop.load()) {
      auto snap = (*rs)->Refresh();
      ASSERT_OK(snap);
      const Dump d = DumpSnapshot(**snap, /*with_gets=*/false);
      // The records written before: every one, unchanged. (A '~resume' key
      // of a live writer may share a run; only initial keys are compared.)
      for (const auto& [k, v] : initial.records) {
        if (k.series == "~resume" && d.records.contains(k) && !(d.records.at(k) == v)) continue;
        auto it = d.records.find(k);
        ASSERT_TRUE(it != d.records.end()) << "snapshot lost " << KeyString(k);
        ASSERT_TRUE(it->second == v) << "snapshot changed " << KeyString(k);
      }
      ++snapshots_checked;
    }
  });
  int compactions = 0;
  for (int i = 0; i < 4; ++i) {
    CompactReport report;
    ASSERT_OK(store->Compact(TestOptions(), &report));
    compactions += !report.outputs.empty();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop = true;
  for (auto& t : threads) t.join();
  reader.join();
  for (const Status& s : writer_status) ASSERT_OK(s);
  EXPECT_GT(compactions, 0);
  Contents expected = initial.records;
  for (const Contents& m : models) {
    for (const auto& [k, v] : m) expected[k] = v;
  }
  ASSERT_OK(store->Compact(TestOptions(), nullptr));
  const Dump final_dump = DumpStore(dir.path());
  size_t mismatched = 0;
  for (const auto& [k, v] : expected) {
    auto it = final_dump.records.find(k);
    if (it == final_dump.records.end() || !(it->second == v)) {
      if (++mismatched < 5) ADD_FAILURE() << "final store differs at " << KeyString(k);
    }
  }
  EXPECT_EQ(mismatched, 0u);
  EXPECT_EQ(final_dump.records.size(), expected.size());
  std::printf("[ figures  ] %d compactions with output, %llu snapshots checked meanwhile\n",
              compactions, static_cast<unsigned long long>(snapshots_checked.load()));
}

TEST(CompactTest, TwoCompactionsAtOnceLeaveTheContentUnchanged) {
  const uint64_t seed = TestSeed();
  std::printf("[ seed     ] RUNSTORE_SEED=%llu\n", static_cast<unsigned long long>(seed));
  for (int round = 0; round < 3; ++round) {
    TempDir dir;
    ASSERT_OK_AND_ASSIGN(auto s1, OpenStore(dir.path()));
    WorkloadOptions w;
    w.seed = seed + round;
    w.string_runs = round % 2 == 0;
    ASSERT_OK(WriteWorkload(s1.get(), w));
    ASSERT_OK_AND_ASSIGN(auto s2, OpenStore(dir.path()));
    const Dump before = DumpStore(dir.path());
    Status r1, r2;
    CompactReport c1, c2;
    std::thread t1([&] { r1 = s1->Compact(TestOptions(), &c1); });
    std::thread t2([&] { r2 = s2->Compact(TestOptions(), &c2); });
    t1.join();
    t2.join();
    ASSERT_OK(r1);
    ASSERT_OK(r2);
    // Claims keep their inputs apart.
    for (const std::string& in : c1.inputs) {
      EXPECT_THAT(c2.inputs, ::testing::Not(::testing::Contains(in)));
    }
    EXPECT_SAME_DUMP(before, DumpStore(dir.path()));
    ASSERT_OK(s1->Compact(TestOptions(), nullptr));
    EXPECT_SAME_DUMP(before, DumpStore(dir.path()));
  }
}

// Two published compactions over overlapping inputs (what only a takeover
// of a stalled compaction's claims can make): readers keep the one whose
// writer id sorts first and leave the other out whole; with every input
// still there the content is the same whichever stands; the next compaction
// removes the loser.
TEST(CompactTest, OverlappingCompactionsResolveToTheFirstByName) {
  TempDir a, b, c;
  namespace fs = std::filesystem;
  const auto copy = fs::copy_options::recursive | fs::copy_options::overwrite_existing;
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore(a.path()));
  ASSERT_OK(WriteWorkload(store.get(), WorkloadOptions{}, "p"));
  fs::copy(a.path(), c.path(), copy);  // c: the first phase only
  WorkloadOptions later;
  later.seed = 7;
  later.commits = 6;
  ASSERT_OK(WriteWorkload(store.get(), later, "q"));
  fs::copy(a.path(), b.path(), copy);  // b: both phases
  const Dump before = DumpStore(a.path());
  CompactReport rb, rc;
  ASSERT_OK_AND_ASSIGN(auto sb, OpenStore(b.path()));
  ASSERT_OK(sb->Compact(TestOptions(), &rb));
  ASSERT_OK_AND_ASSIGN(auto sc, OpenStore(c.path()));
  ASSERT_OK(sc->Compact(TestOptions(), &rc));
  ASSERT_EQ(rb.outputs.size(), 1u);
  ASSERT_EQ(rc.outputs.size(), 1u);
  ASSERT_LT(rc.inputs.size(), rb.inputs.size());
  // Both into a, whose inputs are all still there: their replaced sets
  // intersect in the first phase's segments.
  fs::copy_file(b.path() + "/" + rb.outputs[0], a.path() + "/" + rb.outputs[0]);
  fs::copy_file(c.path() + "/" + rc.outputs[0], a.path() + "/" + rc.outputs[0]);
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  const std::string first = std::min(rb.outputs[0], rc.outputs[0]);
  const std::string second = std::max(rb.outputs[0], rc.outputs[0]);
  std::set<std::string> files;
  for (const auto& s : snap->ListSegments()) files.insert(s.file);
  EXPECT_TRUE(files.contains(first));
  EXPECT_FALSE(files.contains(second));
  EXPECT_EQ(files.size(), first == rb.outputs[0] ? 1u : 1u + rb.inputs.size() - rc.inputs.size());
  EXPECT_SAME_DUMP(before, DumpSnapshot(*snap));
  ASSERT_OK(store->Compact(TestOptions(), nullptr));
  EXPECT_FALSE(fs::exists(a.path() + "/" + second)) << "the loser is removed";
  EXPECT_SAME_DUMP(before, DumpStore(a.path()));
}

TEST(CompactTest, ReadersOfAnOldSnapshotKeepReadingAfterTheInputsAreRemoved) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore(dir.path()));
  WorkloadOptions w;
  w.large_values = true;
  ASSERT_OK(WriteWorkload(store.get(), w));
  ASSERT_OK_AND_ASSIGN(auto reader, Store::Open(dir.path(), {.read_only = true}));
  auto old = reader->GetSnapshot();
  ASSERT_OK_AND_ASSIGN(Value held, old->Get(RunRef(HashedRun(0)), "big", 0).ok()
                                       ? old->Get(RunRef(HashedRun(0)), "big", 0)
                                       : old->Get(RunRef(HashedRun(0)), "big", 1));
  const std::string held_bytes(held.data(), held.nbytes());
  const Dump before = DumpSnapshot(*old);
  CompactOptions o = TestOptions();
  o.retain_inputs_s = 0;
  CompactReport report;
  ASSERT_OK(store->Compact(o, &report));
  EXPECT_TRUE(report.retained.empty());
  for (const std::string& in : report.inputs) {
    EXPECT_FALSE(std::filesystem::exists(dir.path() + "/" + in)) << in;
  }
  EXPECT_SAME_DUMP(before, DumpSnapshot(*old));
  EXPECT_EQ(std::string(held.data(), held.nbytes()), held_bytes);
  // Refreshing past the removal works and reads the same.
  ASSERT_OK_AND_ASSIGN(auto fresh, reader->Refresh());
  EXPECT_SAME_DUMP(before, DumpSnapshot(*fresh));
}

// With the default retention, a snapshot taken before a compaction reads
// every record after it, also from the segments it had not opened yet (the
// catalog opens sealed segments on their first read); the replaced segments
// go with a later compaction, once their replacement is older than the
// retention, and never before the parts that replace them are merged again.
TEST(CompactTest, AnOldSnapshotReadsWhatItHadNotOpenedYetWhileTheInputsAreRetained) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore(dir.path()));
  WorkloadOptions w;
  w.large_values = true;
  ASSERT_OK(WriteWorkload(store.get(), w));
  const Dump before = DumpStore(dir.path());
  ASSERT_OK_AND_ASSIGN(auto reader, Store::Open(dir.path(), {.read_only = true}));
  auto old = reader->GetSnapshot();  // nothing read through it yet
  CompactReport report;
  ASSERT_OK(store->Compact(TestOptions(), &report));  // the default retention
  ASSERT_GE(report.inputs.size(), 4u);
  EXPECT_EQ(report.retained, report.inputs);
  for (const std::string& in : report.inputs) {
    EXPECT_TRUE(std::filesystem::exists(dir.path() + "/" + in)) << in;
  }
  EXPECT_SAME_DUMP(before, DumpSnapshot(*old));
  ASSERT_OK_AND_ASSIGN(auto fresh, reader->Refresh());
  EXPECT_EQ(fresh->ListSegments().size(), report.outputs.size());
  EXPECT_SAME_DUMP(before, DumpSnapshot(*fresh));

  // New segments: a second compaction merges them, not the first one's part,
  // whose inputs are still there; it still retains the first inputs.
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK_AND_ASSIGN(auto wr, store->NewWriter({}));
    ASSERT_OK(wr->Append(int64_t{1000 + i}, "loss", 0, 1.0));
    ASSERT_OK(wr->Close());
  }
  const Dump more = DumpStore(dir.path());
  CompactReport second;
  ASSERT_OK(store->Compact(TestOptions(), &second));
  EXPECT_EQ(second.inputs.size(), 2u);
  for (const std::string& in : second.inputs) EXPECT_FALSE(in.starts_with("segments/compact."));
  EXPECT_EQ(second.retained.size(), report.inputs.size() + 2);
  EXPECT_TRUE(second.removed_leftovers.empty());
  EXPECT_SAME_DUMP(more, DumpStore(dir.path()));

  // Past the retention: removed, and then the two parts merge into one.
  CompactOptions soon = TestOptions();
  soon.retain_inputs_s = 0.001;
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CompactReport third;
  ASSERT_OK(store->Compact(soon, &third));
  EXPECT_EQ(third.removed_leftovers.size(), report.inputs.size() + 2);
  EXPECT_EQ(third.inputs.size(), 2u) << "the two compacted parts";
  EXPECT_SAME_DUMP(more, DumpStore(dir.path()));
  ASSERT_OK_AND_ASSIGN(auto last, reader->Refresh());
  EXPECT_EQ(last->ListSegments().size(), 1u);
  EXPECT_SAME_DUMP(more, DumpSnapshot(*last));
  EXPECT_SAME_DUMP(before, DumpSnapshot(*old)) << "opened everything before the removal";

  CompactOptions bad = TestOptions();
  bad.retain_inputs_s = -1;
  EXPECT_THAT(store->Compact(bad, nullptr), StatusIs(StatusCode::kInvalidArgument));
}

// Without retention, a snapshot that had not opened a replaced segment yet
// cannot read it: the read says so, and a refreshed snapshot reads it all.
TEST(CompactTest, WithoutRetentionAnOldSnapshotIsToldToRefresh) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore(dir.path()));
  ASSERT_OK(WriteWorkload(store.get(), WorkloadOptions()));
  const Dump before = DumpStore(dir.path());
  ASSERT_OK_AND_ASSIGN(auto reader, Store::Open(dir.path(), {.read_only = true}));
  auto old = reader->GetSnapshot();
  CompactOptions o = TestOptions();
  o.retain_inputs_s = 0;
  ASSERT_OK(store->Compact(o, nullptr));
  // The first read that needs a segment fails (listing the series reads the
  // resume markers' segments).
  Status first = Status::OK();
  auto series = old->ListSeries();
  if (!series.ok()) {
    first = series.status();
  } else {
    ASSERT_FALSE(series->empty());
    auto scanner = old->Scan(series->front().name);
    ScanBatch b;
    first = scanner.ok() ? scanner.value()->Next(&b).status() : scanner.status();
  }
  EXPECT_EQ(first.code(), StatusCode::kNotFound) << first.ToString();
  EXPECT_THAT(first.message(), ::testing::HasSubstr("refresh and read again"));
  ASSERT_OK_AND_ASSIGN(auto fresh, reader->Refresh());
  EXPECT_SAME_DUMP(before, DumpSnapshot(*fresh));
}

TEST(CompactTest, WritersNumberPastSegmentsCompactionRemoved) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore(dir.path()));
  WriterOptions o;
  o.writer_id = "w";
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK_AND_ASSIGN(auto wr, store->NewWriter(o));
    ASSERT_OK(wr->Append(int64_t{i}, "x", 0, 1.0));
    ASSERT_OK(wr->Close());
  }
  CompactOptions now = TestOptions();
  now.retain_inputs_s = 0;
  ASSERT_OK(store->Compact(now, nullptr));
  ASSERT_FALSE(std::filesystem::exists(dir.path() + "/segments/w-00000003.rss"));
  ASSERT_OK_AND_ASSIGN(auto wr, store->NewWriter(o));
  ASSERT_OK(wr->Append(int64_t{0}, "x", 0, 2.0));
  ASSERT_OK(wr->Close());
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/segments/w-00000004.rss"));
  const Dump d = DumpStore(dir.path());
  const double two = 2.0;
  EXPECT_EQ(d.records.at(RecordKey{"x", RunId(int64_t{0}), 0}).bytes,
            std::string(reinterpret_cast<const char*>(&two), 8));
}

// ---------------------------------------------------------------------------
// Adoption (docs/design.md#adoption): crashed writers' unsealed segments
// merged on request, and a live writer taken for crashed losing nothing it
// was told was committed.

// Runs `work` with a writer of id `id` (and `buffer_bytes`, 0: the default)
// on the store at `path` in a child process, which then dies of SIGKILL, its
// segment never sealed; `work` returns 0, or the child's exit code.
void KilledWriter(const std::string& path, const std::string& id, size_t buffer_bytes,
                  const std::function<int(Writer*)>& work) {
  std::fflush(stdout);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto store = Store::Open(path, {});
    if (!store.ok()) ::_exit(1);
    WriterOptions o;
    o.writer_id = id;
    if (buffer_bytes > 0) o.buffer_bytes = buffer_bytes;
    auto w = (*store)->NewWriter(o);
    if (!w.ok()) ::_exit(2);
    if (const int code = work(w->get()); code != 0) ::_exit(code);
    ::kill(::getpid(), SIGKILL);
    ::_exit(6);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
}

// A writer that commits records of the workload's series over keys the
// workload also wrote (and a resume marker), then dies.
void CrashedWriter(const std::string& path, const std::string& id, int seed) {
  KilledWriter(path, id, 0, [seed](Writer* w) {
    for (int i = 0; i < 20; ++i) {
      const std::string run = HashedRun((seed + i) % 12);
      if (!w->Append(RunRef(run), "loss", i % 10, 1000.0 * seed + i).ok()) return 3;
    }
    if (!w->Commit().ok()) return 4;
    return w->Resume(RunRef(HashedRun(seed % 12)), 5).ok() ? 0 : 5;
  });
}

// A writer that flushes blocks of "loss" (a small buffer) and dies before
// its first commit: its segment holds bytes no reader reads.
void WriterKilledBeforeItsFirstCommit(const std::string& path, const std::string& id) {
  KilledWriter(path, id, 1 << 16, [](Writer* w) {
    for (int i = 0; i < 60000; ++i) {
      const double v = std::sin(0.37 * i);  // flushed, not compressed away
      if (!w->Append(RunRef(HashedRun(i % 12)), "loss", i / 12, v).ok()) return 3;
    }
    return 0;
  });
}

TEST(CompactTest, AdoptingCrashedWritersSegmentsLeavesEveryRecordAsItWas) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore(dir.path()));
  ASSERT_OK(WriteWorkload(store.get(), WorkloadOptions{}));
  for (int k = 0; k < 3; ++k) {
    ASSERT_NO_FATAL_FAILURE(CrashedWriter(dir.path(), "k" + std::to_string(k), k + 1));
  }
  ASSERT_NO_FATAL_FAILURE(WriterKilledBeforeItsFirstCommit(dir.path(), "none"));
  const std::string uncommitted = dir.path() + "/segments/none-00000001.rss";
  ASSERT_GT(std::filesystem::file_size(uncommitted), 16u * 1024) << "nothing was flushed";
  const Dump before = DumpStore(dir.path());
  CompactOptions o = TestOptions();
  o.retain_inputs_s = 0;
  CompactReport plain;
  ASSERT_OK(store->Compact(o, &plain));
  EXPECT_TRUE(plain.adopted.empty());
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  int unsealed = 0;
  for (const SegmentInfo& seg : snap->ListSegments()) unsealed += seg.sealed ? 0 : 1;
  EXPECT_EQ(unsealed, 4) << "crashed writers' segments are merged only on request";
  EXPECT_SAME_DUMP(before, DumpSnapshot(*snap));

  o.adopt_unsealed = true;
  CompactReport adopted;
  ASSERT_OK(store->Compact(o, &adopted));
  EXPECT_EQ(adopted.adopted.size(), 4u);
  // The one killed before its first commit is reclaimed whole, nothing of it read.
  EXPECT_FALSE(std::filesystem::exists(uncommitted));
  ASSERT_OK_AND_ASSIGN(snap, store->Refresh());
  EXPECT_EQ(snap->ListSegments().size(), 1u);
  EXPECT_TRUE(snap->ListSegments()[0].sealed);
  EXPECT_SAME_DUMP(before, DumpSnapshot(*snap));
  EXPECT_SAME_DUMP(before, DumpStore(dir.path()));
  // A writer of a crashed id numbers past the segment compaction removed.
  WriterOptions wo;
  wo.writer_id = "k0";
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(wo));
  ASSERT_OK(w->Append(RunRef(int64_t{5}), "loss", 0, 2.0));
  ASSERT_OK(w->Close());
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/segments/k0-00000002.rss"));
}

// The caller asserted that no writer runs, and one did: the compaction read
// its segment, then it committed again. With the inputs retained, the group
// stops standing and readers read every input, the new commit included.
TEST(CompactTest, ALiveWriterTakenForCrashedKeepsEveryCommitWhileTheInputsAreRetained) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore(dir.path()));
  WorkloadOptions wl;
  wl.writers = 2;
  ASSERT_OK(WriteWorkload(store.get(), wl));
  WriterOptions wo;
  wo.writer_id = "live";
  ASSERT_OK_AND_ASSIGN(auto live, store->NewWriter(wo));
  ASSERT_OK(live->Append(RunRef(HashedRun(1)), "loss", 0, 1.0));
  ASSERT_OK(live->Commit());
  CompactOptions o = TestOptions();
  o.adopt_unsealed = true;
  CompactReport report;
  ASSERT_OK(store->Compact(o, &report));
  ASSERT_EQ(report.adopted, std::vector<std::string>{"segments/live-00000001.rss"});
  // The same key again, and a new one, after the compaction read it.
  ASSERT_OK(live->Append(RunRef(HashedRun(1)), "loss", 0, 2.0));
  ASSERT_OK(live->Append(RunRef(HashedRun(2)), "loss", 7, 3.0));
  ASSERT_OK(live->Commit());
  const Dump d = DumpStore(dir.path());
  const double two = 2.0, three = 3.0;
  EXPECT_EQ(d.records.at(RecordKey{"loss", RunId(HashedRun(1)), 0}).bytes,
            std::string(reinterpret_cast<const char*>(&two), 8));
  EXPECT_EQ(d.records.at(RecordKey{"loss", RunId(HashedRun(2)), 7}).bytes,
            std::string(reinterpret_cast<const char*>(&three), 8));
  // A later compaction removes nothing the voided group needs; the writer
  // goes on, and closes.
  CompactOptions later = TestOptions();
  later.retain_inputs_s = 0;
  ASSERT_OK(store->Compact(later, nullptr));
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/segments/live-00000001.rss"));
  ASSERT_OK(live->Close());
  EXPECT_SAME_DUMP(d, DumpStore(dir.path()));
}

// The same with the inputs removed at once: the writer's next commit fails
// (its file has no name any more) instead of being acknowledged into a file
// no one can read, and what it had committed is in the compacted segment.
TEST(CompactTest, ALiveWriterTakenForCrashedFailsInsteadOfLosingACommit) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore(dir.path()));
  WorkloadOptions wl;
  wl.writers = 2;
  ASSERT_OK(WriteWorkload(store.get(), wl));
  WriterOptions wo;
  wo.writer_id = "live";
  ASSERT_OK_AND_ASSIGN(auto live, store->NewWriter(wo));
  ASSERT_OK(live->Append(RunRef(HashedRun(1)), "loss", 0, 1.0));
  ASSERT_OK(live->Commit());
  const Dump before = DumpStore(dir.path());
  CompactOptions o = TestOptions();
  o.adopt_unsealed = true;
  o.retain_inputs_s = 0;
  ASSERT_OK(store->Compact(o, nullptr));
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/segments/live-00000001.rss"));
  ASSERT_OK(live->Append(RunRef(HashedRun(1)), "loss", 0, 2.0));
  EXPECT_THAT(live->Commit(),
              StatusIsWith(StatusCode::kIOError, "removed while it was being written"));
  (void)live->Close();
  EXPECT_SAME_DUMP(before, DumpStore(dir.path()));
}

TEST(ReplacesSectionTest, TheAdoptedSectionRoundTripsAndRefusesEveryCut) {
  const std::vector<format::AdoptedSegment> adopted = {{{"a", 1, 5}, 4096},
                                                       {{"bb.c-d_e", 9, -1}, 128}};
  const std::string bytes = format::EncodeAdopted(adopted);
  std::vector<format::AdoptedSegment> got;
  ASSERT_OK(format::DecodeAdopted(bytes, "segments/x-00000001.rss", &got));
  EXPECT_EQ(got, adopted);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THAT(format::DecodeAdopted(bytes.substr(0, n), "segments/x-00000001.rss", &got),
                StatusIsWith(StatusCode::kCorruption, "adopted"))
        << "cut at " << n;
  }
  std::string huge = bytes;
  huge[15] = '\x7f';  // 2^63-ish entries in a few bytes
  EXPECT_THAT(format::DecodeAdopted(huge, "f", &got), StatusIs(StatusCode::kCorruption));
  std::vector<format::AdoptedSegment> unsorted = adopted;
  std::swap(unsorted[0], unsorted[1]);
  EXPECT_THAT(format::DecodeAdopted(format::EncodeAdopted(unsorted), "f", &got),
              StatusIs(StatusCode::kCorruption));
}

// A part whose footer is damaged while the inputs it replaces are still there
// (a crash between publishing and removing them). Read as a crashed writer's
// segment it would lose its replaces section and serve its records beside the
// inputs; it must be a damaged segment instead, and with kSkip the store reads
// as the inputs alone, which is exactly what it held before.
TEST(CompactTest, AnUnsealedCompactedSegmentIsDamagedNeverRecovered) {
  namespace fs = std::filesystem;
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore(dir.path()));
  WorkloadOptions w;
  ASSERT_OK(WriteWorkload(store.get(), w));
  const Dump before = DumpStore(dir.path());
  const std::string kept = dir.path() + "/kept";
  fs::create_directory(kept);
  for (const auto& e : fs::directory_iterator(dir.path() + "/segments")) {
    fs::copy_file(e.path(), kept + "/" + e.path().filename().string());
  }
  CompactReport report;
  ASSERT_OK(store->Compact(TestOptions(), &report));
  ASSERT_EQ(report.outputs.size(), 1u);
  store.reset();
  for (const auto& e : fs::directory_iterator(kept)) {
    const fs::path back = dir.path() + "/segments/" + e.path().filename().string();
    if (!fs::exists(back)) fs::copy_file(e.path(), back);
  }
  EXPECT_SAME_DUMP(before, DumpStore(dir.path())) << "the inputs back beside their part";
  const std::string part = dir.path() + "/" + report.outputs[0];
  ASSERT_OK_AND_ASSIGN(const std::string bytes, ReadFileToString(Env::Default(), part));
  format::Trailer t;
  ASSERT_TRUE(format::DecodeTrailer(
      std::string_view(bytes).substr(bytes.size() - format::kTrailerSize), &t));
  // Bytes of the footer's header and of its payload (the index) flipped, and
  // the footer cut; the padding between them carries nothing.
  std::vector<uint64_t> offsets;
  for (uint64_t off = 0; off < 56; off += 7) offsets.push_back(t.footer_offset + off);
  const uint64_t payload = format::PayloadOffset(t.footer_offset, 56);
  for (uint64_t off = 0; off < 64; off += 9) offsets.push_back(payload + off);
  std::vector<std::string> damaged;
  for (uint64_t off : offsets) {
    std::string b = bytes;
    b[off] ^= 0x20;
    damaged.push_back(b);
  }
  damaged.push_back(bytes.substr(0, t.footer_offset + 16) +
                    bytes.substr(bytes.size() - format::kTrailerSize));
  for (size_t i = 0; i < damaged.size(); ++i) {
    SCOPED_TRACE("damage case " + std::to_string(i));
    ASSERT_OK(WriteFileAtomically(Env::Default(), part, damaged[i]));
    EXPECT_THAT(OpenStore(dir.path()), StatusIsWith(StatusCode::kCorruption, report.outputs[0]));
    StoreOptions skip;
    skip.on_damaged = OnDamaged::kSkip;
    skip.read_only = true;
    ASSERT_OK_AND_ASSIGN(auto s, Store::Open(dir.path(), skip));
    auto snap = s->GetSnapshot();
    ASSERT_EQ(snap->DamagedSegments().size(), 1u);
    EXPECT_EQ(snap->DamagedSegments()[0].file, report.outputs[0]);
    EXPECT_SAME_DUMP(before, DumpSnapshot(*snap));
  }
}

// ---------------------------------------------------------------------------
// Hostile bytes.

TEST(ReplacesSectionTest, RoundTripsAndRefusesEveryCutAndHostileCount) {
  format::Replaces r;
  r.part_count = 2;
  r.segments = {{"a", 1, 5}, {"a", 2, 7}, {"bb.c-d_e", 9, -1}};
  const std::string bytes = format::EncodeReplaces(r);
  format::Replaces got;
  ASSERT_OK(format::DecodeReplaces(bytes, "segments/x-00000001.rss", &got));
  EXPECT_EQ(got.part_count, 2u);
  EXPECT_EQ(got.segments, r.segments);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THAT(format::DecodeReplaces(bytes.substr(0, n), "segments/x-00000001.rss", &got),
                StatusIsWith(StatusCode::kCorruption, "segments/x-00000001.rss"))
        << "cut at " << n;
  }
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string flipped = bytes;
    flipped[i] ^= 0x5a;
    Status s = format::DecodeReplaces(flipped, "f", &got);
    EXPECT_TRUE(s.ok() || s.code() == StatusCode::kCorruption) << s.ToString();
  }
  std::string huge = bytes;
  huge[8] = '\xff';
  huge[15] = '\x7f';  // 2^63-ish entries in a few bytes
  EXPECT_THAT(format::DecodeReplaces(huge, "f", &got), StatusIs(StatusCode::kCorruption));
  format::Replaces unsorted = r;
  std::swap(unsorted.segments[0], unsorted.segments[1]);
  EXPECT_THAT(format::DecodeReplaces(format::EncodeReplaces(unsorted), "f", &got),
              StatusIs(StatusCode::kCorruption));
  format::Replaces bad_id = r;
  bad_id.segments[0].writer_id = "a/b";
  EXPECT_THAT(format::DecodeReplaces(format::EncodeReplaces(bad_id), "f", &got),
              StatusIs(StatusCode::kCorruption));
}

// The one segment WriteCompactedSegment writes.
constexpr char kCompactedSegment[] = "segments/compact.evil-00000001.rss";

struct FooterSection {
  uint32_t tag;
  uint32_t flags;
  std::string bytes;
};

// Seals, in the store at `store_path`, a segment of one empty commit under
// the compacted writer id "compact.evil" with these footer sections: a
// compaction's output as a hostile file would have it.
void WriteCompactedSegment(const std::string& store_path,
                           const std::vector<FooterSection>& sections) {
  format::SegmentHeader h;
  h.version = format::kSegmentFormatVersion;
  h.created_ns = 1;
  h.sequence = 1;
  h.writer_id = "compact.evil";
  ASSERT_OK_AND_ASSIGN(auto w, format::SegmentWriter::Create(
                                   Env::Default(), store_path + "/" + kCompactedSegment, h));
  ASSERT_OK(w->Commit(5));
  for (const FooterSection& f : sections) w->AddFooterSection(f.tag, f.flags, f.bytes);
  ASSERT_OK(w->Seal());
}

TEST(ReplacesSectionTest, AStoreWithAHostileSectionReportsTheFile) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore(dir.path()));
  {
    WriterOptions o;
    o.writer_id = "w";
    ASSERT_OK_AND_ASSIGN(auto wr, store->NewWriter(o));
    ASSERT_OK(wr->Append(int64_t{1}, "x", 0, 1.0));
    ASSERT_OK(wr->Close());
  }
  std::string hostile = format::EncodeReplaces(format::Replaces{1, {{"w", 1, 1}}});
  hostile[8] = '\x40';  // 64 entries in 40 bytes
  ASSERT_NO_FATAL_FAILURE(
      WriteCompactedSegment(dir.path(), {{format::kFooterSectionReplaces, 0, hostile}}));
  EXPECT_THAT(OpenStore(dir.path()),
              StatusIsWith(StatusCode::kCorruption, "segments/compact.evil-00000001.rss"));
  StoreOptions skip;
  skip.on_damaged = OnDamaged::kSkip;
  ASSERT_OK_AND_ASSIGN(auto s, Store::Open(dir.path(), skip));
  ASSERT_EQ(s->GetSnapshot()->DamagedSegments().size(), 1u);
  EXPECT_EQ(s->GetSnapshot()->DamagedSegments()[0].file, "segments/compact.evil-00000001.rss");
  EXPECT_TRUE(s->GetSnapshot()->Get(int64_t{1}, "x", 0).ok()) << "the named segment stays";
  EXPECT_THAT(s->Compact(TestOptions(), nullptr), StatusIs(StatusCode::kFailedPrecondition));
}

// The replaced-earlier section (tag 3) is optional and readers never use it:
// a hostile one leaves the segment's records readable, verify reports it by
// file and byte, and compaction refuses the segment as an input rather than
// drop the segments it names.
TEST(ReplacesSectionTest, AHostileReplacedEarlierSectionIsReportedAndNeverCarriedOn) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore(dir.path()));
  std::string hostile = format::EncodeReplaces(format::Replaces{1, {{"gone", 2, 1}}});
  hostile[8] = '\x40';  // 64 entries in 40 bytes
  ASSERT_NO_FATAL_FAILURE(WriteCompactedSegment(
      dir.path(),
      {{format::kFooterSectionReplaces, 0,
        format::EncodeReplaces(format::Replaces{1, {{"gone", 1, 1}}})},
       {format::kFooterSectionReplacedEarlier, format::kFooterSectionOptional, hostile}}));
  const std::string path = dir.path() + "/" + kCompactedSegment;
  {
    WriterOptions o;
    o.writer_id = "w";
    ASSERT_OK_AND_ASSIGN(auto wr, store->NewWriter(o));
    ASSERT_OK(wr->Append(int64_t{1}, "x", 0, 1.0));
    ASSERT_OK(wr->Close());
  }
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  EXPECT_TRUE(snap->DamagedSegments().empty());
  EXPECT_TRUE(snap->Get(int64_t{1}, "x", 0).ok());
  const VerifyReport report = snap->VerifyAll();
  ASSERT_EQ(report.problems.size(), 1u);
  EXPECT_THAT(report.problems[0],
              StatusIsWith(StatusCode::kCorruption,
                           "segments/compact.evil-00000001.rss: footer section 'replaced earlier' "
                           "(tag 3), byte 8: 64 entries cannot fit"));
  EXPECT_THAT(store->Compact(TestOptions(), nullptr),
              StatusIsWith(StatusCode::kCorruption, "'replaced earlier'"));
  EXPECT_TRUE(std::filesystem::exists(path)) << "the input stays";
  ASSERT_OK_AND_ASSIGN(snap, store->Refresh());
  EXPECT_TRUE(snap->Get(int64_t{1}, "x", 0).ok());
}

// ---------------------------------------------------------------------------
// Crashes: after every file operation of a compaction, power lost with the
// unsynced data dropped, every committed record reads back exactly once and
// nothing else; then a compaction completes.

constexpr char kMemStore[] = "/store";

void BuildCrashStore(Env* env) {
  ASSERT_OK_AND_ASSIGN(auto store, OpenStore(kMemStore, env));
  WorkloadOptions w;
  w.writers = 2;
  w.commits = 6;
  w.records_per_commit = 15;
  ASSERT_OK(WriteWorkload(store.get(), w));
}

// Two writers that commit over the workload's keys and then crash (every
// operation after their commits refused, power lost): their segments stay
// unsealed, their commits durable.
void AddCrashedWriters(FaultInjectionEnv* env) {
  {
    ASSERT_OK_AND_ASSIGN(auto store, OpenStore(kMemStore, env));
    std::vector<std::unique_ptr<Writer>> writers;
    for (int k = 0; k < 2; ++k) {
      WriterOptions o;
      o.writer_id = "crashed" + std::to_string(k);
      ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(o));
      for (int i = 0; i < 12; ++i) {
        ASSERT_OK(w->Append(RunRef(HashedRun((k + i) % 12)), "loss", i % 10, 100.0 * k + i));
      }
      ASSERT_OK(w->Commit());
      ASSERT_OK(w->Resume(RunRef(HashedRun(k)), 4));
      writers.push_back(std::move(w));
    }
    // And one that flushed blocks but never committed.
    WriterOptions o;
    o.writer_id = "uncommitted";
    o.buffer_bytes = 1 << 16;
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(o));
    for (int i = 0; i < 30000; ++i) {
      ASSERT_OK(w->Append(RunRef(HashedRun(i % 12)), "loss", i / 12, std::sin(0.37 * i)));
    }
    writers.push_back(std::move(w));
    env->CrashAfter(0);
    for (auto& w : writers) (void)w->Close();
  }
  ASSERT_OK(env->SimulatePowerLoss(DropMode::kDropUnsynced, 0));
}

// What the crashed compaction does: `first`, run to completion before the
// counted one (none when its retention is negative), and `counted`, crashed
// after each of its file operations.
struct CrashCase {
  const char* test_name;
  const char* name;
  double first_retain_s;  // < 0: no first compaction
  double counted_retain_s;
  bool adopt = false;  // crashed writers' segments too (adopt_unsealed)
};

class CompactCrashTest : public ::testing::TestWithParam<CrashCase> {};

TEST_P(CompactCrashTest, CrashAfterEveryOperationLosesAndDuplicatesNothing) {
  const CrashCase& c = GetParam();
  CompactOptions o = TestOptions();
  o.lease_refresh_s = 0;  // no thread: the same operations every run
  o.lease_expiry_s = 0;
  o.adopt_unsealed = c.adopt;
  CompactOptions first = o;
  first.retain_inputs_s = c.first_retain_s;
  o.retain_inputs_s = c.counted_retain_s;
  auto build = [&](FaultInjectionEnv* env) {
    BuildCrashStore(env);
    if (c.adopt) AddCrashedWriters(env);
    if (c.first_retain_s >= 0) {
      auto store = OpenStore(kMemStore, env);
      ASSERT_TRUE(store.ok());
      CompactReport report;
      ASSERT_OK((*store)->Compact(first, &report));
      ASSERT_FALSE(report.retained.empty());
    }
  };
  uint64_t operations = 0;
  Dump expected;
  {
    auto mem = NewMemEnv();
    FaultInjectionEnv env(mem.get());
    ASSERT_NO_FATAL_FAILURE(build(&env));
    expected = DumpStore(kMemStore, &env);
    ASSERT_GT(expected.records.size(), 50u);
    ASSERT_OK_AND_ASSIGN(auto store, OpenStore(kMemStore, &env));
    env.ResetCounters();
    CompactReport report;
    ASSERT_OK(store->Compact(o, &report));
    operations = env.operation_count();
    if (c.first_retain_s < 0) {
      ASSERT_GE(report.inputs.size(), 4u);
      EXPECT_EQ(report.adopted.size(), c.adopt ? 3u : 0u);  // one with no commit
    } else {
      ASSERT_GE(report.removed_leftovers.size(), 4u) << "the counted compaction removes";
    }
    EXPECT_EQ(report.retained.empty(), c.counted_retain_s == 0);
    EXPECT_SAME_DUMP(expected, DumpStore(kMemStore, &env));
  }
  std::printf("[ figures  ] %s: %llu crash points (file operations of one compaction)\n", c.name,
              static_cast<unsigned long long>(operations));
  ASSERT_GT(operations, c.first_retain_s < 0 ? 20u : 4u);
  int published = 0;
  for (uint64_t k = 0; k < operations; ++k) {
    SCOPED_TRACE("crash after operation " + std::to_string(k) + " of " +
                 std::to_string(operations));
    auto mem = NewMemEnv();
    FaultInjectionEnv env(mem.get());
    ASSERT_NO_FATAL_FAILURE(build(&env));
    const Dump original = DumpStore(kMemStore, &env);
    {
      ASSERT_OK_AND_ASSIGN(auto store, OpenStore(kMemStore, &env));
      env.ResetCounters();
      env.CrashAfter(k);
      Status s = store->Compact(o, nullptr);
      EXPECT_FALSE(s.ok()) << "the crash must surface";
    }
    ASSERT_OK(env.SimulatePowerLoss(DropMode::kDropUnsynced, k));
    const Dump after_crash = DumpStore(kMemStore, &env);
    EXPECT_SAME_DUMP(original, after_crash);
    ASSERT_OK_AND_ASSIGN(auto store, OpenStore(kMemStore, &env));
    for (const auto& seg : store->GetSnapshot()->ListSegments()) {
      published += seg.writer_id.starts_with("compact.") ? 1 : 0;
    }
    CompactOptions finish = o;
    finish.retain_inputs_s = 0;
    CompactReport report;
    ASSERT_OK(store->Compact(finish, &report));
    EXPECT_SAME_DUMP(original, DumpStore(kMemStore, &env));
    EXPECT_EQ(CountFiles(&env, kMemStore, ".tmp"), 0u);
    EXPECT_EQ(CountFiles(&env, kMemStore, ".claim"), 0u);
    EXPECT_EQ(CountFiles(&env, kMemStore, ".lease"), 0u);
    ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
    EXPECT_EQ(snap->ListSegments().size(), 1u);
    EXPECT_EQ(CountFiles(&env, kMemStore, ".rss"), 1u) << "replaced segments left behind";
  }
  std::printf("[ figures  ] %s: %d crash points left the compacted segment published\n", c.name,
              published);
}

std::string CrashCaseName(const ::testing::TestParamInfo<CrashCase>& info) {
  return info.param.test_name;
}

INSTANTIATE_TEST_SUITE_P(
    Retention, CompactCrashTest,
    ::testing::Values(
        CrashCase{"RemovedAtOnce", "inputs removed at once", -1, 0},
        CrashCase{"Retained", "inputs retained (the default)", -1, 300},
        CrashCase{"RemovedLater", "retained inputs removed by a later compaction", 300, 0},
        CrashCase{"AdoptedRemovedAtOnce",
                  "crashed writers' segments adopted, inputs removed at once", -1, 0, true},
        CrashCase{"AdoptedRemovedLater", "adopted inputs removed by a later compaction", 300, 0,
                  true}),
    CrashCaseName);

}  // namespace
}  // namespace runstore
