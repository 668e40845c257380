// Node-local staging and `runstore sync` (docs/design.md#staging): a staging
// writer's store holds what a direct writer's would; a crash after any file
// operation of shipping or of a sync, with unsynced data dropped, loses no
// committed record and duplicates none once a sync runs again; syncs are
// idempotent, also two at once (threads and processes); a live writer's open
// segment is never taken; the shipped ticket and ship_every_s.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "format/claim.h"
#include "format/format.h"
#include "format/segment_reader.h"
#include "runstore/store.h"
#include "runstore/sync.h"
#include "testing/fault_injection_env.h"
#include "testing/test_util.h"

namespace runstore {
namespace {

using ::runstore::testing::Contents;
using ::runstore::testing::RecordKey;
using ::runstore::testing::RecordValueAt;
using ::runstore::testing::TempDir;

// Every visible record of the store at `path`, and, in *segments, each
// segment's (writer id, creation time): a segment published twice under two
// names would show twice.
Status ReadStore(Env* env, const std::string& path, Contents* out,
                 std::multiset<std::pair<std::string, int64_t>>* segments = nullptr) {
  out->clear();
  RUNSTORE_ASSIGN_OR_RETURN(
      auto store, Store::Open(path, {.env = env, .create_if_missing = false, .read_only = true}));
  auto snap = store->GetSnapshot();
  RUNSTORE_ASSIGN_OR_RETURN(auto series, snap->ListSeries());
  for (const SeriesInfo& info : series) {
    RUNSTORE_ASSIGN_OR_RETURN(auto scanner, snap->Scan(info.name));
    ScanBatch b;
    while (true) {
      RUNSTORE_ASSIGN_OR_RETURN(bool more, scanner->Next(&b));
      if (!more) break;
      for (size_t i = 0; i < b.count; ++i) {
        RecordKey k{info.name, b.run(i), b.steps[i]};
        if (!out->emplace(k, RecordValueAt(b, i)).second) {
          return Status::Corruption("record " + testing::KeyString(k) + " read twice");
        }
      }
    }
  }
  if (segments) {
    segments->clear();
    for (const SegmentInfo& s : snap->ListSegments()) {
      if (s.commits > 0) segments->insert({s.writer_id, s.created_ns});
    }
  }
  return Status::OK();
}

// Names in `dir`.
std::vector<std::string> Names(Env* env, const std::string& dir) {
  auto c = env->GetChildren(dir);
  return c.ok() ? *c : std::vector<std::string>{};
}

bool NoDuplicateSegments(const std::multiset<std::pair<std::string, int64_t>>& segs) {
  return std::set<std::pair<std::string, int64_t>>(segs.begin(), segs.end()).size() == segs.size();
}

std::string HashedRun(int i) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%016llx%08x", 0x9e3779b97f4a7c15ull * (i + 1), i * 2654435761u);
  return buf;
}

// The records of commit `c` of the sweep writers: 20 scalars and a string.
void AppendCommit(Writer* w, int c, Status* s) {
  for (int j = 0; j < 20 && s->ok(); ++j) {
    *s = w->Append(RunRef(HashedRun(c)), "loss", j, 0.5 * c + j);
  }
  if (s->ok())
    *s =
        w->Append(RunRef(HashedRun(c)), "note", 0, ValueRef::String("commit " + std::to_string(c)));
}

// What commit `c` writes, for checking.
void ExpectCommit(int c, Contents* expected) {
  for (int j = 0; j < 20; ++j) {
    const double v = 0.5 * c + j;
    (*expected)[RecordKey{"loss", RunId(HashedRun(c)), j}] = testing::RecordValue{
        DType::kFloat64, {}, std::string(reinterpret_cast<const char*>(&v), 8)};
  }
  (*expected)[RecordKey{"note", RunId(HashedRun(c)), 0}] =
      testing::RecordValue{DType::kString, {}, "commit " + std::to_string(c)};
}

WriterOptions StagingOptions(const std::string& staging) {
  WriterOptions o;
  o.writer_id = "stager";
  o.staging_dir = staging;
  o.segment_bytes = 64 << 10;  // the minimum: segments roll and ship often
  o.buffer_bytes = 1 << 20;
  o.block_bytes = 4 << 10;
  return o;
}

TEST(StagingWriterTest, StoreHoldsWhatADirectWriterWritesAndStagingIsEmptyAfterClose) {
  TempDir dir;
  const std::string staged_store = dir.path() + "/staged", direct_store = dir.path() + "/direct",
                    staging = dir.path() + "/local";
  constexpr int kCommits = 800;
  for (const bool stage : {true, false}) {
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(stage ? staged_store : direct_store, {}));
    WriterOptions o;  // defaults, but for the segment size (many segments)
    o.segment_bytes = 64 << 10;
    o.staging_dir = stage ? staging : std::string();
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(o));
    for (int c = 0; c < kCommits; ++c) {
      Status s;
      AppendCommit(w.get(), c, &s);
      ASSERT_OK(s);
      if (c % 10 == 9) ASSERT_OK(w->Commit());
    }
    ASSERT_OK(w->Close());
    if (stage) {
      // Rolls wait for the next number's claim, which the shipping thread
      // makes between its copies: how many depends on the machine.
      EXPECT_GT(w->stats().segments_sealed, 1u);
    }
  }
  Contents staged, direct;
  std::multiset<std::pair<std::string, int64_t>> segs;
  ASSERT_OK(ReadStore(Env::Default(), staged_store, &staged, &segs));
  ASSERT_OK(ReadStore(Env::Default(), direct_store, &direct));
  EXPECT_EQ(staged.size(), static_cast<size_t>(kCommits) * 21);
  EXPECT_TRUE(staged == direct) << staged.size() << " records staged, " << direct.size()
                                << " direct";
  EXPECT_TRUE(NoDuplicateSegments(segs));
  EXPECT_TRUE(Names(Env::Default(), staging).empty())
      << "left in staging: " << Names(Env::Default(), staging).front();
  for (const std::string& n : Names(Env::Default(), staged_store + "/segments")) {
    EXPECT_TRUE(n.ends_with(".rss")) << "a leftover in the store: " << n;
  }
}

