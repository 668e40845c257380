// array_bench: large arrays. Writing 8 MiB float64 arrays with a commit
// each, against write()+fdatasync() of the same bytes in the same directory
// (written in 1 MiB windows, writeback of each started at once with
// sync_file_range, which is the fastest way we found to make this disk take
// them; runstore's writer does the same); and the latency of Get for an 8 MiB uncompressed array,
// which is a view into the mapped segment (zero-copy), and of GetLazy and a
// strided sample of it.
//
// Target (performance issue, item 2): runstore reaches at least 90% of the
// throughput of the baseline measured in the same run (ratio = runstore
// bytes/s over baseline bytes/s; pair_ratio_med = the median over arrays of
// baseline time / runstore time). Each iteration writes kArrays arrays both
// ways, alternating array by array.
//
//   RUNSTORE_BENCH_DIR=/var/tmp ./array_bench --benchmark_repetitions=3
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "bench_util.h"
#include "runstore/store.h"

namespace runstore::bench {
namespace {

constexpr uint64_t kSeed = 0x5eed'0002;
constexpr int64_t kArrayElems = int64_t{1} << 20;  // 8 MiB of float64
constexpr size_t kArrayBytes = kArrayElems * sizeof(double);
constexpr int kArrays = 32;  // per burst: 256 MiB

using Clock = std::chrono::steady_clock;

// The source array: random doubles, page aligned.
std::shared_ptr<double> MakeArray(uint64_t seed) {
  std::shared_ptr<double> a(static_cast<double*>(std::aligned_alloc(4096, kArrayBytes)),
                            [](double* p) { std::free(p); });
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> dist;
  for (int64_t i = 0; i < kArrayElems; ++i) a.get()[i] = dist(rng);
  return a;
}

// Writes n bytes at the end of fd (at *offset), a 1 MiB window at a time,
// starting the writeback of each window before copying the next.
void WriteAll(int fd, const char* p, size_t n, off_t* offset) {
  constexpr size_t kWindow = size_t{1} << 20;
  while (n > 0) {
    ssize_t w = ::write(fd, p, std::min(n, kWindow));
    if (w < 0) {
      if (errno == EINTR) continue;
      std::perror("write");
      std::abort();
    }
    (void)::sync_file_range(fd, *offset, w, SYNC_FILE_RANGE_WRITE);
    *offset += w;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// The baseline: one growing file, windowed write() + fdatasync() per array. Creating
// the file (and syncing its directory, as runstore does for a new segment)
// counts towards the first array.
class Baseline {
 public:
  explicit Baseline(std::string dir) : dir_(std::move(dir)), path_(dir_ + "/baseline.bin") {}
  ~Baseline() {
    if (fd_ >= 0) ::close(fd_);
    RemoveAll(path_);
  }
  // Seconds.
  double Write(const double* data) {
    const auto start = Clock::now();
    if (fd_ < 0) {
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd_ < 0) {
        std::perror(path_.c_str());
        std::abort();
      }
      int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      (void)::fsync(dfd);
      ::close(dfd);
    }
    WriteAll(fd_, reinterpret_cast<const char*>(data), kArrayBytes, &offset_);
    if (::fdatasync(fd_) != 0) {
      std::perror("fdatasync");
      std::abort();
    }
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

 private:
  const std::string dir_;
  const std::string path_;
  int fd_ = -1;
  off_t offset_ = 0;
};

// runstore: Append(run, "arr", step, array) then Commit() per array. The
// store and the writer are made before the clock starts; the segment file is
// created (and its directory synced) by the first Append, inside the timing.
// Close (the seal) is not timed: every array is committed before it.
class Runstore {
 public:
  explicit Runstore(const std::string& dir) : path_(dir + "/store") {
    store_ = CheckValue(Store::Open(path_, {}), "Store::Open");
    WriterOptions wo;
    wo.buffer_bytes = 64ull << 20;
    writer_ = CheckValue(store_->NewWriter(wo), "NewWriter");
  }
  ~Runstore() {
    Check(writer_->Close(), "Close");
    writer_.reset();
    store_.reset();
    RemoveAll(path_);
  }
  // Seconds.
  double Write(const double* data) {
    const int64_t shape[1] = {kArrayElems};
    const auto start = Clock::now();
    Check(writer_->Append(1, "arr", step_++, ValueRef::Array<double>(data, shape)), "Append");
    Check(writer_->Commit(), "Commit");
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

 private:
  const std::string path_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Writer> writer_;
  int64_t step_ = 0;
};

// Each iteration writes kArrays arrays both ways into the same directory,
// alternating array by array (and which side goes first), so that the
// disk's slow and fast moments fall on both sides alike.
void BM_ArrayCommit8MiB(benchmark::State& state) {
  auto data = MakeArray(kSeed);
  TempDir dir("runstore-array");
  double rs_secs = 0, base_secs = 0;
  int64_t it = 0;
  std::vector<double> pair_ratios;  // baseline time / runstore time, per array
  for (auto _ : state) {
    double rs = 0, base = 0;
    {
      Runstore r(dir.path());
      Baseline b(dir.path());
      for (int i = 0; i < kArrays; ++i) {
        double x, y;
        if ((i + it) % 2 == 0) {
          x = r.Write(data.get());
          y = b.Write(data.get());
        } else {
          y = b.Write(data.get());
          x = r.Write(data.get());
        }
        rs += x;
        base += y;
        pair_ratios.push_back(y / x);
      }
    }
    state.SetIterationTime(rs);
    rs_secs += rs;
    base_secs += base;
    ++it;
  }
  const double bytes = static_cast<double>(it) * kArrays * kArrayBytes;
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  state.SetItemsProcessed(it * kArrays);
  state.counters["runstore_Bps"] = benchmark::Counter(
      bytes / rs_secs, benchmark::Counter::kDefaults, benchmark::Counter::kIs1024);
  state.counters["baseline_Bps"] = benchmark::Counter(
      bytes / base_secs, benchmark::Counter::kDefaults, benchmark::Counter::kIs1024);
  state.counters["ratio"] = benchmark::Counter(base_secs / rs_secs);
  // The median of the per-array ratios: less sensitive to a slow moment of
  // the disk that hits one side of one pair.
  std::sort(pair_ratios.begin(), pair_ratios.end());
  state.counters["pair_ratio_med"] = benchmark::Counter(pair_ratios[pair_ratios.size() / 2]);
}

// The store for the Get benchmarks: one 8 MiB array, committed and sealed.
struct GetFixture {
  GetFixture() : dir("runstore-get") {
    auto data = MakeArray(kSeed);
    auto store = CheckValue(Store::Open(dir.Sub("store"), {}), "Store::Open");
    auto writer = CheckValue(store->NewWriter({}), "NewWriter");
    const int64_t shape[1] = {kArrayElems};
    Check(writer->Append(7, "arr", 0, ValueRef::Array<double>(data.get(), shape)), "Append");
    Check(writer->Close(), "Close");
  }
  TempDir dir;
};
GetFixture& TheGetFixture() {
  static GetFixture f;
  return f;
}

// Seconds per iteration (real time), as a counter that targets can check.
benchmark::Counter LatencyCounter() {
  return benchmark::Counter(
      1, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void CheckArray(benchmark::State& state, const Value& v) {
  if (v.nbytes() != kArrayBytes) state.SkipWithError("wrong size");
  state.counters["zero_copy"] = v.zero_copy() ? 1 : 0;
}

// Get from a snapshot that has already read (and verified) the block once:
// the steady-state cost of a lookup.
void BM_GetArray8MiB_Warm(benchmark::State& state) {
  auto store =
      CheckValue(Store::Open(TheGetFixture().dir.Sub("store"), {.read_only = true}), "Store::Open");
  auto snap = store->GetSnapshot();
  CheckArray(state, CheckValue(snap->Get(7, "arr", 0), "Get"));
  for (auto _ : state) {
    auto v = snap->Get(7, "arr", 0);
    benchmark::DoNotOptimize(v);
    if (!v.ok()) state.SkipWithError(v.status().ToString().c_str());
  }
  state.counters["latency_s"] = LatencyCounter();
}

// The first Get after opening the store (page cache warm): maps the segment
// and verifies the block's checksum, which reads all 8 MiB once.
void BM_GetArray8MiB_FirstAfterOpen(benchmark::State& state) {
  const std::string path = TheGetFixture().dir.Sub("store");
  for (auto _ : state) {
    state.PauseTiming();
    auto store = CheckValue(Store::Open(path, {.read_only = true}), "Store::Open");
    state.ResumeTiming();
    auto snap = store->GetSnapshot();
    auto v = snap->Get(7, "arr", 0);
    benchmark::DoNotOptimize(v);
    if (!v.ok()) state.SkipWithError(v.status().ToString().c_str());
    state.PauseTiming();
    v = Status::NotFound("");
    snap.reset();
    store.reset();
    state.ResumeTiming();
  }
  state.counters["latency_s"] = LatencyCounter();
}

// The same first read after opening, of a strided sample (every 16th row of
// 8 KiB, as the comparison suite's lazy workload reads): GetLazy, then the
// chunks the rows reach are checked and the rows summed. Against the first
// Get above, which checks all 8 MiB before the sample can be read.
void BM_GetArray8MiB_LazySampleFirstAfterOpen(benchmark::State& state) {
  constexpr uint64_t kRowBytes = 8192, kStride = 16;
  const std::string path = TheGetFixture().dir.Sub("store");
  std::vector<LazyValue::Range> rows;
  for (uint64_t at = 0; at < kArrayBytes; at += kRowBytes * kStride)
    rows.push_back({at, kRowBytes});
  double sum = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto store = CheckValue(Store::Open(path, {.read_only = true}), "Store::Open");
    state.ResumeTiming();
    auto lazy = store->GetSnapshot()->GetLazy(7, "arr", 0);
    if (!lazy.ok()) state.SkipWithError(lazy.status().ToString().c_str());
    Status s = lazy->Check(rows);
    if (!s.ok()) state.SkipWithError(s.ToString().c_str());
    const auto values = lazy->value().as<double>();
    for (const LazyValue::Range& r : rows) {
      for (uint64_t i = r.offset / 8; i < (r.offset + r.len) / 8; ++i) sum += values[i];
    }
    state.PauseTiming();
    lazy = Status::NotFound("");
    store.reset();
    state.ResumeTiming();
  }
  benchmark::DoNotOptimize(sum);
  state.counters["latency_s"] = LatencyCounter();
}

// Store::Open alone, for comparison with the first Get.
void BM_OpenStoreOneArray(benchmark::State& state) {
  const std::string path = TheGetFixture().dir.Sub("store");
  for (auto _ : state) {
    auto store = CheckValue(Store::Open(path, {.read_only = true}), "Store::Open");
    benchmark::DoNotOptimize(store);
    state.PauseTiming();
    store.reset();
    state.ResumeTiming();
  }
}

void Register() {
  benchmark::AddCustomContext("seed", std::to_string(kSeed));
  WithMinMax(benchmark::RegisterBenchmark("BM_ArrayCommit8MiB", BM_ArrayCommit8MiB))
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->Iterations(6);
  WithMinMax(benchmark::RegisterBenchmark("BM_GetArray8MiB/warm", BM_GetArray8MiB_Warm))
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
  WithMinMax(benchmark::RegisterBenchmark("BM_GetArray8MiB/first_after_open",
                                          BM_GetArray8MiB_FirstAfterOpen))
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
  WithMinMax(benchmark::RegisterBenchmark("BM_GetArray8MiB/lazy_sample_first_after_open",
                                          BM_GetArray8MiB_LazySampleFirstAfterOpen))
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
  WithMinMax(benchmark::RegisterBenchmark("BM_OpenStore/one_array", BM_OpenStoreOneArray))
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
  AddTarget({"BM_GetArray8MiB/warm", "latency_s", 100e-6, false, "s",
             "extra: Get of an 8 MiB array is microseconds (zero-copy; a copy takes ~1 ms)"});
  AddTarget({"BM_ArrayCommit8MiB", "ratio", 0.9, true, "x",
             "item 2: 8 MiB float64 array + Commit vs write()+fdatasync() (same run)"});
}

}  // namespace
}  // namespace runstore::bench

int main(int argc, char** argv) {
  runstore::bench::Register();
  return runstore::bench::BenchMain(argc, argv);
}
