// A refresh in proportion to what changed (docs/design.md#refresh): the
// snapshot a refresh extends by new and grown segments is the snapshot a
// fresh open builds over every segment, record for record and in the same
// order; and it places the blocks of the change, sharing every series the
// change does not touch with the snapshot before.
#include <random>
#include <set>
#include <thread>

#include "runstore/store.h"
#include "store/read/snapshot.h"
#include "testing/test_util.h"

namespace runstore {
namespace {

using read::SnapshotImpl;
using ::runstore::testing::HashedId;
using ::runstore::testing::RecordKey;
using ::runstore::testing::RecordValueAt;
using ::runstore::testing::TempDir;

const SnapshotImpl& Impl(const std::shared_ptr<const Snapshot>& s) {
  return static_cast<const SnapshotImpl&>(*s);
}

// One writer's segment, sealed, of one record.
Status WriteSegment(Store& store, const RunRef& run, std::string_view name, int64_t step,
                    double value) {
  RUNSTORE_ASSIGN_OR_RETURN(auto w, store.NewWriter({}));
  RUNSTORE_RETURN_IF_ERROR(w->Append(run, name, step, value));
  return w->Close();
}

// Everything a reader can ask of a snapshot, as text: its series with their
// types, counts and order of definition, its segments, its runs, and every
// series' records in scan order (the order is part of what must not change).
std::string Describe(const Snapshot& snap) {
  std::string out;
  auto series = snap.ListSeries(/*include_reserved=*/true);
  if (!series.ok()) return "ListSeries: " + series.status().ToString();
  for (const SeriesInfo& s : *series) {
    out += "series " + s.name + " " + std::string(DTypeName(s.dtype)) + " rank " +
           std::to_string(s.shape.size()) + (s.variable_shape ? " variable" : "") + " count " +
           std::to_string(s.count) + " first " + std::to_string(s.first_logged) + " bytes " +
           std::to_string(s.stored_bytes) + "\n";
    auto scanner = snap.Scan(s.name);
    if (!scanner.ok()) return out + "Scan: " + scanner.status().ToString();
    ScanBatch batch;
    while (true) {
      auto more = (*scanner)->Next(&batch);
      if (!more.ok()) return out + "Next: " + more.status().ToString();
      if (!*more) break;
      for (size_t i = 0; i < batch.count; ++i) {
        const auto v = RecordValueAt(batch, i);
        out += "  " + batch.run(i).ToString() + " " + std::to_string(batch.steps[i]) + " " +
               std::to_string(std::hash<std::string>()(v.bytes)) + "\n";
      }
    }
  }
  // Point lookups, which search the markers where a scan resolves blocks.
  for (const SeriesInfo& s : *series) {
    if (s.name.starts_with('~')) continue;
    for (int i = 0; i < 40; i += 3) {
      const RunId run = i % 2 ? RunId(HashedId(i)) : RunId(int64_t{i});
      for (int64_t step = 0; step < 4; ++step) {
        auto v = snap.Get(RunRef(run), s.name, step);
        out += "get " + s.name + " " + run.ToString() + " " + std::to_string(step) + " " +
               (v.ok() ? std::to_string(std::hash<std::string_view>()(v->str()))
                       : std::string(StatusCodeName(v.status().code()))) +
               "\n";
      }
    }
  }
  for (const SegmentInfo& seg : snap.ListSegments()) {
    out += "segment " + seg.file + " " + std::to_string(seg.commits) + " commits " +
           std::to_string(seg.blocks) + " blocks\n";
  }
  auto runs = snap.ListRuns();
  out += "runs " + (runs.ok() ? std::to_string(runs->size()) : runs.status().ToString()) + "\n";
  auto count = snap.CountRuns();
  out += "counted " + (count.ok() ? std::to_string(*count) : count.status().ToString()) + "\n";
  return out;
}

// Fails the opening of segment files for reading while `refuse` is set, as a
// process out of descriptors would.
class RefusingEnv final : public EnvWrapper {
 public:
  using EnvWrapper::EnvWrapper;
  Result<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(const std::string& p) override {
    if (refuse && p.find("/segments/") != std::string::npos) {
      return Status::ResourceExhausted(p + ": open: Too many open files", EMFILE);
    }
    return EnvWrapper::NewRandomAccessFile(p);
  }
  std::atomic<bool> refuse{false};
};

// A series whose keys could not be resolved for want of a resource is not
// carried into the next snapshot with its failure: a refresh that finds
// something new makes it anew, and it reads once the resource is back.
TEST(RefreshTest, ASeriesThatFailedToResolveIsNotSharedWithItsFailure) {
  TempDir dir;
  RefusingEnv env(Env::Default());
  StoreOptions o;
  o.env = &env;
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir.path() + "/s", o));
  for (int i = 0; i < 4; ++i) {  // keys written twice: resolving them reads the blocks
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
    for (int run = 0; run < 10; ++run) ASSERT_OK(w->Append(int64_t{run}, "x", 0, double(i)));
    ASSERT_OK(w->Close());
  }
  ASSERT_OK_AND_ASSIGN(auto before, store->Refresh());
  env.refuse = true;
  EXPECT_THAT(before->GetSeriesInfo("x"),
              ::runstore::testing::StatusIs(StatusCode::kResourceExhausted));
  env.refuse = false;
  ASSERT_OK(WriteSegment(*store, int64_t{0}, "y", 0, 1.0));
  ASSERT_OK_AND_ASSIGN(auto after, store->Refresh());
  EXPECT_FALSE(store->last_refresh().rebuilt);
  EXPECT_FALSE(Impl(after).SharesSeriesWith(Impl(before), "x"));
  ASSERT_OK_AND_ASSIGN(auto x, after->GetSeriesInfo("x"));
  EXPECT_EQ(x.count, 10u);
  EXPECT_EQ(after->Get(int64_t{3}, "x", 0)->scalar<double>(), 3.0);
}