TEST(StagingWriterTest, StagingDirComesFromTheEnvironmentUnlessGivenAndEmptyDisables) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(dir.path() + "/s", {}));
  const std::string staging = dir.path() + "/from_env";
  ::setenv("RUNSTORE_STAGING_DIR", staging.c_str(), 1);
  {
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter({.writer_id = "e"}));
    ASSERT_OK(w->Append(1, "x", 0, 1.0));
    ASSERT_OK(w->Commit());
    // The open segment is in staging, its placeholder in the store a claim.
    EXPECT_EQ(Names(Env::Default(), staging).size(), 2u);  // segment and lease
    ASSERT_OK_AND_ASSIGN(uint64_t size,
                         Env::Default()->GetFileSize(dir.path() + "/s/segments/e-00000001.rss"));
    EXPECT_EQ(size, format::kClaimSize);
    ASSERT_OK(w->Close());
  }
  {
    WriterOptions o{.writer_id = "d"};
    o.staging_dir = "";
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(o));
    ASSERT_OK(w->Append(2, "x", 0, 2.0));
    ASSERT_OK(w->Commit());
    EXPECT_TRUE(Names(Env::Default(), staging).empty());
    ASSERT_OK(w->Close());
  }
  ::unsetenv("RUNSTORE_STAGING_DIR");
  Contents got;
  ASSERT_OK(ReadStore(Env::Default(), dir.path() + "/s", &got));
  EXPECT_EQ(got.size(), 2u);
}

TEST(StagingWriterTest, ShippedTicketAndWaitForShippedMakeACommitVisibleInTheStore) {
  TempDir dir;
  const std::string path = dir.path() + "/s";
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {}));
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(StagingOptions(dir.path() + "/local")));
  ASSERT_OK(w->Append(1, "x", 0, 1.0));
  ASSERT_OK(w->Commit());
  const uint64_t t = w->LastTicket();
  ASSERT_GT(t, 0u);
  Contents got;
  ASSERT_OK(ReadStore(Env::Default(), path, &got));
  EXPECT_TRUE(got.empty()) << "committed in staging, not shipped yet";
  // A reader that refreshes while the store holds only the empty placeholder
  // must see the segment once it is renamed over it.
  ASSERT_OK_AND_ASSIGN(auto reader, Store::Open(path, {.read_only = true}));
  ASSERT_OK_AND_ASSIGN(auto before, reader->Refresh());
  EXPECT_GE(before->ListSegments().size(), 1u);  // placeholders, empty
  EXPECT_LT(w->ShippedTicket(), t);
  ASSERT_OK(w->WaitForShipped(t));
  EXPECT_GE(w->ShippedTicket(), t);
  ASSERT_OK(ReadStore(Env::Default(), path, &got));
  EXPECT_EQ(got.size(), 1u);
  ASSERT_OK_AND_ASSIGN(auto after, reader->Refresh());
  ASSERT_OK_AND_ASSIGN(Value v, after->Get(1, "x", 0));
  EXPECT_EQ(v.scalar<double>(), 1.0);
  EXPECT_THAT(w->WaitForShipped(t + 5), testing::StatusIs(StatusCode::kInvalidArgument));
  // The writer goes on in a new segment.
  ASSERT_OK(w->Append(2, "x", 0, 2.0));
  ASSERT_OK_AND_ASSIGN(uint64_t t2, w->CommitAsync());
  ASSERT_OK(w->WaitForShipped(t2));
  ASSERT_OK(ReadStore(Env::Default(), path, &got));
  EXPECT_EQ(got.size(), 2u);
  ASSERT_OK(w->Close());
}

TEST(StagingWriterTest, ShipEverySecondsShipsCommittedDataWithoutBeingAsked) {
  TempDir dir;
  const std::string path = dir.path() + "/s";
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {}));
  WriterOptions o = StagingOptions(dir.path() + "/local");
  o.segment_bytes = 1 << 30;  // never by size
  o.ship_every_s = 0.2;
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(o));
  for (int round = 1; round <= 3; ++round) {
    ASSERT_OK(w->Append(round, "x", 0, 1.0 * round));
    ASSERT_OK(w->Commit());
    const uint64_t t = w->LastTicket();
    // Polled with a generous timeout: no assertion on how fast.
    Contents got;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while ((w->ShippedTicket() < t || got.size() < static_cast<size_t>(round)) &&
           std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      ASSERT_OK(ReadStore(Env::Default(), path, &got));
    }
    EXPECT_GE(w->ShippedTicket(), t) << "round " << round;
    EXPECT_EQ(got.size(), static_cast<size_t>(round));
  }
  EXPECT_GE(w->stats().segments_sealed, 3u);
  ASSERT_OK(w->Close());
}

// ---- Crashes.

// An Env that refuses to rename anything into the store's segments/ while
// told to: the shared file system is gone for publications (claims, which
// create files, still work).
class NoPublishEnv final : public EnvWrapper {
 public:
  explicit NoPublishEnv(Env* base) : EnvWrapper(base) {}
  std::atomic<bool> refuse{false};
  // The next this many lease beats find their temporary removed before
  // their rename, as by a forced sync running beside them.
  std::atomic<int> lease_temps_to_steal{0};

