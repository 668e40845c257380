// lookup_bench: Snapshot::Get by integer run id in a store of N one-run
// segments (200 steps each), against the same store with one more block
// whose key range spans every run (a compacted segment's block, then
// segments written after it over the same runs: RL runs that go on after a
// compaction, integer experiment ids filled in later). Every key is then in
// the range of two blocks, but in the range of every block's predecessors
// too: a lookup that walks back over min keys (as before the max-key tree of
// point_lookup.cc) reads O(N) headers per Get. The ratio
// under_wide_block / disjoint in the same run says whether a lookup stays
// logarithmic; no target.
//
//   RUNSTORE_BENCH_DIR=/var/tmp ./lookup_bench --benchmark_repetitions=3
#include <map>
#include <memory>

#include "bench_util.h"
#include "runstore/store.h"

namespace runstore::bench {
namespace {

constexpr int64_t kSteps = 200;

struct LookupFixture {
  LookupFixture(int segments, bool wide) : dir("runstore-lookup") {
    store = CheckValue(Store::Open(dir.Sub("store"), {}), "Store::Open");
    if (wide) {
      WriterOptions o;
      o.writer_id = "wide";
      auto w = CheckValue(store->NewWriter(o), "NewWriter");
      for (int64_t r = 0; r < segments; ++r) Check(w->Append(r, "x", 0, -1.0), "Append");
      Check(w->Close(), "Close");
    }
    for (int64_t r = 0; r < segments; ++r) {
      auto w = CheckValue(store->NewWriter({}), "NewWriter");
      for (int64_t s = 0; s < kSteps; ++s) {
        Check(w->Append(r, "x", s, static_cast<double>(r * kSteps + s)), "Append");
      }
      Check(w->Close(), "Close");
    }
    snapshot = CheckValue(store->Refresh(), "Refresh");
  }
  TempDir dir;
  std::unique_ptr<Store> store;
  std::shared_ptr<const Snapshot> snapshot;
};

LookupFixture& Fixture(int segments, bool wide) {
  static std::map<std::pair<int, bool>, std::unique_ptr<LookupFixture>> fixtures;
  auto& f = fixtures[{segments, wide}];
  if (!f) f = std::make_unique<LookupFixture>(segments, wide);
  return *f;
}

void BM_Get(benchmark::State& state, bool wide) {
  const int segments = static_cast<int>(state.range(0));
  LookupFixture& f = Fixture(segments, wide);
  uint64_t rng = 0x5eed'0005, wrong = 0;
  for (auto _ : state) {
    const int64_t run = static_cast<int64_t>(XorShift64(&rng) % static_cast<uint64_t>(segments));
    const int64_t step = static_cast<int64_t>(XorShift64(&rng) % kSteps);
    auto v = f.snapshot->Get(run, "x", step);
    if (!v.ok() || v->scalar<double>() != static_cast<double>(run * kSteps + step)) ++wrong;
  }
  if (wrong > 0) state.SkipWithError("a lookup returned a wrong value");
  state.counters["segments"] = segments;
}

void Register() {
  for (bool wide : {false, true}) {
    auto* b = benchmark::RegisterBenchmark(wide ? "BM_Get/under_wide_block" : "BM_Get/disjoint",
                                           [=](benchmark::State& s) { BM_Get(s, wide); });
    WithMinMax(b)->Arg(100)->Arg(1000)->Arg(10000)->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace
}  // namespace runstore::bench

int main(int argc, char** argv) {
  runstore::bench::Register();
  return runstore::bench::BenchMain(argc, argv);
}
