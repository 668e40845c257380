// Compaction beside staging writers (docs/design.md#compaction-and-staging):
// a segment committed in some node's staging and not yet published is
// invisible to a compactor, yet a later sync publishes it with its own
// commit times. A compaction must leave every key resolving as it would
// without it, whatever is still in staging: later-commit-wins and resume
// markers across the published and the staged segments. And where a
// staging directory and a store are not apart, nothing is ever published
// or removed.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "format/claim.h"
#include "format/format.h"
#include "runstore/store.h"
#include "runstore/sync.h"
#include "store/staging/staging.h"
#include "testing/fault_injection_env.h"
#include "testing/test_util.h"

namespace runstore {
namespace {

using ::runstore::testing::StatusIs;
using ::runstore::testing::TempDir;

// A writer whose process dies now: what it committed stays where it is (its
// open segment in staging, unsealed; its lease there, unchanged for ever),
// and nothing of its Close runs.
void Kill(FaultInjectionEnv* env, std::unique_ptr<Writer> w) {
  env->CrashAfter(0);
  w.reset();
  env->ResetCounters();
}

WriterOptions Staging(const std::string& dir, const std::string& id) {
  WriterOptions o;
  o.writer_id = id;
  o.staging_dir = dir;
  o.segment_bytes = 64 << 10;
  o.buffer_bytes = 1 << 20;
  return o;
}

WriterOptions Direct(const std::string& id) {
  WriterOptions o;
  o.writer_id = id;
  o.staging_dir = "";
  return o;
}

CompactOptions Now() {
  CompactOptions co;
  co.retain_inputs_s = 0;
  co.lease_refresh_s = 0;
  return co;
}

SyncOptions Forced() {
  SyncOptions o;
  o.force = true;  // the killed writers' leases are dead
  return o;
}

// The steps of `run` in `series` that a fresh open of the store shows, with
// their values.
std::map<int64_t, double> Steps(const std::string& path, const std::string& run,
                                const std::string& series) {
  std::map<int64_t, double> out;
  auto store = Store::Open(path, {.create_if_missing = false, .read_only = true});
  EXPECT_OK(store.status());
  if (!store.ok()) return out;
  ScanOptions so;
  so.runs = std::vector<RunId>{RunId(run)};
  auto scan = (*store)->GetSnapshot()->Scan(series, so);
  if (!scan.ok()) {
    EXPECT_THAT(scan.status(), StatusIs(StatusCode::kNotFound));
    return out;
  }
  ScanBatch b;
  while (true) {
    auto more = (*scan)->Next(&b);
    EXPECT_OK(more.status());
    if (!more.ok() || !*more) break;
    for (size_t i = 0; i < b.count; ++i) out[b.steps[i]] = b.values.as<double>()[i];
  }
  return out;
}

// The claims (placeholders with a claim record) in the store's segments/.
std::vector<std::string> Claims(const std::string& path) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(path + "/segments")) {
    const std::string name = e.path().filename().string();
    if (!name.ends_with(".rss") || e.file_size() != format::kClaimSize) continue;
    std::ifstream f(e.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (format::DecodeClaim(bytes, name)) out.push_back(name);
  }
  return out;
}

// Finding 11a of the attack round: life 0 logs steps 0..9 directly; life 1,
// restarted from a checkpoint at step 10, stages: resume(R, 10), steps
// 10..19 committed and shipped, steps 20..29 committed in its next segment,
// then it is killed. Another writer commits later, a compaction runs, then a
// sync publishes what the killed writer left. The compacted segment took the
// newest input's commit time, so the resume marker it carried moved past the
// staged commits of steps 20..29 and hid them.
TEST(CompactionBesideStagingTest, AResumeMarkerIsNeverMovedPastStagedCommitsItMustNotHide) {
  TempDir dir;
  const std::string path = dir.path() + "/store", local = dir.path() + "/local";
  FaultInjectionEnv env(Env::Default());
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {.env = &env}));
  {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(Direct("life0")));
    for (int s = 0; s < 10; ++s) ASSERT_OK(w->Append(RunRef("R"), "loss", s, 1.0 * s));
    ASSERT_OK(w->Close());
  }
  {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(Staging(local, "life1")));
    ASSERT_OK(w->Resume(RunRef("R"), 10));
    for (int s = 10; s < 20; ++s) ASSERT_OK(w->Append(RunRef("R"), "loss", s, 100.0 + s));
    ASSERT_OK(w->Commit());
    ASSERT_OK(w->WaitForShipped(w->LastTicket()));  // seals and ships segment 1
    for (int s = 20; s < 30; ++s) ASSERT_OK(w->Append(RunRef("R"), "loss", s, 100.0 + s));
    ASSERT_OK(w->Commit());
    Kill(&env, std::move(w));
  }
  {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(Direct("other")));
    ASSERT_OK(w->Append(RunRef("Q"), "loss", 0, 7.0));
    ASSERT_OK(w->Close());
  }
  ASSERT_OK(store->Refresh().status());
  CompactReport cr;
  ASSERT_OK(store->Compact(Now(), &cr));
  EXPECT_FALSE(cr.staged.empty()) << "the killed writer's claims";
  EXPECT_FALSE(cr.held_back.empty());
  SyncReport sr;
  ASSERT_OK(SyncStaging(local, path, Forced(), &sr));
  EXPECT_EQ(sr.shipped.size(), 1u);

  const auto steps = Steps(path, "R", "loss");
  ASSERT_EQ(steps.size(), 30u) << "steps 20..29 were hidden";
  for (int s = 0; s < 30; ++s) EXPECT_EQ(steps.at(s), s < 10 ? 1.0 * s : 100.0 + s) << s;
  // Once published, nothing is held back any more (the killed writer's
  // published segment is unsealed, and so never merged, and the rule of
  // commit order keeps the segments that share its run apart from it), and
  // the store reads the same.
  EXPECT_TRUE(Claims(path).empty()) << "the sync released the dead writer's claims";
  CompactReport after;
  ASSERT_OK(store->Refresh().status());
  ASSERT_OK(store->Compact(Now(), &after));
  EXPECT_TRUE(after.staged.empty());
  EXPECT_TRUE(after.held_back.empty());
  EXPECT_EQ(Steps(path, "R", "loss"), steps);
}