  Status RenameFile(const std::string& from, const std::string& to) override {
    if (from.ends_with(".lease.tmp") && lease_temps_to_steal.fetch_sub(1) > 0) {
      RUNSTORE_RETURN_IF_ERROR(target()->RemoveFile(from));
    }
    if (refuse && to.starts_with("/store/segments/")) {
      return Status::IOError(to + ": rename refused (the test's shared file system is down)", EIO);
    }
    return target()->RenameFile(from, to);
  }
};

// A staging writer over `env` that commits kCommits commits (flushing every
// third), rolling segments; returns how many commits were acknowledged.
constexpr int kCrashCommits = 12;
int RunStagingWriter(Env* env, int first_commit = 0, Status* close_status = nullptr) {
  auto store = Store::Open("/store", {.env = env});
  if (!store.ok()) return 0;
  WriterOptions o = StagingOptions("/local");
  auto w = (*store)->NewWriter(o);
  if (!w.ok()) return 0;
  int acked = 0;
  for (int c = first_commit; c < first_commit + kCrashCommits; ++c) {
    Status s;
    AppendCommit(w->get(), c, &s);
    // Large enough commits that the 64 KiB segments roll every few of them.
    std::string pad(9000, static_cast<char>('a' + c % 26));
    if (s.ok()) s = (*w)->Append(RunRef(HashedRun(c)), "pad", 0, ValueRef::Bytes(pad));
    if (s.ok()) s = c % 3 == 2 ? (*w)->Flush() : (*w)->Commit();
    if (!s.ok()) break;
    acked = c - first_commit + 1;
  }
  Status c = (*w)->Close();
  if (close_status) *close_status = c;
  return acked;
}

void ExpectCommitPlusPad(int c, Contents* e) {
  ExpectCommit(c, e);
  (*e)[RecordKey{"pad", RunId(HashedRun(c)), 0}] =
      testing::RecordValue{DType::kBytes, {}, std::string(9000, static_cast<char>('a' + c % 26))};
}

// After recovery: acked commits present, every commit whole or absent, no
// record of anything else, no segment twice, staging and temporaries gone.
void CheckRecovered(Env* env, int acked_durable, int written, const std::string& where,
                    int* problems) {
  Contents got;
  std::multiset<std::pair<std::string, int64_t>> segs;
  Status s = ReadStore(env, "/store", &got, &segs);
  if (!s.ok()) {
    if ((*problems)++ < 5) ADD_FAILURE() << where << ": " << s.ToString();
    return;
  }
  Contents expected_all;
  size_t accounted = 0;
  for (int c = 0; c < written; ++c) {
    Contents e;
    ExpectCommitPlusPad(c, &e);
    size_t present = 0;
    for (const auto& [k, v] : e) {
      auto it = got.find(k);
      if (it != got.end() && it->second == v) ++present;
    }
    accounted += present;
    const bool whole = present == e.size(), none = present == 0;
    if ((!whole && !none) || (c < acked_durable && !whole)) {
      if ((*problems)++ < 5) {
        ADD_FAILURE() << where << ": commit " << c << " has " << present << " of " << e.size()
                      << " records (acknowledged durable: " << (c < acked_durable) << ")";
      }
    }
  }
  if (accounted != got.size() && (*problems)++ < 5) {
    ADD_FAILURE() << where << ": " << got.size() - accounted << " records no commit wrote";
  }
  if (!NoDuplicateSegments(segs) && (*problems)++ < 5) {
    ADD_FAILURE() << where << ": a segment is in the store twice";
  }
  for (const std::string& n : Names(env, "/local")) {
    if ((*problems)++ < 5) ADD_FAILURE() << where << ": left in staging: " << n;
  }
  for (const std::string& n : Names(env, "/store/segments")) {
    if (!n.ends_with(".rss") && (*problems)++ < 5) {
      ADD_FAILURE() << where << ": left in the store: " << n;
    }
    // A dead writer's claim left behind would hold compaction back for ever.
    auto bytes = ReadFileToString(env, "/store/segments/" + n);
    if (bytes.ok() && format::DecodeClaim(*bytes, n) && (*problems)++ < 5) {
      ADD_FAILURE() << where << ": a claim is left in the store: " << n;
    }
  }
}

// The durable prefix of what was acknowledged: flushes are not durable
// until the next commit (every third commit is a flush: 2, 5, 8, ...).
int DurablePrefix(int acked) {
  int d = acked;
  while (d > 0 && (d - 1) % 3 == 2) --d;  // a trailing flush may be lost
  return d;
}

SyncOptions Forced(Env* env) {
  SyncOptions o;
  o.env = env;
  o.force = true;  // the crashed writer's lease is dead: no need to watch it
  return o;
}

