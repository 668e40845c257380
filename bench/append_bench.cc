// append_bench: throughput of Writer::Append and AppendBatch for float64
// scalars without commits, uncompressed and with lz4 and zstd, from one and
// two threads.
//
// Target (performance issue, item 1): at least 20 M records/s on one thread,
// uncompressed, 64 MiB buffer, including the background writer draining
// everything to the segment file. Variants:
//   end_to_end  N = 8 Mi records (192 MiB of columns, 3x the buffer), then
//               Close() inside the timing: the final commit writes the last
//               block, fdatasyncs the whole segment and seals it.
//   sustained   the same N, clock stopped after the last Append: the
//               background writer has been draining concurrently all along
//               (bp_waits > 0 would show that it fell behind).
//   front_end   1 Mi records (fit in the buffer), clock stopped before
//               Close(): the cost of the Append call alone.
//
//   RUNSTORE_BENCH_DIR=/var/tmp ./append_bench --benchmark_repetitions=3
#include <chrono>
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "runstore/store.h"

namespace runstore::bench {
namespace {

constexpr uint64_t kSeed = 0x5eed'0001;
constexpr size_t kBufferBytes = 64ull << 20;
constexpr int64_t kStepsPerRun = 1024;  // a power of two

// A loss-like curve with noise: what a training loop logs. Deterministic
// (xorshift64 from kSeed) so that compressed sizes are repeatable; the curve
// is a table so that making a value costs a few cycles, not a division.
class Values {
 public:
  explicit Values(uint64_t seed) : s_(seed) {
    for (int64_t i = 0; i < kStepsPerRun; ++i)
      curve_[i] = 1.0 / (1.0 + 0.01 * static_cast<double>(i));
  }
  double Next(int64_t step) {
    const double noise = static_cast<double>(XorShift64(&s_) >> 11) * 0x1.0p-53 - 0.5;
    return curve_[step & (kStepsPerRun - 1)] + 0.01 * noise;
  }

 private:
  uint64_t s_;
  double curve_[kStepsPerRun];
};

struct Fixture {
  std::unique_ptr<TempDir> dir;
  std::unique_ptr<Store> store;
  std::unique_ptr<Writer> writer;
  // Closes and removes everything, the store directory last.
  void Reset() {
    writer.reset();
    store.reset();
    dir.reset();
  }
};

Fixture OpenFixture(Codec codec) {
  Fixture f;
  f.dir = std::make_unique<TempDir>("runstore-append");
  f.store = CheckValue(Store::Open(f.dir->Sub("store"), {}), "Store::Open");
  WriterOptions wo;
  wo.buffer_bytes = kBufferBytes;
  wo.codec = codec;
  f.writer = CheckValue(f.store->NewWriter(wo), "NewWriter");
  return f;
}

// Appends records [begin, end) of series `name`: run = i / 1024, step = i % 1024.
void AppendRange(Writer* w, const char* name, uint64_t begin, uint64_t end, uint64_t seed) {
  Values values(seed);
  for (uint64_t i = begin; i < end; ++i) {
    const int64_t run = static_cast<int64_t>(i >> 10);
    const int64_t step = static_cast<int64_t>(i & 1023);
    Status s = w->Append(run, name, step, values.Next(step));
    if (!s.ok()) Check(s, "Append");
  }
}

void ReportWriterStats(benchmark::State& state, const WriterStats& st, double iterations_records) {
  state.counters["bp_waits"] = benchmark::Counter(static_cast<double>(st.backpressure_waits));
  state.counters["bp_s"] = benchmark::Counter(st.backpressure_seconds);
  state.counters["disk_B_per_rec"] =
      benchmark::Counter(static_cast<double>(st.bytes_written) / iterations_records);
  state.counters["peak_buf_MiB"] =
      benchmark::Counter(static_cast<double>(st.peak_buffered_bytes) / (1 << 20));
}

// N appends of float64 scalars on one thread. With close_timed, Close()
// (final commit: write the last block, fdatasync, seal) is inside the timing;
// otherwise the clock stops after the last Append. close_ms is the mean time
// of Close() either way.
void BM_AppendScalarF64(benchmark::State& state, Codec codec, bool close_timed, uint64_t n) {
  WriterStats last{};
  double close_secs = 0;
  for (auto _ : state) {
    state.PauseTiming();
    Fixture f = OpenFixture(codec);
    state.ResumeTiming();
    AppendRange(f.writer.get(), "x", 0, n, kSeed);
    if (!close_timed) state.PauseTiming();
    const auto start = std::chrono::steady_clock::now();
    Check(f.writer->Close(), "Close");
    close_secs += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (close_timed) state.PauseTiming();
    last = f.writer->stats();
    f.Reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n * sizeof(double)));
  state.counters["close_ms"] =
      benchmark::Counter(close_secs * 1e3 / static_cast<double>(state.iterations()));
  ReportWriterStats(state, last, static_cast<double>(n));
}

// AppendBatch of `batch` records at a time (runs, steps and values as
// columns), then Close(), all timed.
void BM_AppendBatchF64(benchmark::State& state, uint64_t n, size_t batch) {
  std::vector<RunRef> runs(batch, RunRef(int64_t{0}));
  std::vector<int64_t> steps(batch);
  std::vector<double> vals(batch);
  WriterStats last{};
  for (auto _ : state) {
    state.PauseTiming();
    Fixture f = OpenFixture(Codec::kNone);
    Values values(kSeed);
    state.ResumeTiming();
    for (uint64_t i = 0; i < n; i += batch) {
      const size_t m = static_cast<size_t>(std::min<uint64_t>(batch, n - i));
      for (size_t k = 0; k < m; ++k) {
        const uint64_t r = i + k;
        runs[k] = RunRef(static_cast<int64_t>(r / kStepsPerRun));
        steps[k] = static_cast<int64_t>(r % kStepsPerRun);
        vals[k] = values.Next(steps[k]);
      }
      const int64_t shape[1] = {static_cast<int64_t>(m)};
      Check(f.writer->AppendBatch(std::span<const RunRef>(runs.data(), m), "x",
                                  std::span<const int64_t>(steps.data(), m),
                                  ValueRef::Array<double>(vals.data(), shape)),
            "AppendBatch");
    }
    Check(f.writer->Close(), "Close");
    state.PauseTiming();
    last = f.writer->stats();
    f.Reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n * sizeof(double)));
  ReportWriterStats(state, last, static_cast<double>(n));
}

