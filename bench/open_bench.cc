// open_bench: the time to open a store of many segments, with the catalog
// and without it, in the same run (docs/design.md#catalog).
//
// Target (cluster-scale issue): a store of 10,000 segments opens in at most
// 0.1 s and one of 100,000 in at most 0.5 s with the catalog.
//
// The store is what a SLURM array of N tasks leaves: N writers ("task-NNNNNN"),
// each one sealed segment holding one experiment under a hashed id (a float64
// outcome and a float32[16] trace). The segments are written through the
// format layer with fsync turned off, because only opening is measured;
// opening is timed with the page cache warm (the files were just written),
// three times each, and the median reported.
//
//   ./open_bench [--segments 10000,100000] [--keep]
//   ./open_bench --reopen STORE [--times K]   opens a kept store K times (10)
//                                              with its catalog, for profiling
//
// The store goes under $RUNSTORE_BENCH_DIR, else /var/tmp (bench_util.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.h"
#include "format/block.h"
#include "format/segment_writer.h"
#include "runstore/store.h"
#include "util/hash.h"

namespace runstore::bench {
namespace {

std::string HashedId(uint64_t i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "e%016llx",
                static_cast<unsigned long long>(Checksum(&i, sizeof i)));
  return buf;
}

// Segments [from, to) of the array, one experiment each.
void WriteTasks(Env* env, const std::string& store, uint64_t from, uint64_t to) {
  format::BlockBuilder loss(format::BlockSchema{"loss", DType::kFloat64});
  format::BlockBuilder trace(format::BlockSchema{"trace", DType::kFloat32, false, {16}});
  std::vector<std::string_view> pieces;
  std::vector<uint64_t> hashes;
  std::vector<float> t(16);
  const int64_t shape[] = {16};
  for (uint64_t i = from; i < to; ++i) {
    char id[32];
    std::snprintf(id, sizeof id, "task-%06llu", static_cast<unsigned long long>(i));
    format::SegmentHeader h{format::kSegmentFormatVersion, env->NowNanos(), 1, id};
    auto w = CheckValue(format::SegmentWriter::Create(
                            env, store + "/segments/" + format::SegmentFileName(id, 1), h),
                        "create segment");
    const std::string run = HashedId(i);
    const double v = 0.5 * static_cast<double>(i);
    std::fill(t.begin(), t.end(), static_cast<float>(i));
    loss.Reset(format::BlockSchema{"loss", DType::kFloat64});
    trace.Reset(format::BlockSchema{"trace", DType::kFloat32, false, {16}});
    loss.Add(RunRef(run), 0, ValueRef::Scalar(v));
    trace.Add(RunRef(run), 0, ValueRef::Array(t.data(), shape));
    for (format::BlockBuilder* b : {&loss, &trace}) {
      format::BlockHeader bh;
      b->Finish(&bh, &pieces);
      b->RunHashes(&hashes);
      Check(w->AddBlock(&bh, pieces, hashes, 3), "add block");
    }
    Check(w->Commit(env->NowNanos(), /*sync=*/false), "commit");
    Check(w->Seal(), "seal");
  }
}

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The median of three opens, read-only, with or without the catalog; checks
// that every segment is there and that a lookup by hashed id answers.
double TimeOpen(const std::string& path, bool catalog, uint64_t n, RefreshStats* stats,
                double* first_get_s) {
  std::vector<double> t, g;
  for (int k = 0; k < 3; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    auto store = CheckValue(Store::Open(path, {.read_only = true, .use_catalog = catalog}), "open");
    t.push_back(SecondsSince(t0));
    *stats = store->last_refresh();
    if (stats->segments != n) {
      std::fprintf(stderr, "open_bench: %llu segments, expected %llu\n",
                   static_cast<unsigned long long>(stats->segments),
                   static_cast<unsigned long long>(n));
      std::exit(1);
    }
    const auto t1 = std::chrono::steady_clock::now();
    auto v = CheckValue(store->GetSnapshot()->Get(RunRef(HashedId(n / 2)), "loss", 0), "get");
    g.push_back(SecondsSince(t1));
    if (v.scalar<double>() != 0.5 * static_cast<double>(n / 2)) {
      std::fprintf(stderr, "open_bench: wrong value\n");
      std::exit(1);
    }
  }
  std::sort(t.begin(), t.end());
  std::sort(g.begin(), g.end());
  *first_get_s = g[1];
  return t[1];
}

// Opens a store kept by --keep `times` times with its catalog and prints
// each time and the median: the loop to run under a profiler.
int Reopen(const std::string& path, int times) {
  std::vector<double> t;
  for (int k = 0; k < times; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    auto store = CheckValue(Store::Open(path, {.read_only = true}), "open");
    t.push_back(SecondsSince(t0));
    const RefreshStats st = store->last_refresh();
    // The first lookup builds the series' key order (docs/design.md#catalog).
    const auto t1 = std::chrono::steady_clock::now();
    CheckValue(store->GetSnapshot()->Get(RunRef(HashedId(st.segments / 2)), "loss", 0), "get");
    const double get_s = SecondsSince(t1);
    std::printf(
        "open %d: %.3f s, then the first get %.3f s (%llu segments, %llu from the catalog)\n", k,
        t.back(), get_s, static_cast<unsigned long long>(st.segments),
        static_cast<unsigned long long>(st.from_catalog));
  }
  std::sort(t.begin(), t.end());
  std::printf("median %.3f s\n", t[t.size() / 2]);
  return 0;
}

int Main(int argc, char** argv) {
  std::vector<uint64_t> sizes = {10000, 100000};
  bool keep = false;
  std::string reopen;
  int times = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--segments" && i + 1 < argc) {
      sizes.clear();
      std::string list = argv[++i];
      for (size_t p = 0; p <= list.size();) {
        size_t q = list.find(',', p);
        if (q == std::string::npos) q = list.size();
        sizes.push_back(std::stoull(list.substr(p, q - p)));
        p = q + 1;
      }
    } else if (a == "--keep") {
      keep = true;
    } else if (a == "--reopen" && i + 1 < argc) {
      reopen = argv[++i];
    } else if (a == "--times" && i + 1 < argc) {
      times = std::max(1, std::stoi(argv[++i]));
    } else {
      std::fprintf(stderr,
                   "usage: open_bench [--segments N,N...] [--keep] | --reopen STORE [--times K]\n");
      return 2;
    }
  }
  if (!reopen.empty()) return Reopen(reopen, times);
  std::printf("open_bench: %s, file system %s\n", CpuModel().c_str(),
              FsTypeName(BenchBaseDir()).c_str());
  std::printf("%10s %14s %14s %8s %12s %12s\n", "segments", "no catalog", "catalog", "ratio",
              "catalog MiB", "target");
  NoSyncEnv env(Env::Default());
  for (const uint64_t n : sizes) {
    TempDir tmp("runstore-open-bench");
    const std::string path = tmp.path() + "/store";
    CheckValue(Store::Open(path, {}), "create store");
    const auto t0 = std::chrono::steady_clock::now();
    WriteTasks(&env, path, 0, n);
    const double write_s = SecondsSince(t0);
    RefreshStats plain_stats, cat_stats;
    double plain_get, cat_get;
    const double plain = TimeOpen(path, false, n, &plain_stats, &plain_get);
    {
      auto store = CheckValue(Store::Open(path, {.env = &env, .catalog_rewrite_segments = 0}),
                              "open for the catalog");
      CheckValue(store->WriteCatalog(), "write catalog");
    }
    const double cat = TimeOpen(path, true, n, &cat_stats, &cat_get);
    const double target = n <= 10000 ? 0.1 : 0.5;
    const double mib =
        static_cast<double>(std::filesystem::file_size(path + "/CATALOG")) / (1 << 20);
    std::printf(
        "%10llu %12.3f s %12.3f s %7.1fx %12.1f %9.1f s %s  (from catalog %llu; first get "
        "%.3f s, %.3f s with the catalog; written in %.1f s)\n",
        static_cast<unsigned long long>(n), plain, cat, plain / cat, mib, target,
        cat <= target ? "PASS" : "MISS", static_cast<unsigned long long>(cat_stats.from_catalog),
        plain_get, cat_get, write_s);
    if (keep) {
      tmp.Release();
      std::printf("kept %s\n", path.c_str());
    }
  }
  return 0;
}

}  // namespace
}  // namespace runstore::bench

int main(int argc, char** argv) { return runstore::bench::Main(argc, argv); }