TEST(StagingCrashTest, CrashAfterEveryOperationOfShippingThenSyncLosesAndDuplicatesNothing) {
  int problems = 0, points = 0;
  // Unsynced bytes dropped, as the brief of this test; then torn into
  // garbage, which a sync must read as torn tails too.
  for (const DropMode mode : {DropMode::kDropUnsynced, DropMode::kTornGarbage}) {
    bool finished = false;
    for (uint64_t k = 1; !finished && k < 20000; ++k) {
      auto mem = NewMemEnv();
      FaultInjectionEnv env(mem.get());
      ASSERT_OK(env.CreateDir("/local"));
      { ASSERT_OK_AND_ASSIGN(auto s, Store::Open("/store", {.env = &env})); }
      env.ResetCounters();
      env.CrashAfter(k);
      const int acked = RunStagingWriter(&env);
      finished = !env.crashed();
      ASSERT_OK(env.SimulatePowerLoss(mode, k));
      ++points;
      const std::string where = std::string(mode == DropMode::kDropUnsynced ? "dropped" : "torn") +
                                ", crash point " + std::to_string(k);
      SyncReport report;
      Status s = SyncStaging("/local", "/store", Forced(&env), &report);
      if (!s.ok()) {
        if (problems++ < 5) ADD_FAILURE() << where << ": sync: " << s.ToString();
        continue;
      }
      CheckRecovered(&env, DurablePrefix(acked), kCrashCommits, where, &problems);
      if (finished) {
        EXPECT_EQ(acked, kCrashCommits);
      }
    }
    EXPECT_TRUE(finished);
  }
  std::printf(
      "staging: %d crash points of a staging writer tested (power loss; unsynced "
      "data dropped, then torn into garbage), %d problems\n",
      points, problems);
  EXPECT_EQ(problems, 0);
}

TEST(StagingWriterTest, AStoreThatRefusesPublicationsStopsShippingNotTheWriter) {
  auto mem = NewMemEnv();
  NoPublishEnv env(mem.get());
  ASSERT_OK(env.CreateDir("/local"));
  { ASSERT_OK_AND_ASSIGN(auto s, Store::Open("/store", {.env = &env})); }
  env.refuse = true;
  Status closed;
  EXPECT_EQ(RunStagingWriter(&env, 0, &closed), kCrashCommits);  // every commit acknowledged
  EXPECT_THAT(closed, testing::StatusIs(StatusCode::kIOError));
  EXPECT_NE(closed.message().find("runstore sync"), std::string::npos) << closed.ToString();
  int sealed = 0;
  for (const std::string& n : Names(&env, "/local")) {
    auto f = env.NewRandomAccessFile("/local/" + n);
    if (n.ends_with(".rss") && f.ok() && format::HasValidTrailer(**f)) ++sealed;
  }
  EXPECT_GE(sealed, 1) << "the writer went on sealing in staging";
  env.refuse = false;  // the shared file system is back
  SyncReport r;
  ASSERT_OK(SyncStaging("/local", "/store", Forced(&env), &r));
  EXPECT_EQ(r.shipped.size(), static_cast<size_t>(sealed));
  int problems = 0;
  CheckRecovered(&env, kCrashCommits, kCrashCommits, "after the store came back", &problems);
  EXPECT_EQ(problems, 0);
}

// Two forced syncs at once each take the other's lease for dead and may
// remove its lease temporary between its write and its rename (the race of
// TwoSyncsAtOnce..., made certain here): the sync writes its first lease
// again and goes on. A writer whose lease is taken that way fails instead.
TEST(StagingSyncTest, ASyncWhoseLeaseTemporaryAForcedSyncRemovesGoesOn) {
  auto mem = NewMemEnv();
  NoPublishEnv env(mem.get());
  ASSERT_OK(env.CreateDir("/local"));
  { ASSERT_OK_AND_ASSIGN(auto s, Store::Open("/store", {.env = &env})); }
  env.refuse = true;  // sealed segments wait in staging
  EXPECT_EQ(RunStagingWriter(&env), kCrashCommits);
  env.refuse = false;
  env.lease_temps_to_steal = 3;
  SyncReport r;
  ASSERT_OK(SyncStaging("/local", "/store", Forced(&env), &r));
  EXPECT_LE(env.lease_temps_to_steal.load(), 0) << "every steal happened";
  EXPECT_FALSE(r.shipped.empty());
  int problems = 0;
  CheckRecovered(&env, kCrashCommits, kCrashCommits, "after a sync lost its lease temporary",
                 &problems);
  EXPECT_EQ(problems, 0);

  env.lease_temps_to_steal = 1;
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open("/store", {.env = &env}));
  auto w = store->NewWriter(StagingOptions("/local"));
  EXPECT_THAT(w.status(), testing::StatusIs(StatusCode::kNotFound));
  EXPECT_NE(w.status().message().find(".lease"), std::string::npos) << w.status().ToString();
}