// Finding 11b: 1.0 written directly, 2.0 committed by a staging writer and
// still in staging, an unrelated commit, a compaction, then the staged
// segment arrives. The later commit (2.0) must win, as it would have
// without the compaction; the compacted segment had moved 1.0 after it.
TEST(CompactionBesideStagingTest, AValueOverwrittenInStagingStaysOverwrittenAfterCompaction) {
  for (const bool writer_alive : {false, true}) {
    SCOPED_TRACE(writer_alive ? "the staging writer closes after the compaction"
                              : "the staging writer is killed; a sync ships its segment");
    TempDir dir;
    const std::string path = dir.path() + "/store", local = dir.path() + "/local";
    FaultInjectionEnv env(Env::Default());
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {.env = &env}));
    {
      ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(Direct("direct")));
      ASSERT_OK(w->Append(RunRef(int64_t{1}), "x", 0, 1.0));
      ASSERT_OK(w->Close());
    }
    ASSERT_OK_AND_ASSIGN(auto staged, store->NewWriter(Staging(local, "stager")));
    ASSERT_OK(staged->Append(RunRef(int64_t{1}), "x", 0, 2.0));
    ASSERT_OK(staged->Commit());
    {
      ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(Direct("unrelated")));
      ASSERT_OK(w->Append(RunRef(int64_t{2}), "y", 0, 3.0));
      ASSERT_OK(w->Close());
    }
    ASSERT_OK(store->Refresh().status());
    CompactReport cr;
    ASSERT_OK(store->Compact(Now(), &cr));
    EXPECT_EQ(cr.staged.size(), 2u) << "the open segment's claim and the one claimed ahead";
    if (writer_alive) {
      ASSERT_OK(staged->Close());
    } else {
      Kill(&env, std::move(staged));
      SyncReport sr;
      ASSERT_OK(SyncStaging(local, path, Forced(), &sr));
    }
    ASSERT_OK_AND_ASSIGN(auto reader, Store::Open(path, {.read_only = true}));
    ASSERT_OK_AND_ASSIGN(Value v, reader->GetSnapshot()->Get(RunRef(int64_t{1}), "x", 0));
    EXPECT_EQ(v.scalar<double>(), 2.0);
    EXPECT_TRUE(Claims(path).empty());
  }
}