TEST(RefreshTest, ARefreshPlacesTheBlocksOfWhatChangedAndSharesTheSeriesItDidNotTouch) {
  TempDir dir;
  auto store = Store::Open(dir.path() + "/s", {});
  ASSERT_OK(store.status());
  for (int i = 0; i < 300; ++i) {
    ASSERT_OK_AND_ASSIGN(auto w, (*store)->NewWriter({}));
    ASSERT_OK(w->Append(RunRef(HashedId(i)), "loss", 0, 0.5 * i));
    ASSERT_OK(w->Append(RunRef(HashedId(i)), "grad", 0, float{1.0f * i}));
    ASSERT_OK(w->Close());
  }
  ASSERT_OK_AND_ASSIGN(auto before, (*store)->Refresh());
  EXPECT_EQ(Impl(before).blocks_placed(), 600u) << "opened: every block";
  ASSERT_OK_AND_ASSIGN(auto loss, before->GetSeriesInfo("loss"));  // resolves its keys
  EXPECT_EQ(loss.count, 300u);

  // One segment of a series the store did not have.
  ASSERT_OK(WriteSegment(**store, RunRef(HashedId(7)), "reward", 0, 1.0));
  ASSERT_OK_AND_ASSIGN(auto after, (*store)->Refresh());
  EXPECT_FALSE((*store)->last_refresh().rebuilt);
  EXPECT_EQ(Impl(after).blocks_placed(), 1u) << "the new segment's block, nothing else";
  EXPECT_TRUE(Impl(after).SharesSeriesWith(Impl(before), "loss"));
  EXPECT_TRUE(Impl(after).SharesSeriesWith(Impl(before), "grad"));
  EXPECT_EQ(after->Get(RunRef(HashedId(7)), "reward", 0)->scalar<double>(), 1.0);

  // One segment of "loss": that series is made again (its blocks copied,
  // its keys resolved on its next read); "grad" and "reward" are shared.
  ASSERT_OK(WriteSegment(**store, RunRef(HashedId(3)), "loss", 0, 9.0));  // overwrites
  ASSERT_OK_AND_ASSIGN(auto again, (*store)->Refresh());
  EXPECT_FALSE((*store)->last_refresh().rebuilt);
  EXPECT_EQ(Impl(again).blocks_placed(), 301u) << "loss's 300 blocks copied and the new one";
  EXPECT_FALSE(Impl(again).SharesSeriesWith(Impl(after), "loss"));
  EXPECT_TRUE(Impl(again).SharesSeriesWith(Impl(after), "grad"));
  EXPECT_TRUE(Impl(again).SharesSeriesWith(Impl(after), "reward"));
  EXPECT_EQ(again->Get(RunRef(HashedId(3)), "loss", 0)->scalar<double>(), 9.0);
  EXPECT_EQ(after->Get(RunRef(HashedId(3)), "loss", 0)->scalar<double>(), 1.5)
      << "the snapshot before keeps what it had";
  EXPECT_EQ(again->GetSeriesInfo("loss")->count, 300u);

  // An open segment is read again at each refresh: while it does not grow,
  // the snapshot stands; when it does, only its series are made again.
  ASSERT_OK_AND_ASSIGN(auto live, (*store)->NewWriter({}));
  ASSERT_OK(live->Append(RunRef(HashedId(1000)), "reward", 0, 2.0));
  ASSERT_OK(live->Commit());
  ASSERT_OK_AND_ASSIGN(auto grown, (*store)->Refresh());
  EXPECT_FALSE((*store)->last_refresh().rebuilt);
  EXPECT_EQ(Impl(grown).blocks_placed(), 2u) << "reward's block before and the new one";
  ASSERT_OK_AND_ASSIGN(auto still, (*store)->Refresh());
  EXPECT_EQ(still.get(), grown.get()) << "the open segment did not grow";
  ASSERT_OK(live->Append(RunRef(HashedId(1001)), "reward", 0, 3.0));
  ASSERT_OK(live->Commit());
  ASSERT_OK_AND_ASSIGN(auto again2, (*store)->Refresh());
  EXPECT_FALSE((*store)->last_refresh().rebuilt);
  EXPECT_EQ(Impl(again2).blocks_placed(), 3u) << "the open segment's two blocks, read again";
  EXPECT_TRUE(Impl(again2).SharesSeriesWith(Impl(grown), "loss"));
  EXPECT_EQ(again2->Get(RunRef(HashedId(1001)), "reward", 0)->scalar<double>(), 3.0);
  ASSERT_OK(live->Close());
  ASSERT_OK_AND_ASSIGN(again, (*store)->Refresh());

  // A store opened afresh is the same store.
  auto fresh = Store::Open(dir.path() + "/s", {});
  ASSERT_OK(fresh.status());
  EXPECT_EQ(Describe(*again), Describe(*(*fresh)->GetSnapshot()));
}