// A staging writer killed between renaming a sealed segment into the store
// and syncing the store's directory: the name is there but not durable. A
// sync finds the segment already published and removes the staged copy; it
// must first make that name durable, or a power cut after the removal takes
// the rename back and the segment's commits are lost in both places. (The
// crash test below hit this only when the writer's threads happened to put
// the rename exactly at its kill point.)
TEST(StagingCrashTest, ASegmentRenamedInByAKilledWriterIsDurableBeforeItsStagedCopyGoes) {
  int problems = 0, points = 0;
  bool finished = false;
  for (uint64_t k = 1; !finished && k < 1000; ++k) {
    auto mem = NewMemEnv();
    NoPublishEnv no_publish(mem.get());
    FaultInjectionEnv env(&no_publish);
    ASSERT_OK(env.CreateDir("/local"));
    { ASSERT_OK_AND_ASSIGN(auto s, Store::Open("/store", {.env = &env})); }
    no_publish.refuse = true;  // sealed segments wait in staging
    ASSERT_EQ(RunStagingWriter(&env), kCrashCommits);
    no_publish.refuse = false;
    // Every sealed one renamed into place as the writer's shipping does
    // (copy, sync, rename), and the writer killed before its directory sync
    // (in a real run only the last rename can be undurable; here none is
    // durable, which is no easier). With nothing left to publish, the sync
    // itself renames nothing that would sync the directory on the way.
    int renamed = 0;
    for (const std::string& n : Names(&env, "/local")) {
      auto f = env.NewRandomAccessFile("/local/" + n);
      if (!n.ends_with(".rss") || !f.ok() || !format::HasValidTrailer(**f)) continue;
      ASSERT_OK_AND_ASSIGN(uint64_t size, env.GetFileSize("/local/" + n));
      const std::string temp = "/store/segments/" + n + ".dead.tmp";
      {
        ASSERT_OK_AND_ASSIGN(auto out, env.NewCopyOf("/local/" + n, size, temp));
        ASSERT_OK(out->Sync());
        ASSERT_OK(out->Close());
      }
      ASSERT_OK(env.RenameFile(temp, "/store/segments/" + n));
      ++renamed;
    }
    ASSERT_GT(renamed, 0) << "no sealed segment in staging";
    env.ResetCounters();
    env.CrashAfter(k);
    SyncReport report;
    (void)SyncStaging("/local", "/store", Forced(&env), &report);
    finished = !env.crashed();
    ASSERT_OK(env.SimulatePowerLoss(DropMode::kDropUnsynced, k));
    ++points;
    SyncReport again;
    Status s = SyncStaging("/local", "/store", Forced(&env), &again);
    if (!s.ok()) {
      if (problems++ < 5) ADD_FAILURE() << "crash point " << k << ": sync again: " << s.ToString();
      continue;
    }
    CheckRecovered(&env, kCrashCommits, kCrashCommits, "sync crash point " + std::to_string(k),
                   &problems);
  }
  EXPECT_TRUE(finished);
  std::printf(
      "staging: %d crash points of a sync after a publisher's undurable rename, %d problems\n",
      points, problems);
  EXPECT_EQ(problems, 0);
}

TEST(StagingCrashTest, CrashAfterEveryOperationOfSyncThenSyncAgainLosesAndDuplicatesNothing) {
  // Leftovers made by killing a staging writer part way (every operation
  // after `kill_at` refused, the page cache kept), then a sync crashed after
  // each of its operations, a power cut, and a sync again.
  int problems = 0, points = 0, setups = 0, setups_with_content = 0, setups_with_sealed = 0,
      points_shipping = 0;
  uint64_t total = 0;  // the operations of a writer that is not killed
  {
    auto mem = NewMemEnv();
    FaultInjectionEnv env(mem.get());
    ASSERT_OK(env.CreateDir("/local"));
    { ASSERT_OK_AND_ASSIGN(auto s, Store::Open("/store", {.env = &env})); }
    env.ResetCounters();
    ASSERT_EQ(RunStagingWriter(&env), kCrashCommits);
    total = env.operation_count();
  }
  for (const DropMode mode : {DropMode::kDropUnsynced, DropMode::kTornGarbage}) {
    // The writer killed after each of its operations (with unsynced data
    // dropped; which operation lands where depends on how its threads
    // interleave, so a sample of kill points missed a rename left without
    // its directory sync), or after each eighth of them (torn); and
    // (kill_at 0) a writer that ran to the end while the store refused its
    // publications, so that sealed segments wait in staging.
    std::vector<uint64_t> kills;
    for (uint64_t at = 1; at < total; ++at) {
      if (mode == DropMode::kDropUnsynced || at % std::max<uint64_t>(total / 8, 1) == 0) {
        kills.push_back(at);
      }
    }
    kills.push_back(0);
    for (const uint64_t kill_at : kills) {
      bool finished = false;
      for (uint64_t k = 1; !finished && k < 5000; ++k) {
        auto mem = NewMemEnv();
        NoPublishEnv no_publish(mem.get());
        FaultInjectionEnv env(&no_publish);
        ASSERT_OK(env.CreateDir("/local"));
        { ASSERT_OK_AND_ASSIGN(auto s, Store::Open("/store", {.env = &env})); }
        env.ResetCounters();
        if (kill_at > 0) {
          env.CrashAfter(kill_at);
        } else {
          no_publish.refuse = true;
        }
        const int acked = RunStagingWriter(&env);
        env.ResetCounters();  // a kill, not a power cut: the OS kept everything
        no_publish.refuse = false;
        if (k == 1 && mode == DropMode::kDropUnsynced) {
          ++setups;
          bool content = false, sealed = false;
          for (const std::string& n : Names(&env, "/local")) {
            auto f = env.NewRandomAccessFile("/local/" + n);
            if (!n.ends_with(".rss") || !f.ok()) continue;
            if ((*f)->Size().ok() && *(*f)->Size() > 0) content = true;
            if (format::HasValidTrailer(**f)) sealed = true;
          }
          setups_with_content += content;
          setups_with_sealed += sealed;
        }
        env.CrashAfter(k);
        SyncReport report;
        (void)SyncStaging("/local", "/store", Forced(&env), &report);
        finished = !env.crashed();
        if (!report.shipped.empty()) ++points_shipping;
        ASSERT_OK(env.SimulatePowerLoss(mode, k));
        ++points;
        SyncReport again;
        Status s = SyncStaging("/local", "/store", Forced(&env), &again);
        if (!s.ok()) {
          if (problems++ < 5) {
            ADD_FAILURE() << "kill at " << kill_at << ", crash point " << k
                          << ": sync again: " << s.ToString();
          }
          continue;
        }
        // Every acknowledged commit was durable in staging when the writer
        // was killed, but for a trailing flush (the page cache kept it, but
        // the power cut after the sync's crash may not).
        CheckRecovered(&env, DurablePrefix(acked), kCrashCommits,
                       std::string(mode == DropMode::kDropUnsynced ? "dropped" : "torn") +
                           (kill_at > 0 ? ", kill at " + std::to_string(kill_at) : ", refused") +
                           ", sync crash point " + std::to_string(k),
                       &problems);
      }
      EXPECT_TRUE(finished);
    }
  }
  EXPECT_GE(setups_with_content, setups / 2) << "most setups must leave a segment in staging";
  EXPECT_GT(setups_with_sealed, 0) << "no setup left a sealed segment unshipped";
  EXPECT_GT(points_shipping, 0);
  std::printf(
      "staging: %d crash points of sync tested (a writer of %llu operations killed after "
      "each of them, or refused its publications: %d of those %d leaving a sealed segment "
      "unshipped; unsynced data dropped; then torn, killed after each eighth), %d problems\n",
      points, static_cast<unsigned long long>(total), setups_with_sealed, setups, problems);
  EXPECT_EQ(problems, 0);
}

