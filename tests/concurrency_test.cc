// Readers refreshing while writers commit (docs/design.md#concepts: commits are the unit of
// visibility; snapshots are repeatable; readers need no locks). Several
// writer threads append to one store on the real file system, each with its
// own Writer, and commit in groups; reader threads Refresh() in a loop and
// check every snapshot: each writer's visible records are a prefix of its
// sequence made of whole commits, never shrinking from one refresh to the
// next, with the right values; and a snapshot keeps reading the same after
// later refreshes.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runstore/store.h"
#include "testing/test_util.h"

namespace runstore {
namespace {

using ::runstore::testing::TempDir;

constexpr int kWriters = 3;
constexpr int kReaders = 2;
constexpr int kGroup = 40;  // records of each series per commit

double XValue(int w, int64_t step) { return w * 1e6 + static_cast<double>(step) * 0.5; }
std::string SValue(int w, int64_t step) {
  return "w" + std::to_string(w) + "-" + std::to_string(step) + std::string(step % 7, '.');
}

// What a reader saw of one writer in one snapshot.
struct Seen {
  int64_t x = 0;  // records [0, x) of series "x"
  int64_t s = 0;  // records [0, s) of series "s"
};

// Reads every record of "x" and "s" and checks each writer's are [0, n) with
// the right values. Returns false (with *why) on a violation.
bool ReadSnapshot(const Snapshot& snap, std::vector<Seen>* seen, std::string* why) {
  seen->assign(kWriters, Seen{});
  for (const char* name : {"x", "s"}) {
    std::vector<std::vector<int64_t>> steps(kWriters);
    auto scanner = snap.Scan(name);
    if (!scanner.ok()) {
      if (scanner.status().code() == StatusCode::kNotFound) continue;
      *why = std::string("Scan ") + name + ": " + scanner.status().ToString();
      return false;
    }
    ScanBatch b;
    while (true) {
      auto more = (*scanner)->Next(&b);
      if (!more.ok()) {
        *why = std::string("Next ") + name + ": " + more.status().ToString();
        return false;
      }
      if (!*more) break;
      for (size_t i = 0; i < b.count; ++i) {
        const RunId run = b.run(i);
        if (!run.is_int() || run.int_value() < 0 || run.int_value() >= kWriters) {
          *why = "unknown run " + run.ToString();
          return false;
        }
        const int w = static_cast<int>(run.int_value());
        const int64_t step = b.steps[i];
        const bool ok = name[0] == 'x' ? b.values.as<double>()[i] == XValue(w, step)
                                       : b.records[i].str() == SValue(w, step);
        if (!ok) {
          *why = std::string("wrong value in ") + name + " for writer " + std::to_string(w) +
                 " step " + std::to_string(step);
          return false;
        }
        steps[w].push_back(step);
      }
    }
    for (int w = 0; w < kWriters; ++w) {
      std::sort(steps[w].begin(), steps[w].end());
      for (size_t i = 0; i < steps[w].size(); ++i) {
        if (steps[w][i] != static_cast<int64_t>(i)) {
          *why = std::string("series ") + name + ", writer " + std::to_string(w) +
                 ": visible steps are not a prefix (position " + std::to_string(i) +
                 " holds step " + std::to_string(steps[w][i]) + ")";
          return false;
        }
      }
      (name[0] == 'x' ? (*seen)[w].x : (*seen)[w].s) = static_cast<int64_t>(steps[w].size());
    }
  }
  return true;
}

struct RunFigures {
  uint64_t refreshes = 0;
  uint64_t commits = 0;
  uint64_t records = 0;
  uint64_t segments = 0;
  uint64_t partial_groups_seen = 0;  // snapshots where a writer's count is not a multiple of kGroup
};

// Runs the writers and readers. Every snapshot must show each writer's
// groups whole (neither a segment roll nor anything else commits part of
// one) and a prefix of its records that never shrinks.
void RunWritersAndReaders(const WriterOptions& base, int groups, RunFigures* fig) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(path, {}));
  std::atomic<int> writers_left{kWriters};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::string failure;
  auto fail = [&](const std::string& why) {
    std::lock_guard lk(mu);
    if (failure.empty()) failure = why;
    failed = true;
  };
  std::atomic<uint64_t> commits{0}, refreshes{0}, partial{0};

  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      WriterOptions wo = base;
      wo.writer_id = "writer" + std::to_string(w);
      auto writer = store->NewWriter(wo);
      if (!writer.ok()) {
        fail("NewWriter: " + writer.status().ToString());
        --writers_left;
        return;
      }
      int64_t step = 0;
      for (int g = 0; g < groups && !failed; ++g) {
        for (int i = 0; i < kGroup; ++i, ++step) {
          Status s = (*writer)->Append(w, "x", step, XValue(w, step));
          if (s.ok()) s = (*writer)->Append(w, "s", step, ValueRef::String(SValue(w, step)));
          if (!s.ok()) {
            fail("Append: " + s.ToString());
            break;
          }
        }
        Status s = (*writer)->Commit();
        if (!s.ok()) fail("Commit: " + s.ToString());
        ++commits;
      }
      Status s = (*writer)->Close();
      if (!s.ok()) fail("Close: " + s.ToString());
      --writers_left;
    });
  }
  std::vector<std::shared_ptr<const Snapshot>> kept(kReaders);
  std::vector<std::vector<Seen>> kept_seen(kReaders);
  for (int r = 0; r < kReaders; ++r) {
    threads.emplace_back([&, r] {
      StoreOptions ro;
      ro.read_only = true;
      auto reader = Store::Open(path, ro);
      if (!reader.ok()) return fail("reader open: " + reader.status().ToString());
      std::vector<Seen> last(kWriters);
      int n = 0;
      while (!failed) {
        const bool writers_done = writers_left == 0;
        auto snap = (*reader)->Refresh();
        if (!snap.ok()) return fail("Refresh: " + snap.status().ToString());
        ++refreshes;
        std::vector<Seen> seen;
        std::string why;
        if (!ReadSnapshot(**snap, &seen, &why)) return fail(why);
        for (int w = 0; w < kWriters; ++w) {
          const std::string who = "reader " + std::to_string(r) + ", writer " + std::to_string(w);
          if (seen[w].x < last[w].x || seen[w].s < last[w].s) {
            return fail(who + ": a refresh lost records (" + std::to_string(last[w].x) + " -> " +
                        std::to_string(seen[w].x) + ")");
          }
          const bool whole = seen[w].x % kGroup == 0 && seen[w].s == seen[w].x;
          if (!whole) {
            ++partial;
            return fail(who + ": a commit is partly visible (x " + std::to_string(seen[w].x) +
                        ", s " + std::to_string(seen[w].s) + " records; commits hold " +
                        std::to_string(kGroup) + " of each)");
          }
        }
        last = seen;
        // Keep one early snapshot to check, in the end, that it still reads the same.
        if (++n == 5) {
          kept[r] = *snap;
          kept_seen[r] = seen;
        }
        if (writers_done) break;
      }
      // Everything, once the writers are done.
      for (int w = 0; w < kWriters && !failed; ++w) {
        if (last[w].x != int64_t{groups} * kGroup || last[w].s != last[w].x) {
          fail("reader " + std::to_string(r) + ": writer " + std::to_string(w) + " ends with " +
               std::to_string(last[w].x) + " records");
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_FALSE(failed) << failure;
  for (int r = 0; r < kReaders; ++r) {
    if (!kept[r]) continue;
    std::vector<Seen> again;
    std::string why;
    ASSERT_TRUE(ReadSnapshot(*kept[r], &again, &why)) << why;
    for (int w = 0; w < kWriters; ++w) {
      EXPECT_EQ(again[w].x, kept_seen[r][w].x) << "an old snapshot changed";
      EXPECT_EQ(again[w].s, kept_seen[r][w].s) << "an old snapshot changed";
    }
  }
  ASSERT_OK_AND_ASSIGN(auto final_snap, store->Refresh());
  fig->refreshes = refreshes;
  fig->commits = commits;
  fig->records = uint64_t{kWriters} * groups * kGroup * 2;
  fig->segments = final_snap->ListSegments().size();
  fig->partial_groups_seen = partial;
}

void Print(const char* title, const RunFigures& f) {
  std::printf(
      "[ figures  ] %s: writers=%d readers=%d commits=%llu records=%llu segments=%llu "
      "refreshes checked=%llu snapshots with a partly visible group=%llu\n",
      title, kWriters, kReaders, static_cast<unsigned long long>(f.commits),
      static_cast<unsigned long long>(f.records), static_cast<unsigned long long>(f.segments),
      static_cast<unsigned long long>(f.refreshes),
      static_cast<unsigned long long>(f.partial_groups_seen));
  std::fflush(stdout);
}

TEST(ConcurrencyTest, RefreshingReadersSeeEachWritersCommitsWholeInOrderAndNeverLoseThem) {
  WriterOptions wo;
  wo.buffer_bytes = 1 << 20;
  wo.block_bytes = 4096;  // blocks reach the file before their commit
  RunFigures fig;
  RunWritersAndReaders(wo, /*groups=*/500, &fig);
  Print("whole commits", fig);
  EXPECT_GT(fig.refreshes, 10u);
}

// A segment that reaches its size target is sealed at the next commit
// (writer.h, segment_bytes): groups are never split by a roll, and readers
// see whole groups, a prefix of each writer's records that never shrinks,
// across the sealed segments and the new ones.
TEST(ConcurrencyTest, RefreshingReadersFollowWritersAcrossSegmentRolls) {
  WriterOptions wo;
  wo.buffer_bytes = 1 << 20;
  wo.block_bytes = 4096;
  wo.segment_bytes = 64 << 10;
  RunFigures fig;
  RunWritersAndReaders(wo, /*groups=*/500, &fig);
  Print("segment rolls", fig);
  EXPECT_GT(fig.segments, uint64_t{kWriters} * 3) << "the writers should roll several segments";
}

}  // namespace
}  // namespace runstore