// A run resumed after a preemption: the writer that resumes it writes a
// marker into its open segment and goes on committing there. Each refresh
// extends the snapshot, makes again the series that hold the resumed run
// (their records past the marker hidden) and shares the others.
TEST(RefreshTest, AResumedRunMakesAgainOnlyTheSeriesThatHoldIt) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir.path() + "/s", {}));
  {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
    for (int64_t step = 0; step < 10; ++step) {
      ASSERT_OK(w->Append(int64_t{1}, "loss", step, double(step)));
      ASSERT_OK(w->Append(int64_t{2}, "acc", step, double(step)));
    }
    ASSERT_OK(w->Close());
  }
  ASSERT_OK_AND_ASSIGN(auto before, store->Refresh());
  ASSERT_EQ(before->GetSeriesInfo("loss")->count, 10u);
  ASSERT_EQ(before->GetSeriesInfo("acc")->count, 10u);

  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
  ASSERT_OK(w->Resume(int64_t{1}, 5));  // steps 5.. of run 1 are lost; it goes on from 5
  ASSERT_OK(w->Append(int64_t{1}, "loss", 5, 50.0));
  ASSERT_OK(w->Commit());
  ASSERT_OK_AND_ASSIGN(auto resumed, store->Refresh());
  EXPECT_FALSE(store->last_refresh().rebuilt);
  EXPECT_TRUE(Impl(resumed).SharesSeriesWith(Impl(before), "acc")) << "run 2 was not resumed";
  EXPECT_FALSE(Impl(resumed).SharesSeriesWith(Impl(before), "loss"));
  EXPECT_EQ(resumed->GetSeriesInfo("loss")->count, 6u) << "steps 0-4 and the new 5";
  EXPECT_EQ(resumed->Get(int64_t{1}, "loss", 5)->scalar<double>(), 50.0);
  EXPECT_EQ(resumed->Get(int64_t{1}, "loss", 7).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(before->Get(int64_t{1}, "loss", 7)->scalar<double>(), 7.0)
      << "the snapshot before keeps what it had";

  // The open segment that holds the marker grows: read again, extended.
  ASSERT_OK(w->Append(int64_t{1}, "loss", 6, 60.0));
  ASSERT_OK(w->Commit());
  ASSERT_OK_AND_ASSIGN(auto grown, store->Refresh());
  EXPECT_FALSE(store->last_refresh().rebuilt);
  EXPECT_TRUE(Impl(grown).SharesSeriesWith(Impl(before), "acc"));
  EXPECT_EQ(grown->GetSeriesInfo("loss")->count, 7u);
  EXPECT_EQ(grown->Get(int64_t{1}, "loss", 6)->scalar<double>(), 60.0);
  ASSERT_OK(w->Close());
  ASSERT_OK_AND_ASSIGN(auto closed, store->Refresh());
  EXPECT_FALSE(store->last_refresh().rebuilt);

  ASSERT_OK_AND_ASSIGN(auto fresh, Store::Open(dir.path() + "/s", {}));
  EXPECT_EQ(Describe(*closed), Describe(*fresh->GetSnapshot()));
}