// What a live staging writer holds back is only what it could be ordered
// among: segments committed before its claim still compact.
TEST(CompactionBesideStagingTest, SegmentsOlderThanEveryStagedClaimStillCompact) {
  TempDir dir;
  const std::string path = dir.path() + "/store", local = dir.path() + "/local";
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {}));
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(Direct("old" + std::to_string(i))));
    ASSERT_OK(w->Append(RunRef(int64_t{i}), "x", 0, 1.0 * i));
    ASSERT_OK(w->Close());
  }
  ASSERT_OK_AND_ASSIGN(auto staged, store->NewWriter(Staging(local, "stager")));
  ASSERT_OK(staged->Append(RunRef(int64_t{0}), "x", 0, 10.0));
  ASSERT_OK(staged->Commit());
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(Direct("new" + std::to_string(i))));
    ASSERT_OK(w->Append(RunRef(int64_t{5 + i}), "x", 0, 5.0 + i));
    ASSERT_OK(w->Close());
  }
  ASSERT_OK(store->Refresh().status());
  CompactReport cr;
  ASSERT_OK(store->Compact(Now(), &cr));
  EXPECT_EQ(cr.inputs.size(), 3u);
  EXPECT_EQ(cr.held_back.size(), 2u);
  ASSERT_OK(staged->Close());
  ASSERT_OK_AND_ASSIGN(auto reader, Store::Open(path, {.read_only = true}));
  ASSERT_OK_AND_ASSIGN(Value v, reader->GetSnapshot()->Get(RunRef(int64_t{0}), "x", 0));
  EXPECT_EQ(v.scalar<double>(), 10.0);
  // Closed: its claims are gone, and nothing is held back any more.
  EXPECT_TRUE(Claims(path).empty());
  CompactReport again;
  ASSERT_OK(store->Refresh().status());
  ASSERT_OK(store->Compact(Now(), &again));
  EXPECT_TRUE(again.held_back.empty());
  EXPECT_EQ(again.inputs.size(), 4u);  // the first output, the stager's, new0, new1
}

// A placeholder is shorter than a segment header: every reader, of this
// version or an older one, takes it for an empty segment.
TEST(CompactionBesideStagingTest, AClaimReadsAsAnEmptySegment) {
  TempDir dir;
  const std::string path = dir.path() + "/store", local = dir.path() + "/local";
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {}));
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(Staging(local, "stager")));
  ASSERT_OK(w->Append(RunRef(int64_t{0}), "x", 0, 1.0));
  ASSERT_OK(w->Commit());
  const std::vector<std::string> claims = Claims(path);
  ASSERT_EQ(claims.size(), 2u);
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  size_t empty = 0;
  for (const SegmentInfo& s : snap->ListSegments()) empty += s.commits == 0;
  EXPECT_EQ(empty, 2u);
  EXPECT_TRUE(snap->DamagedSegments().empty());
  EXPECT_TRUE(snap->VerifyAll().problems.empty());
  // The record is bound to its name: a copy under another name is no claim.
  std::ifstream f(path + "/segments/" + claims[0], std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(format::DecodeClaim(bytes, claims[0]).has_value());
  EXPECT_FALSE(format::DecodeClaim(bytes, claims[1]).has_value());
  bytes[9] ^= 1;
  EXPECT_FALSE(format::DecodeClaim(bytes, claims[0]).has_value());
  EXPECT_FALSE(format::DecodeClaim("", claims[0]).has_value());
  ASSERT_OK(w->Close());
}

// ---- A crash at every file operation, then compaction, then sync.