// Two threads append n/2 records each (disjoint runs, one series each),
// either into one shared Writer or into one Writer each; then Close(), timed.
void BM_AppendScalarF64TwoThreads(benchmark::State& state, bool shared_writer, uint64_t n) {
  for (auto _ : state) {
    state.PauseTiming();
    Fixture f = OpenFixture(Codec::kNone);
    std::unique_ptr<Writer> second;
    if (!shared_writer) {
      WriterOptions wo;
      wo.buffer_bytes = kBufferBytes;
      second = CheckValue(f.store->NewWriter(wo), "NewWriter");
    }
    Writer* w0 = f.writer.get();
    Writer* w1 = shared_writer ? f.writer.get() : second.get();
    state.ResumeTiming();
    std::thread t0([&] { AppendRange(w0, "x", 0, n / 2, kSeed); });
    std::thread t1([&] { AppendRange(w1, "y", n / 2, n, kSeed + 1); });
    t0.join();
    t1.join();
    Check(w0->Close(), "Close");
    if (!shared_writer) Check(w1->Close(), "Close");
    state.PauseTiming();
    second.reset();
    f.Reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n * sizeof(double)));
}

void Register() {
  benchmark::AddCustomContext("seed", std::to_string(kSeed));
  benchmark::AddCustomContext("buffer_bytes", std::to_string(kBufferBytes));
  constexpr uint64_t kN = 8u << 20;       // 8 Mi records, 192 MiB of columns: 3x the buffer
  constexpr uint64_t kFrontN = 1u << 20;  // 1 Mi records, 24 MiB: fits in the buffer
  auto reg = [](const std::string& name, auto fn) {
    auto* b = benchmark::RegisterBenchmark(name.c_str(), fn);
    WithMinMax(b)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);
    return b;
  };
  reg("BM_AppendScalarF64/none/end_to_end",
      [](benchmark::State& s) { BM_AppendScalarF64(s, Codec::kNone, true, kN); });
  reg("BM_AppendScalarF64/none/sustained",
      [](benchmark::State& s) { BM_AppendScalarF64(s, Codec::kNone, false, kN); });
  reg("BM_AppendScalarF64/none/front_end",
      [](benchmark::State& s) { BM_AppendScalarF64(s, Codec::kNone, false, kFrontN); });
  reg("BM_AppendScalarF64/lz4/end_to_end",
      [](benchmark::State& s) { BM_AppendScalarF64(s, Codec::kLz4, true, kN); });
  reg("BM_AppendScalarF64/zstd/end_to_end",
      [](benchmark::State& s) { BM_AppendScalarF64(s, Codec::kZstd, true, kN); });
  reg("BM_AppendBatchF64/batch:4096/end_to_end",
      [](benchmark::State& s) { BM_AppendBatchF64(s, kN, 4096); });
  reg("BM_AppendScalarF64/threads:2/shared_writer/end_to_end",
      [](benchmark::State& s) { BM_AppendScalarF64TwoThreads(s, true, kN); });
  reg("BM_AppendScalarF64/threads:2/writer_each/end_to_end",
      [](benchmark::State& s) { BM_AppendScalarF64TwoThreads(s, false, kN); });

  AddTarget({"BM_AppendScalarF64/none/end_to_end", "items_per_second", 20e6, true, "records/s",
             "item 1: float64 scalar Append, no commits, one thread, incl. drain"});
  AddTarget({"BM_AppendScalarF64/none/sustained", "items_per_second", 20e6, true, "records/s",
             "item 1, without the final Close (the background writer drains concurrently)"});
  AddTarget({"BM_AppendScalarF64/none/front_end", "items_per_second", 20e6, true, "records/s",
             "item 1, Append call only (data fits in the buffer; for diagnosis)"});
}

}  // namespace
}  // namespace runstore::bench

int main(int argc, char** argv) {
  runstore::bench::Register();
  return runstore::bench::BenchMain(argc, argv);
}