// Random changes to a store, each followed by a refresh of one long-lived
// store (extended where it can be) and an open of a fresh one (built over
// every segment): both must describe the same snapshot. The changes: new
// writers of existing and new series, integer and hashed runs, keys written
// again, live writers whose open segments grow, two writers defining one
// series with different types at once, resume markers in sealed and in open
// segments, compaction (conflicts and compactions are changes a refresh
// builds anew).
TEST(RefreshTest, AnExtendedSnapshotIsTheSnapshotThatABuildGives) {
  const uint64_t seed = ::runstore::testing::TestSeed();
  std::mt19937_64 rng(seed);
  TempDir dir;
  const std::string path = dir.path() + "/s";
  auto opened = Store::Open(path, {});
  ASSERT_OK(opened.status());
  std::unique_ptr<Store> store = std::move(opened).value();
  std::vector<std::unique_ptr<Writer>> live;
  int extended = 0, rebuilt = 0, unchanged = 0;
  const int kRounds = 120;
  auto pick = [&](int n) { return static_cast<int>(rng() % n); };
  auto run_of = [&](int i) { return i % 2 ? RunId(HashedId(i)) : RunId(int64_t{i}); };
  for (int round = 0; round < kRounds; ++round) {
    const int action = pick(100);
    SCOPED_TRACE("seed " + std::to_string(seed) + " round " + std::to_string(round) + " action " +
                 std::to_string(action));
    if (action < 45) {  // a writer's segment: existing or new series, some keys again
      ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
      const int records = 1 + pick(20);
      const std::string name = "s" + std::to_string(pick(6 + round / 10));
      for (int r = 0; r < records; ++r) {
        ASSERT_OK(w->Append(RunRef(run_of(pick(40))), name, pick(4), double(round * 100 + r)));
      }
      if (pick(3) == 0) ASSERT_OK(w->Append(RunRef(run_of(pick(40))), "v", 0, int32_t(round)));
      ASSERT_OK(w->Close());
    } else if (action < 70) {  // a live writer commits (its open segment grows)
      if (live.empty() || pick(3) == 0) {
        ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
        live.push_back(std::move(w));
      }
      Writer& w = *live[pick(live.size())];
      for (int r = 0; r < 1 + pick(5); ++r) {
        ASSERT_OK(w.Append(RunRef(run_of(pick(40))), "live" + std::to_string(pick(2)), pick(3),
                           double(round)));
      }
      ASSERT_OK(w.Commit());
    } else if (action < 78 && !live.empty()) {  // a live writer closes (its segment sealed)
      const size_t k = pick(live.size());
      ASSERT_OK(live[k]->Close());
      live.erase(live.begin() + k);
    } else if (action < 84) {  // two writers define one new series with two types
      ASSERT_OK_AND_ASSIGN(auto a, store->NewWriter({}));
      ASSERT_OK_AND_ASSIGN(auto b, store->NewWriter({}));
      const std::string name = "t" + std::to_string(round);
      ASSERT_OK(a->Append(RunRef(run_of(1)), name, 0, 1.0));
      ASSERT_OK(b->Append(RunRef(run_of(2)), name, 0, int64_t{2}));
      ASSERT_OK(a->Close());
      ASSERT_OK(b->Close());
    } else if (action < 88) {  // a resume marker, its writer closed
      ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
      const RunId run = run_of(pick(40));
      ASSERT_OK(w->Resume(RunRef(run), pick(3)));
      ASSERT_OK(w->Append(RunRef(run), "s0", pick(3), double(round)));
      ASSERT_OK(w->Close());
    } else if (action < 92) {  // a live writer resumes a run (its open segment holds the marker)
      if (live.empty() || pick(2) == 0) {
        ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
        live.push_back(std::move(w));
      }
      Writer& w = *live[pick(live.size())];
      const RunId run = run_of(pick(40));
      ASSERT_OK(w.Resume(RunRef(run), pick(3)));
      ASSERT_OK(w.Append(RunRef(run), "live" + std::to_string(pick(2)), pick(3), double(round)));
      ASSERT_OK(w.Commit());
    } else if (action < 96) {  // compaction of the sealed segments
      CompactOptions co;
      co.retain_inputs_s = pick(2) ? 0 : 300;
      ASSERT_OK(store->Compact(co, nullptr));
    }
    ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
    const RefreshStats& st = store->last_refresh();
    if (st.rebuilt) {
      ++rebuilt;
    } else if (st.unchanged == st.segments && st.recovered == 0) {
      ++unchanged;
    } else {
      ++extended;
    }
    auto fresh = Store::Open(path, {});
    ASSERT_OK(fresh.status());
    const std::string want = Describe(*(*fresh)->GetSnapshot());
    const std::string got = Describe(*snap);
    ASSERT_EQ(want, got) << "the refreshed snapshot differs from a fresh open";
  }
  for (auto& w : live) ASSERT_OK(w->Close());
  std::printf(
      "[ figures  ] %d rounds: %d refreshes extended the snapshot, %d built it anew, "
      "%d kept it (seed %llu)\n",
      kRounds, extended, rebuilt, unchanged, static_cast<unsigned long long>(seed));
  EXPECT_GT(extended, kRounds / 4) << "most changes are new or grown segments";
  EXPECT_GT(rebuilt, 0) << "conflicts and compactions build anew";
}