// Life 0 of run "R" logged steps 0..19 directly (value s); life 1 stages
// from the checkpoint at step 10: Resume("R", 10), then steps 10..29 (value
// 100 + s), a commit each, its segments rolling and shipping; the machine
// loses power after its k-th file operation. Then another writer commits,
// a compaction runs, a forced sync ships what life 1 left, and a second
// compaction runs. Whatever k: steps 0..9 are life 0's; if the marker is in
// the store, no step >= 10 of life 0 shows, and every step life 1 had
// committed when the power went shows with its value; if it is not, life 0's
// steps 10..19 show and nothing of life 1 does; and no claim is left.
TEST(CompactionBesideStagingTest, PowerLossAtEveryOperationOfAResumingStagerThenCompactAndSync) {
  int problems = 0, points = 0, with_marker = 0, held_back = 0;
  auto problem = [&](const std::string& what) {
    if (problems++ < 5) ADD_FAILURE() << what;
  };
  for (const DropMode mode : {DropMode::kDropUnsynced, DropMode::kTornGarbage}) {
    bool finished = false;
    for (uint64_t k = 1; !finished && k < 20000; ++k) {
      auto mem = NewMemEnv();
      FaultInjectionEnv env(mem.get());
      ASSERT_OK(env.CreateDir("/local"));
      ASSERT_OK_AND_ASSIGN(auto store, Store::Open("/store", {.env = &env}));
      {
        ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(Direct("life0")));
        for (int s = 0; s < 20; ++s) ASSERT_OK(w->Append(RunRef("R"), "loss", s, 1.0 * s));
        ASSERT_OK(w->Close());
      }
      env.ResetCounters();
      env.CrashAfter(k);
      int acked = -1;  // steps of life 1 acknowledged: 10 .. 10 + acked - 1 (-1: no resume)
      {
        WriterOptions o = Staging("/local", "life1");
        auto w = store->NewWriter(o);
        if (w.ok() && (*w)->Resume(RunRef("R"), 10).ok()) {
          acked = 0;
          for (int s = 10; s < 30; ++s) {
            const std::string pad(9000, static_cast<char>('a' + s % 26));  // segments roll
            if (!(*w)->Append(RunRef("R"), "loss", s, 100.0 + s).ok() ||
                !(*w)->Append(RunRef("R"), "pad", s, ValueRef::Bytes(pad)).ok() ||
                !(*w)->Commit().ok()) {
              break;
            }
            ++acked;
          }
          (void)(*w)->Close();
        }
      }
      finished = !env.crashed();
      store.reset();
      ASSERT_OK(env.SimulatePowerLoss(mode, k));
      ++points;
      const std::string where = std::string(mode == DropMode::kDropUnsynced ? "dropped" : "torn") +
                                ", power lost after operation " + std::to_string(k);
      ASSERT_OK_AND_ASSIGN(store, Store::Open("/store", {.env = &env}));
      {
        ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(Direct("late")));
        ASSERT_OK(w->Append(RunRef("Q"), "loss", 0, 7.0));
        ASSERT_OK(w->Close());
      }
      CompactReport first, second;
      if (Status c = store->Compact(Now(), &first); !c.ok()) {
        problem(where + ": compaction: " + c.ToString());
        continue;
      }
      held_back += !first.held_back.empty();
      SyncOptions so = Forced();
      so.env = &env;
      if (Status y = SyncStaging("/local", "/store", so, nullptr); !y.ok()) {
        problem(where + ": sync: " + y.ToString());
        continue;
      }
      ASSERT_OK(store->Refresh().status());
      if (Status c = store->Compact(Now(), &second); !c.ok()) {
        problem(where + ": second compaction: " + c.ToString());
        continue;
      }
      if (!second.staged.empty()) problem(where + ": a claim is left: " + second.staged[0]);
      ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
      const bool marker = snap->Get(RunRef("R"), "~resume", 10).ok();
      with_marker += marker;
      if (acked >= 0 && !marker) problem(where + ": the acknowledged resume marker is gone");
      std::map<int64_t, double> steps;
      ScanOptions opts;
      opts.runs = std::vector<RunId>{RunId("R")};
      ASSERT_OK_AND_ASSIGN(auto scan, snap->Scan("loss", opts));
      ScanBatch b;
      while (true) {
        ASSERT_OK_AND_ASSIGN(bool more, scan->Next(&b));
        if (!more) break;
        for (size_t i = 0; i < b.count; ++i) steps[b.steps[i]] = b.values.as<double>()[i];
      }
      for (int s = 0; s < 30; ++s) {
        const auto it = steps.find(s);
        const std::string at = where + ": step " + std::to_string(s);
        if (s < 10) {
          if (it == steps.end() || it->second != 1.0 * s) problem(at + ": life 0's is wrong");
        } else if (!marker) {
          if (s < 20 && (it == steps.end() || it->second != 1.0 * s)) {
            problem(at + ": life 0's is gone without a resume marker");
          }
          if (s >= 20 && it != steps.end()) problem(at + ": shows without a resume marker");
        } else if (it != steps.end() && it->second != 100.0 + s) {
          problem(at + ": life 0's value shows past the resume marker");
        } else if (it == steps.end() && s < 10 + std::max(acked, 0)) {
          problem(at + ": acknowledged by life 1 and gone");
        }
      }
    }
    EXPECT_TRUE(finished);
  }
  std::printf(
      "[ figures  ] compaction beside staging: %d power losses of a resuming staging writer, each "
      "followed "
      "by a compaction, a sync and a compaction (%d with the resume marker in, %d compactions "
      "held back by claims), %d problems\n",
      points, with_marker, held_back, problems);
  EXPECT_EQ(problems, 0);
}