// ---- Idempotence and liveness, on the real file system.

// Leftovers of two killed staging writers (their files as a kill leaves
// them: a fault env that refuses everything after the last commit).
void MakeLeftovers(const std::string& root, int* commits) {
  FaultInjectionEnv env(Env::Default());
  ASSERT_OK(env.CreateDir(root + "/local"));
  { ASSERT_OK_AND_ASSIGN(auto s, Store::Open(root + "/store", {.env = &env})); }
  *commits = 0;
  for (const char* id : {"a", "b"}) {
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(root + "/store", {.env = &env}));
    WriterOptions o = StagingOptions(root + "/local");
    o.writer_id = id;
    ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(o));
    for (int c = 0; c < 30; ++c) {
      Status s;
      AppendCommit(w.get(), *commits + c, &s);
      ASSERT_OK(s);
      ASSERT_OK(w->Commit());
    }
    *commits += 30;
    env.CrashAfter(0);  // killed: the open segment stays in staging, its lease stops
    w.reset();
    env.ResetCounters();
  }
}

void CheckAllCommits(const std::string& store, int commits) {
  Contents got, expected;
  std::multiset<std::pair<std::string, int64_t>> segs;
  ASSERT_OK(ReadStore(Env::Default(), store, &got, &segs));
  for (int c = 0; c < commits; ++c) ExpectCommit(c, &expected);
  EXPECT_TRUE(got == expected) << got.size() << " records, expected " << expected.size();
  EXPECT_TRUE(NoDuplicateSegments(segs));
}

TEST(StagingSyncTest, SyncTwiceShipsOnceAndTheSecondFindsNothing) {
  TempDir dir;
  int commits = 0;
  MakeLeftovers(dir.path(), &commits);
  SyncReport first, second;
  SyncOptions o;
  o.wait_s = 1.2;  // the killed writers' leases stopped beating
  // Progress: the watch (0 of 0), then each staged segment, ending done.
  std::vector<std::array<uint64_t, 3>> progress;
  o.progress = [&](size_t done, size_t staged, uint64_t bytes) {
    progress.push_back({done, staged, bytes});
  };
  ASSERT_OK(SyncStaging(dir.path() + "/local", dir.path() + "/store", o, &first));
  ASSERT_GE(progress.size(), 3u);
  EXPECT_EQ(progress.front(), (std::array<uint64_t, 3>{0, 0, 0}));
  const uint64_t staged = progress.back()[1];
  EXPECT_GE(staged, first.shipped.size());
  EXPECT_EQ(progress.back(), (std::array<uint64_t, 3>{staged, staged, first.bytes_shipped}));
  for (size_t i = 2; i < progress.size(); ++i) {
    EXPECT_EQ(progress[i][1], staged);
    EXPECT_GE(progress[i][0], progress[i - 1][0]);
    EXPECT_GE(progress[i][2], progress[i - 1][2]);
  }
  EXPECT_GE(first.shipped.size(), 2u);
  EXPECT_TRUE(first.skipped.empty());
  EXPECT_GE(first.cleaned.size(), 2u);  // the two dead leases
  CheckAllCommits(dir.path() + "/store", commits);
  ASSERT_OK(SyncStaging(dir.path() + "/local", dir.path() + "/store", Forced(nullptr), &second));
  EXPECT_TRUE(second.shipped.empty() && second.already_published.empty() &&
              second.cleaned.empty() && second.skipped.empty());
  CheckAllCommits(dir.path() + "/store", commits);
  EXPECT_TRUE(Names(Env::Default(), dir.path() + "/local").empty());
}

TEST(StagingSyncTest, TwoSyncsAtOnceInThreadsAndInProcessesShipEverythingOnce) {
  for (const bool processes : {false, true}) {
    TempDir dir;
    int commits = 0;
    MakeLeftovers(dir.path(), &commits);
    const std::string local = dir.path() + "/local", store = dir.path() + "/store";
    size_t published = 0;
    if (!processes) {
      SyncReport r[2];
      Status s[2];
      std::thread t0([&] { s[0] = SyncStaging(local, store, Forced(nullptr), &r[0]); });
      std::thread t1([&] { s[1] = SyncStaging(local, store, Forced(nullptr), &r[1]); });
      t0.join();
      t1.join();
      ASSERT_OK(s[0]);
      ASSERT_OK(s[1]);
      published = r[0].shipped.size() + r[1].shipped.size();
      EXPECT_GE(published, 2u);
    } else {
      pid_t pids[2];
      for (pid_t& pid : pids) {
        pid = ::fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
          SyncReport r;
          Status s = SyncStaging(local, store, Forced(nullptr), &r);
          if (!s.ok()) std::fprintf(stderr, "sync: %s\n", s.ToString().c_str());
          ::_exit(s.ok() ? 0 : 1);
        }
      }
      for (pid_t pid : pids) {
        int status = 0;
        ASSERT_EQ(::waitpid(pid, &status, 0), pid);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      }
    }
    CheckAllCommits(store, commits);
    EXPECT_TRUE(Names(Env::Default(), local).empty())
        << (processes ? "processes" : "threads") << ": left in staging";
  }
}

