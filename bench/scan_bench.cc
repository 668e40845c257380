// scan_bench: column scan of an uncompressed float64 series of 256 MiB of
// values (32 Mi records), summing every value so that every byte is read.
//
// Target (performance issue, item 3): at least 2 GB/s (2e9 bytes/s) of value
// bytes for opening the store + Scan over every batch + the sum. Variants:
//   cold_open     the segment files are evicted from the page cache first
//                 (fdatasync + POSIX_FADV_DONTNEED): the first scan from disk.
//   warm_open     page cache warm; a fresh Store::Open each time, so the scan
//                 maps the segment and verifies each block's checksum again.
//   warm_refresh  one open Store; Refresh() then Scan: blocks already
//                 verified and mapped by an earlier snapshot are reused.
//   .../values_only  the same with ScanOptions::keys = false: the key
//                 columns are not handed out (built, where they are stored
//                 as sequences). No target.
// bytes_per_second counts value bytes only; stored_Bps counts every byte of
// the series' blocks (run and step columns too).
//
// BM_ScanOneRun: the records of one run of the 32,768 (1,024 steps each), as a
// caller reads one run's curve, opening the store each time (cold: evicted
// first). runs_option: Scan with ScanOptions::runs, which reads only the
// blocks whose run range holds the run; full_scan: what a caller without it
// does, a scan of the whole series keeping the run's rows. No target.
//
//   RUNSTORE_BENCH_DIR=/var/tmp ./scan_bench --benchmark_repetitions=3
#include <cmath>
#include <cstring>

#include "bench_util.h"
#include "runstore/store.h"

namespace runstore::bench {
namespace {

constexpr uint64_t kSeed = 0x5eed'0003;
constexpr uint64_t kRecords = uint64_t{32} << 20;  // 256 MiB of float64
constexpr int64_t kStepsPerRun = 1024;

struct ScanFixture {
  ScanFixture() : dir("runstore-scan") {
    auto store = CheckValue(Store::Open(dir.Sub("store"), {}), "Store::Open");
    auto writer = CheckValue(store->NewWriter({}), "NewWriter");
    uint64_t s = kSeed;
    for (uint64_t i = 0; i < kRecords; ++i) {
      const double v = static_cast<double>(XorShift64(&s) >> 11) * 0x1.0p-53;
      expected_sum += v;
      Check(writer->Append(static_cast<int64_t>(i / kStepsPerRun), "x",
                           static_cast<int64_t>(i % kStepsPerRun), v),
            "Append");
    }
    Check(writer->Close(), "Close");
    auto info =
        CheckValue(CheckValue(store->Refresh(), "Refresh")->GetSeriesInfo("x"), "GetSeriesInfo");
    stored_bytes = info.stored_bytes;
    if (info.count != kRecords) {
      std::fprintf(stderr, "scan fixture: %llu records visible, expected %llu\n",
                   static_cast<unsigned long long>(info.count),
                   static_cast<unsigned long long>(kRecords));
      std::abort();
    }
  }
  TempDir dir;
  double expected_sum = 0;
  uint64_t stored_bytes = 0;
};
ScanFixture& TheFixture() {
  static ScanFixture f;
  return f;
}

// Sums every value of series "x" in the snapshot. Eight accumulators so that
// the sum is bound by memory, not by the latency of one add chain.
double SumSeries(const Snapshot& snap, uint64_t* count, bool keys = true) {
  auto scanner = CheckValue(snap.Scan("x", ScanOptions{.keys = keys}), "Scan");
  double acc[8] = {};
  uint64_t n = 0;
  ScanBatch batch;
  while (CheckValue(scanner->Next(&batch), "Next")) {
    const std::span<const double> v = batch.values.as<double>();
    size_t i = 0;
    for (; i + 8 <= v.size(); i += 8) {
      for (int k = 0; k < 8; ++k) acc[k] += v[i + k];
    }
    for (; i < v.size(); ++i) acc[0] += v[i];
    n += batch.count;
  }
  *count = n;
  double sum = 0;
  for (double a : acc) sum += a;
  return sum;
}

void CheckSum(benchmark::State& state, double sum, uint64_t count) {
  const double expected = TheFixture().expected_sum;
  if (count != kRecords || std::abs(sum - expected) > 1e-6 * expected) {
    state.SkipWithError("scan returned wrong records");
  }
}

void SetRates(benchmark::State& state) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kRecords * sizeof(double)));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kRecords));
  state.counters["stored_Bps"] = benchmark::Counter(static_cast<double>(TheFixture().stored_bytes),
                                                    benchmark::Counter::kIsIterationInvariantRate,
                                                    benchmark::Counter::kIs1024);
  // bytes_per_second in decimal units, for the 2 GB/s target.
  state.counters["value_GBps"] =
      benchmark::Counter(static_cast<double>(kRecords * sizeof(double)) / 1e9,
                         benchmark::Counter::kIsIterationInvariantRate);
}