// ---- Staging directories and stores that are not apart (finding 2).

// Three sealed segments of a direct writer, for a store that must survive.
void ThreeSegments(Store* store) {
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(Direct("w")));
    ASSERT_OK(w->Append(RunRef(int64_t{i}), "x", 0, 1.0 * i));
    ASSERT_OK(w->Close());
  }
}

std::set<std::string> Files(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    out.insert(e.path().filename().string());
  }
  return out;
}

TEST(StagingApartTest, SyncOfAStoresOwnSegmentsIsRefusedAndRemovesNothing) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {}));
  ASSERT_NO_FATAL_FAILURE(ThreeSegments(store.get()));
  const std::set<std::string> before = Files(path + "/segments");
  std::filesystem::create_directory_symlink(path + "/segments", dir.path() + "/alias");
  std::filesystem::create_directory(path + "/segments/inner");
  std::filesystem::create_directory(dir.path() + "/outer");
  std::filesystem::create_directory_symlink(path, dir.path() + "/outer/store-link");
  int cases = 0;
  for (const std::string& staging :
       {path + "/segments", path + "/segments/", path + "//segments/.", dir.path() + "/alias", path,
        path + "/segments/inner", dir.path() + "/alias/inner", dir.path()}) {
    for (const bool force : {true, false}) {
      SyncOptions o = Forced();
      o.force = force;
      SyncReport r;
      Status s = SyncStaging(staging, path, o, &r);
      EXPECT_THAT(s, StatusIs(StatusCode::kInvalidArgument)) << staging;
      EXPECT_NE(s.message().find("apart from the store"), std::string::npos) << s.ToString();
      EXPECT_TRUE(r.shipped.empty() && r.already_published.empty() && r.cleaned.empty());
      ++cases;
    }
  }
  // A store reached through a link to it is the same store.
  EXPECT_THAT(SyncStaging(path + "/segments", dir.path() + "/outer/store-link", Forced(), nullptr),
              StatusIs(StatusCode::kInvalidArgument));
  std::filesystem::remove(path + "/segments/inner");
  EXPECT_EQ(Files(path + "/segments"), before);
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  EXPECT_EQ(snap->ListSegments().size(), 3u);
  std::printf(
      "[ figures  ] staging apart: %d spellings of a staging directory inside a store refused\n",
      cases);
}