// Snapshots share the series a refresh did not touch, and what their first
// reads resolve of them: readers of several snapshots at once resolve one
// shared series (its keys, its key order, its run index) while another
// thread refreshes. Every reader sees every record; under ThreadSanitizer
// (scripts/test.sh) a race on the shared entries is reported.
TEST(RefreshTest, ReadersOfSnapshotsThatShareASeriesResolveItOnceWhileTheStoreRefreshes) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir.path() + "/s", {}));
  constexpr int kSegments = 40, kRuns = 25;
  for (int i = 0; i < kSegments; ++i) {  // hashed ids, each run in two segments: keys resolved
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({}));
    for (int r = 0; r < kRuns; ++r) {
      ASSERT_OK(w->Append(RunRef(HashedId((i % 20) * kRuns + r)), "x", 0, double(i)));
    }
    ASSERT_OK(w->Close());
  }
  // How a refresh read the store, said where "x" is not shared as it should be.
  auto how = [&](int k) {
    const RefreshStats st = store->last_refresh();
    return " [" + std::to_string(k) + ": " + (st.rebuilt ? "rebuilt" : "extended") + ", segments " +
           std::to_string(st.segments) + ", unchanged " + std::to_string(st.unchanged) +
           ", recovered " + std::to_string(st.recovered) + ", from footer " +
           std::to_string(st.from_footer) + "]";
  };
  std::vector<std::shared_ptr<const Snapshot>> snaps;
  ASSERT_OK_AND_ASSIGN(auto first, store->Refresh());
  std::string refreshes = how(-1);
  snaps.push_back(first);
  for (int k = 0; k < 3; ++k) {  // three more snapshots, each a segment of another series
    ASSERT_OK(WriteSegment(*store, RunRef(HashedId(k)), "y" + std::to_string(k), 0, 1.0));
    ASSERT_OK_AND_ASSIGN(auto s, store->Refresh());
    refreshes += how(k);
    ASSERT_TRUE(Impl(s).SharesSeriesWith(Impl(first), "x")) << "refreshes:" << refreshes;
    snaps.push_back(s);
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 8; ++t) {
    readers.emplace_back([&, t] {
      const Snapshot& s = *snaps[t % snaps.size()];
      auto info = s.GetSeriesInfo("x");
      if (!info.ok() || info->count != 20 * kRuns) ++failures;
      for (int r = 0; r < 20 * kRuns; r += 7) {
        auto v = s.Get(RunRef(HashedId(r)), "x", 0);
        // Run r was written by segments r / kRuns and r / kRuns + 20: the later wins.
        if (!v.ok() || v->scalar<double>() != double(r / kRuns + 20)) ++failures;
      }
    });
  }
  std::thread refresher([&] {
    for (int k = 0; k < 5; ++k) {
      if (!WriteSegment(*store, RunRef(HashedId(k)), "z", k, 1.0).ok() || !store->Refresh().ok()) {
        ++failures;
      }
      refreshes += how(3 + k);
    }
  });
  for (std::thread& t : readers) t.join();
  refresher.join();
  EXPECT_EQ(failures.load(), 0);
  ASSERT_OK_AND_ASSIGN(auto last, store->Refresh());
  EXPECT_TRUE(Impl(last).SharesSeriesWith(Impl(first), "x")) << "refreshes:" << refreshes;
}

}  // namespace
}  // namespace runstore