void BM_ScanF64(benchmark::State& state, bool evict, bool reopen, bool keys) {
  ScanFixture& f = TheFixture();
  const std::string path = f.dir.Sub("store");
  std::unique_ptr<Store> kept;
  if (!reopen) {
    kept = CheckValue(Store::Open(path, {.read_only = true}), "Store::Open");
    uint64_t n;
    (void)SumSeries(*kept->GetSnapshot(), &n);  // map and verify once
  }
  for (auto _ : state) {
    if (evict) {
      state.PauseTiming();
      EvictFromPageCache(path);
      state.ResumeTiming();
    }
    std::unique_ptr<Store> opened;
    std::shared_ptr<const Snapshot> snap;
    if (reopen) {
      opened = CheckValue(Store::Open(path, {.read_only = true}), "Store::Open");
      snap = opened->GetSnapshot();
    } else {
      snap = CheckValue(kept->Refresh(), "Refresh");
    }
    uint64_t n = 0;
    const double sum = SumSeries(*snap, &n, keys);
    state.PauseTiming();
    CheckSum(state, sum, n);
    snap.reset();
    opened.reset();
    state.ResumeTiming();
  }
  SetRates(state);
}

void BM_ScanOneRun(benchmark::State& state, bool evict, bool runs_option) {
  ScanFixture& f = TheFixture();
  const std::string path = f.dir.Sub("store");
  const int64_t runs = static_cast<int64_t>(kRecords) / kStepsPerRun;
  uint64_t s = kSeed;
  for (auto _ : state) {
    state.PauseTiming();
    const int64_t run = static_cast<int64_t>(XorShift64(&s) % static_cast<uint64_t>(runs));
    if (evict) EvictFromPageCache(path);
    state.ResumeTiming();
    auto store = CheckValue(Store::Open(path, {.read_only = true}), "Store::Open");
    ScanOptions options;
    if (runs_option) options.runs = std::vector<RunId>{run};
    auto scanner = CheckValue(store->GetSnapshot()->Scan("x", options), "Scan");
    double sum = 0;
    int64_t count = 0, next_step = 0;
    bool in_order = true;
    ScanBatch batch;
    while (CheckValue(scanner->Next(&batch), "Next")) {
      const std::span<const double> v = batch.values.as<double>();
      for (size_t i = 0; i < batch.count; ++i) {
        if (batch.int_runs[i] != run) continue;
        in_order = in_order && batch.steps[i] == next_step++;
        sum += v[i];
        ++count;
      }
    }
    state.PauseTiming();
    if (count != kStepsPerRun || !in_order || !(sum > 0)) {
      state.SkipWithError("the scan of one run returned wrong records");
    }
    state.ResumeTiming();
  }
}

void Register() {
  benchmark::AddCustomContext("seed", std::to_string(kSeed));
  auto reg = [](const char* name, bool evict, bool reopen, bool keys) {
    auto* b = benchmark::RegisterBenchmark(
        name, [=](benchmark::State& s) { BM_ScanF64(s, evict, reopen, keys); });
    WithMinMax(b)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);
  };
  reg("BM_ScanF64/256MiB/cold_open", true, true, true);
  reg("BM_ScanF64/256MiB/warm_open", false, true, true);
  reg("BM_ScanF64/256MiB/warm_refresh", false, false, true);
  // The same without the key columns (ScanOptions::keys = false), no target.
  reg("BM_ScanF64/256MiB/cold_open/values_only", true, true, false);
  reg("BM_ScanF64/256MiB/warm_refresh/values_only", false, false, false);
  for (bool evict : {true, false}) {
    for (bool option : {true, false}) {
      const std::string name = std::string("BM_ScanOneRun/") + (evict ? "cold_open" : "warm_open") +
                               (option ? "/runs_option" : "/full_scan");
      auto* b = benchmark::RegisterBenchmark(
          name.c_str(), [=](benchmark::State& st) { BM_ScanOneRun(st, evict, option); });
      WithMinMax(b)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);
    }
  }
  for (const char* v : {"cold_open", "warm_open", "warm_refresh"}) {
    AddTarget({std::string("BM_ScanF64/256MiB/") + v, "value_GBps", 2.0, true, "GB/s",
               std::string("item 3: scan + sum of uncompressed float64 values (") + v + ")"});
  }
}

}  // namespace
}  // namespace runstore::bench

int main(int argc, char** argv) {
  runstore::bench::Register();
  return runstore::bench::BenchMain(argc, argv);
}