TEST(StagingSyncTest, ALiveWritersOpenSegmentIsSkippedAndShippedByItsWriterLater) {
  TempDir dir;
  const std::string local = dir.path() + "/local", path = dir.path() + "/s";
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {}));
  WriterOptions o = StagingOptions(local);
  o.segment_bytes = 1 << 30;
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(o));
  Status s;
  AppendCommit(w.get(), 0, &s);
  ASSERT_OK(s);
  ASSERT_OK(w->Commit());
  SyncReport r;
  SyncOptions so;
  so.wait_s = 4 * StagingLeaseBeatSeconds();
  ASSERT_OK(SyncStaging(local, path, so, &r));
  ASSERT_EQ(r.skipped.size(), 1u);
  EXPECT_EQ(r.skipped[0], format::SegmentFileName("stager", 1));
  EXPECT_TRUE(r.shipped.empty());
  AppendCommit(w.get(), 1, &s);
  ASSERT_OK(s);
  ASSERT_OK(w->Close());
  CheckAllCommits(path, 2);
  EXPECT_TRUE(Names(Env::Default(), local).empty());
}

// A process killed inside its first lease beat leaves "<token>.lease.tmp"
// and no lease (the kill -9 loop of tests/kill9_test.cc found one): sync
// removes it once it has outlived the watch, and leaves a live writer's
// lease, and its beats' temporaries, alone.
TEST(StagingSyncTest, ALeaseTemporaryOfAnOwnerKilledInItsFirstBeatIsCleaned) {
  TempDir dir;
  const std::string local = dir.path() + "/local", path = dir.path() + "/s";
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {}));
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(StagingOptions(local)));
  Status s;
  AppendCommit(w.get(), 0, &s);
  ASSERT_OK(s);
  ASSERT_OK(w->Commit());
  const std::string orphan = "0123456789abcdef.lease.tmp";
  {
    std::ofstream f(local + "/" + orphan);
    f << "runstore lease\nkind wri";  // cut inside the write
  }
  SyncReport r;
  SyncOptions so;
  so.wait_s = 4 * StagingLeaseBeatSeconds();
  ASSERT_OK(SyncStaging(local, path, so, &r));
  EXPECT_THAT(r.cleaned, ::testing::Contains(orphan));
  EXPECT_FALSE(std::filesystem::exists(local + "/" + orphan));
  EXPECT_EQ(r.skipped.size(), 1u) << "the live writer's open segment";
  ASSERT_OK(w->Close());
  CheckAllCommits(path, 1);
  EXPECT_TRUE(Names(Env::Default(), local).empty());
  // With force, at once.
  { std::ofstream f(local + "/" + orphan); }
  SyncReport forced;
  ASSERT_OK(SyncStaging(local, path, Forced(nullptr), &forced));
  EXPECT_THAT(forced.cleaned, ::testing::ElementsAre(orphan));
  EXPECT_TRUE(Names(Env::Default(), local).empty());
}

// A writer killed after publishing a segment and before removing its staged
// copy, and a compaction that then merged the published one away (the kill
// -9 loop of tests/kill9_test.cc found it): the placeholder is gone, and a
// compacted segment names the staged one as replaced. Sync removes the copy
// and counts it as published, rather than failing for ever.
// A writer's life: commits *commits.. *commits + 9, one Commit each, then
// Close.
void WriteLife(Store* store, const WriterOptions& o, int* commits) {
  ASSERT_OK_AND_ASSIGN(auto w, store->NewWriter(o));
  for (const int end = *commits + 10; *commits < end; ++*commits) {
    Status s;
    AppendCommit(w.get(), *commits, &s);
    ASSERT_OK(s);
    ASSERT_OK(w->Commit());
  }
  ASSERT_OK(w->Close());
}

// Copies every segment of the store at `path` into staging `local`: the
// staged copies that writers killed after publishing them would leave (the
// published bytes). Their names.
std::vector<std::string> LeaveStagedCopies(const std::string& path, const std::string& local) {
  std::vector<std::string> copied;
  for (const std::string& n : Names(Env::Default(), path + "/segments")) {
    if (!n.ends_with(".rss")) continue;
    std::filesystem::copy_file(path + "/segments/" + n, local + "/" + n);
    copied.push_back(n);
  }
  return copied;
}

// A forced sync of `local` counts each of `copied` as already published,
// ships nothing and empties staging; the store holds every commit once.
void ExpectStagedCopiesPublished(const std::string& local, const std::string& path,
                                 std::vector<std::string> copied, int commits) {
  SyncReport r;
  ASSERT_OK(SyncStaging(local, path, Forced(nullptr), &r));
  std::sort(r.already_published.begin(), r.already_published.end());
  std::sort(copied.begin(), copied.end());
  EXPECT_EQ(r.already_published, copied);
  EXPECT_TRUE(r.shipped.empty());
  EXPECT_TRUE(Names(Env::Default(), local).empty());
  CheckAllCommits(path, commits);
}

