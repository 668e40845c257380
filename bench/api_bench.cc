// The workload of bindings/rust/runstore/examples/throughput.rs through the
// C++ API, so that bench/rust_vs_cpp.py can put the two side by side: what
// the C API and the Rust crate over it cost against the C++ API they wrap.
//
//   api_bench DIR
//
// Phases (each line: name, figure, unit): 2,000,000 float64 scalars appended
// one call each (runs i % 100, steps i / 100) and committed, then again in
// calls of 10,000 (AppendBatch); 128 arrays of
// 1 MiB appended and committed; the 128 arrays read back as zero-copy views
// and summed whole (warm); 100,000 scalar point lookups. Each phase runs 5
// times (the appends to steps of their own) and prints two lines of its
// best: its figure over the wall-clock time, then (NAME.cpu) over the
// process's CPU time (CLOCK_PROCESS_CPUTIME_ID: the calling thread's and the
// writer's own threads'), which another process's work on the machine does not
// lengthen, and which counts work moved to a writer's thread that the wall
// clock does not see. DIR is removed and made again.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "runstore/store.h"

namespace {

// How many times each phase runs; each figure is its best.
constexpr int kReps = 5;

// A phase's two clocks: the wall's and the process's CPU time.
struct Times {
  double wall = 1e30, cpu = 1e30;
};

double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

class Stopwatch {
 public:
  Stopwatch() : wall0_(std::chrono::steady_clock::now()), cpu0_(ProcessCpuSeconds()) {}
  Times Elapsed() const {
    return {std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0_).count(),
            ProcessCpuSeconds() - cpu0_};
  }

 private:
  std::chrono::steady_clock::time_point wall0_;
  double cpu0_;
};

// Runs phase(r) for r in [0, kReps) and returns the shortest time of each
// clock: what the phase costs when nothing else on the machine interferes.
template <typename Phase>
Times BestOf(Phase&& phase) {
  Times best;
  for (int r = 0; r < kReps; ++r) {
    Stopwatch t0;
    phase(r);
    const Times t = t0.Elapsed();
    best = {std::min(best.wall, t.wall), std::min(best.cpu, t.cpu)};
  }
  return best;
}

// Prints "NAME FIGURE UNIT" and "NAME.cpu FIGURE UNIT": `amount` over each time.
void Report(const char* name, double amount, Times t, const char* unit) {
  std::printf("%s %.3f %s\n%s.cpu %.3f %s\n", name, amount / t.wall, unit, name, amount / t.cpu,
              unit);
}

template <typename T>
T Must(runstore::Result<T> r) {
  if (!r.ok()) {
    std::fprintf(stderr, "api_bench: %s\n", r.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(r).value();
}

void Must(const runstore::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "api_bench: %s\n", s.ToString().c_str());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: api_bench DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::filesystem::remove_all(dir);
  constexpr int64_t kScalars = 2'000'000, kArrays = 128, kElems = 131072, kGets = 100'000;
  auto store = Must(runstore::Store::Open(dir, {}));
  auto w = Must(store->NewWriter({}));
  // Rep r of the appends writes steps of its own: the scalars from r * 20,000, the batches
  // from (kReps + r) * 20,000, the arrays from r * kArrays.
  Times best = BestOf([&](int r) {
    const int64_t base = r * (kScalars / 100);
    for (int64_t i = 0; i < kScalars; ++i) {
      Must(w->Append(i % 100, "x", base + i / 100, static_cast<double>(i)));
    }
    Must(w->Commit());
  });
  Report("append_scalars", kScalars / 1e6, best, "M/s");

  // The same records again, 10,000 a call (what the crate's append_batch makes).
  best = BestOf([&](int r) {
    const int64_t base = (kReps + r) * (kScalars / 100);
    for (int64_t start = 0; start < kScalars; start += 10'000) {
      std::vector<runstore::RunRef> runs;
      std::vector<int64_t> steps;
      std::vector<double> values;
      runs.reserve(10'000);
      steps.reserve(10'000);
      values.reserve(10'000);
      for (int64_t i = start; i < start + 10'000; ++i) {
        runs.emplace_back(i % 100);
        steps.push_back(base + i / 100);
        values.push_back(static_cast<double>(i));
      }
      const int64_t n[1] = {10'000};
      runstore::ValueRef v;
      v.dtype = runstore::DType::kFloat64;
      v.shape = n;
      v.data = values.data();
      v.nbytes = values.size() * sizeof(double);
      Must(w->AppendBatch(runs, "x", steps, v));
    }
    Must(w->Commit());
  });
  Report("append_batches", kScalars / 1e6, best, "M/s");

  std::vector<double> a(kElems);
  for (int64_t k = 0; k < kElems; ++k) a[k] = static_cast<double>(k);
  const int64_t shape[1] = {kElems};
  best = BestOf([&](int r) {
    for (int64_t k = 0; k < kArrays; ++k) {
      runstore::ValueRef v;
      v.dtype = runstore::DType::kFloat64;
      v.shape = shape;
      v.data = a.data();
      v.nbytes = a.size() * sizeof(double);
      Must(w->Append(int64_t{0}, "a", r * kArrays + k, v));
    }
    Must(w->Commit());
  });
  Must(w->Close());
  const double gb = kArrays * kElems * 8.0 / 1e9;
  Report("append_arrays", gb, best, "GB/s");

  auto snap = Must(store->Refresh());
  double sum = 0;
  best = BestOf([&](int) {
    sum = 0;
    for (int64_t k = 0; k < kArrays; ++k) {
      runstore::Value v = Must(snap->Get(int64_t{0}, "a", k));
      for (double x : v.as<double>()) sum += x;
    }
  });
  if (sum != kArrays * (kElems * (kElems - 1.0) / 2)) {
    std::fprintf(stderr, "api_bench: arrays sum to %.1f\n", sum);
    return 1;
  }
  Report("read_arrays", gb, best, "GB/s");

  double got = 0;
  best = BestOf([&](int) {
    for (int64_t i = 0; i < kGets; ++i) {
      const int64_t at = (i * 7919) % kScalars;
      got += Must(snap->Get(at % 100, "x", at / 100)).scalar<double>();
    }
  });
  Report("point_gets", kGets / 1e3, best, "k/s");
  if (got <= 0) return 1;
  std::filesystem::remove_all(dir);
  return 0;
}