TEST(StagingApartTest, AWriterWithAStagingDirectoryInTheStoreIsRefusedAndClaimsNothing) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {}));
  ASSERT_NO_FATAL_FAILURE(ThreeSegments(store.get()));
  const std::set<std::string> before = Files(path + "/segments");
  const std::set<std::string> store_before = Files(path);
  std::filesystem::create_directory_symlink(path + "/segments", dir.path() + "/alias");
  for (const std::string& staging : {path + "/segments", dir.path() + "/alias", path,
                                     path + "/new-stage", path + "/segments/new", dir.path()}) {
    WriterOptions o = Staging(staging, "stager");
    auto w = store->NewWriter(o);
    EXPECT_THAT(w.status(), StatusIs(StatusCode::kInvalidArgument)) << staging;
    EXPECT_NE(w.status().message().find("apart from the store"), std::string::npos)
        << w.status().ToString();
  }
  EXPECT_EQ(Files(path + "/segments"), before);
  EXPECT_EQ(Files(path), store_before) << "no staging directory made inside the store";
  // Beside the store is where staging goes.
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(Staging(dir.path() + "/beside", "stager")));
  ASSERT_OK(w->Close());
}

// The last guard: a staged file that is the store's segment itself (one
// file under two names) is never counted as published and removed.
TEST(StagingApartTest, PublishingAFileOverItselfIsRefused) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {}));
  ASSERT_NO_FATAL_FAILURE(ThreeSegments(store.get()));
  const std::string name = format::SegmentFileName("w", 1);
  const std::string seg = path + "/segments/" + name;
  ASSERT_OK_AND_ASSIGN(uint64_t size, Env::Default()->GetFileSize(seg));
  auto p = staging::PublishSegment(Env::Default(), seg, size, path + "/segments", name,
                                   "0123456789abcdef");
  EXPECT_THAT(p.status(), StatusIs(StatusCode::kInvalidArgument));
  std::filesystem::create_hard_link(seg, dir.path() + "/link");
  p = staging::PublishSegment(Env::Default(), dir.path() + "/link", size, path + "/segments", name,
                              "0123456789abcdef");
  EXPECT_THAT(p.status(), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_OK(Env::Default()->FileExists(seg));
}

// ---- Leases that are not leases (finding 3).

TEST(StagingLeaseTest, AFileNamedLikeALeaseThatIsNotOneBlocksNothingAndIsReported) {
  TempDir dir;
  const std::string path = dir.path() + "/store", local = dir.path() + "/local";
  FaultInjectionEnv env(Env::Default());
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {.env = &env}));
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(Staging(local, "crashed")));
  for (int s = 0; s < 10; ++s) ASSERT_OK(w->Append(RunRef(int64_t{1}), "x", s, 1.0 * s));
  ASSERT_OK(w->Commit());
  Kill(&env, std::move(w));
  // A sparse giant, as `truncate -s 256G` makes: never read whole.
  const std::string giant = local + "/00000000deadbeef.lease";
  { std::ofstream f(giant); }
  ASSERT_EQ(::truncate(giant.c_str(), off_t{256} << 30), 0);
  // A FIFO, which would block a reader that opened it plainly.
  const std::string fifo = local + "/00000000000000aa.lease";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  SyncOptions o;
  o.wait_s = 2 * StagingLeaseBeatSeconds();
  SyncReport r;
  Status s = SyncStaging(local, path, o, &r);
  EXPECT_THAT(s, StatusIs(StatusCode::kCorruption));
  EXPECT_NE(s.message().find(".lease: not a lease"), std::string::npos) << s.ToString();
  ASSERT_EQ(r.damaged_leases.size(), 2u);
  EXPECT_EQ(r.shipped.size(), 1u) << "the crashed writer's committed records";
  EXPECT_OK(Env::Default()->FileExists(giant));  // left for a person
  EXPECT_OK(Env::Default()->FileExists(fifo));
  ASSERT_OK_AND_ASSIGN(auto reader, Store::Open(path, {.read_only = true}));
  ScanOptions so;
  ASSERT_OK_AND_ASSIGN(auto scan, reader->GetSnapshot()->Scan("x", so));
  ScanBatch b;
  size_t n = 0;
  while (true) {
    ASSERT_OK_AND_ASSIGN(bool more, scan->Next(&b));
    if (!more) break;
    n += b.count;
  }
  EXPECT_EQ(n, 10u);
}

}  // namespace
}  // namespace runstore