TEST(StagingSyncTest, AStagedCopyOfASegmentCompactedAwayIsCountedPublished) {
  TempDir dir;
  const std::string local = dir.path() + "/local", path = dir.path() + "/s";
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {}));
  int commits = 0;
  for (int life = 0; life < 3; ++life) {  // a segment each: a writer restarted twice
    ASSERT_NO_FATAL_FAILURE(WriteLife(store.get(), StagingOptions(local), &commits));
  }
  ASSERT_TRUE(Names(Env::Default(), local).empty());
  const std::vector<std::string> copied = LeaveStagedCopies(path, local);
  ASSERT_GE(copied.size(), 2u);
  CompactOptions co;
  co.retain_inputs_s = 0;  // the published segments are removed at once
  co.lease_refresh_s = 0;
  CompactReport cr;
  ASSERT_OK(store->Compact(co, &cr));
  for (const std::string& n : copied) {
    ASSERT_FALSE(std::filesystem::exists(path + "/segments/" + n)) << n << " was not compacted";
  }
  ExpectStagedCopiesPublished(local, path, copied, commits);
}

// The same after a second compaction merged the first one's output away too
// (a compactor run again later, with the first output among the small
// segments): the second output names the stager's segments only as
// replaced earlier, since they were gone when it ran. The staged copies
// still count as published, and a writer of the same id still numbers past
// them. Before that section, the sync failed: "the placeholder that claims
// this segment number is gone".
TEST(StagingSyncTest, AStagedCopyOfASegmentCompactedAwayTwiceIsCountedPublished) {
  TempDir dir;
  const std::string local = dir.path() + "/local", path = dir.path() + "/s";
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {}));
  int commits = 0;
  uint64_t last_seq = 0;
  auto write_life = [&](const WriterOptions& o) { WriteLife(store.get(), o, &commits); };
  for (int life = 0; life < 3; ++life) ASSERT_NO_FATAL_FAILURE(write_life(StagingOptions(local)));
  const std::vector<std::string> copied = LeaveStagedCopies(path, local);
  for (const std::string& n : copied) {
    std::string id;
    uint64_t seq = 0;
    ASSERT_TRUE(format::ParseSegmentFileName(n, &id, &seq)) << n;
    last_seq = std::max(last_seq, seq);
  }
  ASSERT_GE(copied.size(), 2u);
  CompactOptions co;
  co.retain_inputs_s = 0;
  co.lease_refresh_s = 0;
  CompactReport first, second;
  ASSERT_OK(store->Compact(co, &first));
  ASSERT_EQ(first.outputs.size(), 1u);
  // Another writer's segment, so that the second compaction has two inputs:
  // the first output and it.
  WriterOptions other;
  other.writer_id = "other";
  ASSERT_NO_FATAL_FAILURE(write_life(other));
  ASSERT_OK(store->Refresh().status());
  ASSERT_OK(store->Compact(co, &second));
  ASSERT_EQ(second.outputs.size(), 1u);
  EXPECT_FALSE(std::filesystem::exists(path + "/" + first.outputs[0]))
      << first.outputs[0] << " was not merged away";
  for (const std::string& n : copied)
    EXPECT_FALSE(std::filesystem::exists(path + "/segments/" + n));

  ExpectStagedCopiesPublished(local, path, copied, commits);

  // A new life of the stager numbers past every segment it ever had.
  ASSERT_NO_FATAL_FAILURE(write_life(StagingOptions(local)));
  ASSERT_OK_AND_ASSIGN(auto snap, store->Refresh());
  uint64_t newest = 0;
  for (const SegmentInfo& si : snap->ListSegments()) {
    if (si.writer_id == "stager") newest = std::max(newest, si.sequence);
  }
  EXPECT_GT(newest, last_seq);
  CheckAllCommits(path, commits);
}

TEST(StagingSyncTest, APublishedSegmentWithOtherBytesIsNeverReplaced) {
  TempDir dir;
  int commits = 0;
  MakeLeftovers(dir.path(), &commits);
  const std::string local = dir.path() + "/local", store = dir.path() + "/store";
  // Another writer's bytes where a staged segment's placeholder was.
  std::string staged_name;
  for (const std::string& n : Names(Env::Default(), local)) {
    if (n.ends_with(".rss")) staged_name = n;
  }
  ASSERT_FALSE(staged_name.empty());
  const std::string target = store + "/segments/" + staged_name;
  ASSERT_OK(WriteFileAtomically(Env::Default(), target, std::string(300, 'x')));
  SyncReport r;
  Status s = SyncStaging(local, store, Forced(nullptr), &r);
  EXPECT_THAT(s, testing::StatusIs(StatusCode::kAlreadyExists));
  EXPECT_NE(s.message().find(target), std::string::npos) << s.ToString();
  ASSERT_OK_AND_ASSIGN(std::string after, ReadFileToString(Env::Default(), target));
  EXPECT_EQ(after, std::string(300, 'x'));
  EXPECT_OK(Env::Default()->FileExists(local + "/" + staged_name));  // kept for a human
}

TEST(StagingSyncTest, ErrorsNameWhatIsMissing) {
  TempDir dir;
  EXPECT_THAT(SyncStaging(dir.path() + "/nope", dir.path(), Forced(nullptr), nullptr),
              testing::StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(SyncStaging(dir.path(), dir.path() + "/nostore", Forced(nullptr), nullptr),
              testing::StatusIs(StatusCode::kNotFound));
  SyncOptions too_short;
  too_short.wait_s = StagingLeaseBeatSeconds();  // one beat could be missed by chance
  EXPECT_THAT(SyncStaging(dir.path(), dir.path(), too_short, nullptr),
              testing::StatusIs(StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace runstore
