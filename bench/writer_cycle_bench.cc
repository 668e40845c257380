// writer_cycle_bench: a store of N segments made the way a SLURM array or a
// Dask sweep makes it, by N writer open/log/close cycles into one store, then
// everything that reads it whole.
//
// Target (cluster-scale issue): the time to open a writer stays flat from
// the first cycle to the last (it lists nothing and reads no other
// segment); the store of 100,000 segments then opens in at most 0.5 s with
// its catalog and 2 s without, and compacts, verifies and scans under the
// system's default limits.
//
// Each cycle opens a writer of a default id on one Store (as a worker
// process that keeps its store open does), logs one experiment under a
// hashed id (a float64 outcome and a float32[16] trace) and closes it, which
// seals its segment. Syncs are skipped unless --sync: the figure is the
// writer's open, not the disk's fsync. The cycles are reported in tenths:
// the median and the 99th percentile of the open, and the median cycle.
//
//   ./writer_cycle_bench [--cycles 100000] [--sync] [--keep]
//
// The store goes under $RUNSTORE_BENCH_DIR, else /var/tmp (bench_util.h).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_util.h"
#include "runstore/store.h"

namespace runstore::bench {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The experiment id of cycle i, as a sweep's hashed ids look: 16 hex digits
// of a splitmix64 of i.
std::string HashedId(uint64_t i) {
  uint64_t z = i + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(z));
  return buf;
}

double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

long PeakRssMiB() {
  struct rusage u {};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024;
}

// The median of three read-only opens, with or without the catalog.
double TimeOpen(const std::string& path, bool catalog, uint64_t n) {
  std::vector<double> t;
  for (int k = 0; k < 3; ++k) {
    const auto t0 = Clock::now();
    auto store = CheckValue(Store::Open(path, {.read_only = true, .use_catalog = catalog}), "open");
    t.push_back(SecondsSince(t0));
    if (store->last_refresh().segments != n) {
      std::fprintf(stderr, "writer_cycle_bench: %llu segments, expected %llu\n",
                   static_cast<unsigned long long>(store->last_refresh().segments),
                   static_cast<unsigned long long>(n));
      std::exit(1);
    }
  }
  return Quantile(t, 0.5);
}

// Every record of "loss" in the store's current snapshot, checked against
// what cycle i logged (and the one record of 0.0 logged after them).
double TimeScan(Store* store, uint64_t n) {
  const auto t0 = Clock::now();
  auto snap = store->GetSnapshot();
  auto scanner = CheckValue(snap->Scan("loss"), "scan");
  ScanBatch batch;
  uint64_t records = 0;
  double sum = 0;
  while (CheckValue(scanner->Next(&batch), "next")) {
    records += batch.count;
    const auto* v = reinterpret_cast<const double*>(batch.values.data());
    for (size_t i = 0; i < batch.count; ++i) sum += v[i];
  }
  const double s = SecondsSince(t0);
  const double expected = 0.5 * static_cast<double>(n) * static_cast<double>(n - 1) / 2;
  if (records != n + 1 || sum != expected) {
    std::fprintf(stderr, "writer_cycle_bench: scan read %llu records summing to %.1f\n",
                 static_cast<unsigned long long>(records), sum);
    std::exit(1);
  }
  return s;
}

