// The workload of bindings/rust/runstore/examples/throughput.rs through the
// C++ API, so that bench/rust_vs_cpp.sh can put the two side by side: what
// the C API and the Rust crate over it cost against the C++ API they wrap.
//
//   api_bench DIR
//
// Phases (each line: name, figure, unit): 2,000,000 float64 scalars appended
// one call each (runs i % 100, steps i / 100) and committed, then again in
// calls of 10,000 (AppendBatch); 128 arrays of
// 1 MiB appended and committed; the 128 arrays read back as zero-copy views
// and summed whole (best of 3, warm); 100,000 scalar point lookups. DIR is
// removed and made again.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "runstore/store.h"

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
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
  auto t0 = Clock::now();
  for (int64_t i = 0; i < kScalars; ++i) {
    Must(w->Append(i % 100, "x", i / 100, static_cast<double>(i)));
  }
  Must(w->Commit());
  std::printf("append_scalars %.3f M/s\n", kScalars / Since(t0) / 1e6);

  // The same records again, 10,000 a call (what the crate's append_batch makes).
  t0 = Clock::now();
  for (int64_t start = 0; start < kScalars; start += 10'000) {
    std::vector<runstore::RunRef> runs;
    std::vector<int64_t> steps;
    std::vector<double> values;
    runs.reserve(10'000);
    steps.reserve(10'000);
    values.reserve(10'000);
    for (int64_t i = start; i < start + 10'000; ++i) {
      runs.emplace_back(i % 100);
      steps.push_back(100'000 + i / 100);
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
  std::printf("append_batches %.3f M/s\n", kScalars / Since(t0) / 1e6);

  std::vector<double> a(kElems);
  for (int64_t k = 0; k < kElems; ++k) a[k] = static_cast<double>(k);
  const int64_t shape[1] = {kElems};
  t0 = Clock::now();
  for (int64_t k = 0; k < kArrays; ++k) {
    runstore::ValueRef v;
    v.dtype = runstore::DType::kFloat64;
    v.shape = shape;
    v.data = a.data();
    v.nbytes = a.size() * sizeof(double);
    Must(w->Append(int64_t{0}, "a", k, v));
  }
  Must(w->Commit());
  Must(w->Close());
  std::printf("append_arrays %.3f GB/s\n", kArrays * kElems * 8.0 / Since(t0) / 1e9);

  auto snap = Must(store->Refresh());
  double best = 1e30, sum = 0;
  for (int rep = 0; rep < 3; ++rep) {
    t0 = Clock::now();
    sum = 0;
    for (int64_t k = 0; k < kArrays; ++k) {
      runstore::Value v = Must(snap->Get(int64_t{0}, "a", k));
      for (double x : v.as<double>()) sum += x;
    }
    best = std::min(best, Since(t0));
  }
  if (sum != kArrays * (kElems * (kElems - 1.0) / 2)) {
    std::fprintf(stderr, "api_bench: arrays sum to %.1f\n", sum);
    return 1;
  }
  std::printf("read_arrays %.3f GB/s\n", kArrays * kElems * 8.0 / best / 1e9);

  t0 = Clock::now();
  double got = 0;
  for (int64_t i = 0; i < kGets; ++i) {
    const int64_t at = (i * 7919) % kScalars;
    got += Must(snap->Get(at % 100, "x", at / 100)).scalar<double>();
  }
  std::printf("point_gets %.3f k/s\n", kGets / Since(t0) / 1e3);
  if (got <= 0) return 1;
  std::filesystem::remove_all(dir);
  return 0;
}