int Main(int argc, char** argv) {
  uint64_t cycles = 100000;
  bool sync = false;
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--cycles" && i + 1 < argc) {
      cycles = std::max<uint64_t>(10, std::stoull(argv[++i]));
    } else if (a == "--sync") {
      sync = true;
    } else if (a == "--keep") {
      keep = true;
    } else {
      std::fprintf(stderr, "usage: writer_cycle_bench [--cycles N] [--sync] [--keep]\n");
      return 2;
    }
  }
  std::printf("writer_cycle_bench: %s, file system %s, %llu cycles, syncs %s\n", CpuModel().c_str(),
              FsTypeName(BenchBaseDir()).c_str(), static_cast<unsigned long long>(cycles),
              sync ? "on" : "skipped");
  TempDir tmp("runstore-writer-cycle-bench");
  const std::string path = tmp.path() + "/store";
  NoSyncEnv no_sync(Env::Default());
  StoreOptions so;
  so.env = sync ? Env::Default() : &no_sync;
  auto store = CheckValue(Store::Open(path, so), "create store");

  std::vector<double> open_s(cycles), cycle_s(cycles);
  std::vector<float> trace(16);
  const int64_t shape[] = {16};
  for (uint64_t i = 0; i < cycles; ++i) {
    const auto t0 = Clock::now();
    auto w = CheckValue(store->NewWriter({}), "open writer");
    open_s[i] = SecondsSince(t0);
    const std::string run = HashedId(i);
    std::fill(trace.begin(), trace.end(), static_cast<float>(i));
    const double loss = 0.5 * static_cast<double>(i);
    Check(w->Append(RunRef(run), "loss", 0, ValueRef::Scalar(loss)), "append");
    Check(w->Append(RunRef(run), "trace", 0, ValueRef::Array(trace.data(), shape)), "append");
    Check(w->Close(), "close");
    cycle_s[i] = SecondsSince(t0);
  }
  std::printf("\n%-22s %14s %14s %14s\n", "cycles", "open median", "open p99", "cycle median");
  const uint64_t tenth = cycles / 10;
  double first = 0, last = 0;
  for (uint64_t d = 0; d < 10; ++d) {
    const auto b = static_cast<std::ptrdiff_t>(d * tenth);
    const auto e = static_cast<std::ptrdiff_t>(d == 9 ? cycles : (d + 1) * tenth);
    std::vector<double> o(open_s.begin() + b, open_s.begin() + e);
    std::vector<double> c(cycle_s.begin() + b, cycle_s.begin() + e);
    const double med = Quantile(o, 0.5);
    if (d == 0) first = med;
    if (d == 9) last = med;
    char range[48];
    std::snprintf(range, sizeof range, "%llu-%llu", static_cast<unsigned long long>(b + 1),
                  static_cast<unsigned long long>(e));
    std::printf("%-22s %11.1f us %11.1f us %11.1f us\n", range, med * 1e6, Quantile(o, 0.99) * 1e6,
                Quantile(c, 0.5) * 1e6);
  }
  std::printf("writer open, last tenth / first tenth: %.2fx (target: flat, about 1x)\n",
              last / first);

  const auto r0 = Clock::now();
  CheckValue(store->Refresh(), "refresh");
  const double refresh_s = SecondsSince(r0);
  // A refresh costs in proportion to what changed: nothing, then one segment.
  const auto r1 = Clock::now();
  CheckValue(store->Refresh(), "refresh");
  const double refresh_none_s = SecondsSince(r1);
  // One new segment holding one record of `series`; the refresh that reads
  // it, timed, and whether it built the snapshot anew.
  auto one_more = [&](const char* series, double value) {
    auto w = CheckValue(store->NewWriter({}), "open writer");
    Check(w->Append(RunRef("extra"), series, 0, ValueRef::Scalar(value)), "append");
    Check(w->Close(), "close");
    const auto t0 = Clock::now();
    CheckValue(store->Refresh(), "refresh");
    return std::make_pair(SecondsSince(t0), store->last_refresh().rebuilt);
  };
  const auto [refresh_one_s, one_rebuilt] = one_more("extra", -1);
  // One of a series every segment holds: that series is made again (its
  // blocks copied), the others are kept.
  const auto [refresh_loss_s, loss_rebuilt] = one_more("loss", 0);
  // A run resumed from step 1 by a writer that goes on committing: its marker
  // in an open segment, read again at each refresh; every series whose
  // blocks may hold the run (with hashed ids, each block's run range: all of
  // them) is made again, none rebuilt. ("loss" holds the run at step 0 only:
  // its records stay as they were.)
  auto resumer = CheckValue(store->NewWriter({}), "open writer");
  Check(resumer->Resume(RunRef("extra"), 1), "resume");
  // One more record of the resumed run committed, and the refresh that reads it.
  auto commit_resumed = [&](int64_t step, double value) {
    Check(resumer->Append(RunRef("extra"), "extra", step, ValueRef::Scalar(value)), "append");
    Check(resumer->Commit(), "commit");
    const auto t0 = Clock::now();
    CheckValue(store->Refresh(), "refresh");
    return std::make_pair(SecondsSince(t0), store->last_refresh().rebuilt);
  };
  const auto [refresh_marker_s, marker_rebuilt] = commit_resumed(1, 1.0);
  const auto [refresh_grown_s, grown_rebuilt] = commit_resumed(2, 2.0);
  Check(resumer->Close(), "close");
  const auto c0 = Clock::now();
  const uint64_t catalog = CheckValue(store->WriteCatalog(), "write catalog");
  const double catalog_s = SecondsSince(c0);
  store.reset();
  const double with_catalog = TimeOpen(path, true, cycles + 3);
  const double without = TimeOpen(path, false, cycles + 3);
  std::printf(
      "\nrefresh of the writing store: %.3f s with all %llu segments new, %.3f s "
      "with none, %.3f s with one of a new series (%s), %.3f s with one of \"loss\" (%s)\n",
      refresh_s, static_cast<unsigned long long>(cycles), refresh_none_s, refresh_one_s,
      one_rebuilt ? "rebuilt" : "extended", refresh_loss_s, loss_rebuilt ? "rebuilt" : "extended");
  std::printf(
      "refresh after a run resumed in an open segment: %.3f s (%s), after that segment grew: "
      "%.3f s (%s)\n",
      refresh_marker_s, marker_rebuilt ? "rebuilt" : "extended", refresh_grown_s,
      grown_rebuilt ? "rebuilt" : "extended");
  std::printf("catalog of %llu segments written in %.3f s\n",
              static_cast<unsigned long long>(catalog), catalog_s);
  std::printf("open with the catalog: %.3f s (target 0.5 s), without: %.3f s (target 2 s)\n",
              with_catalog, without);

  store = CheckValue(Store::Open(path, so), "reopen");
  const double scan_s = TimeScan(store.get(), cycles);
  const auto v0 = Clock::now();
  const VerifyReport vr = CheckValue(store->Refresh(), "refresh")->VerifyAll();
  const double verify_s = SecondsSince(v0);
  if (!vr.problems.empty() || !vr.unchecked.empty() || vr.segments != cycles + 3) {
    std::fprintf(stderr, "writer_cycle_bench: verify found %zu problems, %zu unchecked\n",
                 vr.problems.size(), vr.unchecked.size());
    return 1;
  }
  CompactOptions co;
  co.retain_inputs_s = 0;
  CompactReport report;
  const auto k0 = Clock::now();
  Check(store->Compact(co, &report), "compact");
  const double compact_s = SecondsSince(k0);
  const auto f0 = Clock::now();
  CheckValue(store->Refresh(), "refresh after compaction");
  const double refresh_after_s = SecondsSince(f0);
  const double scan_after_s = TimeScan(store.get(), cycles);
  std::printf("scan of %llu records: %.3f s; verify of %llu segments: %.3f s\n",
              static_cast<unsigned long long>(cycles), scan_s,
              static_cast<unsigned long long>(vr.segments), verify_s);
  std::printf(
      "compact --retain 0: %.3f s (%zu inputs, %zu outputs); then a refresh %.3f s and a scan "
      "%.3f s\n",
      compact_s, report.inputs.size(), report.outputs.size(), refresh_after_s, scan_after_s);
  const auto w0 = Clock::now();
  auto w = CheckValue(store->NewWriter({}), "open writer after compaction");
  std::printf("a writer opened after the compaction: %.1f us\n", SecondsSince(w0) * 1e6);
  Check(w->Close(), "close");
  std::printf("peak RSS of this process: %ld MiB\n", PeakRssMiB());
  if (keep) {
    tmp.Release();
    std::printf("kept: %s\n", path.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace runstore::bench

int main(int argc, char** argv) { return runstore::bench::Main(argc, argv); }
